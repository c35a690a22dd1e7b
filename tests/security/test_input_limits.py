"""Findings 7 and 9 (input limits and small leaks), each written as the attack, through the real CLI
and REST API on real daemons.  The run-as-users ones create throwaway unix accounts (``useradd``)
and remove them afterwards (``userdel``): they need root, as CI runs.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid

import httpx
import pytest

from tests.helpers import Cluster, ControllerProcess, cli, wait_for
from xce.config import DEFAULT_CONFIG
from xce.resreq import MAX_DEPTH, ResReqError, parse_resreq
from xce.units import MAX_SIZE
from xce.worker import sandbox

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="run-as-users attacks need root and real accounts (CI runs as root)")

MAX_ARRAY, MAX_PENDING = 1000, 1500
CONFIG = (DEFAULT_CONFIG.replace("max_pending_jobs_per_user = 10000", f"max_pending_jobs_per_user = {MAX_PENDING}")
          .replace("max_array_size = 10000", f"max_array_size = {MAX_ARRAY}")
          .replace("host_timeout = 10.0", "host_timeout = 2.0"))
DEEP = "select[" + "(" * 300 + "zone==a" + ")" * 300 + "]"


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    """A controller with no workers (nothing runs, so pending jobs stay pending)."""
    root = tmp_path_factory.mktemp("limits")
    cfg = root / "xce.toml"
    cfg.write_text(CONFIG)
    c = ControllerProcess(state_dir=str(root / "ctl"), config=str(cfg)).start()
    yield c
    c.stop()


def user_token(ctl, name: str) -> str:
    with ctl.client() as c:
        r = c.post("/v1/users", json={"name": name, "projects": ["default"]})
        assert r.status_code in (201, 409), r.text
        r = c.post("/v1/tokens", json={"user": name})
        assert r.status_code == 201, r.text
        return r.json()["token"]


def env_for(ctl, token: str | None = None) -> dict[str, str]:
    return {"XCE_URL": ctl.url, "XCE_TOKEN": token or ctl.token, "XCE_CONFIG": ""}


def audit_last(ctl, user: str) -> dict:
    with ctl.client() as c:
        return c.get("/v1/audit", params={"user": user, "limit": 1}).json()[-1]


def controller_log(ctl) -> str:
    with open(ctl.log.name, errors="replace") as fh:
        return fh.read()


# ---------------------------------------------------------------- finding 7: nesting


def test_a_deeply_nested_resource_requirement_is_a_clean_audited_400(ctl):
    token = user_token(ctl, "eve")
    with httpx.Client(base_url=ctl.url, headers={"Authorization": f"Bearer {token}"}) as c:
        r = c.post("/v1/jobs", json={"command": ["true"], "resreq": DEEP})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and f"nested deeper than {MAX_DEPTH} levels" in err["message"]
    last = audit_last(ctl, "eve")
    assert (last["action"], last["result"]) == ("POST /v1/jobs", "invalid_request")
    assert f"deeper than {MAX_DEPTH}" in last["detail"]
    # the CLI checks -R itself: bad usage (exit 2) that says why, not a traceback
    r = cli(env_for(ctl, token), "submit", "-R", "!" * 400 + "zone", "--", "true")
    assert r.returncode == 2 and f"nested deeper than {MAX_DEPTH} levels" in r.stderr, r.stderr
    assert "RecursionError" not in controller_log(ctl) and "Traceback" not in controller_log(ctl)


def test_nesting_up_to_the_limit_parses_and_long_chains_evaluate_without_recursion():
    ok = parse_resreq("(" * MAX_DEPTH + "zone==a" + ")" * MAX_DEPTH)
    assert ok.select.matches({"zone": "a"}, {})
    with pytest.raises(ResReqError, match=f"deeper than {MAX_DEPTH}"):
        parse_resreq("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1))
    # 1,300 alternatives in 4 KiB: one closure, not 1,300 nested ones (the scheduler evaluates them)
    chain = parse_resreq("||".join(["a"] * 1300))
    assert chain.select.matches({"a": "1"}, {}) and not chain.select.matches({}, {})
    assert parse_resreq("&&".join(["a"] * 1300)).select.matches({"a": "1"}, {})


def test_deeply_nested_json_bodies_never_get_a_5xx_on_any_post_route(ctl):
    with ctl.client() as c:
        paths = [p for p, ops in c.get("/openapi.json").json()["paths"].items() if "post" in ops]
        for path in paths:
            url = (path.replace("{job_id}", "1").replace("{name}", "x").replace("{claim_id}", "1")
                   .replace("{host}", "h1").replace("{agent}", "a1"))
            r = c.post(url, content="[" * 200_000, headers={"Content-Type": "application/json"})
            assert r.status_code < 500, (path, r.status_code, r.text)  # routes without a body ignore it
    assert "RecursionError" not in controller_log(ctl)


# ---------------------------------------------------------------- finding 9: sizes, bodies, pools


def test_an_absurd_size_is_refused_as_too_large_naming_the_maximum(ctl):
    r = cli(env_for(ctl), "claim", "create", "huge", "--class", "simfs", "--size", "999999999999999999999999Pi",
            "--access", "RWO")
    assert r.returncode == 2  # found by the CLI with the controller's own reader: bad usage
    assert f"too large (at most {MAX_SIZE} bytes" in r.stderr, r.stderr
    with ctl.client() as c:
        r = c.post("/v1/claims", json={"name": "huge", "class": "simfs", "size": "9" * 32, "access_mode": "RWO"})
    assert r.status_code == 400 and "too large" in r.json()["error"]["message"]


def test_a_chunked_body_over_the_limit_is_413(ctl):
    def chunks():
        for _ in range(40):  # 2.5 MiB, no Content-Length: the limit is found while reading
            yield b" " * 65536

    with ctl.client() as c:
        for path in ("/v1/jobs", "/v1/claims"):
            r = c.post(path, content=chunks(), headers={"Content-Type": "application/json"})
            assert r.status_code == 413, (path, r.text)
            assert r.json()["error"]["code"] == "too_large"


def test_a_claim_larger_than_every_pool_is_refused_naming_the_largest(ctl):
    r = cli(env_for(ctl), "claim", "create", "whale", "--class", "simfs", "--size", "2Ti", "--access", "RWO")
    assert r.returncode == 1
    assert "the largest, shared, has a capacity of 1Ti" in r.stderr, r.stderr
    with ctl.client() as c:
        assert c.get("/v1/claims/whale").status_code == 404  # nothing was created
        # the same for a job's shared template claim (scratch in class simfs, pool shared)
        r = c.post("/v1/jobs", json={"command": ["true"], "scratch": "2Ti:simfs"})
        assert r.status_code == 409 and "the largest, shared, has a capacity of 1Ti" in r.json()["error"]["message"]
        # what fits is still accepted; node-scope scratch is not checked against pools
        r = c.post("/v1/jobs", json={"command": ["true"], "scratch": "2Ti"})
        assert r.status_code == 201, r.text
        c.post(f"/v1/jobs/{r.json()['id']}/kill")


# ---------------------------------------------------------------- finding 9: per-user limits, listings


def test_one_user_cannot_flood_with_arrays_or_pending_jobs_and_listings_are_bounded(ctl):
    token = user_token(ctl, "flooder")
    env = env_for(ctl, token)
    r = cli(env, "submit", "-J", f"big[1-{MAX_ARRAY + 1}]", "--", "true")
    assert r.returncode == 1 and f"at most {MAX_ARRAY} per submission" in r.stderr, r.stderr
    first = json.loads(cli(env, "--json", "submit", "-J", f"a[1-{MAX_ARRAY}]", "--", "true").stdout)["id"]
    assert cli(env, "submit", "-J", f"b[1-{MAX_PENDING - MAX_ARRAY}]", "--", "true").returncode == 0
    r = cli(env, "submit", "--", "true")
    assert r.returncode == 1 and f"exceed the limit of {MAX_PENDING}" in r.stderr, r.stderr
    assert audit_last(ctl, "flooder")["result"] == "limit_exceeded"
    # a listing is bounded: the newest 1000 by default, in id order
    with ctl.client() as c:
        every = c.get("/v1/jobs", params={"all": "true"}).json()
        assert len(every) == 1000
        ids = [j["id"] for j in every]
        assert ids == sorted(ids) and ids[-1] == first + MAX_PENDING - 1
        assert c.get("/v1/jobs", params={"all": "true", "limit": 10001}).status_code == 422
        assert len(c.get("/v1/jobs", params={"all": "true", "limit": 10000}).json()) >= MAX_PENDING
    r = cli(env, "jobs", "--limit", "5")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1 + 5 and "--limit" in r.stderr
    assert len(json.loads(cli(env, "--json", "jobs").stdout)) == 1000
    # the whole array is still reachable by its id (kill), and killing frees the user's allowance
    assert cli(env, "kill", str(first)).returncode == 0
    assert cli(env, "submit", "--", "true").returncode == 0


# ---------------------------------------------------------------- run-as-users: accounts, output, staging


class Account:
    """A throwaway unix account (``useradd``), removed with ``userdel`` by ``remove``."""

    def __init__(self, system: bool = False) -> None:
        self.name = f"xce{'sys' if system else 'atk'}{uuid.uuid4().hex[:8]}"
        subprocess.run(["useradd", *(["--system"] if system else []), "--no-create-home", "--shell",
                        "/usr/sbin/nologin", self.name], check=True, capture_output=True)
        self.uid = pwd.getpwnam(self.name).pw_uid

    def remove(self) -> None:
        subprocess.run(["userdel", self.name], capture_output=True)


@pytest.fixture(scope="module")
def runas(tmp_path_factory):
    """A cluster whose worker runs jobs as their users, a throwaway account and a shared directory."""
    if not ROOT:
        pytest.skip("needs root")
    shared = tempfile.mkdtemp(prefix="xce-sec-input-")
    os.chmod(shared, 0o755)  # jobs (their users) must reach their workspaces under it
    root = os.path.join(shared, "cluster")
    os.makedirs(root, mode=0o755)
    cfg = os.path.join(root, "xce.toml")
    with open(cfg, "w") as fh:
        fh.write(CONFIG)
    accounts = [Account(), Account(system=True)]
    cl = Cluster(root, config=cfg).start()
    try:
        cl.add_worker("host1", slots=2, counters={"scratch": "1Gi"}, extra_args=["--run-as-users"])
        tokens = {}
        for name in [a.name for a in accounts] + ["root"]:
            tokens[name] = user_token(cl.ctl, name)
        yield cl, shared, accounts, tokens
    finally:
        cl.stop()
        for a in accounts:
            a.remove()
        shutil.rmtree(shared, ignore_errors=True)


def user_dir(shared: str, account: Account) -> str:
    """A directory the account may write its job output into."""
    path = os.path.join(shared, f"home-{account.name}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chown(path, account.uid, -1)
    return path


def submit_as(cl, token: str, *args: str) -> int:
    r = cli({**cl.env, "XCE_TOKEN": token}, "--json", "submit", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["id"]


def post_as(cl, token: str, **submission) -> int:
    """A submission sent to the REST API as it is: what the CLI checks first as the user it runs as (a
    stage-in source is there) is not checked; the tests run the CLI as root, which sees more."""
    r = httpx.post(f"{cl.ctl.url}/v1/jobs", json=submission, headers={"Authorization": f"Bearer {token}"},
                   timeout=30)
    assert r.is_success, r.text
    return r.json()["id"]


@needs_root
def test_output_into_a_directory_the_user_cannot_write_says_why(runas):
    cl, shared, (person, _), tokens = runas
    closed = os.path.join(shared, "root-only")
    os.makedirs(closed, mode=0o755, exist_ok=True)  # root's: others may enter, not write
    out = os.path.join(closed, "out.txt")
    job = cl.wait_state(submit_as(cl, tokens[person.name], "-o", out, "--", "true"), "EXIT")
    assert job["exit_reason"] == f"failed to start: cannot open output file {out}: Permission denied", job
    # where the user may write, the same job runs as them
    mine = user_dir(shared, person)
    done = cl.wait_state(submit_as(cl, tokens[person.name], "-o", os.path.join(mine, "o"), "--", "id", "-u"),
                         "DONE", "EXIT")
    assert done["state"] == "DONE", done["exit_reason"]
    with open(os.path.join(mine, "o")) as fh:
        assert fh.read().strip() == str(person.uid)


@needs_root
def test_an_xce_user_named_root_or_a_system_account_never_runs_as_it(runas):
    cl, shared, (_, system), tokens = runas
    for name in ("root", system.name):
        marker = os.path.join(shared, f"ran-as-{name}")
        job = cl.wait_state(submit_as(cl, tokens[name], "--", "touch", marker), "EXIT", "DONE")
        assert job["state"] == "EXIT" and not os.path.exists(marker), job
        assert "is a system account" in job["exit_reason"] and "--allow-system-users" in job["exit_reason"]
    # their stage-in copies are refused the same way (they would run as root too)
    job = cl.wait_state(submit_as(cl, tokens["root"], "--stage-in", "/etc/shadow", "--", "true"), "EXIT")
    assert "is a system account" in job["exit_reason"], job


def test_system_accounts_are_refused_unless_explicitly_allowed():
    assert sandbox.uid_min() >= 1
    with pytest.raises(sandbox.StartFailed, match="system account"):
        sandbox.run_as_for("root", "h1")
    assert sandbox.run_as_for("root", "h1", allow_system=True).uid == 0
    assert sandbox.run_as_for("nobody", "h1").uid == 65534  # above UID_MIN: an ordinary account


@needs_root
def test_stage_in_does_not_tell_missing_from_forbidden_behind_a_closed_directory(runas):
    cl, shared, (person, _), tokens = runas
    closed = os.path.join(shared, "vault")
    os.makedirs(closed, mode=0o700)  # root's, closed to everyone else
    with open(os.path.join(closed, "exists.txt"), "w") as fh:
        fh.write("secret\n")
    reasons = {}
    for leaf in ("exists.txt", "missing.txt"):
        job = cl.wait_state(post_as(cl, tokens[person.name], command=["true"],
                                    stage_in=[os.path.join(closed, leaf)]), "EXIT")
        reasons[leaf] = job["exit_reason"].replace(leaf, "FILE")
    assert reasons["exists.txt"] == reasons["missing.txt"], reasons
    assert reasons["exists.txt"] == (f"stage-in failed: NOT_READABLE: stage-in: cannot read {closed}/FILE as "
                                     f"{person.name} (missing or permission denied)")
    # what the user can read is staged in
    readable = os.path.join(shared, "open.txt")
    with open(readable, "w") as fh:
        fh.write("data\n")
    os.chmod(readable, 0o644)
    out = os.path.join(user_dir(shared, person), "staged")
    job = cl.wait_state(submit_as(cl, tokens[person.name], "--stage-in", readable, "-o", out, "--",
                                  "sh", "-c", 'cat "$XCE_STAGE/open.txt"'), "DONE", "EXIT")
    assert job["state"] == "DONE", job["exit_reason"]
    wait_for(lambda: os.path.exists(out), what="the job's output")
