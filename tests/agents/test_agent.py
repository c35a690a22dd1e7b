"""The claim agent loop (``xce.agents.agent``) against a real controller, with a throwaway provider.

Each test starts a controller on loopback and runs the agent as ``xce
provisioner`` (a real process, stopped by its PID) whose only provider is a
tiny script written here.  The script speaks the provider contract (one JSON
request document on stdin, one reply document on stdout) and appends every
request it gets to a record file, with its process id (one per batch).  How it answers is its private config, so
two agents of one test can run it differently:

- ``label``: marks its records and the handles it makes (``A-c1.create.1``);
- ``outcomes``: what attempt N of an op answers (``ok`` or ``CODE:retryable`` /
  ``CODE:permanent``; the last one repeats), counted from the record file;
- ``gate`` (from attempt ``gate_from``): the script waits, after recording the
  request, until that file exists, so a test can look at the controller while
  the provider is running.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import ControllerProcess, ProvisionerProcess, wait_for

CONFIG = """
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[queues]]
name = "default"
[[projects]]
name = "default"
[[pools]]
name = "p"
capacity = "1Ti"
[[claim_classes]]
name = "tw"
provider = "throwaway"
pools = ["p"]
[claims]
max_attempts = 3
retry_base = 0.3
retry_cap = 0.5
retry_jitter = 0.0
orphan_scan_interval = 3600.0
"""

PROVIDER = """\
import json, os, sys, time

doc = json.load(sys.stdin)
cfg = doc["config"]
replies = []
for r in doc["requests"]:
    if r["op"] in ("list", "health", "capabilities"):  # the agent's own checks: not what the tests look at
        replies.append({"op_id": r["op_id"], "ok": True, "objects": []} if r["op"] == "list"
                       else {"op_id": r["op_id"], "ok": True, "capabilities": {
                           "create_snapshot": False, "clone": False, "expand": True, "online_expand": False,
                           "access_modes": ["RWO"]}} if r["op"] == "capabilities"
                       else {"op_id": r["op_id"], "ok": True, "healthy": True})
        continue
    with open(cfg["record"], "a") as fh:
        fh.write(json.dumps({"label": cfg["label"], "request": r, "pid": os.getpid()}) + "\\n")
    with open(cfg["record"]) as fh:
        attempt = sum(1 for line in fh if json.loads(line)["request"]["op_id"] == r["op_id"])
    if cfg.get("gate") and attempt >= cfg.get("gate_from", 1):
        while not os.path.exists(cfg["gate"]):  # bounded by the provider's timeout
            time.sleep(0.01)
    outcome = cfg["outcomes"][min(attempt, len(cfg["outcomes"])) - 1]
    if outcome == "ok" and r["op"] == "create":
        replies.append({"op_id": r["op_id"], "ok": True, "handle": cfg["label"] + "-" + r["op_id"],
                        "size_bytes": r["size_bytes"], "path": "/throwaway/" + r["op_id"]})
    elif outcome == "ok":
        replies.append({"op_id": r["op_id"], "ok": True})
    else:
        code, _, kind = outcome.partition(":")
        replies.append({"op_id": r["op_id"], "ok": False, "error": {
            "code": code, "message": code + " on attempt " + str(attempt) + " from " + cfg["label"],
            "retryable": kind == "retryable"}})
sys.stdout.write(json.dumps({"contract": 1, "replies": replies}))
"""


class Bench:
    """A controller, the throwaway provider, and the provisioners a test starts (all stopped after it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "xce.toml").write_text(CONFIG)
        self.ctl = ControllerProcess(state_dir=str(root / "ctl"), config=str(root / "xce.toml")).start()
        self.script = root / "provider.py"
        self.script.write_text(PROVIDER)
        self.record = root / "requests.jsonl"
        self.agents: list[ProvisionerProcess] = []
        self.gates: list[Path] = []
        self.api = self.ctl.client()

    def provisioner(self, label: str, outcomes: tuple[str, ...] = ("ok",), gate: Path | None = None,
                    gate_from: int = 1, settings: str = "") -> ProvisionerProcess:
        config = {"record": str(self.record), "label": label, "outcomes": list(outcomes)}
        if gate is not None:
            config.update(gate=str(gate), gate_from=gate_from)
            self.gates.append(gate)
        entry = (f"[providers.throwaway]\ncommand = {json.dumps([sys.executable, str(self.script)])}\n"
                 f"timeout = 30.0\n[providers.throwaway.config]\n"
                 + "".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items()))
        agent = ProvisionerProcess(self.ctl, str(self.root / f"agent-{label}"), str(self.root / "simfs"),
                                   extra_providers=entry, settings=settings).start()
        self.agents.append(agent)
        return agent

    def create(self, name: str) -> dict:
        r = self.api.post("/v1/claims", json={"name": name, "class": "tw", "size": "1Gi", "access_mode": "RWO"})
        assert r.status_code == 201, r.text
        return r.json()

    def claim(self, name: str) -> dict:
        r = self.api.get(f"/v1/claims/{name}")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_claim(self, name: str, state: str) -> dict:
        return wait_for(lambda: (c := self.claim(name))["state"] == state and c, what=f"claim {name} {state}")

    def requests(self) -> list[dict]:
        """What the provider was asked, in order: {label, request}."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def wait_requests(self, n: int) -> list[dict]:
        return wait_for(lambda: len(got := self.requests()) >= n and got, what=f"{n} provider request(s)")

    def close(self) -> None:
        for gate in self.gates:  # let any provider still waiting answer, so its agent can stop
            gate.touch()
        for agent in self.agents:
            agent.stop()
        self.api.close()
        self.ctl.stop()


@pytest.fixture
def bench(tmp_path):
    b = Bench(tmp_path)
    yield b
    b.close()


def ops(claim: dict) -> list[tuple]:
    """The claim's provider attempts as the controller recorded them: (op_id, attempt, result, epoch)."""
    return [(o["op_id"], o["attempt"], o["result"], o.get("epoch")) for o in claim["ops"]]


def test_the_intent_is_committed_before_the_provider_runs_and_every_op_keeps_its_op_id(bench):
    gate = bench.root / "gate"
    bench.provisioner("A", gate=gate)
    claim_id = bench.create("vol")["id"]
    (first,) = bench.wait_requests(1)
    create_id = f"c{claim_id}.create.1"
    # the provider is running (it waits for the gate): the controller already has the intent
    running = bench.claim("vol")
    assert running["state"] == "PREPARING"
    assert running["op"] == {"op_id": create_id, "op": "create", "attempts": 1, "agent": "provisioner", "epoch": 1,
                             "next_retry": None}
    assert ops(running) == [(create_id, 1, "started", 1)]
    request = first["request"]
    assert (request["op"], request["op_id"], request["claim_id"], request["size_bytes"]) == \
        ("create", create_id, claim_id, 2**30)
    assert request["tags"]["xce.op"] == create_id and request["tags"]["xce.claim"] == str(claim_id)
    gate.touch()
    ready = bench.wait_claim("vol", "READY")
    assert (ready["handle"], ready["path"]) == (f"A-{create_id}", f"/throwaway/{create_id}")
    assert ops(ready) == [(create_id, 1, "started", 1), (create_id, 1, "ok", None)]
    assert bench.api.delete("/v1/claims/vol").status_code in (200, 202)
    released = bench.wait_claim("vol", "RELEASED")
    release_id = f"c{claim_id}.release.1"
    assert [(r["request"]["op"], r["request"]["op_id"], r["request"]["handle"]) for r in bench.requests()] == [
        ("create", create_id, None), ("release", release_id, f"A-{create_id}")], "each op once, by its own op_id"
    assert ops(released)[-1] == (release_id, 1, "ok", None)


def test_a_retryable_error_is_retried_with_the_same_op_id_after_a_backoff(bench):
    gate = bench.root / "gate"
    bench.provisioner("A", outcomes=("UNAVAILABLE:retryable", "UNAVAILABLE:retryable", "ok"), gate=gate, gate_from=2)
    claim_id = bench.create("vol")["id"]
    op_id = f"c{claim_id}.create.1"
    bench.wait_requests(2)  # the second attempt is running (waiting for the gate)
    retrying = bench.claim("vol")
    assert retrying["state"] == "PREPARING"
    assert (retrying["op"]["attempts"], retrying["attempts"]) == (2, 2)
    assert retrying["last_error"] == "UNAVAILABLE: UNAVAILABLE on attempt 1 from A", "the claim shows the last error"
    first_failure, second_start = retrying["ops"][1], retrying["ops"][2]
    assert (first_failure["result"], first_failure["retryable"]) == ("UNAVAILABLE", True)
    assert first_failure["next_retry"] is not None and first_failure["next_retry"] > first_failure["time"], \
        "a retryable failure schedules the next attempt later: a backoff"
    assert second_start["result"] == "started" and second_start["time"] >= first_failure["next_retry"], \
        "the controller hands the op out again only when its retry is due"
    gate.touch()
    ready = bench.wait_claim("vol", "READY")
    assert ops(ready) == [(op_id, 1, "started", 1), (op_id, 1, "UNAVAILABLE", None), (op_id, 2, "started", 1),
                          (op_id, 2, "UNAVAILABLE", None), (op_id, 3, "started", 1), (op_id, 3, "ok", None)]
    assert [r["request"]["op_id"] for r in bench.requests()] == [op_id] * 3, "one op_id for every attempt"
    assert ready["last_error"] is None and ready["handle"] == f"A-{op_id}"


def test_a_permanent_error_ends_the_claim_failed_after_one_attempt(bench):
    bench.provisioner("A", outcomes=("INVALID_ARGUMENT:permanent",))
    claim_id = bench.create("vol")["id"]
    failed = bench.wait_claim("vol", "FAILED")
    op_id = f"c{claim_id}.create.1"
    assert failed["last_error"] == "INVALID_ARGUMENT: INVALID_ARGUMENT on attempt 1 from A"
    assert ops(failed) == [(op_id, 1, "started", 1), (op_id, 1, "INVALID_ARGUMENT", None)]
    assert failed["history"][-1]["reason"] == \
        "create failed after 1 attempt: INVALID_ARGUMENT: INVALID_ARGUMENT on attempt 1 from A"
    assert len(bench.requests()) == 1 and failed["op"] is None and not failed["data_exists"]


def test_a_restarted_agent_redrives_the_op_an_older_epoch_started_with_the_same_op_id(bench):
    older = bench.provisioner("A", gate=bench.root / "never")  # its provider never answers
    claim_id = bench.create("vol")["id"]
    bench.wait_requests(1)
    older.kill()  # the agent and its provider die between the intent and the report
    bench.provisioner("B")
    ready = bench.wait_claim("vol", "READY")
    op_id = f"c{claim_id}.create.1"
    assert ops(ready) == [(op_id, 1, "started", 1), (op_id, 2, "started", 2), (op_id, 2, "ok", None)]
    first, second = (r["request"] for r in bench.requests())
    assert [r["label"] for r in bench.requests()] == ["A", "B"]
    assert second["op_id"] == first["op_id"] == op_id and second["tags"] == first["tags"], \
        "the same op_id and owner tags: an idempotent provider makes one object"
    assert ready["handle"] == f"B-{op_id}"


def test_a_fenced_agent_has_its_report_refused_and_stops(bench):
    gate_a, gate_b = bench.root / "gate-a", bench.root / "gate-b"
    older = bench.provisioner("A", outcomes=("BROKEN:permanent",), gate=gate_a)
    claim_id = bench.create("vol")["id"]
    op_id = f"c{claim_id}.create.1"
    bench.wait_requests(1)
    bench.provisioner("B", gate=gate_b)  # a new epoch takes over while A's provider still runs
    bench.wait_requests(2)
    taken_over = bench.claim("vol")
    assert taken_over["op"]["epoch"] == 2 and taken_over["op"]["attempts"] == 2
    gate_a.touch()  # A's provider answers (a permanent failure); A reports it with epoch 1
    wait_for(lambda: older.proc.poll() is not None, what="the fenced agent to stop")
    assert older.proc.returncode == 3, "a fenced provisioner exits 3"
    log = Path(older.work_dir, "provisioner.log").read_text()
    # (whichever call of A's meets the new epoch first says so: its report, or its next work poll)
    assert "fenced by a newer epoch; stopping" in log or "another agent took over, stopping" in log, log[-2000:]
    unchanged = bench.claim("vol")
    assert unchanged["state"] == "PREPARING" and unchanged["last_error"] is None
    assert unchanged["op"] == taken_over["op"], "the refused report changed nothing"
    assert ops(unchanged) == [(op_id, 1, "started", 1), (op_id, 2, "started", 2)]
    gate_b.touch()
    ready = bench.wait_claim("vol", "READY")
    assert ready["handle"] == f"B-{op_id}"
    assert [r["label"] for r in bench.requests()] == ["A", "B"]



def test_the_agent_reports_each_class_capabilities_once_it_has_its_lease(bench):
    """The provider's ``capabilities`` answer reaches the model as a fact (one per change, not per report)."""
    bench.provisioner("A")
    cls = wait_for(lambda: (c := bench.api.get("/v1/claimclasses").json()[0])["capabilities"] and c,
                   what="capabilities reported")
    assert cls["capabilities"] == {"create_snapshot": False, "clone": False, "expand": True, "online_expand": False}


def test_ops_that_come_while_the_provider_is_busy_go_together_in_its_next_batch(bench):
    """With every slot of a provider busy, new ops wait for one and then go in one process, not one each:
    under load a provider runs few batches of many ops (btrfs takes its root's lock once per batch)."""
    gate = bench.root / "gate"
    bench.provisioner("A", gate=gate, settings="concurrency = 1\n")
    bench.create("first")
    bench.wait_requests(1)  # the only slot is busy: the provider waits for the gate
    names = [f"later{i}" for i in range(5)]
    for name in names:
        bench.create(name)
    # the agent has taken their intents (committed before it queues them) while the first op still runs
    wait_for(lambda: all((op := bench.claim(n)["op"]) and op["attempts"] == 1 for n in names),
             what="the intents of the later ops")
    assert len(bench.requests()) == 1
    gate.touch()
    for name in names:
        bench.wait_claim(name, "READY")
    later = [r for r in bench.requests() if r["request"]["claim_name"] in names]
    assert len(later) == 5 and len({r["pid"] for r in later}) == 1, later
