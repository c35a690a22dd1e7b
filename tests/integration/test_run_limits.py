"""Run limits (``-W``, ``-wa``/``-wt``) on a real cluster: the run's shepherd keeps the limit from the
job's start on its own clock, sends the warning signal first, then ends the run by the kill path, and
the job ends EXIT with "run limit H:MM reached"."""

from __future__ import annotations

import pytest

from tests.integration.conftest import make_cluster

pytestmark = pytest.mark.long  # started first under make test (tests/conftest.py): two minutes of waiting


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("limits"))
    c.add_worker("host1", slots=2)
    yield c
    c.stop()


def read(path) -> list[str]:
    with open(path) as fh:
        return fh.read().split()


def test_a_two_minute_limit_warns_a_minute_before_then_ends_the_run_exit(cl, tmp_path):
    """The warning comes a minute into the run: a warning due at the start (``-W 1 -wt 1``) can reach the
    shell before its trap is set, and then ends it by that signal, as it would under LSF."""
    log = tmp_path / "signals"
    # the kill path sends SIGINT and SIGTERM together (as bkill): each is recorded, TERM ends it
    script = (f"trap 'echo USR1 >> {log}' USR1; trap 'echo INT >> {log}' INT; "
              f"trap 'echo TERM >> {log}; exit 143' TERM; echo start >> {log}; while :; do sleep 0.2; done")
    job_id = cl.submit("-W", "2", "-wa", "USR1", "-wt", "1", "--", "sh", "-c", script)
    job = cl.wait_state(job_id, "DONE", "EXIT", timeout=180)
    assert job["state"] == "EXIT" and job["exit_reason"] == "run limit 0:02 reached"
    signals = read(log)
    assert signals[:2] == ["start", "USR1"] and sorted(signals[2:]) == ["INT", "TERM"]
    assert 119 <= job["end_time"] - job["start_time"] < 135
    assert job["run_limit"] == 120.0


def test_limits_are_checked_at_submission(cl):
    r = cl.xce("submit", "-W", "1:xx", "--", "true", ok=False)
    assert r.returncode != 0 and "invalid run limit (-W)" in r.stderr
    r = cl.xce("submit", "-W", "5", "-wa", "USR1", "--", "true", ok=False)
    assert r.returncode != 0 and "-wa SIGNAL and -wt [HH:]MM go together" in r.stderr
