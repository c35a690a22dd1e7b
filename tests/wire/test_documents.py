"""``xce.wire``'s documents against what a real controller sends, key for key.

A ``TypedDict`` is only a promise; these tests make it one that fails: each document type's keys
must be exactly those of the real document (its required keys always there, its optional ones the
only others), so a key added to ``xce.api.views`` or a daemon route fails here until the type says
it.  The request types are checked against the API's request schemas the same way.
"""

from __future__ import annotations

import typing

import pytest

from tests.helpers import ControllerProcess, wait_for
from xce.api import schemas as S
from xce.wire import AgentOp, ClaimDoc, Dispatch, HistoryRow, JobDoc, JobRow, OpReport, ReplicaDoc, Submission


def same_keys(doc: dict, kind: type) -> None:
    required, optional = set(kind.__required_keys__), set(kind.__optional_keys__)
    assert required <= set(doc), (kind.__name__, "missing", required - set(doc))
    assert set(doc) <= required | optional, (kind.__name__, "not in the type", set(doc) - required - optional)


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("wire") / "ctl")).start()
    yield c
    c.stop()


def test_job_documents_rows_and_history(ctl):
    with ctl.client() as http:
        held = http.post("/v1/jobs", json={"command": ["true"], "hold": True}).json()
        same_keys(held, JobDoc)
        same_keys(http.get(f"/v1/jobs/{held['id']}").json(), JobDoc)
        for row in http.get("/v1/jobs", params={"view": "brief"}).json():
            same_keys(row, JobRow)
        assert http.post(f"/v1/jobs/{held['id']}/kill", json={}).status_code == 200
        wait_for(lambda: http.get("/v1/history/jobs").json(), what="a finished job in history")
        for row in http.get("/v1/history/jobs").json():
            same_keys(row, HistoryRow)


def test_a_dispatch_and_an_agent_op(ctl):
    with ctl.client() as http:
        r = http.post("/v1/hosts/h1/register", json={"slots": 2})
        assert r.status_code == 200, r.text
        job = http.post("/v1/jobs", json={"command": ["true"]}).json()

        def dispatched():
            return [d for d in http.get("/v1/hosts/h1/work").json()["dispatch"] if d["job_id"] == job["id"]]

        same_keys(wait_for(dispatched, what="the job dispatched to h1")[0], Dispatch)
        claim = http.post("/v1/claims", json={"name": "wired", "class": "simfs", "size": "1Mi",
                                              "access_mode": "RWO"}).json()
        same_keys(claim, ClaimDoc)
        epoch = http.post("/v1/agents/provisioner/lease", json={"holder": "test"}).json()["epoch"]

        def ops():
            return [o for o in http.get("/v1/agents/provisioner/work", params={"epoch": epoch}).json()["ops"]
                    if o["claim_id"] == claim["id"]]

        same_keys(wait_for(ops, what="the claim's create op")[0], AgentOp)



def test_a_node_local_claim_and_its_replicas_op(ctl):
    """A replica of a node-local claim, in its claim's document, and its create as its host's agent runs it."""
    with ctl.client() as http:
        assert http.post("/v1/hosts/h7/register", json={"slots": 1, "counters": {"scratch": 2**30}}).status_code == 200
        r = http.post("/v1/claims", json={"name": "local", "class": "scratch", "size": "1Mi", "access_mode": "RWO",
                                          "hosts": ["h7"]})
        assert r.status_code == 201, r.text
        same_keys(r.json(), ClaimDoc)
        [replica] = r.json()["replicas"]
        same_keys(replica, ReplicaDoc)
        epoch = http.post("/v1/agents/node:h7/lease", json={"holder": "test"}).json()["epoch"]

        def ops():
            return [o for o in http.get("/v1/agents/node:h7/work", params={"epoch": epoch}).json()["ops"]
                    if o["claim_id"] == r.json()["id"]]

        [op] = wait_for(ops, what="the replica's create op, placed by the scheduler")
        same_keys(op, AgentOp)
        assert (op["op"], op["scope"], op["host"]) == ("create", "node", "h7")
        same_keys(http.get("/v1/claims/local").json()["replicas"][0], ReplicaDoc)


def test_request_types_are_the_api_request_schemas():
    """``Submission`` is ``POST /v1/jobs``'s body field for field (the schema is made from it); ``OpReport``
    is a report's result (``OpResult``), required keys and all."""
    assert set(S.JobSubmitRequest.model_fields) == set(typing.get_type_hints(Submission))
    fields = S.OpResult.model_fields
    assert set(fields) == set(typing.get_type_hints(OpReport))
    assert {k for k, f in fields.items() if f.is_required()} == set(OpReport.__required_keys__)


def test_a_submission_is_its_body_and_back():
    s = Submission(command=["a", "b c"], claims=["x:ro"], mem_limit=512, hold=True)
    body = s.to_body()
    assert body["command"] == ["a", "b c"] and body["mem_limit"] == "512" and "name" not in body
    assert Submission.from_body(body) == s
    assert S.JobSubmitRequest.model_validate(body).model_dump(exclude_unset=True) == body
    with pytest.raises(TypeError):
        Submission.from_body({**body, "nonsense": 1})
    with pytest.raises(TypeError):
        Submission(command="echo hi")  # one argument per character is never what was meant
