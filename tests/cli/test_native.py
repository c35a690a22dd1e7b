"""The native front of ``xce`` (native/xce.c) against the Python CLI, argument list by argument list.

The front runs ``xce submit`` itself for the options it knows and hands everything else to the
Python CLI.  Both must mean the same: for each argument list, what reaches a real controller (the
job as it shows it) and what the user sees (stdout, stderr, exit code) are compared.  Cases the
front must run itself use a build whose hand-over target does not exist, so a silent hand-over
fails them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import XCE, ControllerProcess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(REPO, "native", "xce.c")
NO_PYTHON = "/nonexistent/python3"

# the job's fields that differ between two submissions of the same thing
VOLATILE = {"id", "display_id", "submit_time", "history", "array_parent"}


def build(out: str, python: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (make deps installs gcc): the native xce front cannot be built"
    subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", f"-DXCE_PYTHON=\"{python}\"", "-o", out, SOURCE],
                   check=True)
    return out


@pytest.fixture(scope="module")
def binaries(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    return {"front": build(str(d / "xce"), sys.executable),  # hands over to this interpreter
            "alone": build(str(d / "xce-alone"), NO_PYTHON)}  # cannot hand over


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
def env(ctl, tmp_path):
    config = tmp_path / "client.toml"
    config.write_text(f'# written by xce up\nurl = "{ctl.url}"\ntoken = "{ctl.token}"\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith("XCE_")}
    return {**base, "XCE_CONFIG": str(config), "HOME": str(tmp_path)}


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
    ["jobs"],
    ["queues"],
    ["--config", "/nonexistent/client.toml", "submit", "--", "true"],
    ["--url", "https://127.0.0.1:9", "submit", "--", "true"],
    ["--url", "http://127.0.0.1:1", "submit", "--", "true"],  # nothing listens: nothing was sent
]


@pytest.mark.parametrize("args", HANDED_OVER, ids=[" ".join(a)[:60] for a in HANDED_OVER])
def test_everything_else_is_the_python_clis(ctl, binaries, env, tmp_path, args):
    (tmp_path / "f").write_text("x")
    compare(ctl, binaries["front"], args, env, str(tmp_path))
    assert "cannot run the Python CLI" in run([binaries["alone"], *args], env, str(tmp_path)).stderr


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
    r = run([binaries["alone"], "--config", str(config), "submit", "--", "true"], env, str(tmp_path))
    assert "cannot run the Python CLI" in r.stderr


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
    assert "cannot run the Python CLI" in run([binaries["alone"], *args], env, str(tmp_path)).stderr
