"""The ``xce`` command against a real controller: output, --json shapes, exit codes, refusals."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ControllerProcess, audit_trail, cli

JOB_KEYS = {"id", "name", "user", "project", "queue", "state", "command", "submit_time", "pending_reason",
            "exit_code", "hosts", "claims"}


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("cli") / "ctl")).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def env(ctl):
    return {"XCE_URL": ctl.url, "XCE_TOKEN": ctl.token, "XCE_CONFIG": ""}


def xce(env, *args):
    return cli(env, *args)


def ok_json(env, *args):
    r = xce(env, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_ping_shows_version_epoch_and_log_position(env):
    r = xce(env, "ping")
    assert r.returncode == 0, r.stderr
    assert "Leader epoch: 1" in r.stdout and "Log position:" in r.stdout and "admin (admin)" in r.stdout
    p = ok_json(env, "ping")
    assert p["leader"] is True and p["store"] == "sqlite" and p["log_position"] > 0


def test_submit_list_show_with_stable_json_shapes(env):
    r = xce(env, "submit", "-J", "hello", "--", "echo", "hello", "world")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Job <") and "is submitted to queue <default>." in r.stdout
    job_id = int(r.stdout.split("<")[1].split(">")[0])
    shown = ok_json(env, "job", "show", str(job_id))
    assert JOB_KEYS <= set(shown)
    assert (shown["name"], shown["state"], shown["command"], [c["name"] for c in shown["claims"]]) == (
        "hello", "PEND", ["echo", "hello", "world"], ["workspace"])
    listed = ok_json(env, "jobs")
    assert isinstance(listed, list) and any(j["id"] == job_id for j in listed)
    assert all(JOB_KEYS <= set(j) for j in listed)
    table = xce(env, "jobs").stdout.splitlines()
    assert table[0].split()[:3] == ["JOBID", "USER", "STAT"]
    assert any(line.split()[:3] == [str(job_id), "admin", "PEND"] for line in table[1:])
    human = xce(env, "job", "show", str(job_id)).stdout
    assert "Command:" in human and "echo hello world" in human


def test_json_flag_works_before_and_after_the_command(env):
    assert ok_json(env, "queues") == json.loads(xce(env, "queues", "--json").stdout)


def test_queues_projects_users(env):
    q = ok_json(env, "queues")
    assert [x["name"] for x in q] == ["default"] and {"priority", "pending", "running"} <= set(q[0])
    assert [p["name"] for p in ok_json(env, "projects")] == ["default"]
    assert "admin" in [u["name"] for u in ok_json(env, "users")]
    assert xce(env, "queues").stdout.split()[:7] == ["QUEUE", "PRIO", "PEND", "RUN", "STAGE", "CLASS", "DESCRIPTION"]


def test_user_and_token_create_then_the_user_sees_only_their_jobs(env):
    r = xce(env, "user", "create", "carol", "--project", "default")
    assert r.returncode == 0, r.stderr
    tok = ok_json(env, "token", "create", "--user", "carol")["token"]
    carol = {**env, "XCE_TOKEN": tok}
    mine = json.loads(xce(carol, "--json", "submit", "--", "true").stdout)["id"]
    assert [j["id"] for j in ok_json(carol, "jobs")] == [mine]
    r = xce(carol, "users")
    assert r.returncode == 1 and r.stderr.strip() == "xce: user 'carol' is not an admin"
    r = xce(carol, "jobs", "-u", "admin")
    assert r.returncode == 1 and "only their own jobs" in r.stderr
    for command in ("jobs", "hist"):  # -a from a user: their own jobs, and it says so (not everyone's, silently)
        r = xce(carol, command, "-a")
        assert r.returncode == 0 and "-a: only carol's jobs are shown (every user's: admins only)" in r.stderr, r.stderr
    r = xce(carol, "--json", "jobs", "-a")
    assert [j["id"] for j in json.loads(r.stdout)] == [mine] and "only carol's jobs" in r.stderr
    assert "only" not in xce(env, "jobs", "-a").stderr
    r = xce(carol, "job", "show", "1")  # admin's job: looks like no job at all
    assert r.returncode == 1 and r.stderr.strip() == "xce: job 1 not found"
    r = xce(env, "user", "create", "carol")
    assert r.returncode == 1 and "already exists" in r.stderr


def test_audit_shows_mutations_and_refusals(env):
    xce(env, "submit", "-q", "nosuchqueue", "--", "true")
    rows = ok_json(env, "audit", "--since", "10m")
    assert rows and {"seq", "time", "user", "action", "target", "result", "detail"} <= set(rows[-1])
    assert rows[-1]["action"] == "POST /v1/jobs" and rows[-1]["result"] == "not_found"
    assert ok_json(env, "audit", "--since", "2000-01-01T00:00") == ok_json(env, "audit")[-1000:]
    assert ok_json(env, "audit", "--user", "nobody-at-all") == []


def test_audit_filters_and_pages(env, ctl):
    for i in range(5):
        ok_json(env, "submit", "-J", f"aud{i}", "--", "true")
    everything = ok_json(env, "audit", "--all")
    with ctl.client() as c:
        assert everything == audit_trail(c)
    assert ok_json(env, "audit", "--limit", "3") == everything[-3:]  # the newest, oldest first
    jobs = ok_json(env, "audit", "--target", "job/", "--action", "POST /v1/jobs", "--result", "ok")
    assert len(jobs) >= 5 and all(r["target"].startswith("job/") and r["result"] == "ok" for r in jobs)
    until = everything[-1]["time"]
    assert ok_json(env, "audit", "--all", "--until", str(until)) == [r for r in everything if r["time"] < until]
    r = xce(env, "audit", "--target", "job/", "--limit", "2")
    assert r.returncode == 0 and r.stdout.startswith("TIME") and len(r.stdout.strip().splitlines()) == 3


def test_jobs_and_claims_listings_limit_and_follow_pages(env, ctl):
    for i in range(7):
        ok_json(env, "submit", "-J", f"pg{i}", "--", "true")
    with ctl.client() as c:
        everything = sorted(j["id"] for j in c.get("/v1/jobs", params={"all": "true", "limit": 10_000}).json())
        for i in range(5):
            r = c.post("/v1/claims", json={"name": f"pg{i}", "class": "simfs", "size": "1Mi", "access_mode": "RWO"})
            assert r.status_code == 201, r.text
        claims = sorted(x["id"] for x in c.get("/v1/claims", params={"limit": 10_000}).json())
    assert [j["id"] for j in ok_json(env, "jobs", "-a", "--limit", "3")] == everything[-3:]
    assert [j["id"] for j in ok_json(env, "jobs", "-a", "--all-pages")] == everything
    assert [j["id"] for j in ok_json(env, "jobs", "-a", "--all-pages", "--limit", "4")] == everything[-4:]
    assert [x["id"] for x in ok_json(env, "claim", "list")] == claims
    assert [x["id"] for x in ok_json(env, "claim", "list", "--limit", "2")] == claims[-2:]
    assert ok_json(env, "snapshot", "list", "--limit", "2") == []
    r = xce(env, "jobs", "-a", "--limit", "2")
    assert r.returncode == 0 and "--all-pages" in r.stderr and len(r.stdout.strip().splitlines()) == 3


@pytest.mark.parametrize("args,fragment", [
    (["submit"], "the following arguments are required: CMD"),
    (["submit", "-n", "abc", "--", "true"], "expected a positive integer"),
    (["submit", "-n", "0", "--", "true"], "expected a positive integer"),
    (["jobs", "--bogus"], "unrecognized arguments: --bogus"),
    (["nosuchcommand"], "invalid choice"),
    (["jobs", "--state", "WEIRD"], "invalid choice"),
    (["audit", "--since", "last tuesday"], "invalid time"),
    (["audit", "--limit", "0"], "expected a positive integer"),
    (["job", "show", "x1"], "invalid job id 'x1'"),
    (["submit", "-R", "select[mem>", "--", "true"], "at column 12"),
    (["submit", "-R", "rusage[mem=lots]", "--", "true"], "invalid amount 'lots'"),
    # typos the controller used to be asked about (and refuse, exit 1): checked here with its own readers
    (["submit", "-M", "lots", "--", "true"], "invalid memory limit 'lots'"),
    (["submit", "--scratch", "lots:scratch", "--", "true"], "invalid --scratch size 'lots'"),
    (["submit", "--stage-size", "lots", "--stage-in", "/etc/hostname", "--", "true"], "invalid --stage-size"),
    (["submit", "-W", "soon", "--", "true"], "invalid run limit (-W) 'soon'"),
    (["submit", "-W", "5", "-wa", "NOSIG", "-wt", "1", "--", "true"], "unknown signal 'NOSIG'"),
    (["kill", "-s", "NOSIG", "1"], "unknown signal 'NOSIG'"),
    (["claim", "create", "c", "--class", "simfs", "--size", "lots", "--access", "RWO"], "invalid size 'lots'"),
    (["claim", "resize", "c", "lots"], "invalid size 'lots'"),
    (["claim", "create", "c", "--class", "simfs", "--size", "1Gi", "--access", "RWX", "--snapshot-on-preempt"],
     "--snapshot-on-preempt is for RWO claims (written by one host at a time), not RWX"),
    # names the controller checks, checked here (one with a blank could not even be a URL's path)
    (["user", "create", "bad name"], "invalid user name 'bad name'"),
    (["claim", "create", "Bad", "--class", "simfs", "--size", "1Gi", "--access", "RWO"], "invalid claim name 'Bad'"),
    (["claim", "snapshot", "c1", "x y"], "invalid snapshot name 'x y'"),
    (["claim", "delete", "x/y"], "invalid claim name 'x/y'"),
    (["host", "remove", "Host 1"], "invalid host name 'Host 1'"),
])
def test_bad_usage_is_exit_2_with_one_clear_line(env, args, fragment):
    before = len(ok_json(env, "jobs"))
    r = xce(env, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert fragment in r.stderr and "Traceback" not in r.stderr
    assert len(ok_json(env, "jobs")) == before


def test_an_invalid_state_is_named_among_the_valid_ones_in_plain_words(env):
    for args, valid in ((["jobs", "--state", "FOO"], "'PEND', 'PSUSP', 'RUN'"),
                        (["claim", "list", "--state", "FOO"], "'PENDING', 'PREPARING', 'READY'"),
                        (["snapshot", "list", "--state", "FOO"], "'PENDING', 'READY'")):
        r = xce(env, *args)
        assert r.returncode == 2 and valid in r.stderr and "<" not in r.stderr, r.stderr


@pytest.mark.parametrize("args,code,exit_code", [
    (["job", "show", "99999"], "not_found", 1),
    (["jobs", "--state", "FOO"], "usage", 2),
    (["nosuchcommand"], "usage", 2),
    (["submit", "-M", "lots", "--", "true"], "usage", 2),
    (["kill", "abc"], "usage", 2),
])
def test_json_errors_are_json_on_stdout_with_the_exit_code(env, args, code, exit_code):
    for where in (["--json", *args], [args[0], "--json", *args[1:]]):
        r = xce(env, *where)
        assert r.returncode == exit_code and r.stderr == "", (where, r.stderr)
        error = json.loads(r.stdout)["error"]
        assert error["code"] == code and error["message"], error
    r = cli({"XCE_URL": "http://127.0.0.1:9", "XCE_TOKEN": "x", "XCE_CONFIG": ""}, "--json", "jobs")
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["code"] == "unreachable"


@pytest.mark.parametrize("args,fragment", [
    (["job", "show", "99999"], "xce: job 99999 not found"),
    (["kill", "99999"], "job 99999 not found"),
    (["submit", "-q", "nosuchqueue", "--", "true"], "xce: queue 'nosuchqueue' does not exist"),
    (["submit", "-J", "Bad Name", "--", "true"], "invalid job name"),
    (["token", "create", "--user", "ghost"], "xce: user 'ghost' does not exist"),
    (["claim", "create", "cache", "--class", "scratch", "--size", "1Gi", "--access", "RWO"],
     "xce: claim class 'scratch' is node-scope: its claims live on hosts"),
])
def test_refusals_are_exit_1_with_the_servers_message(env, args, fragment):
    r = xce(env, *args)
    assert r.returncode == 1 and fragment in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_missing_settings_and_unreachable_controller(tmp_path):
    r = cli({"XCE_URL": "", "XCE_TOKEN": "", "XCE_CONFIG": "", "XDG_CONFIG_HOME": str(tmp_path),
             "HOME": str(tmp_path)}, "jobs")
    assert r.returncode == 2 and "no controller url" in r.stderr
    r = cli({"XCE_URL": "http://127.0.0.1:9", "XCE_TOKEN": "x", "XCE_CONFIG": ""}, "jobs")
    assert r.returncode == 1 and r.stderr.startswith("xce: cannot reach the controller at http://127.0.0.1:9")
    r = cli({"XCE_URL": "ftp://x", "XCE_TOKEN": "x", "XCE_CONFIG": ""}, "jobs")
    assert r.returncode == 2 and "invalid controller URL" in r.stderr


def test_wrong_token_is_refused(env):
    r = xce({**env, "XCE_TOKEN": "xce_bad_token"}, "jobs")
    assert r.returncode == 1 and r.stderr.strip() == "xce: invalid or revoked token"


def test_hold_release_and_kill_pending_jobs(env):
    job_id = json.loads(xce(env, "--json", "submit", "-H", "--", "true").stdout)["id"]
    assert ok_json(env, "job", "show", str(job_id))["state"] == "PSUSP"
    assert xce(env, "release", str(job_id)).stdout.strip() == f"Job <{job_id}> is released"
    assert xce(env, "hold", str(job_id)).returncode == 0
    why = xce(env, "job", "why", str(job_id)).stdout.strip()
    assert why == f"Job <{job_id}> PSUSP: held by admin"
    r = xce(env, "kill", str(job_id), "99999")
    assert r.returncode == 1 and f"Job <{job_id}> is being terminated" in r.stdout and "99999" in r.stderr
    job = ok_json(env, "job", "show", str(job_id))
    assert (job["state"], job["exit_reason"]) == ("EXIT", "killed by admin")
    # the history in text, as in --json: each state with its time, run and reason (the README promises it)
    text = xce(env, "job", "show", str(job_id)).stdout
    history = text[text.index("\nHistory:\n") + 1:].splitlines()[2:]
    assert [line.split()[3] for line in history] == [h["state"] for h in job["history"]]
    assert [h["state"] for h in job["history"]] == ["PSUSP", "PEND", "PSUSP", "EXIT"]
    assert "submitted by admin" in history[0] and history[-1].endswith("killed by admin")


def test_job_arrays_by_id_and_element(env):
    parent = json.loads(xce(env, "--json", "submit", "-H", "-J", "arr[1-3]", "--", "true").stdout)["id"]
    elements = ok_json(env, "job", "show", str(parent))
    assert [e["display_id"] for e in elements] == [f"{parent}[1]", f"{parent}[2]", f"{parent}[3]"]
    second = ok_json(env, "job", "show", f"{parent}[2]")
    assert second["array_index"] == 2 and second["array_parent"] == parent
    assert xce(env, "kill", f"{parent}[2]").returncode == 0
    states = [e["state"] for e in ok_json(env, "job", "show", str(parent))]
    assert states == ["PSUSP", "EXIT", "PSUSP"]
    r = xce(env, "job", "show", f"{parent}[9]")
    assert r.returncode == 1 and f"job {parent}[9] not found" in r.stderr
    r = xce(env, "release", str(parent))  # the whole array: one line for it, as LSF's
    assert r.returncode == 1 and r.stdout == f"Job <{parent}> is released (2 of its 3 elements)\n"
    assert f"job <{parent}[2]>: job {parent}[2] is EXIT" in r.stderr


def test_version_needs_no_controller():
    import xce

    r = cli({"XCE_URL": "", "XCE_TOKEN": "", "XCE_CONFIG": ""}, "--version")
    assert r.returncode == 0 and r.stdout == f"xce {xce.__version__}\n"


def test_each_command_is_built_from_the_module_that_registers_it():
    """``xce CMD`` builds only CMD's module's parsers (a one-shot call starts faster): the table that
    says which module that is must name every command the whole parser has, and no other."""
    from xce.cli.main import COMMANDS, _command, build_parser

    full = build_parser()
    choices = set(full._subparsers._group_actions[0].choices)
    assert set(COMMANDS) == choices
    for command, module in COMMANDS.items():
        assert command in build_parser(module)._subparsers._group_actions[0].choices
    assert _command(["--url", "http://x", "--json", "submit", "--", "ls"]) == "submit"
    assert _command(["--config", "jobs", "ping"]) == "ping"
    assert _command(["--json"]) is None


def test_the_worker_takes_every_cgroup_layout_the_worker_knows():
    """``xce worker --cgroups`` offers exactly ``worker.cgroups.MODES`` (hybrid was missing once)."""
    from xce.cli.main import build_parser
    from xce.worker.cgroups import MODES

    parser = build_parser("commands_daemons")
    action = next(a for a in parser._subparsers._group_actions[0].choices["worker"]._actions
                  if "--cgroups" in a.option_strings)
    assert sorted(action.choices) == sorted(MODES)
