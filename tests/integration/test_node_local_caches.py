"""Node-local claims filled from an object store or a shared claim, caches, and host loss, on a real cluster: an
S3 server (``rclone serve s3``) on loopback, the controller, the provisioner, three workers (simfs node objects)
with a ``--transfer-config`` holding the remote's keys, but host3's without remote ``store`` (its populates fail
for good, naming the remote).  Project ``team-b`` (bob) may hold 64Mi of class ``local``: one cache replica of
64Mi.

host1..host3 have 4 slots and 4Gi of ``scratch``; class ``local`` is node-scope on that counter.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from tests.helpers import Cluster, children_of, kill_jobs_of, wait_for
from tests.integration.test_job_claims import CONFIG as JOB_CONFIG
from tests.integration.test_job_claims import read
from tests.integration.test_node_local_claims import LOCAL, objects_of, replicas
from tests.transfer_servers import S3Server

CONFIG = JOB_CONFIG + LOCAL + """
[[quotas]]
project = "team-b"
claim_class = "local"
max_bytes = "64Mi"

[transfers]
public_schemes = ["https"]

[[transfers.remotes]]
name = "store"
type = "s3"
schemes = ["s3"]
description = "the object store the weights live in"

[[transfers.remotes]]
name = "store-slow"
type = "s3"
description = "the same store through a link limited to 2 MiB/s (a populate seen half-way)"
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Site:
    """The S3 server and the cluster, stopped together (nothing started outlives a failed set-up)."""

    def __init__(self, root: str) -> None:
        self.s3 = self.cl = None
        try:
            self.s3 = S3Server(os.path.join(root, "s3")).start()
            cfg = os.path.join(root, "xce.toml")
            with open(cfg, "w") as fh:
                fh.write(CONFIG.replace("host_timeout = 2.0", "host_timeout = 3.0")  # a host is lost in seconds
                         .replace("fence_time = 2.0", "fence_time = 3.0"))
            with_store = os.path.join(root, "transfers.toml")
            with open(os.open(with_store, os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
                fh.write(f'[transfers]\ntimeout = 120\n\n[[transfers.remotes]]\nname = "store"\ntype = "s3"\n'
                         f'[transfers.remotes.options]\n{self.s3.options()}\n'
                         f'[[transfers.remotes]]\nname = "store-slow"\ntype = "s3"\nbwlimit = "2M"\n'
                         f'[transfers.remotes.options]\n{self.s3.options()}')
            without = os.path.join(root, "transfers-none.toml")
            with open(os.open(without, os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
                fh.write("[transfers]\ntimeout = 120\n")
            self.cl = Cluster(os.path.join(root, "cluster"), config=cfg).start()
            self.cl.add_provisioner()  # shared claims (class simfs): a source of node-local claims too
            for n, h in enumerate(("host1", "host2", "host3"), 1):
                self.cl.add_worker(h, slots=4, counters={"scratch": "4Gi"}, attrs={"node": f"n{n}"},
                                   extra_args=["--transfer-config", with_store if h != "host3" else without])
        except BaseException:
            self.stop()
            raise
        self.data = {"config.json": b'{"layers": 2}\n', "shards/0.bin": os.urandom(300_000)}
        self.big = os.urandom(8 << 20)  # 4 s through store-slow
        more = [("../mistral/config.json", b'{"layers": 3}\n'), ("../big.bin", self.big)]
        for name, blob in [*self.data.items(), *more]:
            path = os.path.normpath(os.path.join(self.s3.bucket("models"), "llama", name))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(blob)

    def stop(self) -> None:
        for part in (self.cl, self.s3):
            if part is not None:
                part.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(str(tmp_path_factory.mktemp("caches")))
    yield s
    s.stop()


def settled(cl, name: str, hosts: int) -> dict[str, dict] | None:
    """The claim's replicas by host once ``hosts`` of them are READY or FAILED (None before)."""
    rs = replicas(cl, name)
    done = {h: r for h, r in rs.items() if r["state"] in ("READY", "FAILED")}
    return done if len(done) == hosts else None


def test_each_replica_is_filled_by_its_host_and_one_that_cannot_be_fails_while_the_others_serve(site, tmp_path):
    cl = site.cl
    made = cl.xce("--json", "claim", "create", "weights", "--class", "local", "--size", "64Mi",
                  "--access", "ROX", "--hosts", "host1,host2,host3", "--source",
                  "s3://models/llama/")
    assert '"populate_from": "store:models/llama/"' in made.stdout, "resolved at creation"
    rs = wait_for(lambda: settled(cl, "weights", 3), timeout=90, what="every replica filled or failed")
    assert {h: r["state"] for h, r in rs.items()} == {"host1": "READY", "host2": "READY", "host3": "FAILED"}
    assert rs["host3"]["last_error"].startswith("NO_REMOTE: populate: remote store is not configured on host3"), \
        rs["host3"]["last_error"]
    claim = cl.claim("weights")
    assert claim["state"] == "READY" and claim["replicas_ready"] == 2
    done = [(o["host"], o["op"]) for o in claim["ops"] if o["result"] == "ok"]
    assert sorted(done) == [("host1", "create"), ("host1", "populate"), ("host2", "create"), ("host2", "populate"),
                            ("host3", "create")]
    with cl.api() as c:
        metrics = c.get("/metrics").text
    assert 'xce_claim_ops_total{class="local",op="populate",outcome="ok",pool=""} 2.0' in metrics
    assert 'xce_claim_ops_total{class="local",op="populate",outcome="failed",pool=""} 1.0' in metrics
    for host in ("host1", "host2"):  # the prefix fills the replica's root, on its own host
        for name, blob in site.data.items():
            with open(os.path.join(rs[host]["path"], name), "rb") as fh:
                assert fh.read() == blob, (host, name)
    outs = {}
    for i in range(4):
        out = tmp_path / f"read{i}"
        outs[cl.submit("--claim", "weights", "-o", str(out), "--", "sh", "-c",
                       'sha256sum "$XCE_CLAIM_WEIGHTS/shards/0.bin"; echo "on $XCE_HOST"')] = out
    for job, out in outs.items():
        done_job = cl.wait_state(job, "DONE", timeout=60)
        assert done_job["hosts"][0] in ("host1", "host2"), "never on the host whose replica failed"
        assert read(out).split()[0] == sha(site.data["shards/0.bin"])
    cl.xce("claim", "delete", "weights")
    gone = cl.wait_claim("weights", "RELEASED")
    assert [r["state"] for r in gone["replicas"]] == ["RELEASED"] * 3, "the failed one's object released too"


def test_a_cache_makes_replicas_where_its_jobs_go_and_evicts_unused_ones_but_never_one_attached(site, tmp_path):
    cl = site.cl
    gates = {n: tmp_path / f"gate-{n}" for n in ("n2", "n3", "a")}

    def hold(*args: str, gate) -> int:
        return cl.submit(*args, "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done")

    busy = [hold("-n", "4", "-R", f"select[node=={n}] span[hosts=1]", gate=gates[n]) for n in ("n2", "n3")]
    for j in busy:
        cl.wait_state(j, "RUN")  # host1 is the only host with free slots from here on
    for name, prefix in (("llama", "llama/"), ("mistral", "mistral/")):  # 3Gi each: one fits a host's 4Gi
        made = cl.xce("--json", "claim", "create", name, "--class", "local", "--size", "3Gi",
                      "--access", "ROX", "--cache", "--source", f"s3://models/{prefix}").stdout
        assert '"cache": true' in made and '"state": "READY"' in made, "a cache serves at once: replicas on demand"
    out = tmp_path / "first"
    first = cl.submit("--claim", "llama", "-o", str(out), "--", "sh", "-c",
                      'cat "$XCE_CLAIM_LLAMA/config.json"; echo "on $XCE_HOST"')
    assert cl.wait_state(first, "DONE", timeout=90)["hosts"] == ["host1"]
    assert read(out) == '{"layers": 2}\non host1\n', "a replica made where the job went, filled, then read"
    [r] = cl.claim("llama")["replicas"]
    assert (r["host"], r["state"]) == ("host1", "READY")
    assert r["history"][0]["reason"] == "made on demand: a job waits for it here"
    user = hold("--claim", "llama", gate=gates["a"])
    cl.wait_state(user, "RUN")
    waits = cl.submit("--claim", "mistral", "-o", str(tmp_path / "second"), "--", "sh", "-c",
                      'cat "$XCE_CLAIM_MISTRAL/config.json"; echo "on $XCE_HOST"')
    why = wait_for(lambda: "claim mistral" in (t := cl.xce("job", "why", str(waits)).stdout) and t,
                   what="why the second cache's job waits")
    assert "claim mistral: replicas READY on no host" in why, why
    assert replicas(cl, "llama")["host1"]["state"] == "READY", "attached: never evicted"
    assert cl.job(waits)["state"] == "PEND"
    gates["a"].write_text("")
    cl.wait_state(user, "DONE")
    done = cl.wait_state(waits, "DONE", timeout=90)
    assert done["hosts"] == ["host1"] and read(tmp_path / "second") == '{"layers": 3}\non host1\n'
    evicted = wait_for(lambda: (r := replicas(cl, "llama")["host1"])["state"] == "RELEASED" and r,
                       what="llama's unused replica released")
    assert any("least recently used: its room on host1 went to claim mistral's replica" in h["reason"]
               for h in evicted["history"]), evicted["history"]
    assert cl.claim("llama")["state"] == "READY", "a cache without replicas still serves"
    for gate in gates.values():
        gate.write_text("")
    for j in busy:
        cl.wait_state(j, "DONE")
    for name in ("llama", "mistral"):
        cl.xce("claim", "delete", name)
        cl.wait_claim(name, "RELEASED")


def test_a_cache_grows_on_demand_only_within_its_projects_quota_and_the_job_says_why_it_waits(site, tmp_path):
    cl = site.cl
    with cl.api() as api:
        bob = {"XCE_TOKEN": api.post("/v1/tokens", json={"user": "bob"}).json()["token"]}

    def show() -> dict:
        return json.loads(cl.xce("--json", "claim", "show", "quota", env=bob).stdout)

    cl.xce("claim", "create", "quota", "--class", "local", "--size", "64Mi", "--access", "ROX", "--cache",
           "--source", "s3://models/llama/", env=bob)
    cl.xce("claim", "warm", "quota", "--hosts", "host1", env=bob)  # its first replica: charged from its creation
    wait_for(lambda: [r["state"] for r in show()["replicas"]] == ["READY"], timeout=60, what="host1's replica READY")
    gate = tmp_path / "gate"
    full = cl.submit("-n", "4", "-R", "select[node==n1] span[hosts=1]", "--", "sh", "-c",
                     f"while [ ! -e {gate} ]; do sleep 0.1; done")
    cl.wait_state(full, "RUN")  # host1, the replica's host, has no slot free: a replica would start elsewhere
    waits = json.loads(cl.xce("--json", "submit", "--claim", "quota", "--", "true", env=bob).stdout)["id"]
    why = wait_for(lambda: "no replica starts" in (t := cl.xce("job", "why", str(waits), env=bob).stdout) and t,
                   what="why bob's job waits")
    assert "claim quota: replicas READY on host1, none with room; no replica starts: quota of project team-b, " \
           "class local: at most 64Mi, 64Mi in use, a replica is charged 64Mi" in why, why
    assert [r["host"] for r in show()["replicas"]] == ["host1"] and cl.job(waits)["state"] == "PEND"
    cl.xce("kill", str(waits))
    gate.write_text("")
    cl.wait_state(full, "DONE")
    cl.xce("claim", "delete", "quota", env=bob)
    wait_for(lambda: show()["state"] == "RELEASED", what="the cache released")


def ready_then_host2_lost(cl, name: str, *args: str):
    """Claim ``name`` (64Mi of ``local``, ``args`` more) with READY replicas on host1 and host2, then host2's
    worker and jobs SIGKILLed until its replica is LOST: (the replicas as they were READY, host2's worker)."""
    cl.xce("claim", "create", name, "--class", "local", "--size", "64Mi", "--hosts", "host1,host2", *args)
    rs = wait_for(lambda: (r := settled(cl, name, 2)) and all(x["state"] == "READY" for x in r.values()) and r,
                  timeout=90, what="both replicas READY")
    lost = cl.workers["host2"]
    lost.kill()
    kill_jobs_of(lost.work_dir)
    wait_for(lambda: replicas(cl, name)["host2"]["state"] == "LOST", timeout=60, what="host2's replica LOST")
    return rs, lost


def test_a_lost_hosts_replica_is_lost_until_its_worker_is_back_and_has_refilled_what_went_missing(site, tmp_path):
    cl = site.cl
    rs, lost = ready_then_host2_lost(cl, "served", "--access", "ROX", "--source", "s3://models/llama/")
    claim = cl.claim("served")
    assert claim["state"] == "READY" and claim["replicas_ready"] == 1
    assert "host2  LOST" in cl.xce("claim", "show", "served").stdout.replace("    ", "  ")
    out = tmp_path / "read"
    job = cl.submit("--claim", "served", "-o", str(out), "--", "sh", "-c", 'echo "on $XCE_HOST"')
    assert cl.wait_state(job, "DONE")["hosts"] == ["host1"], "no job goes where the replica is LOST"
    shard = os.path.join(rs["host2"]["path"], "shards", "0.bin")
    os.unlink(shard)  # part of host2's copy went with it
    lost.start()
    back = wait_for(lambda: (r := replicas(cl, "served")["host2"])["state"] in ("READY", "FAILED") and r,
                    timeout=90, what="host2's replica checked")
    assert back["state"] == "READY" and back["handle"] == rs["host2"]["handle"], "the same object, kept"
    with open(shard, "rb") as fh:
        assert fh.read() == site.data["shards/0.bin"], "what went missing copied again"
    creates = {o["op_id"] for o in cl.claim("served")["ops"] if o["host"] == "host2" and o["op"] == "create"}
    assert len(creates) == 1, "re-driven by the op id that made it"
    cl.xce("claim", "delete", "served")
    cl.wait_claim("served", "RELEASED")


def test_a_lost_hosts_replica_with_no_source_whose_object_vanished_is_failed_and_the_other_serves(site, tmp_path):
    cl = site.cl
    rs, lost = ready_then_host2_lost(cl, "notes", "--access", "RWX")
    shutil.rmtree(os.path.dirname(rs["host2"]["path"]))  # its object went with the host's disk
    lost.start()
    back = wait_for(lambda: (r := replicas(cl, "notes")["host2"])["state"] in ("READY", "FAILED") and r,
                    timeout=90, what="host2's replica checked")
    assert back["state"] == "FAILED", "not READY and empty: the data jobs wrote there is gone"
    assert back["last_error"] == "object gone while host2 was lost: its data is lost"
    assert not os.path.exists(os.path.dirname(rs["host2"]["path"])), "nothing made anew"
    claim = cl.claim("notes")
    assert claim["state"] == "READY" and claim["replicas_ready"] == 1
    assert "object gone while host2 was lost: its data is lost" in cl.xce("claim", "show", "notes").stdout
    out = tmp_path / "where"
    job = cl.submit("--claim", "notes", "-o", str(out), "--", "sh", "-c", 'echo "on $XCE_HOST"')
    assert cl.wait_state(job, "DONE")["hosts"] == ["host1"], "host1 serves on"
    cl.xce("claim", "delete", "notes")
    cl.wait_claim("notes", "RELEASED")


def test_replicas_filled_from_a_shared_claim_which_stays_while_they_are_its_readers(site):
    cl = site.cl
    cl.xce("claim", "create", "corpus", "--class", "simfs", "--size", "64Mi", "--access", "RWX")
    corpus = cl.wait_claim("corpus", "READY")
    os.makedirs(os.path.join(corpus["path"], "shards"))
    for name, blob in site.data.items():
        with open(os.path.join(corpus["path"], name), "wb") as fh:
            fh.write(blob)
    made = cl.xce("--json", "claim", "create", "copy", "--class", "local", "--size", "64Mi", "--access", "ROX",
                  "--hosts", "host1,host2", "--source", "claim:corpus").stdout
    assert '"populate_from": "claim:corpus"' in made
    rs = wait_for(lambda: settled(cl, "copy", 2), timeout=60, what="both replicas filled")
    assert {h: r["state"] for h, r in rs.items()} == {"host1": "READY", "host2": "READY"}, rs
    for r in rs.values():  # the shared claim's tree, whole, in each replica's root
        for name, blob in site.data.items():
            with open(os.path.join(r["path"], name), "rb") as fh:
                assert fh.read() == blob
    refused = cl.xce("claim", "delete", "corpus", ok=False)
    assert "claim 'corpus' is the source of node-local claim(s) copy" in refused.stderr, refused.stderr
    cl.xce("claim", "delete", "copy")
    cl.wait_claim("copy", "RELEASED")
    cl.xce("claim", "delete", "corpus")
    cl.wait_claim("corpus", "RELEASED")


def test_a_worker_sigkilled_mid_populate_leaves_one_object_filled_by_the_same_op_id(site):
    cl = site.cl
    cl.xce("claim", "create", "big", "--class", "local", "--size", "64Mi", "--access", "ROX", "--hosts", "host1",
           "--source", "store-slow:models/big.bin")
    wait_for(lambda: (op := replicas(cl, "big")["host1"]["op"]) and op["op"] == "populate" and op["attempts"],
             timeout=60, interval=0.1, what="host1's populate under way")
    w = cl.workers["host1"]
    copying = children_of(w.proc.pid)
    w.kill()
    for pid in copying:  # its rclone goes with it, as on a machine crash
        try:
            os.killpg(pid, 9)
        except ProcessLookupError:
            pass
    w.start()
    r = wait_for(lambda: (x := replicas(cl, "big")["host1"])["state"] in ("READY", "FAILED") and x, timeout=90,
                 what="host1's replica filled after the restart")
    assert r["state"] == "READY", r["last_error"]
    claim = cl.claim("big")
    assert objects_of(cl, claim["id"])["host1"] == [r["handle"]], "one object"
    with open(os.path.join(r["path"], "big.bin"), "rb") as fh:
        assert sha(fh.read()) == sha(site.big)
    populates = [o for o in claim["ops"] if o["op"] == "populate"]
    assert {o["op_id"] for o in populates} == {f"c{claim['id']}.r1.populate.1"}, "re-driven by the same op id"
    assert [o["result"] for o in populates].count("started") == 2 and populates[-1]["result"] == "ok"
    cl.xce("claim", "delete", "big")
    cl.wait_claim("big", "RELEASED")


def test_a_replica_being_filled_shows_how_far_its_worker_has_copied(site):
    cl = site.cl
    cl.xce("claim", "create", "slow", "--class", "local", "--size", "64Mi", "--access", "ROX",
           "--hosts", "host1,host2", "--source", "store-slow:models/big.bin")
    show = lambda: json.loads(cl.xce("--json", "claim", "show", "slow").stdout)  # noqa: E731
    seen = wait_for(lambda: [r for r in show()["replicas"] if (r.get("progress") or {}).get("bytes")] or None,
                    timeout=60, interval=0.2, what="a replica's fill with bytes copied")
    p = seen[0]["progress"]
    assert 0 < p["bytes"] <= len(site.big) and p["total_bytes"] == len(site.big), p
    assert p["op_id"] == seen[0]["op"]["op_id"] and seen[0]["state"] == "PREPARING"
    text = cl.xce("claim", "show", "slow").stdout
    assert "PROGRESS" in text and " of 8.0 MiB" in text, text
    done = wait_for(lambda: (rs := show()["replicas"]) and all(r["state"] == "READY" for r in rs) and rs,
                    timeout=90, what="both replicas filled")
    assert all(r["progress"] is None for r in done), "kept only while its op is open"
    cl.xce("claim", "delete", "slow")
    cl.wait_claim("slow", "RELEASED")


def test_a_jobs_scratch_short_on_every_host_evicts_a_caches_unused_replica_and_runs_there(site, tmp_path):
    cl = site.cl
    cl.xce("claim", "create", "roomy", "--class", "local", "--size", "3Gi", "--access", "ROX", "--cache",
           "--source", "s3://models/llama/")
    cl.xce("claim", "warm", "roomy", "--hosts", "host1,host2")  # 3Gi of each one's 4Gi scratch (host3 has no store)
    wait_for(lambda: (r := settled(cl, "roomy", 2)) and all(x["state"] == "READY" for x in r.values()), timeout=90,
             what="two replicas READY")
    out = tmp_path / "where"
    job = cl.submit("--scratch", "2Gi", "-R", "select[node!=n3]", "-o", str(out), "--", "sh", "-c",
                    'echo "on $XCE_HOST"')
    host = cl.wait_state(job, "DONE", timeout=60)["hosts"][0]
    assert read(out) == f"on {host}\n"
    evicted = replicas(cl, "roomy")[host]
    assert evicted["state"] in ("RELEASING", "RELEASED"), evicted
    assert any(f"least recently used: its room on {host} went to job {job}'s template claims" in h["reason"]
               for h in evicted["history"]), evicted["history"]
    rest = {h: r["state"] for h, r in replicas(cl, "roomy").items() if h != host}
    assert rest == {h: "READY" for h in ("host1", "host2") if h != host}, "one eviction was enough"
    cl.xce("claim", "delete", "roomy")
    cl.wait_claim("roomy", "RELEASED")
