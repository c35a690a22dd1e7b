"""Finding 5, as the attacker does it: tokens that cannot be revoked or expire, and tokens that leak.

On a real cluster through ``xce`` and the REST API: a revoked, an expired and a disabled user's
token get 401 and change nothing; listings never carry a secret or a hash; daemons never take a
token on their command line; no log, audit record or fact in the store holds a secret.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import threading

import httpx

import pytest

from tests.helpers import XCE, audit_trail, daemon_env, wait_for, write_token_file
from tests.security.conftest import SECRET, as_user, new_user, xce_as

LISTED = {"token_id", "user", "created", "expires", "expired", "revoked", "revoked_time"}


def token_id(secret: str) -> str:
    return secret.split("_")[1]


def ok_json(cl, token: str, *args: str):
    r = xce_as(cl, token, "--json", *args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return json.loads(r.stdout)


def jobs_of(cl, user: str) -> list[int]:
    with cl.api() as c:
        return [j["id"] for j in c.get("/v1/jobs", params={"all": "true", "user": user}).json()]


# ---------------------------------------------------------------- revocation and listing


def test_a_user_lists_and_revokes_their_own_token_and_it_stops_working(cl):
    tok = new_user(cl, "carol")
    spare = json.loads(cl.xce("--json", "token", "create", "--user", "carol").stdout)["token"]
    listed = ok_json(cl, tok, "token", "list")
    assert {t["token_id"] for t in listed} == {token_id(tok), token_id(spare)}
    assert all(set(t) == LISTED and not t["revoked"] for t in listed)
    every = cl.xce("--json", "token", "list").stdout  # the admin's view of every token
    assert not SECRET.search(every.encode()) and "hash" not in every
    assert tok not in every and spare not in every

    r = xce_as(cl, tok, "token", "revoke", token_id(spare))
    assert r.returncode == 0 and "revoked" in r.stdout
    r = xce_as(cl, spare, "submit", "--", "true")
    assert r.returncode == 1 and r.stderr.strip() == "xce: invalid or revoked token"
    with as_user(cl, spare) as c:
        r = c.get("/v1/jobs")
        assert r.status_code == 401 and r.json()["error"]["message"] == "invalid or revoked token"
    assert jobs_of(cl, "carol") == []
    assert {t["token_id"]: t["revoked"] for t in ok_json(cl, tok, "token", "list")} == \
        {token_id(tok): False, token_id(spare): True}
    # revoking one's own last token works too, and it is refused from the next request on
    assert xce_as(cl, tok, "token", "revoke", token_id(tok)).returncode == 0
    assert xce_as(cl, tok, "jobs").returncode == 1


def test_a_user_can_neither_see_nor_revoke_another_users_tokens(cl):
    dave = new_user(cl, "dave")
    erin = new_user(cl, "erin")
    r = xce_as(cl, dave, "token", "revoke", token_id(erin))
    assert r.returncode == 1 and r.stderr.strip() == f"xce: token '{token_id(erin)}' does not exist"
    r = xce_as(cl, dave, "token", "list", "--user", "erin")
    assert r.returncode == 1 and "only their own tokens" in r.stderr
    assert [t["user"] for t in ok_json(cl, dave, "token", "list")] == ["dave"]
    assert xce_as(cl, dave, "token", "create", "--user", "dave").returncode == 1  # issuing stays with admins
    assert xce_as(cl, erin, "jobs").returncode == 0  # erin's token still works


def test_an_admin_revokes_a_daemon_token(cl):
    """A stolen copy of host2's daemon token, revoked: refused on host2's own routes."""
    with cl.api() as adm:
        stolen = adm.post("/v1/tokens", json={"user": "worker-host2"}).json()["token"]
    with as_user(cl, stolen) as c:
        assert c.post("/v1/hosts/host2/heartbeat", json={}).status_code == 200
    cl.xce("token", "revoke", token_id(stolen))
    with as_user(cl, stolen) as c:
        for method, path in (("POST", "/v1/hosts/host2/heartbeat"), ("GET", "/v1/hosts/host2/work"),
                             ("POST", "/v1/hosts/host2/register")):
            r = c.request(method, path, json={"slots": 1} if path.endswith("register") else {})
            assert r.status_code == 401 and r.json()["error"]["message"] == "invalid or revoked token"
    with cl.api() as adm:
        assert {h["name"]: h["slots"] for h in adm.get("/v1/hosts").json()}["host2"] == 2  # not re-registered
    with as_user(cl, cl.workers["host2"].token) as c:  # the worker's own token is untouched
        assert c.post("/v1/hosts/host2/heartbeat", json={}).status_code == 200


def test_long_polls_opened_before_their_token_was_revoked_hand_out_nothing_and_the_host_gets_no_job(cl):
    """Issue 27, finding 3: a worker's ``GET /v1/hosts/H/work?wait=`` opened before its daemon token
    was revoked was handed the next job placed on H, command, user and paths.  Every long-poll (the
    worker's, and the node agent's ``GET``/``POST .../work``) judges its token again when it wakes, and a
    host whose daemon credentials are all revoked is not allocated to at all."""
    host = "hpoll"
    with cl.api() as adm:
        assert adm.post("/v1/users", json={"name": f"worker-{host}", "role": "daemon", "host": host,
                                           "projects": []}).status_code == 201
        token = adm.post("/v1/tokens", json={"user": f"worker-{host}"}).json()["token"]
    with as_user(cl, token) as c:
        assert c.post(f"/v1/hosts/{host}/register", json={"slots": 2, "attrs": {"node": host}}).status_code == 200
        epoch = c.post(f"/v1/agents/node:{host}/lease", json={"holder": "test"}).json()["epoch"]

    def age() -> float:  # seconds since the controller last heard from the host (its work route says so)
        with cl.api() as adm:
            return next(h["last_heartbeat_age"] for h in adm.get("/v1/hosts").json() if h["name"] == host)

    answers: dict[str, httpx.Response] = {}

    def poll(name: str, method: str, path: str, **kw) -> None:
        with as_user(cl, token) as c:
            answers[name] = c.request(method, path, timeout=30, **kw)

    wait_for(lambda: age() >= 0.3, what="the host's last word to age")
    last = [age()]

    def dropped() -> bool:
        now = age()
        went, last[0] = now < last[0], now
        return went

    polls = [threading.Thread(target=poll, args=("node agent GET", "GET", f"/v1/agents/node:{host}/work"),
                              kwargs={"params": {"epoch": epoch, "wait": 3}}),
             threading.Thread(target=poll, args=("node agent POST", "POST", f"/v1/agents/node:{host}/work"),
                              kwargs={"params": {"wait": 3}, "json": {"epoch": epoch}}),
             threading.Thread(target=poll, args=("worker", "GET", f"/v1/hosts/{host}/work"),
                              kwargs={"params": {"wait": 3}})]
    for t in polls:
        t.start()
    wait_for(dropped, what="the worker's poll to wait (it marks the host seen as it starts)")
    cl.xce("token", "revoke", token_id(token))
    job = cl.submit("-R", f"select[node=={host}]", "--", "sh", "-c", "echo private-command")
    try:
        for t in polls:
            t.join(30)
        for name, r in answers.items():
            assert r.status_code == 401 and "private-command" not in r.text, (name, r.status_code, r.text)
        assert set(answers) == {"node agent GET", "node agent POST", "worker"}
        with cl.api() as adm:
            shown = adm.get(f"/v1/jobs/{job}").json()
        assert shown["state"] == "PEND" and not shown.get("hosts"), shown
    finally:
        cl.xce("kill", str(job))


def test_a_secret_pasted_where_a_token_id_goes_is_never_kept(cl):
    """A user revokes by pasting the secret itself: the CLI sends only its id; sent raw, it is refused
    and the audit trail (a durable fact) keeps only the id."""
    kim = new_user(cl, "kim")
    leaked = json.loads(cl.xce("--json", "token", "create", "--user", "kim").stdout)["token"]
    with as_user(cl, kim) as c:
        r = c.delete(f"/v1/tokens/{leaked}")
        assert r.status_code == 422 and leaked not in r.text
        r = c.post(f"/v1/claims/{leaked}/attachments", json={})  # any route, any refusal
        assert leaked not in r.text
    r = xce_as(cl, kim, "token", "revoke", leaked)
    assert r.returncode == 0 and leaked not in r.stdout + r.stderr
    assert xce_as(cl, leaked, "jobs").returncode == 1
    with cl.api() as adm:
        trail = json.dumps(audit_trail(adm))
    assert leaked not in trail and f"/v1/tokens/xce_{token_id(leaked)}_***" in trail


# ---------------------------------------------------------------- expiry


def test_expiry_is_judged_at_the_request_clock():
    """The model stores the expiry; ``authenticate`` takes the clock: a pure check, any clock."""
    from xce.errors import Unauthenticated
    from xce.model import Model
    from xce.model.facts import UserDefined
    from xce.model.identity import authenticate, hash_token, issue_token

    m = Model()
    m.apply(1, UserDefined(time=100.0, name="frank", role="user"))
    facts, secret = issue_token(m, "frank", 100.0, expires=200.0)
    m.apply(2, facts[0])
    assert facts[0].expires == 200.0 and secret not in json.dumps(facts[0].__repr__())
    assert authenticate(m, hash_token(secret), 199.9).name == "frank"
    for now in (200.0, 10_000.0):
        with pytest.raises(Unauthenticated, match="^token expired$"):
            authenticate(m, hash_token(secret), now)
    loaded = Model.from_snapshot(json.loads(json.dumps(m.to_snapshot())))  # survives a snapshot
    assert loaded.tokens[facts[0].token_id].expires == 200.0
    with pytest.raises(Unauthenticated, match="^token expired$"):
        authenticate(loaded, hash_token(secret), 200.0)


def test_an_expired_token_gets_401(cl):
    new_user(cl, "gina")
    t = json.loads(cl.xce("--json", "token", "create", "--user", "gina", "--expires", "1s").stdout)
    assert t["expires"] is not None

    def refused():
        with as_user(cl, t["token"]) as c:
            r = c.get("/v1/jobs")
        return r.status_code == 401 and r.json()["error"]["message"] == "token expired"

    wait_for(refused, timeout=30, interval=0.2, what="the 1-second token to expire")
    r = xce_as(cl, t["token"], "submit", "--", "true")
    assert r.returncode == 1 and r.stderr.strip() == "xce: token expired"
    assert jobs_of(cl, "gina") == []
    listed = {x["token_id"]: x for x in json.loads(cl.xce("--json", "token", "list", "--user", "gina").stdout)}
    assert listed[t["token_id"]]["expired"] is True


def test_an_expiry_in_the_past_or_malformed_is_refused_and_issues_nothing(cl):
    new_user(cl, "hank")
    before = json.loads(cl.xce("--json", "token", "list", "--user", "hank").stdout)
    r = cl.xce("token", "create", "--user", "hank", "--expires", "2001-01-01T00:00", ok=False)
    assert r.returncode == 1 and r.stderr.strip() == "xce: a token's expiry must be in the future"
    r = cl.xce("token", "create", "--user", "hank", "--expires", "soon", ok=False)
    assert r.returncode == 2 and "invalid time 'soon'" in r.stderr
    with cl.api() as adm:
        assert adm.post("/v1/tokens", json={"user": "hank", "expires": -5}).status_code == 422
    assert json.loads(cl.xce("--json", "token", "list", "--user", "hank").stdout) == before


# ---------------------------------------------------------------- disabled users


def test_a_disabled_users_tokens_all_fail_until_enabled(cl):
    one = new_user(cl, "ivan")
    two = json.loads(cl.xce("--json", "token", "create", "--user", "ivan").stdout)["token"]
    assert xce_as(cl, one, "jobs").returncode == 0
    assert json.loads(cl.xce("--json", "user", "disable", "ivan").stdout)["disabled"] is True
    for tok in (one, two):
        r = xce_as(cl, tok, "submit", "--", "true")
        assert r.returncode == 1 and r.stderr.strip() == "xce: user ivan is disabled"
    r = cl.xce("token", "create", "--user", "ivan", ok=False)
    assert r.returncode == 1 and "is disabled" in r.stderr
    assert jobs_of(cl, "ivan") == []
    assert {u["name"]: u["disabled"] for u in json.loads(cl.xce("--json", "users").stdout)}["ivan"] is True
    cl.xce("user", "enable", "ivan")
    assert xce_as(cl, one, "jobs").returncode == 0 and xce_as(cl, two, "jobs").returncode == 0


def test_only_admins_disable_and_never_the_last_enabled_admin(cl):
    jack = new_user(cl, "jack")
    r = xce_as(cl, jack, "user", "disable", "admin")
    assert r.returncode == 1 and "not an admin" in r.stderr
    r = cl.xce("user", "disable", "admin", ok=False)
    assert r.returncode == 1 and "last enabled admin" in r.stderr
    assert cl.xce("ping").returncode == 0
    r = cl.xce("user", "disable", "nobody", ok=False)
    assert r.returncode == 1 and "does not exist" in r.stderr


# ---------------------------------------------------------------- tokens never on a command line or in a log


def worker_argv(cl, host: str, *extra: str) -> list[str]:
    return XCE + ["worker", "--host", host, "--controller", cl.ctl.url, "--work-dir",
                  os.path.join(cl.root, host), *extra]


def test_daemons_refuse_a_token_on_the_command_line_and_a_loose_token_file(cl, tmp_path):
    secret = cl.workers["host1"].token
    for argv in (worker_argv(cl, "host9", "--token", secret), XCE + ["--token", secret] + worker_argv(cl, "host9")[3:],
                 XCE + ["provisioner", "--controller", cl.ctl.url, "--config", cl.provisioner.config_path,
                        "--token", secret]):
        r = subprocess.run(argv, env=daemon_env(), capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (argv, r.stdout, r.stderr)
        assert "use --token-file PATH (mode 0600) or XCE_TOKEN" in r.stderr
    loose = write_token_file(str(tmp_path / "loose.token"), secret)
    os.chmod(loose, 0o644)
    r = subprocess.run(worker_argv(cl, "host9", "--token-file", loose), env=daemon_env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and f"chmod 600 {loose}" in r.stderr and "mode 0644" in r.stderr
    with cl.api() as adm:
        assert "host9" not in {h["name"] for h in adm.get("/v1/hosts").json()}


def proc_text(pid: int, what: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{what}", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def test_no_token_in_any_process_listing_or_job_environment(cl, tmp_path):
    """As a job would look: every process's command line (what ps shows), and its own environment."""
    out = tmp_path / "seen.txt"
    job = cl.submit("-R", "select[node==host1]", "-o", str(out), "--", "sh", "-c",
                    "env; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done")
    cl.wait_state(job, "DONE")
    seen = out.read_bytes()
    ours = [line for line in seen.splitlines() if cl.ctl.url.encode() in line]  # (not other tests' processes)
    assert len(ours) >= 3  # it did see the workers' and the provisioner's command lines...
    assert not any(SECRET.search(line) for line in ours)  # ...and no token in any of them
    known = [cl.ctl.token, cl.provisioner.token] + [w.token for w in cl.workers.values()]
    assert not any(k.encode() in seen for k in known) and b"XCE_TOKEN" not in seen
    daemons = [w.proc.pid for w in cl.workers.values()] + [cl.provisioner.proc.pid]
    for pid in daemons:  # the daemons as their owner (and root) sees them: command line and environment
        assert not SECRET.search(proc_text(pid, "cmdline")) and not SECRET.search(proc_text(pid, "environ"))


def test_no_secret_in_any_log_audit_record_or_stored_fact(cl):
    known = [cl.ctl.token, cl.provisioner.token] + [w.token for w in cl.workers.values()]
    logs = glob.glob(os.path.join(cl.root, "**", "*.log"), recursive=True)
    assert any("controller-" in p for p in logs)
    for path in logs:
        with open(path, "rb") as fh:
            text = fh.read()
        assert not SECRET.search(text), f"a token in {path}"
    controller_log = next(p for p in logs if "controller-" in os.path.basename(p))
    assert f"admin token: in {cl.ctl.state_dir}/admin.token (mode 0600)".encode() in open(controller_log, "rb").read()
    assert oct(os.stat(os.path.join(cl.ctl.state_dir, "admin.token")).st_mode & 0o777) == "0o600"
    with cl.api() as adm:
        trail = json.dumps(audit_trail(adm)).encode()
        users = adm.get("/v1/users").content
    assert not SECRET.search(trail) and not SECRET.search(users)
    for db in glob.glob(os.path.join(cl.ctl.state_dir, "*.db*")):  # the log and snapshots: hashes only
        with open(db, "rb") as fh:
            data = fh.read()
        assert not any(k.encode() in data for k in known), db


def test_xce_up_leaks_no_token_to_its_logs_or_process_listing(tmp_path):
    """The README's way: ``xce up``; then every log in DIR and every process of the cluster."""
    state = str(tmp_path / "up")
    up = subprocess.Popen(XCE + ["up", "--hosts", "1", "--state-dir", state, "--listen", "127.0.0.1:0",
                                 "--slots", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=daemon_env())
    try:
        line = up.stdout.readline()
        assert line.startswith("xce cluster up"), line + (up.stdout.read() if up.poll() is not None else "")
        ours = [int(p) for p in os.listdir("/proc") if p.isdigit() and state.encode() in proc_text(int(p), "cmdline")]
        assert len(ours) >= 3  # the controller, the provisioner, host1's worker
        for pid in ours:
            assert not SECRET.search(proc_text(pid, "cmdline")), proc_text(pid, "cmdline")
            assert not SECRET.search(proc_text(pid, "environ"))
        for path in glob.glob(os.path.join(state, "logs", "*.log")):
            with open(path, "rb") as fh:
                assert not SECRET.search(fh.read()), path
        for name in ("admin.token", "client.toml", "provisioner.token", "provisioner.toml", "hosts/host1/token"):
            assert oct(os.stat(os.path.join(state, name)).st_mode & 0o777) == "0o600", name
    finally:
        up.terminate()
        up.wait(60)


def test_a_revoked_admin_token_is_replaced_in_the_state_dir_at_the_next_start(tmp_path):
    """An admin revokes the bootstrap token (it leaked); whoever runs the controller gets a fresh one
    in DIR/admin.token (0600) at the next start, and the leaked one stays dead."""
    from tests.helpers import ControllerProcess

    ctl = ControllerProcess(state_dir=str(tmp_path / "ctl")).start()
    try:
        old = ctl.token
        with ctl.client() as c:
            assert c.delete(f"/v1/tokens/{token_id(old)}").status_code == 200
            assert c.get("/v1/ping").status_code == 401
        ctl.stop()
        ctl.start()
        new = ctl.token
        assert new != old
        assert oct(os.stat(os.path.join(ctl.state_dir, "admin.token")).st_mode & 0o777) == "0o600"
        with ctl.client(new) as c:
            assert c.get("/v1/ping").json()["role"] == "admin"
        with ctl.client(old) as c:
            assert c.get("/v1/ping").status_code == 401
        with open(ctl.log.name, "rb") as fh:
            assert not SECRET.search(fh.read())
    finally:
        ctl.stop()
