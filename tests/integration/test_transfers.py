"""Stage-in and stage-out from where data lives, on a real cluster: an S3 server (``rclone serve s3``)
and an HTTPS server on loopback, a worker with a ``--transfer-config`` holding the remotes' keys.

Remotes: ``lab`` (serves ``s3://`` for project physics, the right key) and ``lab-badkey`` (the same
server, a wrong secret), both physics only.  ann is in physics, ben in chem.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from tests.helpers import Cluster, audit_trail, children_of, cli, wait_for
from tests.integration.test_job_claims import CONFIG as JOB_CONFIG, ROOT
from tests.transfer_servers import HTTPSServer, S3Server

CONFIG = JOB_CONFIG.replace("max_attempts = 6", "max_attempts = 40") + """
[[projects]]
name = "physics"

[[projects]]
name = "chem"

[transfers]
public_schemes = ["https"]

[[transfers.remotes]]
name = "lab"
type = "s3"
schemes = ["s3"]
projects = ["physics"]
description = "the lab's object store"

[[transfers.remotes]]
name = "lab-badkey"
type = "s3"
projects = ["physics"]

[[transfers.remotes]]
name = "lab-slow"
type = "s3"
projects = ["physics"]
description = "the lab's store, through a link the site limits to 2 MiB/s"
"""


def transfer_config(path: str, s3: S3Server, https: HTTPSServer) -> str:
    with open(path, "w") as fh:
        fh.write(f'[transfers]\ntimeout = 120\nca_cert = "{https.ca_cert}"\n\n'
                 f'[[transfers.remotes]]\nname = "lab"\ntype = "s3"\n[transfers.remotes.options]\n{s3.options()}\n'
                 f'[[transfers.remotes]]\nname = "lab-badkey"\ntype = "s3"\n[transfers.remotes.options]\n'
                 f'{s3.options(secret="not-the-secret-" + s3.secret_key[:6])}\n'
                 # slow on purpose (a real setting: a remote's bandwidth limit): transfers seen half-way
                 f'[[transfers.remotes]]\nname = "lab-slow"\ntype = "s3"\nbwlimit = "2M"\n'
                 f'[transfers.remotes.options]\n{s3.options()}\n')
    os.chmod(path, 0o600)
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Site:
    def __init__(self, root: str, worker_args: tuple[str, ...] = ()) -> None:
        self.root = root
        self.s3 = self.https = self.cl = None
        try:
            self._start(worker_args)
        except BaseException:
            self.stop()  # nothing started here outlives a failed set-up
            raise

    def _start(self, worker_args: tuple[str, ...]) -> None:
        root = self.root
        self.s3 = S3Server(os.path.join(root, "s3")).start()
        self.https = HTTPSServer(os.path.join(root, "https")).start()
        cfg = os.path.join(root, "xce.toml")
        with open(cfg, "w") as fh:
            fh.write(CONFIG)
        self.cl = Cluster(os.path.join(root, "cluster"), config=cfg)
        self.cl.start()
        self.cl.add_worker("host1", slots=4, counters={"scratch": "4Gi"}, extra_args=[
            *worker_args,
            "--transfer-config", transfer_config(os.path.join(root, "transfers.toml"), self.s3, self.https)])
        self.env = {}
        with self.cl.api() as c:
            for name, project in (("ann", "physics"), ("ben", "chem")):
                assert c.post("/v1/users", json={"name": name, "projects": [project]}).status_code == 201
                self.env[name] = {**self.cl.env, "XCE_TOKEN": c.post("/v1/tokens", json={"user": name}).json()["token"]}
        # what the object store and the web server hold
        self.data = {"in.bin": os.urandom(1_500_000), "set/a.txt": b"A\n", "set/b/c.bin": os.urandom(70_000)}
        for name, blob in self.data.items():
            path = os.path.join(self.s3.bucket("data"), name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(blob)
        self.page = os.urandom(200_000)
        with open(os.path.join(self.https.www, "page.bin"), "wb") as fh:
            fh.write(self.page)
        self.s3.bucket("results")
        # 4 s through lab-slow; huge.bin 12 s, more than loopback's socket buffers hold (a server killed
        # after the first reading has not sent it all)
        self.big, self.huge = os.urandom(8 << 20), os.urandom(24 << 20)
        for name, blob in (("big.bin", self.big), ("huge.bin", self.huge)):
            with open(os.path.join(self.s3.bucket("data"), name), "wb") as fh:
                fh.write(blob)

    def submit(self, user: str, *args: str) -> int:
        r = cli(self.env[user], "--json", "submit", *args)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["id"]

    def stage_claim(self, job_id: int) -> dict | None:
        """The job's staging claim (None until the job has one: node-scope claims come with its hosts)."""
        return next((c for c in self.cl.job(job_id)["claims"] if c.get("kind") == "stage"), None)

    def transfer(self, job_id: int) -> dict | None:
        """The staging claim's transfer in flight, as ``xce claim show`` gives it (None: none now)."""
        stage = self.stage_claim(job_id)
        if stage is None:
            return None
        r = cli(self.env["ann"], "--json", "claim", "show", stage["name"])
        return json.loads(r.stdout).get("transfer") if r.returncode == 0 else None

    def half_way(self, job_id: int) -> dict:
        """A reading in the middle of the staging claim's transfer: 0 < copied < total."""
        def middle():
            t = self.transfer(job_id)
            return t if t and t.get("total_bytes") and 0 < t["bytes"] < t["total_bytes"] else None
        return wait_for(middle, timeout=60, interval=0.1, what=f"job {job_id}'s transfer half-way")

    def stop(self) -> None:
        for part in (self.cl, self.https, self.s3):
            if part is not None:
                part.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(str(tmp_path_factory.mktemp("transfers")))
    yield s
    s.stop()


def test_transfers_list_shows_schemes_and_the_remotes_of_my_projects(site):
    ann = json.loads(cli(site.env["ann"], "--json", "transfers", "list").stdout)
    assert [(s["scheme"], s["via"]) for s in ann["schemes"]] == [("https", "public"), ("s3", "lab")]
    assert [r["name"] for r in ann["remotes"]] == ["lab", "lab-badkey", "lab-slow"]
    ben = json.loads(cli(site.env["ben"], "--json", "transfers", "list").stdout)
    assert ben["remotes"] == [] and [s["scheme"] for s in ben["schemes"]] == ["https"]
    assert ben["remote_names"] == ["lab", "lab-badkey", "lab-slow"]  # names only: NAME:path is read as a remote
    table = cli(site.env["ann"], "transfers", "list").stdout
    assert "lab-badkey" in table and "s3://" in table
    assert "options" not in json.dumps(ann) and site.s3.access_key not in json.dumps(ann)


def test_stage_in_from_s3_and_https_the_job_reads_exactly_the_bytes(site, tmp_path):
    out = tmp_path / "out"
    job = site.submit("ann", "--stage-in", "s3://data/in.bin", "--stage-in", "s3://data/set/:set",
                      "--stage-in", f"{site.https.url}/page.bin", "--stage-size", "64Mi", "-o", str(out), "--",
                      "sh", "-c", 'cd "$XCE_STAGE" && sha256sum in.bin page.bin set/a.txt set/b/c.bin')
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=60)
    assert done["state"] == "DONE", done["exit_reason"]
    got = dict(line.split()[::-1] for line in out.read_text().splitlines())
    assert got == {"in.bin": sha(site.data["in.bin"]), "page.bin": sha(site.page),
                   "set/a.txt": sha(site.data["set/a.txt"]), "set/b/c.bin": sha(site.data["set/b/c.bin"])}
    stage = site.stage_claim(job)
    claim = site.cl.claim(stage["name"])
    # the claim records where s3:// went: the remote lab, as the controller resolved it for physics
    assert ["lab:data/in.bin", "in.bin"] in claim["stage_in"] and ["lab:data/set/", "set"] in claim["stage_in"]


def test_stage_out_to_s3_the_objects_equal_the_jobs_output(site, tmp_path):
    job = site.submit("ann", "--stage-out", "out.txt:s3://results/run1/out.txt",
                      "--stage-out", "res:lab:results/run1/res", "--",
                      "sh", "-c", 'cd "$XCE_STAGE" && seq 1 200000 > out.txt && mkdir -p res/deep && '
                                  'echo one > res/one && echo two > res/deep/two')
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=60)
    assert done["state"] == "DONE", done["exit_reason"]
    expected = "".join(f"{i}\n" for i in range(1, 200001)).encode()
    base = os.path.join(site.s3.data, "results", "run1")
    with open(os.path.join(base, "out.txt"), "rb") as fh:
        assert fh.read() == expected
    with open(os.path.join(base, "res", "deep", "two")) as fh:
        assert fh.read() == "two\n"


@pytest.mark.parametrize("user, location, says", [
    ("ben", "s3://data/in.bin", "project chem may use no remote for s3:// URLs"),
    ("ben", "lab:data/in.bin", "project chem may not use remote lab"),
    ("ann", "ftp://127.0.0.1/x", "unknown scheme ftp://"),
    ("ann", "nosuch:data/x", "nosuch is not a remote (xce transfers list) nor a file here"),  # (the CLI: exit 2)
    ("ann", "https://alice:hunter2-secret@127.0.0.1/x", "credentials"),
    ("ann", "https://127.0.0.1/x?X-Amz-Signature=sig-secret", "query string"),
])
def test_refused_at_submission_with_the_reason(site, user, location, says):
    r = cli(site.env[user], "submit", "--stage-in", location, "--", "true")
    assert r.returncode == (2 if location.startswith("nosuch:") else 1) and says in r.stderr, r.stderr
    assert "hunter2" not in r.stderr and "sig-secret" not in r.stderr


def test_stage_out_to_a_url_is_refused_and_so_is_a_remote_of_another_project(site):
    r = cli(site.env["ann"], "submit", "--stage-out", f"x:{site.https.url}/up", "--", "true")
    assert r.returncode == 1 and "read-only" in r.stderr, r.stderr
    r = cli(site.env["ben"], "submit", "--stage-out", "x:s3://results/x", "--", "true")
    assert r.returncode == 1 and "project chem" in r.stderr, r.stderr


def test_a_wrong_key_is_a_permanent_error_naming_the_remote_and_the_job_exits(site):
    job = site.submit("ann", "--stage-in", "lab-badkey:data/in.bin", "--stage-size", "64Mi", "--", "true")
    done = site.cl.wait_state(job, "EXIT", timeout=60)
    assert done["exit_reason"].startswith("stage-in failed: ACCESS_DENIED: "), done["exit_reason"]
    assert "via remote lab-badkey" in done["exit_reason"] and done["start_time"] is None
    claim = site.cl.claim(site.stage_claim(job)["name"])
    assert claim["attempts"] == 1, "permanent: not retried"


def test_a_missing_object_is_a_permanent_error(site):
    job = site.submit("ann", "--stage-in", "s3://data/nope.bin", "--stage-size", "64Mi", "--", "true")
    done = site.cl.wait_state(job, "EXIT", timeout=60)
    assert done["exit_reason"].startswith("stage-in failed: NOT_FOUND: "), done["exit_reason"]
    assert "lab:data/nope.bin" in done["exit_reason"]


def test_a_stage_in_larger_than_the_staging_area_is_refused_before_it_copies(site):
    job = site.submit("ann", "--stage-in", "s3://data/in.bin", "--stage-size", "1Mi", "--", "true")
    done = site.cl.wait_state(job, "EXIT", timeout=60)
    assert done["exit_reason"].startswith("stage-in failed: RESOURCE_EXHAUSTED: "), done["exit_reason"]
    assert "--stage-size" in done["exit_reason"]


def test_stage_out_refused_by_the_store_ends_exit_and_keeps_the_data(site):
    job = site.submit("ann", "--stage-out", "result.txt:lab-badkey:results/never/result.txt", "--",
                      "sh", "-c", 'echo precious > "$XCE_STAGE/result.txt"')
    done = site.cl.wait_state(job, "EXIT", timeout=60)
    assert done["exit_reason"].startswith("stage-out failed: ACCESS_DENIED: "), done["exit_reason"]
    assert done["exit_code"] == 0, "the process itself succeeded"
    stage = site.stage_claim(job)
    shown = json.loads(site.cl.xce("--json", "claim", "show", stage["name"]).stdout)
    assert shown["state"] == "FAILED" and shown["data_exists"]
    with open(os.path.join(shown["path"], "result.txt")) as fh:
        assert fh.read() == "precious\n"
    assert shown["path"] in site.cl.xce("claim", "show", stage["name"]).stdout, "claim show says where it is"
    assert not os.path.exists(os.path.join(site.s3.data, "results", "never"))


def test_the_store_down_gives_retries_then_success_when_it_returns(site, tmp_path):
    site.s3.stop()
    try:
        out = tmp_path / "out"
        job = site.submit("ann", "--stage-in", "s3://data/in.bin", "--stage-size", "64Mi", "-o", str(out), "--",
                          "sh", "-c", 'cd "$XCE_STAGE" && sha256sum in.bin')
        stage = wait_for(lambda: (c := site.stage_claim(job)) and (c.get("attempts") or 0) >= 2 and c,
                         timeout=60, what="stage-in retried")
        assert stage["last_error"] and "TRANSFER_FAILED" in stage["last_error"], stage
        assert site.cl.job(job)["state"] == "PEND"
    finally:
        site.s3.start()
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=60)
    assert done["state"] == "DONE", done["exit_reason"]
    claim = site.cl.claim(site.stage_claim(job)["name"])
    assert claim["state"] in ("RELEASING", "RELEASED")


def test_credentials_appear_nowhere_users_or_logs_can_see(site):
    secrets = [site.s3.access_key, site.s3.secret_key, site.s3.secret_key[:6], "hunter2", "sig-secret"]
    seen = []
    jobs = json.loads(site.cl.xce("--json", "jobs", "-a").stdout)
    assert len(jobs) >= 7  # the module's jobs so far (a stage-in naming no remote and no file is refused now)
    for j in jobs:
        shown = site.cl.xce("--json", "job", "show", str(j["id"])).stdout
        seen.append(shown)
        shown_jobs = json.loads(shown)
        for c in (shown_jobs if isinstance(shown_jobs, list) else [shown_jobs])[0]["claims"]:
            if c.get("kind") == "stage":
                seen.append(site.cl.xce("--json", "claim", "show", c["name"]).stdout)
    with site.cl.api() as c:
        seen.append(json.dumps(audit_trail(c)))
        seen.append(c.get("/v1/transfers").text)
    for log in glob.glob(os.path.join(site.cl.root, "**", "*.log"), recursive=True):
        with open(log, errors="replace") as fh:
            seen.append(fh.read())
    text = "\n".join(seen)
    assert "lab:data/in.bin" in text  # (what was searched is what the tests made)
    for s in secrets:
        assert s not in text, f"a credential leaked: {s[:3]}..."


@pytest.mark.skipif(not ROOT, reason="running jobs as their users needs a root worker (CI runs as root)")
def test_as_the_jobs_user_rclone_stages_in_and_out_and_the_files_are_theirs(tmp_path):
    shared = tempfile.mkdtemp(prefix="xce-transfer-users-")
    os.chmod(shared, 0o755)
    name = f"xcetu{os.urandom(4).hex()}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True, capture_output=True)
    s = None
    try:
        s = Site(shared, worker_args=("--run-as-users",))
        with s.cl.api() as c:
            assert c.post("/v1/users", json={"name": name, "projects": ["physics"]}).status_code == 201
            s.env[name] = {**s.cl.env, "XCE_TOKEN": c.post("/v1/tokens", json={"user": name}).json()["token"]}
        out = os.path.join(shared, "o.txt")
        os.chmod(shared, 0o777)
        job = s.submit(name, "--stage-in", "s3://data/in.bin", "--stage-out", "made.txt:s3://results/byuser/made.txt",
                       "--stage-size", "64Mi", "-o", out, "--", "sh", "-c",
                       'cd "$XCE_STAGE" && stat -c %U in.bin && sha256sum in.bin && id -u > made.txt')
        done = s.cl.wait_state(job, "DONE", "EXIT", timeout=60)
        assert done["state"] == "DONE", done["exit_reason"]
        with open(out) as fh:
            owner, digest = fh.read().split()[:2]
        assert owner == name and digest == sha(s.data["in.bin"])
        with open(os.path.join(s.s3.data, "results", "byuser", "made.txt")) as fh:
            assert int(fh.read()) == int(subprocess.run(["id", "-u", name], capture_output=True,
                                                        text=True).stdout)
    finally:
        if s is not None:
            s.stop()
        subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(shared, ignore_errors=True)


def test_progress_of_a_node_scope_stage_in_is_seen_while_it_copies(site, tmp_path):
    out = tmp_path / "out"
    job = site.submit("ann", "--stage-in", "lab-slow:data/big.bin", "--stage-size", "64Mi", "-o", str(out), "--",
                      "sh", "-c", 'cd "$XCE_STAGE" && sha256sum big.bin')
    reading = site.half_way(job)
    assert reading["total_bytes"] == len(site.big)
    why = site.cl.xce("job", "why", str(job)).stdout
    assert "staging in:" in why and " of 8.0 MiB" in why, why  # the same reading, in words
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=60)
    assert done["state"] == "DONE", done["exit_reason"]
    assert sha(site.big) in out.read_text()
    assert site.transfer(job) is None, "a reading lives no longer than its op"


def test_progress_of_a_stage_out_is_seen_while_it_copies(site):
    job = site.submit("ann", "--stage-out", "big.bin:lab-slow:results/progress/big.bin", "--",
                      "sh", "-c", f'head -c {8 << 20} /dev/urandom > "$XCE_STAGE/big.bin"')
    reading = site.half_way(job)
    assert reading["total_bytes"] == 8 << 20
    assert "staging out:" in site.cl.xce("job", "why", str(job)).stdout
    final = os.path.join(site.s3.data, "results", "progress", "big.bin")
    assert not os.path.exists(final), "an object half uploaded is not there under its name"
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=60)
    assert done["state"] == "DONE", done["exit_reason"]
    assert os.path.getsize(final) == 8 << 20


def test_the_store_killed_in_the_middle_of_a_stage_in_gives_retries_then_success_with_exact_bytes(site, tmp_path):
    out = tmp_path / "out"
    job = site.submit("ann", "--stage-in", "lab-slow:data/huge.bin", "--stage-size", "64Mi", "-o", str(out), "--",
                      "sh", "-c", 'cd "$XCE_STAGE" && ls -a && sha256sum huge.bin')
    site.half_way(job)  # bytes are moving
    site.s3.kill()
    try:
        stage = wait_for(lambda: (c := site.stage_claim(job)) and (c.get("attempts") or 0) >= 2 and c,
                         timeout=60, what="stage-in retried")
        assert stage["last_error"] and "TRANSFER_FAILED" in stage["last_error"], stage
        assert site.cl.job(job)["state"] == "PEND", "no job starts on part of its data"
        assert "attempt" in site.cl.xce("job", "why", str(job)).stdout
        assert not os.path.exists(os.path.join(stage["path"], "huge.bin")), "nothing half-copied under its name"
    finally:
        site.s3.start()
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=90)
    assert done["state"] == "DONE", done["exit_reason"]
    listing = out.read_text()
    assert sha(site.huge) in listing, listing
    assert "partial" not in listing, "no temporary file is left beside the data"


def test_a_stage_out_killed_half_way_leaves_no_object_and_the_retry_puts_it_whole(site):
    job = site.submit("ann", "--stage-out", "big.bin:lab-slow:results/killed/big.bin", "--",
                      "sh", "-c", f'head -c {8 << 20} /dev/urandom > "$XCE_STAGE/big.bin" && '
                                  f'sha256sum "$XCE_STAGE/big.bin" > "$XCE_STAGE/sum"')
    site.half_way(job)
    worker = site.cl.workers["host1"].proc.pid
    copies = [pid for pid in _descendants(worker) if b"copyto" in _cmdline(pid)]
    assert copies, "the worker's rclone is running"
    for pid in copies:  # as a crash of the copy would: no chance to clean up
        os.kill(pid, 9)
    final = os.path.join(site.s3.data, "results", "killed", "big.bin")
    assert not os.path.exists(final), "half an upload is no object"
    stage = wait_for(lambda: (c := site.stage_claim(job)) and (c.get("attempts") or 0) >= 2 and c,
                     timeout=60, what="stage-out retried")
    assert stage["last_error"], stage
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=90)
    assert done["state"] == "DONE", done["exit_reason"]
    assert os.path.getsize(final) == 8 << 20


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = children_of(todo.pop())
        out += kids
        todo += kids
    return out


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""
