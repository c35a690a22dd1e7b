"""LSF's commands through the native front (``make dev`` links them to it): served by the warm CLI
server by the name they were run as, meaning what the Python entry points mean."""

from __future__ import annotations

import os
import sys

import pytest

from tests.cli.test_native import build, job_of
from tests.helpers import stop_cli_servers
from tests.lsf.conftest import console_scripts
from xce.cli import programs

pytestmark = pytest.mark.long


def test_the_programs_table_is_the_console_scripts():
    assert programs.LSF == console_scripts()


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    """The front, built to never run Python itself (a call it answers was served warm), as bsub and bjobs;
    its servers in a directory of this module's, stopped at its end."""
    d = tmp_path_factory.mktemp("front")
    alone = build(str(d / "xce"), sys.executable, cold=False)
    for name in ("bsub", "bjobs"):
        os.symlink(alone, d / name)
    runtime = d / "runtime"
    runtime.mkdir(mode=0o700)
    yield {"bin": str(d), "runtime": str(runtime)}
    stop_cli_servers(str(runtime))


def test_bsub_through_the_front_means_what_the_python_bsub_means(site, front, tmp_path):
    env = {"XCE_RUNTIME_DIR": front["runtime"], "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = ["-H", "-J", "same", "-q", "default", "-n", "2", "-R", "span[hosts=1]", "-R", "rusage[mem=10]", "-o", "o.%J",
            "echo a; echo b"]
    site.env.update(env)
    try:
        native = site.run(os.path.join(front["bin"], "bsub"), *argv, cwd=str(tmp_path))
        python = site.run("bsub", *argv, cwd=str(tmp_path))
        assert "cannot run the Python CLI" not in native.stderr  # served warm
        assert (native.returncode, native.stderr) == (python.returncode, python.stderr) == (0, "")
        assert job_of(site.cluster.ctl, native.stdout) == job_of(site.cluster.ctl, python.stdout)
        script = "#!/bin/sh\n#BSUB -J from-stdin\necho hi\n"
        piped = site.run(os.path.join(front["bin"], "bsub"), cwd=str(tmp_path), input=script)  # stdin is the caller's
        assert piped.returncode == 0 and piped.stdout.startswith("Job <"), piped.stderr
        refused = site.run(os.path.join(front["bin"], "bsub"), "-G", "grp", "true")
        assert refused.returncode == 255 and "user groups (-G)" in refused.stderr
        listed = site.run(os.path.join(front["bin"], "bjobs"), "-noheader", "-o", "job_name", "-aJ", "from-stdin")
        assert listed.stdout.split() == ["from-stdin"], listed.stderr
        for r in (native, python):
            site.run("bkill", r.stdout.split("<")[1].split(">")[0], check=True)
    finally:
        for key in env:
            site.env.pop(key)
