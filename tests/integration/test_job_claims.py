"""Claims in jobs on a real cluster (controller, provisioner, three workers, simfs), as CI runs it: as root.

host1..host3 have 4 slots and 4Gi of ``scratch``.  Classes: ``simfs`` (shared, every host),
``near3`` (reachable from host3 only), ``scratch`` and ``stage`` (node scope).  Profile ``serve``
declares a ``kv-cache`` scratch claim.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from tests.helpers import Cluster, kill_jobs_of, wait_for
from tests.integration.test_claims import CONFIG as CLAIMS_CONFIG

CONFIG = CLAIMS_CONFIG.replace("host_timeout = 5.0", "host_timeout = 2.0") + """
[[claim_classes]]
name = "scratch"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]

[[claim_classes]]
name = "stage"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]

[[apps]]
name = "serve"
claims = [{ name = "kv-cache", claim_class = "scratch", size = "512Mi" }]
"""

ROOT = os.geteuid() == 0


def make_job_cluster(root, hosts=("host1", "host2", "host3"), host_timeout: float = 2.0,
                     extra_config: str = "", launcher_lease: float = 30.0) -> Cluster:
    """``host_timeout`` is also the fence time: 2 s for the tests that lose a host; longer for those that
    restart daemons and expect the runs kept (a restart takes seconds on a busy machine).
    ``extra_config``: more of the configuration (classes of a test's own); ``launcher_lease``: the
    controller's (a blaunch's tasks end that long after it stopped asking for them)."""
    cfg = root / "xce.toml"
    cfg.write_text(CONFIG.replace("host_timeout = 2.0", f"host_timeout = {host_timeout}\nlauncher_lease = {launcher_lease}")
                   .replace("fence_time = 2.0", f"fence_time = {host_timeout}") + extra_config)
    cl = Cluster(str(root), config=str(cfg)).start()
    near3 = root / "simfs-near3"
    near3.mkdir()
    cl.add_provisioner(extra_providers=f'[providers.simfs-near3]\n[providers.simfs-near3.config]\n'
                                       f'root = "{near3}"\nreachable_hosts = ["host3"]\n', extra_roots=(str(near3),))
    for h in hosts:
        cl.add_worker(h, slots=4, counters={"scratch": "4Gi"})
    return cl


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_job_cluster(tmp_path_factory.mktemp("jobclaims"))
    yield c
    c.stop()


def read(path) -> str:
    with open(path) as fh:
        return fh.read()


def claim_data(cl, name: str) -> str:
    """Where a shared simfs claim's data lives (to look at it from outside the jobs)."""
    return cl.claim(name)["path"]


def node_objects(cl) -> list[str]:
    return [p for w in cl.workers.values() for p in glob.glob(os.path.join(w.work_dir, "simfs", "nodes", "*", "*"))
            if not os.path.basename(p).startswith(".")]


def test_a_checkpoint_survives_losing_the_host_and_the_requeued_run_reads_it(cl, tmp_path):
    cl.xce("claim", "create", "ckpt", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    out = tmp_path / "train.out"
    script = ('if [ -f "$XCE_CLAIM_CKPT/step" ]; then echo "resumed from step $(cat "$XCE_CLAIM_CKPT/step") '
              'on $XCE_HOST run $XCE_RUN"; else echo 7 > "$XCE_CLAIM_CKPT/step"; echo "first run on $XCE_HOST"; '
              'sleep 300; fi')
    job = cl.submit("-r", "--claim", "ckpt:rw", "-o", str(out), "--", "sh", "-c", script)
    first = cl.wait_state(job, "RUN")
    wait_for(lambda: out.exists() and "first run" in read(out), what="checkpoint written")
    lost = cl.workers[first["hosts"][0]]
    lost.kill()  # the training host dies with its job
    kill_jobs_of(lost.work_dir)
    done = cl.wait_state(job, "DONE", timeout=60)
    assert done["run"] == 2 and done["hosts"] != first["hosts"]
    assert read(out).splitlines()[-1] == f"resumed from step 7 on {done['hosts'][0]} run 2"
    # the lost host's attachment was fenced; the new run's is detached once the provider confirms
    wait_for(lambda: cl.claim("ckpt")["attachments"] == [], what="attachments gone")
    lost.start()


def test_read_only_weights_serve_three_replicas_and_refuse_writes(cl, tmp_path):
    cl.xce("claim", "create", "weights", "--class", "simfs", "--size", "1Gi", "--access", "ROX", "--wait")
    with open(os.path.join(claim_data(cl, "weights"), "model.bin"), "w") as fh:
        fh.write("w-v1")
    r = cl.xce("submit", "--claim", "weights:rw", "--", "true", ok=False)
    assert r.returncode == 1 and "use --claim weights:ro" in r.stderr
    script = ('cat "$XCE_CLAIM_WEIGHTS/model.bin"; echo; if touch "$XCE_CLAIM_WEIGHTS/x" 2>/dev/null; '
              'then echo WROTE; else echo refused; fi; sleep 1')
    ids = [cl.submit("--claim", "weights", "--app", "serve", "-o", str(tmp_path / f"r{i}"), "--",
                     "sh", "-c", script) for i in range(3)]
    wait_for(lambda: sum(cl.job(j)["state"] == "RUN" for j in ids) == 3 or all(
        cl.job(j)["state"] == "DONE" for j in ids), what="replicas running together")
    jobs = [cl.wait_state(j, "DONE") for j in ids]
    for j, i in zip(jobs, range(3)):
        lines = read(tmp_path / f"r{i}").split()
        assert lines[0] == "w-v1"
        assert lines[1] == ("refused" if ROOT else "WROTE"), "ROX is mounted read-only (as root)"
        kinds = {c["name"]: c for c in j["claims"]}
        assert kinds["weights"]["mode"] == "ro" and kinds["weights"]["form"] == "standalone"
    assert not os.path.exists(os.path.join(claim_data(cl, "weights"), "x"))


def test_rwop_claims_serve_one_job_at_a_time(cl, tmp_path):
    cl.xce("claim", "create", "solo", "--class", "simfs", "--size", "1Gi", "--access", "RWOP", "--wait")
    gate = tmp_path / "gate"
    first = cl.submit("--claim", "solo", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done")
    cl.wait_state(first, "RUN")
    second = cl.submit("--claim", "solo", "--", "true")
    reason = wait_for(lambda: (r := cl.job(second)["pending_reason"]) and "RWOP" in r and r, what="RWOP reason")
    assert reason == f"claim solo (RWOP) in use by job {first}"
    why = cl.xce("job", "why", str(second)).stdout.strip()
    assert why == f"Job <{second}> PEND: claim solo (RWOP) in use by job {first}"
    gate.write_text("")
    a, b = cl.wait_state(first, "DONE"), cl.wait_state(second, "DONE")
    assert a["end_time"] <= b["start_time"]


def test_rwo_users_are_placed_on_one_host(cl, tmp_path):
    cl.xce("claim", "create", "shared-rwo", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    gate = tmp_path / "gate"
    ids = [cl.submit("--claim", "shared-rwo", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done")
           for _ in range(3)]
    jobs = [cl.wait_state(j, "RUN") for j in ids]
    assert len({j["hosts"][0] for j in jobs}) == 1
    gate.write_text("")
    for j in ids:
        cl.wait_state(j, "DONE")


def test_a_claim_reachable_only_from_host3_takes_its_job_there(cl, tmp_path):
    cl.xce("claim", "create", "local3", "--class", "near3", "--size", "1Gi", "--access", "RWX", "--wait")
    ids = [cl.submit("--claim", "local3", "--", "true") for _ in range(3)]
    assert [cl.wait_state(j, "DONE")["hosts"] for j in ids] == [["host3"]] * 3


def test_scratch_is_reserved_on_the_host_counter_and_its_shortage_is_the_pending_reason(cl, tmp_path):
    out = tmp_path / "s"
    job = cl.submit("--scratch", "1Gi", "-o", str(out), "--", "sh", "-c",
                    'df -P "$XCE_SCRATCH" >/dev/null && echo scratch ok > "$XCE_SCRATCH/f" && cat "$XCE_SCRATCH/f"')
    assert cl.wait_state(job, "DONE")
    assert read(out).strip() == "scratch ok"
    big = cl.submit("--scratch", "8Gi", "--", "true")
    reason = wait_for(lambda: (r := cl.job(big)["pending_reason"]) and "scratch" in r and r, what="scratch reason")
    assert reason == "no matching host has 8Gi scratch free for its template claims; 3 host(s) match"
    cl.xce("kill", str(big))
    assert all(c["state"] == "RELEASED" for c in cl.job(job)["claims"][1:])


def test_stage_in_and_stage_out(cl, tmp_path):
    (tmp_path / "input.csv").write_text("1,2,3\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.txt").write_text("A")
    job = cl.submit("--stage-in", str(tmp_path / "input.csv"), "--stage-in", f"{tmp_path / 'dir'}:inputs/dir",
                    "--stage-out", f"sum.txt:{tmp_path / 'results' / 'sum.txt'}", "--",
                    "sh", "-c", 'cd "$XCE_STAGE" && cat input.csv inputs/dir/a.txt > sum.txt')
    done = cl.wait_state(job, "DONE")
    assert read(tmp_path / "results" / "sum.txt") == "1,2,3\nA"
    stage = next(c for c in done["claims"] if c.get("kind") == "stage")
    assert stage["env"] == "XCE_STAGE"
    cl.wait_claim(stage["name"], "RELEASED")


def test_stage_out_failing_then_succeeding_ends_done(cl, tmp_path):
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the destination's directory should be")
    job = cl.submit("--stage-out", f"out.txt:{blocker / 'out.txt'}", "--",
                    "sh", "-c", 'echo result > "$XCE_STAGE/out.txt"')
    stage = wait_for(lambda: next((c for c in cl.job(job)["claims"] if c.get("kind") == "stage"
                                   and (c.get("attempts") or 0) >= 2), None), what="stage-out retried")
    assert "COPY_FAILED" in stage["last_error"]
    assert cl.job(job)["state"] == "STAGE_OUT"
    blocker.unlink()
    done = cl.wait_state(job, "DONE")
    assert done["exit_code"] == 0 and read(blocker / "out.txt") == "result\n"


def test_stage_out_failing_for_good_ends_exit_and_keeps_the_data(cl, tmp_path):
    job = cl.submit("--stage-out", f"never-written.txt:{tmp_path / 'x'}", "--",
                    "sh", "-c", 'echo kept > "$XCE_STAGE/partial.txt"')
    done = cl.wait_state(job, "EXIT")
    assert done["exit_reason"].startswith("stage-out failed: NOT_FOUND: stage-out: ")
    stage = next(c for c in done["claims"] if c.get("kind") == "stage")
    assert stage["state"] == "FAILED"
    c = cl.claim(stage["name"])
    assert c["data_exists"] and "the data is kept" in c["history"][-1]["reason"]
    assert read(os.path.join(c["path"], "partial.txt")) == "kept\n", "never deleted"


def test_template_claims_of_failed_and_killed_jobs_leave_nothing_behind(cl, tmp_path):
    failed = cl.submit("--scratch", "256Mi", "--stage-in", str(tmp_path), "--", "sh", "-c", "exit 4")
    killed = cl.submit("--scratch", "256Mi", "--", "sleep", "300")
    cl.wait_state(failed, "EXIT")
    cl.wait_state(killed, "RUN")
    cl.xce("kill", str(killed))
    cl.wait_state(killed, "EXIT")
    names = [c["name"] for j in (failed, killed) for c in cl.job(j)["claims"] if c["form"] == "template"
             and c["name"] != "workspace"]
    assert len(names) == 3
    for name in names:
        cl.wait_claim(name, "RELEASED")
    handles = {cl.claim(n)["handle"] for n in names}
    assert not [p for p in node_objects(cl) if os.path.basename(p) in handles], "nothing left on disk"
    assert not [o for o in json.loads(cl.xce("--json", "orphans").stdout) if o.get("name") in names]


def test_claim_refused_at_submission(cl):
    for args, fragment in ((["--claim", "nosuch"], "claim 'nosuch' not found"),
                           (["--scratch", "1Gi:nope"], "claim class 'nope' does not exist"),
                           (["--app", "nope"], "application profile 'nope' does not exist"),
                           (["--stage-out", "../etc:/tmp/x"], "must be a relative path inside the staging area")):
        r = cl.xce("submit", *args, "--", "true", ok=False)
        assert r.returncode == 1 and fragment in r.stderr, (args, r.stderr)
    r = cl.xce("submit", "--scratch", "lots", "--", "true", ok=False)  # a typo: bad usage, said by the CLI
    assert r.returncode == 2 and "invalid --scratch size 'lots'" in r.stderr, r.stderr


def test_job_show_and_claim_show_tell_each_other(cl, tmp_path):
    cl.xce("claim", "create", "shown", "--class", "simfs", "--size", "1Gi", "--access", "RWX", "--wait")
    gate = tmp_path / "gate"
    job = cl.submit("--claim", "shown", "--scratch", "256Mi", "--", "sh", "-c",
                    f"while [ ! -e {gate} ]; do sleep 0.1; done")
    cl.wait_state(job, "RUN")
    shown = cl.xce("job", "show", str(job)).stdout
    assert "XCE_CLAIM_SHOWN" in shown and "XCE_SCRATCH" in shown and "ATTACHED" in shown
    claim = cl.xce("claim", "show", "shown").stdout
    assert f"job {job}" in claim
    gate.write_text("")
    cl.wait_state(job, "DONE")


@pytest.mark.skipif(not ROOT, reason="running jobs as their users needs a root worker (CI runs as root)")
def test_jobs_run_as_their_user_and_stage_in_only_what_that_user_may_read():
    import shutil
    import tempfile

    # the cluster and the files live outside pytest's root-only tmp tree: users must reach their claims
    shared = tempfile.mkdtemp(prefix="xce-stage-test-")
    os.chmod(shared, 0o777)
    root = os.path.join(shared, "cluster")
    os.makedirs(root, mode=0o755)
    cfg = os.path.join(root, "xce.toml")
    with open(cfg, "w") as fh:
        fh.write(CONFIG)
    cl = Cluster(root, config=cfg).start()
    try:
        cl.add_worker("host1", slots=2, counters={"scratch": "1Gi"}, extra_args=["--run-as-users"])
        with cl.api() as api:
            assert api.post("/v1/users", json={"name": "nobody", "projects": ["default"]}).status_code == 201
            token = api.post("/v1/tokens", json={"user": "nobody"}).json()["token"]
        readable, secret = os.path.join(shared, "readable.txt"), os.path.join(shared, "secret.txt")
        for path, mode in ((readable, 0o644), (secret, 0o600)):
            with open(path, "w") as fh:
                fh.write("data\n")
            os.chmod(path, mode)
        nobody = {**cl.env, "XCE_TOKEN": token}
        from tests.helpers import cli

        ok = json.loads(cli(nobody, "--json", "submit", "--stage-in", readable, "-o", os.path.join(shared, "o.%J"),
                            "--", "sh", "-c", 'id -u; cat "$XCE_STAGE/readable.txt"').stdout)["id"]
        assert cl.wait_state(ok, "DONE", "EXIT")["state"] == "DONE", cl.job(ok)["exit_reason"]
        assert read(os.path.join(shared, f"o.{ok}")).split() == ["65534", "data"]
        denied = json.loads(cli(nobody, "--json", "submit", "--stage-in", secret, "--", "true").stdout)["id"]
        job = cl.wait_state(denied, "EXIT")
        # refused as the user would be; the answer is the same as for a file that is not there
        assert job["exit_reason"] == (f"stage-in failed: NOT_READABLE: stage-in: cannot read {secret} as nobody "
                                      "(missing or permission denied)")
        assert job["start_time"] is None, "the job never started"
    finally:
        cl.stop()
        shutil.rmtree(shared, ignore_errors=True)


def test_shared_template_claims_come_from_a_pool_through_the_provisioner(cl, tmp_path):
    out = tmp_path / "o"
    job = cl.submit("--scratch", "1Gi:tiny", "-o", str(out), "--", "sh", "-c",
                    'echo shared > "$XCE_SCRATCH/f" && cat "$XCE_SCRATCH/f"')
    done = cl.wait_state(job, "DONE")
    assert read(out).strip() == "shared"
    scratch = next(c for c in done["claims"] if c.get("kind") == "scratch")
    c = cl.wait_claim(scratch["name"], "RELEASED")
    assert (c["scope"], c["pool"], c["class"]) == ("shared", "small", "tiny")
    assert c["handle"] not in os.listdir(os.path.join(cl.provisioner.simfs_root, "volumes"))
    # larger than the pool itself: refused at submission (it could never be placed)
    r = cl.xce("submit", "--scratch", "5Gi:tiny", "--", "true", ok=False)
    assert r.returncode == 1 and "the largest, small, has a capacity of 3Gi" in r.stderr
    # larger than what is free now: it waits, and says why
    cl.xce("claim", "create", "filler", "--class", "tiny", "--size", "2Gi", "--access", "RWO", "--wait")
    big = cl.submit("--scratch", "2Gi:tiny", "--", "true")
    reason = wait_for(lambda: (r := cl.job(big)["pending_reason"]) and "pool" in r and r, what="pool reason")
    assert reason == "no pool has room for its scratch claim (2Gi): small has 1Gi free"
    cl.xce("kill", str(big))
    cl.xce("claim", "delete", "filler", "--wait")
