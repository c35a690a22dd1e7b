"""Finding 3: with ``--run-as-users`` one user's job cannot read another's per-run data or output.

Two real unix accounts (made and removed here) run jobs on one root worker.  Alice's job writes a
secret into its workspace, scratch and staging claims and its default output, then waits; Bob's
job, told every path where the secrets live on the host, tries to read each of them.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid

import pytest

from tests.helpers import XCE as XCE_CLI, Cluster, cli, wait_for
from tests.integration.test_job_claims import CONFIG, ROOT

pytestmark = pytest.mark.skipif(not ROOT, reason="jobs run as their users only under a root worker (CI is root)")


@pytest.fixture
def accounts():
    """Two throwaway unix accounts; XCE users of the same names run as them."""
    names = [f"xs{uuid.uuid4().hex[:6]}a", f"xs{uuid.uuid4().hex[:6]}b"]
    for n in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", n], check=True)
    yield names
    for n in names:
        subprocess.run(["userdel", n], check=False)


@pytest.fixture
def shared():
    path = tempfile.mkdtemp(prefix="xce-users-")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_per_run_data_and_output_belong_to_the_jobs_user_alone(accounts, shared):
    alice, bob = accounts
    root = os.path.join(shared, "cluster")
    os.makedirs(root, mode=0o755)
    with open(os.path.join(root, "xce.toml"), "w") as fh:
        fh.write(CONFIG)
    cl = Cluster(root, config=os.path.join(root, "xce.toml")).start()
    try:
        cl.add_worker("host1", slots=4, counters={"scratch": "1Gi"}, extra_args=["--run-as-users"])
        env = {}
        with cl.api() as c:
            for name in accounts:
                assert c.post("/v1/users", json={"name": name, "projects": ["default"]}).status_code == 201
                env[name] = {**cl.env, "XCE_TOKEN": c.post("/v1/tokens", json={"user": name}).json()["token"]}
        src = os.path.join(shared, "in.txt")
        with open(src, "w") as fh:
            fh.write("staged\n")
        os.chmod(src, 0o644)
        gate, ready = os.path.join(shared, "gate"), os.path.join(shared, "ready")
        script = ('echo secret > "$XCE_WORKSPACE/s" && echo secret > "$XCE_SCRATCH/s" && '
                  'echo secret > "$XCE_STAGE/s" && echo secret && '
                  f'touch {ready} && while [ ! -e {gate} ]; do sleep 0.1; done')
        job = json.loads(cli(env[alice], "--json", "submit", "--scratch", "64Mi", "--stage-in", src, "--",
                             "sh", "-c", script).stdout)["id"]
        wait_for(lambda: os.path.exists(ready) or cl.job(job)["state"] in ("DONE", "EXIT"), what="alice's secrets")
        running = cl.job(job)
        assert running["state"] == "RUN", running["exit_reason"]
        uid = pwd.getpwnam(alice).pw_uid
        data = {c.get("kind", c["name"]): c["path"] for c in running["claims"]}
        targets = [os.path.join(data["workspace"], "s"), os.path.join(data["scratch"], "s"),
                   os.path.join(data["stage"], "s"), os.path.join(data["stage"], "in.txt"), running["stdout"]]
        for path in (data["workspace"], data["scratch"], data["stage"]):
            st = os.stat(path)
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700), f"{path}: {st.st_uid} {oct(st.st_mode)}"
        st = os.stat(running["stdout"])
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o600), oct(st.st_mode)

        probe = " ".join(f'if cat {p} >/dev/null 2>&1; then echo "READ {p}"; else echo "denied {p}"; fi;'
                         for p in targets)
        spy = json.loads(cli(env[bob], "--json", "submit", "--", "sh", "-c", probe).stdout)["id"]
        done = cl.wait_state(spy, "DONE", "EXIT")
        assert done["state"] == "DONE", done["exit_reason"]
        with open(done["stdout"]) as fh:
            seen = fh.read().splitlines()
        assert seen == [f"denied {p}" for p in targets]
        with open(os.path.join(shared, "gate"), "w"):
            pass
        finished = cl.wait_state(job, "DONE", "EXIT")
        assert finished["state"] == "DONE", finished["exit_reason"]
        with open(finished["stdout"]) as fh:
            assert fh.read() == "secret\n", "alice reached her own data all along"
    finally:
        cl.stop()


def test_the_submission_directory_is_entered_as_the_jobs_user_never_through_roots_rights(accounts, shared):
    """Issue 31: the job starts in the directory it was submitted from, entered by the launcher as the
    job's user.  The attack: alice submits from a link she planted to a directory only root may enter
    (and from that directory itself); the worker runs as root, and must not take her there.  Her job
    starts in its workspace instead, noted; her script is hers alone; her token stays behind."""
    alice, _ = accounts
    root = os.path.join(shared, "cluster")
    os.makedirs(root, mode=0o755)
    with open(os.path.join(root, "xce.toml"), "w") as fh:
        fh.write(CONFIG)
    private = tempfile.mkdtemp(prefix="xce-rootonly-")  # 0700 root
    with open(os.path.join(private, "secret"), "w") as fh:
        fh.write("root's\n")
    planted = os.path.join(shared, "planted")
    os.symlink(private, planted)
    cl = Cluster(root, config=os.path.join(root, "xce.toml")).start()
    try:
        cl.add_worker("host1", slots=2, extra_args=["--run-as-users"])
        with cl.api() as c:
            assert c.post("/v1/users", json={"name": alice, "projects": ["default"]}).status_code == 201
            env = {**cl.env, "XCE_TOKEN": c.post("/v1/tokens", json={"user": alice}).json()["token"]}
        out = os.path.join(shared, "out.%J")
        probe = "pwd; cat secret 2>&1 || true; ls -l \"$0\" 2>/dev/null | cut -d' ' -f1,3; env"
        jobs = [json.loads(subprocess.run(
            [*XCE_CLI, "--json", "submit", "-o", out, "--script", "-"], input=probe, cwd=cwd, env={**os.environ, **env},
            capture_output=True, text=True, check=True).stdout)["id"] for cwd in (planted, private)]
        uid_name = alice
        for job_id in jobs:
            job = cl.wait_state(job_id, "DONE", "EXIT")
            assert job["state"] == "DONE", job["exit_reason"]
            with open(out.replace("%J", str(job_id))) as fh:
                lines = fh.read().splitlines()
            workspace = lines[0]
            assert workspace.endswith(f"/jobs/{job_id}.1"), lines
            assert "root's" not in lines and lines[1].endswith("No such file or directory")
            assert lines[2].split() == ["-rwx------", uid_name]  # RUN/script: hers, 0700
            assert not any(line.startswith("XCE_TOKEN=") for line in lines)
            assert "Permission denied" in job["note"] and workspace in job["note"]
    finally:
        cl.stop()
        shutil.rmtree(private, ignore_errors=True)
