"""The native front of ``xce`` (native/xce.c) against the Python CLI, argument list by argument list.

The front owns no semantics: it passes every call to the warm CLI server (``xce.cli.server``), and
runs the Python CLI itself ("cold") only for daemons or when no server can be had.  Both must mean
the same: for each argument list, what reaches a real controller (the job as it shows it) and what
the user sees (stdout, stderr, exit code) are compared.  Cases the front must serve warm use a build
that cannot run the Python CLI cold (``-DXCE_NO_COLD``), so a silent cold run fails them.  Each test
module's servers live in a runtime directory of its own (``runtime``, tests/cli/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import XCE, ControllerProcess, WorkerProcess, kill_jobs_of, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(REPO, "native", "xce.c")

# the job's fields that differ between two submissions of the same thing
VOLATILE = {"id", "display_id", "submit_time", "history", "array_parent"}


def build(out: str, python: str, *, cold: bool = True, flags: tuple[str, ...] = ("-O2",)) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (make deps installs gcc): the native xce front cannot be built"
    subprocess.run([cc, *flags, "-Wall", "-Wextra", "-Werror", f"-DXCE_PYTHON=\"{python}\"",
                    *(() if cold else ("-DXCE_NO_COLD",)), "-o", out, SOURCE], check=True)
    return out


@pytest.fixture(scope="module")
def binaries(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    return {"front": build(str(d / "xce"), sys.executable),  # warm, or cold with this interpreter
            "alone": build(str(d / "xce-alone"), sys.executable, cold=False)}  # warm or nothing


CONFIG = """
[[users]]
name = "admin"
role = "admin"
projects = ["default"]

[[queues]]
name = "q1"
priority = 30

[[queues]]
name = "q2"
priority = 60

[[projects]]
name = "default"
"""


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    root = tmp_path_factory.mktemp("native")
    (root / "xce.toml").write_text(CONFIG)
    c = ControllerProcess(state_dir=str(root / "ctl"), config=str(root / "xce.toml")).start()
    yield c
    c.stop()


@pytest.fixture()
def env(ctl, tmp_path, runtime):
    config = tmp_path / "client.toml"
    config.write_text(f'# written by xce up\nurl = "{ctl.url}"\ntoken = "{ctl.token}"\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith("XCE_")}
    return {**base, "XCE_CONFIG": str(config), "HOME": str(tmp_path), "XCE_RUNTIME_DIR": runtime}


def run(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


def job_of(ctl: ControllerProcess, stdout: str) -> dict:
    job_id = int(stdout.split("<", 1)[1].split(">", 1)[0])
    with ctl.client() as http:
        return _same_job(http.get(f"/v1/jobs/{job_id}").json())


def _same_job(job: dict) -> dict:
    return {k: v for k, v in job.items() if k not in VOLATILE}


def compare(ctl, binary: str, args: list[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    """Run ``args`` through ``binary`` and through the Python CLI: same output, same job."""
    native = run([binary, *args], env, cwd)
    python = run([*XCE, *args], env, cwd)
    assert (native.returncode, native.stderr) == (python.returncode, python.stderr)
    if native.stdout.startswith("Job <"):
        assert _no_id(native.stdout) == _no_id(python.stdout)
        assert job_of(ctl, native.stdout) == job_of(ctl, python.stdout)
    elif native.stdout.startswith("{"):  # --json: the job as submitted
        assert _same_job(json.loads(native.stdout)) == _same_job(json.loads(python.stdout))
    else:
        assert native.stdout == python.stdout
    return native


def _no_id(stdout: str) -> str:
    return re.sub(r"^Job <\d+>", "Job <N>", stdout)


# what the front runs itself: every option it knows, in every form argparse reads the same way
OWN = [
    ["submit", "--", "true"],
    ["submit", "echo", "hello", "world"],
    ["submit", "-o", "out.%J", "-e", "/tmp/err.%J", "--cwd", "sub", "-q", "q1", "-J", "named", "-n", "4",
     "-r", "-H", "--", "sh", "-c", "echo \"$HOME\" 'x'"],
    ["submit", "-H", "--", "true"],
    ["submit", "--rerunnable", "--", "true"],
    ["submit", "-qq2", "-n3", "-Jattached", "-oout", "--", "true"],
    ["submit", "--queue=q1", "--name=sweep[1-3]", "--slots=2", "--stdout=/dev/null", "--rerunnable", "--hold",
     "--", "true"],
    ["submit", "-o", "o1", "-o", "o2", "--cwd", "/abs/dir", "--", "printf", "%s\\n", "é ü \t tab\nnewline \x01 \"q\""],
    ["submit", "--scratch", "", "--app", "", "-P", "default", "--", "true"],
    ["--config", "{config}", "submit", "-J", "via-flag", "--", "true"],
    ["submit", "--url", "{url}", "--token", "{token}", "--", "true"],
    # refused by the controller: the same message, the same exit code
    ["submit", "-q", "nosuch", "--", "true"],
    ["submit", "-P", "nosuch", "--", "true"],
    ["submit", "--claim", "missing", "--claim=other:ro", "--", "true"],
    ["submit", "--scratch", "1Gi:nosuchclass", "--", "true"],
]


@pytest.mark.parametrize("args", OWN, ids=[" ".join(a)[:60] for a in OWN])
def test_the_front_runs_submit_itself_and_means_what_the_python_cli_means(ctl, binaries, env, tmp_path, args):
    args = [a.format(config=env["XCE_CONFIG"], url=ctl.url, token=ctl.token) for a in args]
    r = compare(ctl, binaries["alone"], args, env, str(tmp_path))
    assert "cannot run the Python CLI" not in r.stderr  # it never handed over


def test_environment_settings_and_the_default_config_file(ctl, binaries, env, tmp_path):
    by_env = {**env, "XCE_CONFIG": "", "XCE_URL": f" {ctl.url}/ ", "XCE_TOKEN": ctl.token}
    r = compare(ctl, binaries["alone"], ["submit", "--", "true"], by_env, str(tmp_path))
    assert r.returncode == 0
    default = tmp_path / ".config" / "xce" / "config.toml"
    default.parent.mkdir(parents=True)
    default.write_text(f"url = '{ctl.url}'  # a comment\n\ntoken = \"{ctl.token}\"\n")
    r = compare(ctl, binaries["alone"], ["submit", "--", "true"], {**env, "XCE_CONFIG": ""}, str(tmp_path))
    assert r.returncode == 0


# what the front hands over: the Python CLI answers, and the answer is the Python CLI's
HANDED_OVER = [
    ["--json", "submit", "--", "true"],
    ["submit", "--json", "--", "true"],
    ["submit", "-R", "select[", "--", "true"],
    ["submit", "-R", "rusage[mem=1]", "--", "true"],
    ["submit", "--que", "q1", "--", "true"],  # an abbreviation argparse accepts
    ["submit", "-rH", "--", "true"],
    ["submit", "-q=q1", "--", "true"],
    ["submit", "-n", "0", "--", "true"],
    ["submit", "-n", "1_0", "--", "true"],
    ["submit", "-o", "-", "--", "true"],
    ["submit", "--cwd", "", "--", "true"],
    ["submit", "--stage-in", "f", "--", "true"],
    ["submit", "true", "-o", "x"],
    ["submit"],
    ["submit", "--"],
    ["submit", "--help"],
    ["--version"],
    ["queues"],
    # xce jobs beyond its plain forms
    ["jobs", "--json"],
    ["--json", "jobs"],
    ["jobs", "--state", "PEND"],
    ["jobs", "--done"],
    ["jobs", "--all-pages"],
    ["jobs", "--since", "1h"],
    ["jobs", "--limit", "10001"],  # a usage error
    ["jobs", "--limit", "0"],
    ["jobs", "--lim", "5"],  # an abbreviation argparse accepts
    ["jobs", "-au", "admin"],
    ["jobs", "-q=q1"],
    ["jobs", "-u", "-x"],
    ["jobs", "extra"],
    ["jobs", "--help"],
    ["-a", "jobs"],
    ["--url", "http://127.0.0.1:1", "jobs"],
    ["--config", "/nonexistent/client.toml", "submit", "--", "true"],
    ["--url", "https://127.0.0.1:9", "submit", "--", "true"],
    ["--url", "http://127.0.0.1:1", "submit", "--", "true"],  # nothing listens: nothing was sent
]


@pytest.mark.parametrize("args", HANDED_OVER, ids=[" ".join(a)[:60] for a in HANDED_OVER])
def test_everything_else_is_the_python_clis(ctl, binaries, env, tmp_path, args):
    """What the front once handed over (-R, --json, staging, every other command) is served warm now, by
    the same definition: the same output and the same job as the Python CLI, never run cold."""
    (tmp_path / "f").write_text("x")
    compare(ctl, binaries["front"], args, env, str(tmp_path))
    r = compare(ctl, binaries["alone"], args, env, str(tmp_path))
    assert "cannot run the Python CLI" not in r.stderr


@pytest.mark.parametrize("content", [
    '[server]\nurl = "http://x"\n',
    'url = "http://a"\nurl = "http://b"\n',
    'url = "http://a\\u0041"\n',
    'colour = "blue"\n',
    'url = """http://a"""\n',
    'url = http://a\n',
])
def test_a_config_file_it_cannot_read_plainly_is_the_python_clis(ctl, binaries, env, tmp_path, content):
    config = tmp_path / "odd.toml"
    config.write_text(content + f'token = "{ctl.token}"\n')
    compare(ctl, binaries["front"], ["--config", str(config), "--url", ctl.url, "submit", "--", "true"], env,
            str(tmp_path))
    r = compare(ctl, binaries["alone"], ["--config", str(config), "submit", "--", "true"], env, str(tmp_path))
    assert "cannot run the Python CLI" not in r.stderr  # the config is the Python CLI's to read, warm


def test_a_bad_token_is_refused_in_the_same_words(ctl, binaries, env, tmp_path):
    compare(ctl, binaries["alone"], ["--token", "xce_not-a-token", "submit", "--", "true"], env, str(tmp_path))


def test_a_closed_stdout_is_not_a_failure(ctl, binaries, env, tmp_path):
    """``xce submit ... | head -c0``: the job is submitted, and the exit code says so, as in Python."""
    r = subprocess.run(f"{binaries['alone']} submit -- true | head -c0; echo ${{PIPESTATUS[0]}}", shell=True,
                       executable="/bin/bash", capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert r.stdout.strip() == "0", r.stderr


@pytest.mark.parametrize("how", ["env", "flag", "config"])
def test_several_controllers_are_the_python_clis(ctl, binaries, env, tmp_path, how):
    """A list of controllers (leader following) is never the front's: it hands the submission over."""
    urls = f"{ctl.url},http://127.0.0.1:1"
    if how == "env":
        env = {**env, "XCE_CONFIG": "", "XCE_URL": urls, "XCE_TOKEN": ctl.token}
        args = ["submit", "--", "true"]
    elif how == "flag":
        args = ["--url", urls, "submit", "--", "true"]
    else:
        config = tmp_path / "ha.toml"
        config.write_text(f'urls = ["{ctl.url}", "http://127.0.0.1:1"]\ntoken = "{ctl.token}"\n')
        args = ["--config", str(config), "submit", "--", "true"]
    r = compare(ctl, binaries["front"], args, env, str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("Job <"), r.stderr
    r = compare(ctl, binaries["alone"], args, env, str(tmp_path))  # leader following: the Python client's, warm
    assert r.returncode == 0 and "cannot run the Python CLI" not in r.stderr


# ---------------------------------------------------------------- xce jobs

# CONFIG's users, queues and project, finished jobs kept listed, and two users more
LISTING_CONFIG = """
[controller]
keep_finished = "1d"  # the finished jobs stay listed while the tests compare
""" + CONFIG + """
[[users]]
name = "alice"
projects = ["default"]

[[users]]
name = "bob"  # no jobs at all
projects = ["default"]
"""

# names of different widths (the controller takes only [a-z0-9][a-z0-9-_.]{0,62}: no other character
# can reach a listing)
NAMES = ["a", "sweep.v2_final-run", "x" * 63]


def _token(ctl: ControllerProcess, user: str) -> str:
    with ctl.client() as http:
        r = http.post("/v1/tokens", json={"user": user})
        assert r.status_code == 201, r.text
        return r.json()["token"]


def _submit(ctl: ControllerProcess, token: str, **body) -> int:
    with ctl.client(token) as http:
        r = http.post("/v1/jobs", json={"command": ["true"], **body})
        assert r.status_code == 201, r.text
        return r.json()["id"]


def _state(ctl: ControllerProcess, job_id: int) -> dict:
    with ctl.client() as http:
        return http.get(f"/v1/jobs/{job_id}").json()


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    """A controller with two workers and jobs in every kind of row: pending (held, in q1 and q2, with
    names of non-ASCII and escaped characters), one running on two hosts, one that ran on two hosts
    and is DONE, one killed while held (EXIT, no hosts); alice's jobs; bob has none."""
    root = tmp_path_factory.mktemp("listing")
    (root / "xce.toml").write_text(LISTING_CONFIG)
    ctl = ControllerProcess(state_dir=str(root / "ctl"), config=str(root / "xce.toml")).start()
    workers = []
    try:
        for host in ("h1", "h2"):
            workers.append(WorkerProcess(ctl, host, str(root / host), slots=2).start())
        tokens = {"admin": ctl.token, "alice": _token(ctl, "alice"), "bob": _token(ctl, "bob")}
        ids = {}
        for name in NAMES:
            ids[name] = _submit(ctl, ctl.token, name=name, queue="q2", hold=True)
        ids["q1"] = _submit(ctl, ctl.token, queue="q1", hold=True, slots=3)
        ids["ran"] = _submit(ctl, ctl.token, name="two-hosts", slots=2, resreq="span[ptile=1]")
        wait_for(lambda: _state(ctl, ids["ran"])["state"] == "DONE", timeout=60, what="the two-host job DONE")
        ids["runs"] = _submit(ctl, ctl.token, command=["sleep", "600"], name="still-running", slots=2,
                              resreq="span[ptile=1]")
        wait_for(lambda: _state(ctl, ids["runs"])["state"] == "RUN", timeout=60, what="the two-host job RUN")
        ids["killed"] = _submit(ctl, ctl.token, name="killed", hold=True)
        with ctl.client() as http:
            assert http.post(f"/v1/jobs/{ids['killed']}/kill", json={}).status_code == 200
        wait_for(lambda: _state(ctl, ids["killed"])["state"] == "EXIT", what="the killed job EXIT")
        ids["alice"] = _submit(ctl, tokens["alice"], name="alices", hold=True)
        yield ctl, tokens, ids
    finally:
        for w in workers:
            w.stop()
        for w in workers:
            kill_jobs_of(w.work_dir)
        ctl.stop()


def _listing_env(ctl: ControllerProcess, token: str, tmp_path, runtime: str) -> dict[str, str]:
    config = tmp_path / "client.toml"
    config.write_text(f'url = "{ctl.url}"\ntoken = "{token}"\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith(("XCE_", "PYTHON", "LC_"))}
    # localtime() the same in both, and not UTC: a POSIX zone string needs no tz database
    return {**base, "LANG": "C.UTF-8", "TZ": "XCE-5:30", "XCE_CONFIG": str(config), "HOME": str(tmp_path),
            "XCE_RUNTIME_DIR": runtime}


# (who runs it, the arguments): each runs in the front itself, never handed over
JOBS_OWN = [
    ("admin", ["jobs"]),
    ("admin", ["jobs", "-a"]),
    ("admin", ["jobs", "--all"]),
    ("admin", ["jobs", "-u", "alice"]),
    ("admin", ["jobs", "--user=alice"]),
    ("admin", ["jobs", "-ualice", "-a"]),
    ("admin", ["jobs", "--user", "josé"]),  # nobody: "No jobs found", the value UTF-8 and quoted
    ("admin", ["jobs", "-a", "-q", "日本"]),
    ("admin", ["jobs", "-u", ""]),
    ("admin", ["jobs", "-q", "q1"]),
    ("admin", ["jobs", "--queue=q2", "-a"]),
    ("admin", ["jobs", "-qq2", "--limit", "2"]),
    ("admin", ["jobs", "--limit", "2"]),  # more jobs than that: the note
    ("admin", ["jobs", "--limit=7"]),  # exactly as many as there are: the note too
    ("admin", ["jobs", "-q", "a b&c=d/%"]),
    ("admin", ["jobs", "-u", "日" * 63]),  # 567 bytes quoted: longer than a line of the front's formats
    ("admin", ["jobs", "-q", "x" * 64]),  # refused: too long
    ("admin", ["--config", "{config}", "jobs", "-a", "--url", "{url}"]),
    ("admin", ["--url", "{url}", "--token", "{token}", "jobs"]),
    ("alice", ["jobs"]),
    ("alice", ["jobs", "-a"]),
    ("alice", ["jobs", "-u", "alice"]),
    ("alice", ["jobs", "-u", "admin"]),  # refused: "users may list only their own jobs"
    ("alice", ["jobs", "--user", "josé"]),
    ("bob", ["jobs"]),  # no jobs at all
    ("admin", ["--token", "xce_not-a-token", "jobs"]),  # refused: unknown token
]


@pytest.mark.parametrize("who,args", JOBS_OWN, ids=[f"{w}: {' '.join(a)}"[:60] for w, a in JOBS_OWN])
def test_the_front_runs_a_plain_jobs_itself_and_prints_what_the_python_cli_prints(listing, binaries, tmp_path,
                                                                                    runtime, who, args):
    ctl, tokens, _ = listing
    env = _listing_env(ctl, tokens[who], tmp_path, runtime)
    args = [a.format(config=env["XCE_CONFIG"], url=ctl.url, token=tokens[who]) for a in args]
    native = run([binaries["alone"], *args], env, str(tmp_path))
    python = run([*XCE, *args], env, str(tmp_path))
    assert "cannot run the Python CLI" not in native.stderr  # it never handed over
    assert (native.returncode, native.stdout, native.stderr) == (python.returncode, python.stdout, python.stderr)


def _table(who: str, args: list[str], listing, binaries, tmp_path, runtime) -> subprocess.CompletedProcess:
    ctl, tokens, _ = listing
    r = run([binaries["alone"], *args], _listing_env(ctl, tokens[who], tmp_path, runtime), str(tmp_path))
    assert "cannot run the Python CLI" not in r.stderr
    return r


def test_what_the_listing_shows(listing, binaries, tmp_path, runtime):
    """The rows the comparisons above rest on are there (the comparison alone would pass on two
    identical wrong tables)."""
    ctl, _, ids = listing
    r = _table("admin", ["jobs"], listing, binaries, tmp_path, runtime)
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["JOBID", "USER", "STAT", "QUEUE", "NAME", "SLOTS", "EXEC_HOST", "SUBMIT_TIME"]
    rows = {int(line.split()[0]): line for line in lines[1:] if line[:1].isdigit()}
    assert sorted(rows) == sorted(v for k, v in ids.items() if k != "alice")  # admin's own, by id
    assert " h1,h2 " in rows[ids["ran"]] and " DONE " in rows[ids["ran"]]
    assert " h1,h2 " in rows[ids["runs"]] and " RUN " in rows[ids["runs"]]
    assert " EXIT " in rows[ids["killed"]]
    # TZ=XCE-5:30 is UTC+5:30 (POSIX counts west): the time as the zone's clock shows it
    submitted = _state(ctl, ids["ran"])["submit_time"]
    assert rows[ids["ran"]].endswith(time.strftime("%b %d %H:%M:%S", time.gmtime(int(submitted) + 5 * 3600 + 1800)))
    # the columns line up: each starts at the same place on every line
    starts = [m.start() for m in re.finditer(r"(?<=  )\S", lines[0])]
    for line in lines[1:]:
        if line[:1].isdigit():
            assert all(line[i - 2:i] == "  " and line[i] != " " for i in starts[:3]), line
    assert any(f" {'x' * 63} " in line for line in lines)
    r = _table("admin", ["jobs", "--limit", "2"], listing, binaries, tmp_path, runtime)
    assert r.stderr == "(the newest 2 jobs that match: --limit N or --all-pages for more)\n"
    assert len(r.stdout.splitlines()) == 3
    r = _table("bob", ["jobs"], listing, binaries, tmp_path, runtime)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "No jobs found\n")
    r = _table("alice", ["jobs", "-u", "admin"], listing, binaries, tmp_path, runtime)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "xce: users may list only their own jobs\n")
