"""Node-local standalone claims on a real cluster (controller, provisioner, three workers, simfs node
objects): a replica on each named host made by that host's worker, jobs placed only where a replica is
READY, deletion releasing every replica, a worker SIGKILLed mid-create leaving one object per replica, and the
workers' orphan scans of their node objects (both ways: an object no claim owns is released, a READY replica
whose object is gone is noticed).

host1..host3 have 4 slots and 4Gi of ``scratch``; class ``local`` is node-scope on that counter.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal

import pytest

from tests.helpers import children_of, wait_for
from tests.integration.test_job_claim_crashes import inject_root
from tests.integration.test_job_claims import make_job_cluster, read

LOCAL = """
[[claim_classes]]
name = "local"
provider = "simfs"
scope = "node"
counter = "scratch"
"""


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("nodelocal")
    # host_timeout 30: the crash test restarts a worker and expects nothing given up meanwhile
    c = make_job_cluster(root, host_timeout=30.0, extra_config=LOCAL)
    yield c
    c.stop()


def objects_of(cl, claim_id: int) -> dict[str, list[str]]:
    """Each host's node objects of claim ``claim_id`` (simfs names them ``v<claim>-<op hash>``)."""
    return {h: sorted(os.path.basename(p) for p in glob.glob(os.path.join(w.work_dir, "simfs", "nodes", h,
                                                                           f"v{claim_id}-*")))
            for h, w in cl.workers.items()}


def replicas(cl, name: str) -> dict[str, dict]:
    return {r["host"]: r for r in cl.claim(name)["replicas"]}


def orphans(cl) -> list[dict]:
    return json.loads(cl.xce("--json", "orphans").stdout)


def all_ready(cl, name: str) -> dict[str, dict] | None:
    """The claim's replicas by host once every one is READY (None before)."""
    rs = replicas(cl, name)
    return rs if rs and all(r["state"] == "READY" for r in rs.values()) else None


def test_replicas_on_the_named_hosts_serve_jobs_there_only_and_go_with_their_claim(cl, tmp_path):
    cl.xce("claim", "create", "weights", "--class", "local", "--size", "256Mi", "--access", "ROX",
           "--hosts", "host1,host3")
    ready = wait_for(lambda: all_ready(cl, "weights"), what="both replicas READY")
    assert sorted(ready) == ["host1", "host3"]
    claim = cl.claim("weights")
    assert claim["state"] == "READY" and claim["replicas_ready"] == 2
    assert {h: len(o) for h, o in objects_of(cl, claim["id"]).items()} == {"host1": 1, "host2": 0, "host3": 1}
    shown = json.loads(cl.xce("--json", "claim", "show", "weights").stdout)
    assert [(r["host"], r["state"]) for r in shown["replicas"]] == [("host1", "READY"), ("host3", "READY")]
    text = cl.xce("claim", "show", "weights").stdout
    assert "READY (2 of 2 replicas READY)" in text and "Replicas:" in text
    [row] = [line for line in cl.xce("claim", "list").stdout.splitlines() if " weights " in line]
    assert "READY (2/2 replicas)" in row
    for host, r in ready.items():  # each host's copy, written from outside: the job reads its own host's
        with open(os.path.join(r["path"], "model.bin"), "w") as fh:
            fh.write(f"weights@{host}")
    ids = [cl.submit("--claim", "weights", "-o", str(tmp_path / f"r{i}"), "--", "sh", "-c",
                     'cat "$XCE_CLAIM_WEIGHTS/model.bin"; echo " on $XCE_HOST"') for i in range(6)]
    jobs = [cl.wait_state(j, "DONE") for j in ids]
    assert {j["hosts"][0] for j in jobs} <= {"host1", "host3"}, "never where no replica is"
    for i, j in enumerate(jobs):
        host = j["hosts"][0]
        assert read(tmp_path / f"r{i}").strip() == f"weights@{host} on {host}"
    gate = tmp_path / "gate"
    busy = [cl.submit("--claim", "weights", "-n", "4", "-R", "span[hosts=1]", "--", "sh", "-c",
                      f"while [ ! -e {gate} ]; do sleep 0.1; done") for _ in range(2)]
    for j in busy:
        cl.wait_state(j, "RUN")
    waits = cl.submit("--claim", "weights", "--", "true")
    why = wait_for(lambda: "full" in (r := cl.xce("job", "why", str(waits)).stdout) and r, what="why it waits")
    assert why.strip() == f"Job <{waits}> PEND: claim weights: replicas READY on host1, host3; both full", \
        "host2 has free slots, and no replica"
    gate.write_text("")
    assert cl.wait_state(waits, "DONE")["hosts"][0] in ("host1", "host3")
    wait_for(lambda: cl.claim("weights")["attachments"] == [], what="attachments gone")
    cl.xce("claim", "delete", "weights")
    gone = cl.wait_claim("weights", "RELEASED")
    assert [r["state"] for r in gone["replicas"]] == ["RELEASED", "RELEASED"]
    assert objects_of(cl, claim["id"]) == {"host1": [], "host2": [], "host3": []}, "released by each host's agent"
    ops = {(o["host"], o["op"], o["result"]) for o in gone["ops"]}
    assert {("host1", "release", "ok"), ("host3", "release", "ok")} <= ops


def test_the_scheduler_chooses_hosts_for_replicas_by_free_room(cl):
    cl.xce("claim", "create", "data", "--class", "local", "--size", "3Gi", "--access", "RWX", "--replicas", "2")
    rs = wait_for(lambda: len(all_ready(cl, "data") or {}) == 2 and all_ready(cl, "data"), what="two replicas READY")
    assert len(rs) == 2
    # a third host has room for 3Gi too, but nobody asked for three
    cl.xce("claim", "create", "more", "--class", "local", "--size", "3Gi", "--access", "RWX", "--replicas", "2")
    waiting = wait_for(lambda: (c := cl.claim("more"))["waiting"] and "wait" in c["waiting"] and c,
                       what="the second claim told why its replica waits")
    assert len(waiting["replicas"]) == 1 and waiting["replicas_to_place"] == 1
    assert "1 more host with 3Gi scratch free wanted, none left" in waiting["waiting"]
    for name in ("data", "more"):
        cl.xce("claim", "delete", name)
        cl.wait_claim(name, "RELEASED")


def test_a_worker_sigkilled_mid_create_leaves_exactly_one_object_per_replica(cl):
    w = cl.workers["host2"]
    inject_root(os.path.join(w.work_dir, "simfs"), "--hang-next", "1", "--hang-seconds", "60",
                "--ops", "node_prepare")
    cl.xce("claim", "create", "cache", "--class", "local", "--size", "128Mi", "--access", "RWO",
           "--hosts", "host1,host2")
    wait_for(lambda: replicas(cl, "cache")["host2"]["state"] == "PREPARING", what="host2's create in flight")
    providers = children_of(w.proc.pid)
    w.kill()
    for pid in providers:  # the hung provider goes with its worker, as on a machine crash
        os.killpg(pid, signal.SIGKILL)
    w.start()
    ready = wait_for(lambda: all_ready(cl, "cache"), timeout=60, what="both replicas READY after the restart")
    claim = cl.claim("cache")
    assert {h: len(o) for h, o in objects_of(cl, claim["id"]).items()} == {"host1": 1, "host2": 1, "host3": 0}
    assert objects_of(cl, claim["id"])["host2"] == [ready["host2"]["handle"]], "the same op id named one object"
    creates = [o["result"] for o in claim["ops"] if o["op"] == "create" and o["host"] == "host2"]
    assert creates[0] == "started" and creates[-1] == "ok" and creates.count("ok") == 1
    cl.xce("claim", "delete", "cache")
    cl.wait_claim("cache", "RELEASED")
    assert objects_of(cl, claim["id"]) == {"host1": [], "host2": [], "host3": []}


def test_warm_adds_a_replica_and_evict_releases_one_but_not_while_a_job_there_uses_it(cl, tmp_path):
    cl.xce("claim", "create", "shards", "--class", "local", "--size", "64Mi", "--access", "ROX", "--hosts", "host1")
    wait_for(lambda: all_ready(cl, "shards"), what="host1's replica READY")
    out = cl.xce("claim", "warm", "shards", "--hosts", "host2").stdout
    assert out.startswith("Claim <shards> is warmed on host2: replicas host1 READY, host2 "), out
    ready = wait_for(lambda: len(all_ready(cl, "shards") or {}) == 2 and all_ready(cl, "shards"),
                     what="host2's replica READY")
    claim_id = cl.claim("shards")["id"]
    assert {h: len(o) for h, o in objects_of(cl, claim_id).items()} == {"host1": 1, "host2": 1, "host3": 0}
    again = cl.xce("claim", "warm", "shards", "--hosts", "host2", ok=False)
    assert again.returncode == 1 and "has a replica on host2 already (READY)" in again.stderr, again.stderr
    gate = tmp_path / "gate"
    busy = [cl.submit("--claim", "shards", "-n", "4", "-R", "span[hosts=1]", "--", "sh", "-c",
                      f"while [ ! -e {gate} ]; do sleep 0.1; done") for _ in range(2)]
    [job] = [j for j in busy if cl.wait_state(j, "RUN")["hosts"] == ["host2"]]  # one on each replica's host
    refused = cl.xce("claim", "evict", "shards", "--hosts", "host2", ok=False)
    assert refused.returncode == 1, refused.stdout
    assert f"claim 'shards' is attached on host2 by job {job}: its replica there is evicted once they are done" \
        in refused.stderr, refused.stderr
    assert replicas(cl, "shards")["host2"]["state"] == "READY"
    gate.write_text("")
    for j in busy:
        cl.wait_state(j, "DONE")
    wait_for(lambda: cl.claim("shards")["attachments"] == [], what="the jobs' attachments gone")
    cl.xce("claim", "evict", "shards", "--hosts", "host2")
    wait_for(lambda: replicas(cl, "shards")["host2"]["state"] == "RELEASED", what="host2's replica released")
    assert objects_of(cl, claim_id) == {"host1": [ready["host1"]["handle"]], "host2": [], "host3": []}
    assert cl.claim("shards")["state"] == "READY", "host1 serves on"
    last = cl.xce("claim", "evict", "shards", "--hosts", "host1", ok=False)
    assert "the last replica of claim 'shards': delete the claim instead" in last.stderr, last.stderr
    cl.xce("claim", "delete", "shards")
    cl.wait_claim("shards", "RELEASED")


def test_an_object_planted_in_a_workers_root_for_no_claim_is_released_and_a_replicas_never_touched(cl):
    cl.xce("claim", "create", "kept", "--class", "local", "--size", "64Mi", "--access", "RWO", "--hosts", "host1")
    ready = wait_for(lambda: all_ready(cl, "kept"), what="host1's replica READY")["host1"]
    with open(os.path.join(ready["path"], "model.bin"), "w") as fh:
        fh.write("weights")
    nodes = os.path.join(cl.workers["host1"].work_dir, "simfs", "nodes", "host1")
    with open(os.path.join(nodes, ready["handle"], "meta.json")) as fh:
        cluster = json.load(fh)["tags"]["xce.cluster"]
    planted = os.path.join(nodes, "v99999-0badc0ffee")  # of claim 99999, which does not exist
    os.makedirs(os.path.join(planted, "data"))
    with open(os.path.join(planted, "meta.json"), "w") as fh:
        json.dump({"handle": "v99999-0badc0ffee", "size_bytes": 1, "created": 0, "class": "local", "params": {},
                   "attachments": [], "tags": {"xce.cluster": cluster, "xce.claim": "99999",
                                               "xce.op": "c99999.r1.create.1"}}, fh)
    seen = wait_for(lambda: [o for o in orphans(cl) if o.get("handle") == "v99999-0badc0ffee"],
                    what="the planted object reported as an orphan")
    assert seen[0]["host"] == "host1" and seen[0]["claim_id"] == 99999
    wait_for(lambda: not os.path.exists(planted), what="the planted object released by host1's worker")
    wait_for(lambda: not [o for o in orphans(cl) if o.get("handle") == "v99999-0badc0ffee"],
             what="the orphan resolved")
    assert replicas(cl, "kept")["host1"]["state"] == "READY"
    with open(os.path.join(ready["path"], "model.bin")) as fh:
        assert fh.read() == "weights", "the replica's object is never touched"
    audit = cl.xce("--json", "audit", "--action", "orphan").stdout
    assert "v99999-0badc0ffee" in audit and "released" in audit
    cl.xce("claim", "delete", "kept")
    cl.wait_claim("kept", "RELEASED")


def test_a_ready_replicas_object_gone_from_its_host_is_failed_its_data_lost(cl):
    cl.xce("claim", "create", "gone", "--class", "local", "--size", "64Mi", "--access", "RWO",
           "--hosts", "host1,host2")
    rs = wait_for(lambda: len(all_ready(cl, "gone") or {}) == 2 and all_ready(cl, "gone"), what="both READY")
    shutil.rmtree(os.path.dirname(rs["host2"]["path"]))  # someone removed host2's object
    failed = wait_for(lambda: (r := replicas(cl, "gone")["host2"])["state"] == "FAILED" and r,
                      what="host2's replica noticed")
    assert failed["last_error"] == "object gone from host2: its data is lost"
    claim = cl.claim("gone")
    assert claim["state"] == "READY" and claim["replicas_ready"] == 1
    cl.xce("claim", "delete", "gone")
    cl.wait_claim("gone", "RELEASED")
