"""A staged job's handoffs, against a real controller, with the test playing host h1's worker and node
agent over the API: taking ops with their intents in one call, a report taking the ops it opened, a
node agent's report naming the runs it made startable, and the long-poll woken by the fact that opens
an op.  Nothing here is timed: a missing wake-up shows as a long-poll that does not answer before the
client gives up."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.helpers import ControllerProcess, audit_trail

AGENT = "/v1/agents/node:h1"


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("api-handoffs") / "ctl")).start()
    with c.client() as api:
        r = api.post("/v1/hosts/h1/register", json={"slots": 8, "counters": {"scratch": 2**36}})
        assert r.status_code == 200, r.text
    yield c
    c.stop()


@pytest.fixture
def api(ctl):
    with ctl.client() as c:
        yield c


def lease(api) -> int:
    r = api.post(f"{AGENT}/lease", json={"holder": "test"})
    assert r.status_code == 200, r.text
    return r.json()["epoch"]


def submit(api, tmp_path, name: str) -> int:
    src = tmp_path / f"{name}.in"
    src.write_bytes(b"x" * 4096)
    r = api.post("/v1/jobs", json={"command": ["true"], "name": name, "scratch": "1Mi",
                                   "stage_in": [f"{src}:in.bin"], "stage_out": [f"out.bin:{tmp_path / name}.out"]})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def take(api, epoch: int, wait: float = 0, timeout: float = 30.0, **params) -> dict:
    r = api.post(f"{AGENT}/work", params={"wait": wait, **params}, json={"epoch": epoch}, timeout=timeout)
    assert r.status_code == 200, r.text
    return r.json()


def job_claims(api, job_id: int) -> dict[str, dict]:
    return {c["kind"]: api.get(f"/v1/claims/by-id/{c['claim_id']}").json()
            for c in api.get(f"/v1/jobs/{job_id}").json()["claims"] if "kind" in c}


def ok(op: dict, path: str | None = None) -> dict:
    return {"op_id": op["op_id"], "claim_id": op["claim_id"], "ok": True, "handle": op["op_id"], "path": path}


def test_ops_are_taken_with_their_intents_once_and_a_report_takes_what_it_opened_and_names_the_run(api, tmp_path):
    epoch = lease(api)
    job = submit(api, tmp_path, "a")
    creates = take(api, epoch, wait=20)["ops"]  # the allocation's creates (the long-poll waits for the scheduler)
    assert sorted(o["op"] for o in creates) == ["create", "create"]
    for kind, claim in job_claims(api, job).items():  # the intents are committed: the claims say so
        assert claim["state"] == "PREPARING" and claim["ops"][-1]["result"] == "started", kind
        assert claim["ops"][-1]["epoch"] == epoch
    assert take(api, epoch)["ops"] == [], "an op is handed out once per epoch"
    held = api.get(f"{AGENT}/work", params={"epoch": epoch, "held": "true"}).json()["ops"]
    assert sorted(o["op_id"] for o in held) == sorted(o["op_id"] for o in creates), \
        "an agent that lost the answer can ask which ops its epoch holds"

    # the creates' report takes the staging claim's stage_in, its intent committed with it
    r = api.post(f"{AGENT}/reports", json={"epoch": epoch, "take": 16, "results": [
        ok(o, str(tmp_path / f"area-{o['claim_id']}")) for o in creates]})
    assert r.status_code == 200 and r.json()["refused"] == {}, r.text
    work = r.json()["work"]
    [stage_in] = work["ops"]
    assert stage_in["op"] == "stage_in" and stage_in["items"] == [[str(tmp_path / "a.in"), "in.bin"]]
    assert work["dispatch"] == [], "the staging claim is not READY yet: the run may not start"
    assert job_claims(api, job)["stage"]["ops"][-1] == {**job_claims(api, job)["stage"]["ops"][-1],
                                                        "op": "stage_in", "result": "started", "epoch": epoch}

    # the stage-in's report opens the readiness gate: its answer names the run, as the host's work would
    r = api.post(f"{AGENT}/reports", json={"epoch": epoch, "take": 16, "results": [ok(stage_in)]})
    assert r.status_code == 200 and r.json()["refused"] == {}, r.text
    [run] = r.json()["work"]["dispatch"]
    assert (run["job_id"], run["run"]) == (job, 1)
    assert {c["name"] for c in run["claims"]} == {"scratch", "stage"}
    assert [d["job_id"] for d in api.get("/v1/hosts/h1/work").json()["dispatch"]] == [job]

    # a poll that finds nothing commits nothing (the audit trail does not grow with empty polls)
    before = len(audit_trail(api))
    assert take(api, epoch)["ops"] == []
    assert len(audit_trail(api)) == before


def test_a_long_poll_for_work_answers_when_the_fact_that_opens_an_op_is_committed(ctl, api, tmp_path):
    epoch = lease(api)
    got: dict = {}

    def poll() -> None:  # waits up to 60 s on the controller; the client gives up after 30 s
        with ctl.client() as own:
            try:
                got["work"] = take(own, epoch, wait=60, timeout=30)
            except (httpx.HTTPError, AssertionError) as e:
                got["error"] = e

    t = threading.Thread(target=poll)
    t.start()
    job = submit(api, tmp_path, "b")  # its allocation opens two creates on h1
    t.join(40)
    assert "error" not in got, got
    assert {o["claim_name"] for o in got["work"]["ops"]} <= {f"j{job}.1:scratch", f"j{job}.1:stage"}
    assert got["work"]["ops"], "woken by the allocation's facts, with the ops it opened"


def test_taking_work_checks_the_epoch_and_who_speaks_for_the_agent(ctl, api, tmp_path):
    epoch = lease(api)
    r = api.post(f"{AGENT}/work", json={"epoch": epoch - 1})
    assert r.status_code == 409 and r.json()["error"]["code"] == "stale_epoch"
    r = api.post("/v1/users", json={"name": "mallory", "role": "user", "projects": ["default"]})
    assert r.status_code == 201, r.text
    token = api.post("/v1/tokens", json={"user": "mallory"}).json()["token"]
    with httpx.Client(base_url=ctl.url, headers={"Authorization": f"Bearer {token}"}) as mallory:
        r = mallory.post(f"{AGENT}/work", json={"epoch": epoch})
        assert r.status_code == 403, r.text
        r = mallory.post(f"{AGENT}/reports", json={"epoch": epoch, "take": 5, "results": []})
        assert r.status_code == 403, r.text
