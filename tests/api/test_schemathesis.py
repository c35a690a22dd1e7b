"""Every operation in /openapi.json, fuzzed with schemathesis against a real controller: no answer is a
5xx, and every answer matches the document (its status is one the operation lists, its body the schema
of that status, its content type the declared one).

One run covers the roles (an admin, a plain user, and nobody: every route but /healthz answers 401) and
both generation modes (valid data, and data the schema forbids: refused with 4xx, never a 5xx). A small
fixed number of examples per operation, mode and role, derandomized (the same requests on every run), so
the run is bounded; every request goes to 127.0.0.1.  Before it, the controller is given something to
show (a host, a job dispatched to it, a claim, an agent's lease), so the answers checked are not only
empty lists.  Long polls are asked not to wait (``wait=0``): they hold a request open by design.
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
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from tests.helpers import audit_trail

pytestmark = pytest.mark.long  # started first under make test (tests/conftest.py)

EXAMPLES = int(os.environ.get("XCE_FUZZ_EXAMPLES", "10"))  # per operation, generation mode and role
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)


def fuzz(schema, base_url: str, token: str | None, modes=MODES, examples: int = EXAMPLES,
         expect: int | None = None) -> tuple[list[str], list[int]]:
    """Run every operation; the answers that failed a check (or were not ``expect``), as
    'METHOD PATH (mode) -> STATUS: why', and every status seen."""
    failures: list[str] = []
    statuses: list[int] = []
    session = requests.Session()
    if token is not None:
        session.headers["Authorization"] = f"Bearer {token}"
    for result in schema.get_all_operations():
        op = result.ok()
        query = {"wait": 0} if "wait" in {p.name for p in op.query} else None
        for mode in modes:
            @given(case=op.as_strategy(generation_mode=mode, query=query))
            @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            def run(case) -> None:
                response = case.call(base_url=base_url, session=session, timeout=15)
                statuses.append(response.status_code)
                where = f"{op.method.upper()} {op.path} ({mode.value}) -> {response.status_code}"
                if expect is not None and response.status_code != expect and op.path != "/healthz":
                    failures.append(f"{where}: expected {expect} [{case.as_curl_command()[:400]}]")
                try:
                    case.validate_response(response, checks=CHECKS)
                except Exception as e:  # a check failed: schemathesis says which and why
                    failures.append(f"{where}: {str(e)[:1200]} [{case.as_curl_command()[:400]}]")

            try:
                run()
            except Unsatisfiable:  # nothing in this operation can be made invalid (no parameters, no body)
                assert mode is GenerationMode.NEGATIVE, op.path
    return failures, statuses


def seed(c: httpx.Client) -> None:
    """Something for the answers to show: a registered host with a job dispatched to it, a claim, the
    provisioner's lease."""
    assert c.post("/v1/hosts/h1/register", json={"slots": 4, "attrs": {"zone": "a"},
                                                 "counters": {"scratch": 2**34}}).status_code == 200
    r = c.post("/v1/jobs", json={"command": ["true"], "name": "seeded"})
    assert r.status_code == 201, r.text
    assert c.post("/v1/claims", json={"name": "seeded", "class": "simfs", "size": "1Gi",
                                      "access_mode": "RWX"}).status_code == 201
    assert c.post("/v1/agents/provisioner/lease", json={"holder": "fuzz"}).status_code == 200


@pytest.mark.timeout(900)  # minutes when the machine's other test processes are busy too
def test_every_operation_answers_as_documented_under_schema_fuzzing(ctl):
    with ctl.client() as c:
        seed(c)
        assert c.post("/v1/users", json={"name": "fuzzer", "projects": ["default"]}).status_code == 201
        user_token = c.post("/v1/tokens", json={"user": "fuzzer"}).json()["token"]
        doc = c.get("/openapi.json").json()
        admins_before = sum(a["user"] == "admin" for a in audit_trail(c))
    assert ctl.url.startswith("http://127.0.0.1:")
    schema = schemathesis.openapi.from_dict(doc)

    as_admin, admin_statuses = fuzz(schema, ctl.url, ctl.token)
    as_user, user_statuses = fuzz(schema, ctl.url, user_token)
    nobody, _ = fuzz(schema, ctl.url, None, modes=(GenerationMode.POSITIVE,), examples=2, expect=401)
    failures = as_admin + as_user + nobody
    assert not failures, f"{len(failures)} answers not as documented:\n" + "\n".join(failures[:20])

    assert len(admin_statuses) + len(user_statuses) >= 2 * len(doc["paths"]) * EXAMPLES // 2  # it did run
    assert sum(200 <= s < 300 for s in admin_statuses) > len(doc["paths"]), "few requests got past validation"
    with ctl.client() as c:
        admins_after = sum(a["user"] == "admin" for a in audit_trail(c))
    assert admins_after > admins_before + 20, "the fuzzer's requests were not authenticated as the admin"
    assert httpx.get(ctl.url + "/healthz").json()["ok"]
    with open(ctl.log.name, errors="replace") as fh:
        assert "Traceback" not in fh.read()
