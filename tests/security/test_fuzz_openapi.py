"""Every operation in /openapi.json, fuzzed with schemathesis against a real controller, as an admin and
as a plain user: no answer is a 5xx.

A small fixed number of examples per operation, mode (valid and invalid data) and role, derandomized
(the same requests on every run), so the run is bounded; every request goes to 127.0.0.1.  Long polls
are asked not to wait (``wait=0``): they hold a request open by design.
"""

from __future__ import annotations

import os

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.helpers import ControllerProcess

pytestmark = pytest.mark.long  # started first under make test (tests/conftest.py)

EXAMPLES = int(os.environ.get("XCE_FUZZ_EXAMPLES", "10"))  # per operation, generation mode and role


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("fuzz") / "ctl")).start()
    yield c
    c.stop()


def fuzz(schema, base_url: str, token: str, calls: list[int]) -> list[str]:
    """Run every operation; the 5xx answers seen, as 'METHOD PATH -> STATUS: body'."""
    errors: list[str] = []
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    for result in schema.get_all_operations():
        op = result.ok()
        params = {p.name for p in op.query}
        query = {"wait": 0} if "wait" in params else None
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = op.as_strategy(generation_mode=mode, query=query)

            @given(case=strategy)
            @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            def run(case) -> None:
                response = case.call(base_url=base_url, session=session, timeout=15)
                calls.append(response.status_code)
                if response.status_code >= 500:
                    errors.append(f"{op.method.upper()} {op.path} ({mode.value}) -> {response.status_code}: "
                                  f"{response.text[:300]} [{case.as_curl_command()[:600]}]")

            try:
                run()
            except Unsatisfiable:  # nothing in this operation can be made invalid (no parameters, no body)
                assert mode is GenerationMode.NEGATIVE, op.path
    return errors


@pytest.mark.timeout(900)  # minutes when the machine's other test processes are busy too
def test_no_server_errors_under_schema_fuzzing_as_admin_and_as_user(ctl):
    with ctl.client() as c:
        assert c.post("/v1/users", json={"name": "fuzzer", "projects": ["default"]}).status_code == 201
        user_token = c.post("/v1/tokens", json={"user": "fuzzer"}).json()["token"]
        doc = c.get("/openapi.json").json()
    assert ctl.url.startswith("http://127.0.0.1:")
    schema = schemathesis.openapi.from_dict(doc)
    calls: list[int] = []
    errors = fuzz(schema, ctl.url, ctl.token, calls) + fuzz(schema, ctl.url, user_token, calls)
    assert not errors, "\n".join(errors[:20])
    assert len(calls) >= 2 * len(doc["paths"]) * EXAMPLES // 2  # it did run
    assert httpx.get(ctl.url + "/healthz").json()["ok"]
    with open(ctl.log.name, errors="replace") as fh:
        assert "Traceback" not in fh.read()


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
