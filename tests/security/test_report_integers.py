"""What schema fuzzing found, kept as plain tests: integers beyond 64 bits in a worker's report or
registration are refused (422), never a 500.  The fuzzing itself, every operation as an admin, a user and
nobody, checking that each answer is the one the OpenAPI document describes, is
``tests/api/test_schemathesis.py``.
"""

from __future__ import annotations

import pytest

from tests.helpers import ControllerProcess


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("fuzz") / "ctl")).start()
    yield c
    c.stop()


@pytest.mark.parametrize("report", [
    {"started": [{"job_id": 22475331748402347114496, "run": 1, "pid": 1}]},
    {"started": [{"job_id": 1, "run": 1, "pid": 314004556149568703444287488}]},
    {"finished": [{"job_id": 1, "run": -(2**70), "exit_code": 2**64}]},
    {"finished": [{"job_id": 1, "run": 1, "signal": 2**40}]},
])
def test_integers_beyond_64_bits_are_refused_not_a_500(ctl, report):
    """What the fuzz found: a report naming a job id beyond 64 bits was echoed into an answer orjson cannot
    render (500); one reaching a fact could not be stored.  Every request integer is bounded now."""
    with ctl.client() as c:
        r = c.post("/v1/hosts/h1/reports", json=report)
        assert r.status_code == 422, r.text
        r = c.post("/v1/hosts/h1/register", content='{"slots": 1, "counters": {"gpu": 1e400}}',  # infinity
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
