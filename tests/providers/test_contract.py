"""The provider contract: round trips, refusals, and the schema agreeing with docs, contract and simfs."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xce.providers import (
    CAPABILITY_FLAGS,
    CONTRACT_VERSION,
    OPS,
    ContractError,
    ErrorCode,
    ProviderReply,
    ProviderRequest,
    check_reply,
    decode_reply_document,
    encode_request_document,
    owner_tags,
    reply_document,
    reply_error,
    reply_ok,
    request_document,
    run_provider,
)
from xce.providers import simfs
from xce.providers.contract import OPTIONAL_WIRE_FIELDS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "providers.md"
SCHEMA_PATH = REPO / "docs" / "provider-contract.schema.json"

# The worked example of docs/providers.md, verbatim in meaning (a test checks the docs still hold it).
EXAMPLE_REQUEST = {
    "contract": 1,
    "cluster_id": "xce-prod-1",
    "config": {"root": "/srv/simfs", "capacity_bytes": 1099511627776, "reachable_hosts": ["host1", "host3"]},
    "requests": [
        {"op_id": "c42-create-1", "op": "create", "claim_id": 42, "claim_name": "ckpt-7",
         "class_name": "shared-fs", "size_bytes": 10737418240, "access_mode": "RWX",
         "params": {"tier": "fast"},
         "tags": {"xce.cluster": "xce-prod-1", "xce.claim": "42", "xce.op": "c42-create-1", "xce.project": "llm"},
         "handle": None, "host": None, "target_path": None, "readonly": False},
        {"op_id": "c43-create-1", "op": "create", "claim_id": 43, "claim_name": "huge",
         "class_name": "shared-fs", "size_bytes": 2199023255552, "access_mode": "RWO",
         "params": {},
         "tags": {"xce.cluster": "xce-prod-1", "xce.claim": "43", "xce.op": "c43-create-1"},
         "handle": None, "host": None, "target_path": None, "readonly": False},
        {"op_id": "c42-attach-2", "op": "attach", "claim_id": 42, "claim_name": "ckpt-7",
         "class_name": "shared-fs", "size_bytes": 0, "access_mode": "RWX", "params": {},
         "tags": {"xce.cluster": "xce-prod-1", "xce.claim": "42", "xce.op": "c42-attach-2"},
         "handle": "v42-0cf1e47d95", "host": "host9", "target_path": None, "readonly": False},
    ],
}
EXAMPLE_REPLY = {
    "contract": 1,
    "replies": [
        {"op_id": "c42-create-1", "ok": True, "handle": "v42-0cf1e47d95", "size_bytes": 10737418240,
         "reachable_hosts": ["host1", "host3"], "path": "/srv/simfs/volumes/v42-0cf1e47d95/data"},
        {"op_id": "c43-create-1", "ok": False,
         "error": {"code": "RESOURCE_EXHAUSTED",
                   "message": "simfs: no room for 2199023255552 bytes: 10737418240 of 1099511627776 bytes are in use",
                   "retryable": True}},
        {"op_id": "c42-attach-2", "ok": False,
         "error": {"code": "NOT_REACHABLE",
                   "message": "simfs: v42-0cf1e47d95 cannot be reached from host host9 (reachable from host1, host3)",
                   "retryable": False}},
    ],
}


def create_request(op_id: str = "op-1", claim_id: int = 7, **kw) -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="create", claim_id=claim_id,
                           tags=owner_tags("c1", claim_id, op_id), **kw)


# ---------------------------------------------------------------------------
# Requests


def test_request_round_trip_every_field():
    req = create_request(claim_name="ckpt-7", class_name="shared-fs", size_bytes=1 << 30, access_mode="RWOP",
                         params={"tier": "fast"}, readonly=True, source_handle="s7-snap")
    wire = req.to_json()
    assert set(wire) == set(ProviderRequest.__dataclass_fields__)
    assert ProviderRequest.from_json(json.loads(json.dumps(wire))) == req


def test_fields_added_since_the_first_text_are_sent_only_when_set():
    """A provider written before source_handle sees exactly the documents it always saw."""
    wire = create_request().to_json()
    assert "source_handle" not in wire
    assert set(wire) == set(ProviderRequest.__dataclass_fields__) - set(OPTIONAL_WIRE_FIELDS)
    assert ProviderRequest.from_json(wire) == create_request()


def test_request_from_json_fills_defaults():
    req = ProviderRequest.from_json({"op_id": "h-1", "op": "health"})
    assert req == ProviderRequest(op_id="h-1", op="health")
    assert req.params == {} and req.handle is None and req.readonly is False


def test_request_copies_its_maps():
    params = {"a": "1"}
    req = create_request(params=params)
    params["a"] = "2"
    assert req.params == {"a": "1"}


@pytest.mark.parametrize("kw, fragment", [
    ({"op": "mount"}, "unknown op"),
    ({"op_id": ""}, "op_id"),
    ({"op_id": "x" * 300}, "op_id"),
    ({"claim_id": True}, "claim_id"),
    ({"claim_id": -1}, "claim_id"),
    ({"size_bytes": 1.5}, "size_bytes"),
    ({"access_mode": "rw"}, "access_mode"),
    ({"params": {"a": 1}}, "params"),
    ({"handle": ""}, "handle"),
    ({"readonly": "no"}, "readonly"),
])
def test_request_refuses_malformed_fields(kw, fragment):
    base = {"op_id": "h-1", "op": "health"}
    with pytest.raises(ContractError, match=fragment):
        ProviderRequest(**{**base, **kw})


@pytest.mark.parametrize("kw, fragment", [
    ({"op": "create", "claim_id": 7}, "owner tags"),
    ({"op": "create", "tags": owner_tags("c1", 7, "op-1")}, "needs claim_id"),
    ({"op": "create", "claim_id": 7, "tags": owner_tags("c1", 7, "other-op")}, "not the op_id"),
    ({"op": "create", "claim_id": 7, "tags": owner_tags("c1", 8, "op-1")}, "not the claim_id"),
    ({"op": "attach", "handle": "v1"}, "needs host"),
    ({"op": "release"}, "needs handle"),
    ({"op": "node_prepare", "host": "h1", "tags": owner_tags("c1", 7, "op-1")}, "handle or a claim_id"),
    ({"op": "node_publish", "handle": "v1", "host": "h1", "target_path": "rel/path"}, "absolute"),
    ({"op": "node_publish", "handle": "v1", "host": "h1"}, "needs target_path"),
    ({"op": "create_snapshot", "handle": "v1", "tags": owner_tags("c1", 7, "op-1")}, "needs claim_id"),
    ({"op": "create_snapshot", "claim_id": 7, "tags": owner_tags("c1", 7, "op-1")}, "needs handle"),
    ({"op": "create_snapshot", "claim_id": 7, "handle": "v1"}, "owner tags"),
    ({"op": "delete_snapshot"}, "needs handle"),
    ({"op": "expand", "handle": "v1"}, "expand needs size_bytes"),
    ({"op": "expand", "size_bytes": 5}, "needs handle"),
    ({"op": "attach", "handle": "v1", "host": "h1", "source_handle": "s1"}, "only for create"),
    ({"op": "create", "claim_id": 7, "tags": owner_tags("c1", 7, "op-1"), "source_handle": ""}, "source_handle"),
])
def test_request_refuses_what_its_op_cannot_do_without(kw, fragment):
    with pytest.raises(ContractError, match=fragment):
        ProviderRequest(op_id="op-1", **kw)


def test_request_from_json_refuses_unknown_fields_and_non_objects():
    with pytest.raises(ContractError, match="unknown fields colour"):
        ProviderRequest.from_json({"op_id": "h-1", "op": "health", "colour": "red"})
    with pytest.raises(ContractError, match="must be an object"):
        ProviderRequest.from_json(["health"])
    with pytest.raises(ContractError, match="needs op_id and op"):
        ProviderRequest.from_json({"op": "health"})


def test_request_document_refuses_duplicate_op_ids_and_empty_batches():
    with pytest.raises(ContractError, match="appears twice"):
        request_document("c1", {}, [create_request(), create_request()])
    with pytest.raises(ContractError, match="at least one"):
        request_document("c1", {}, [])
    with pytest.raises(ContractError, match="cluster_id"):
        request_document("", {}, [create_request()])


def test_encoded_request_document():
    doc = json.loads(encode_request_document("c1", {"secret": "s"}, [create_request()]))
    assert doc["contract"] == CONTRACT_VERSION == 1
    assert doc["cluster_id"] == "c1" and doc["config"] == {"secret": "s"}
    assert doc["requests"][0]["tags"] == {"xce.cluster": "c1", "xce.claim": "7", "xce.op": "op-1"}


# ---------------------------------------------------------------------------
# Replies

FULL_OK = reply_ok("op-1", handle="v7-abc", size_bytes=2048, reachable_hosts=["h1", "h3"],
                   host_labels={"fs": "lustre"}, path="/srv/v7/data",
                   objects=[{"handle": "v7-abc", "tags": {"xce.claim": "7"}, "size_bytes": 2048,
                             "created": 1700000000.5},
                            {"handle": "s7-abc", "tags": {"xce.claim": "7"}, "size_bytes": 2048,
                             "created": 1700000001, "used_bytes": 1024, "kind": "snapshot",
                             "source_handle": "v7-abc"}],
                   healthy=True, message="made it", used_bytes=1024, capacity_bytes=1 << 40,
                   available_bytes=1 << 39,
                   capabilities={"create_snapshot": True, "clone": True, "expand": True,
                                 "online_expand": False, "access_modes": ["RWO", "RWX"]})


@pytest.mark.parametrize("reply", [
    FULL_OK,
    reply_ok("op-2"),
    reply_ok("op-3", reachable_hosts=[]),  # reachable from no host is not "from all" (None)
    reply_error("op-4", ErrorCode.RESOURCE_EXHAUSTED, "no room", True),
    reply_error("op-5", "VENDOR_QUIRK_42", "", False),
])
def test_reply_round_trip(reply):
    wire = json.loads(json.dumps(reply.to_json()))
    assert ProviderReply.from_json(wire) == reply


def test_reply_wire_forms():
    assert reply_ok("op-2").to_json() == {"op_id": "op-2", "ok": True}
    assert reply_error("op-4", ErrorCode.NOT_FOUND, "gone", False, stderr_tail="trace").to_json() == {
        "op_id": "op-4", "ok": False, "error": {"code": "NOT_FOUND", "message": "gone", "retryable": False}}


def test_objects_are_normalised():
    r = ProviderReply.from_json({"op_id": "l", "ok": True, "objects": [{"handle": "v1", "tags": {}}]})
    assert r.objects == [{"handle": "v1", "tags": {}, "size_bytes": None, "created": None}]


# JSON Schema counts 1.0 as an integer; the contract wants sizes written as integers (no fraction).
SIZE_AS_FLOAT = {"op_id": "a", "ok": True, "size_bytes": 1.0}
MALFORMED_REPLIES = [
    ("must be an object", ["op-1"]),
    ("op_id", {"ok": True}),
    ("op_id", {"op_id": "", "ok": True}),
    ("op_id", {"op_id": 7, "ok": True}),
    ("ok must be", {"op_id": "a", "ok": "true"}),
    ("ok must be", {"op_id": "a"}),
    ("unexpected fields reachable_host", {"op_id": "a", "ok": True, "reachable_host": ["h1"]}),
    ("unexpected fields error", {"op_id": "a", "ok": True, "error": {"code": "X", "message": "", "retryable": True}}),
    ("size_bytes", {"op_id": "a", "ok": True, "size_bytes": "12"}),
    ("size_bytes", {"op_id": "a", "ok": True, "size_bytes": -1}),
    ("size_bytes", {"op_id": "a", "ok": True, "size_bytes": True}),
    ("size_bytes", SIZE_AS_FLOAT),
    ("reachable_hosts", {"op_id": "a", "ok": True, "reachable_hosts": "h1"}),
    ("reachable_hosts", {"op_id": "a", "ok": True, "reachable_hosts": ["h1", 3]}),
    ("host_labels", {"op_id": "a", "ok": True, "host_labels": {"fs": 1}}),
    ("host_labels", {"op_id": "a", "ok": True, "host_labels": None}),
    ("path must be absolute", {"op_id": "a", "ok": True, "path": "vol/data"}),
    ("handle", {"op_id": "a", "ok": True, "handle": ""}),
    ("healthy", {"op_id": "a", "ok": True, "healthy": "yes"}),
    ("message", {"op_id": "a", "ok": True, "message": 3}),
    ("objects", {"op_id": "a", "ok": True, "objects": {"v1": {}}}),
    ("needs tags", {"op_id": "a", "ok": True, "objects": [{"handle": "v1"}]}),
    ("needs a handle", {"op_id": "a", "ok": True, "objects": [{"tags": {}}]}),
    ("unexpected fields path", {"op_id": "a", "ok": True, "objects": [{"handle": "v1", "tags": {}, "path": "/x"}]}),
    ("created", {"op_id": "a", "ok": True, "objects": [{"handle": "v1", "tags": {}, "created": "yesterday"}]}),
    ("created", {"op_id": "a", "ok": True, "objects": [{"handle": "v1", "tags": {}, "created": math.nan}]}),
    ("needs an error object", {"op_id": "a", "ok": False}),
    ("missing retryable", {"op_id": "a", "ok": False, "error": {"code": "X", "message": "m"}}),
    ("unexpected detail", {"op_id": "a", "ok": False,
                           "error": {"code": "X", "message": "m", "retryable": True, "detail": 1}}),
    ("UPPER_SNAKE_CASE", {"op_id": "a", "ok": False, "error": {"code": "not_found", "message": "", "retryable": False}}),
    ("UPPER_SNAKE_CASE", {"op_id": "a", "ok": False, "error": {"code": "", "message": "", "retryable": False}}),
    ("retryable", {"op_id": "a", "ok": False, "error": {"code": "X", "message": "", "retryable": "yes"}}),
    ("unexpected fields handle", {"op_id": "a", "ok": False, "handle": "v1",
                                  "error": {"code": "X", "message": "", "retryable": True}}),
    ("used_bytes", {"op_id": "a", "ok": True, "used_bytes": -1}),
    ("capacity_bytes", {"op_id": "a", "ok": True, "capacity_bytes": "1T"}),
    ("available_bytes", {"op_id": "a", "ok": True, "available_bytes": True}),
    ("missing online_expand", {"op_id": "a", "ok": True, "capabilities": {
        "create_snapshot": True, "clone": True, "expand": True, "access_modes": []}}),
    ("unexpected snapshot", {"op_id": "a", "ok": True, "capabilities": {
        "create_snapshot": True, "clone": True, "expand": True, "online_expand": True, "access_modes": [],
        "snapshot": True}}),
    ("clone", {"op_id": "a", "ok": True, "capabilities": {
        "create_snapshot": True, "clone": "yes", "expand": True, "online_expand": True, "access_modes": []}}),
    ("access_modes", {"op_id": "a", "ok": True, "capabilities": {
        "create_snapshot": True, "clone": True, "expand": True, "online_expand": True, "access_modes": ["rw"]}}),
    ("kind", {"op_id": "a", "ok": True, "objects": [{"handle": "v1", "tags": {}, "kind": "clone"}]}),
    ("used_bytes", {"op_id": "a", "ok": True, "objects": [{"handle": "v1", "tags": {}, "used_bytes": "1"}]}),
    ("unexpected fields used_bytes", {"op_id": "a", "ok": False, "used_bytes": 1,
                                      "error": {"code": "X", "message": "", "retryable": True}}),
]


@pytest.mark.parametrize("fragment, wire", MALFORMED_REPLIES)
def test_reply_from_json_refuses_malformed(fragment, wire):
    with pytest.raises(ContractError, match=fragment):
        ProviderReply.from_json(wire)


def test_reply_constructor_keeps_ok_and_error_apart():
    with pytest.raises(ContractError, match="no error_code"):
        ProviderReply(op_id="a", ok=True, error_code="X")
    with pytest.raises(ContractError, match="only its error"):
        ProviderReply(op_id="a", ok=False, error_code="X", handle="v1")
    with pytest.raises(ContractError, match="UPPER_SNAKE_CASE"):
        ProviderReply(op_id="a", ok=False)


def test_check_reply_demands_what_each_op_answers():
    check_reply(create_request(), reply_ok("op-1", handle="v7"))
    check_reply(create_request(), reply_error("op-1", "UNAVAILABLE", "down", True))
    with pytest.raises(ContractError, match="lacks handle"):
        check_reply(create_request(), reply_ok("op-1"))
    with pytest.raises(ContractError, match="lacks objects"):
        check_reply(ProviderRequest(op_id="l", op="list"), reply_ok("l"))
    with pytest.raises(ContractError, match="lacks healthy"):
        check_reply(ProviderRequest(op_id="h", op="health"), reply_ok("h"))
    with pytest.raises(ContractError, match="different request"):
        check_reply(create_request(), reply_ok("op-2", handle="v7"))
    snap = ProviderRequest(op_id="s", op="create_snapshot", claim_id=7, handle="v7", tags=owner_tags("c1", 7, "s"))
    with pytest.raises(ContractError, match="lacks size_bytes"):
        check_reply(snap, reply_ok("s", handle="s7"))
    with pytest.raises(ContractError, match="lacks size_bytes"):
        check_reply(ProviderRequest(op_id="e", op="expand", handle="v7", size_bytes=9), reply_ok("e"))
    with pytest.raises(ContractError, match="lacks capabilities"):
        check_reply(ProviderRequest(op_id="c", op="capabilities"), reply_ok("c"))


# ---------------------------------------------------------------------------
# Reply documents


def test_decode_reply_document():
    raw = json.dumps(reply_document([FULL_OK, reply_error("op-9", "X", "m", True)])).encode()
    entries = decode_reply_document(raw)
    assert [ProviderReply.from_json(e) for e in entries] == [FULL_OK, reply_error("op-9", "X", "m", True)]


@pytest.mark.parametrize("raw, fragment", [
    (b"", "empty"),
    (b"   \n", "empty"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"{not json", "not JSON"),
    (b'{"contract": 1, "replies": [{"op_id": "a", "ok": true, "size_bytes": NaN}]}', "not JSON"),
    (b'{"contract": 1, "contract": 1, "replies": []}', "duplicate key"),
    (b"[]", "must be an object"),
    (b'{"contract": 2, "replies": []}', "contract must be 1"),
    (b'{"contract": "1", "replies": []}', "contract must be 1"),
    (b'{"contract": true, "replies": []}', "contract must be 1"),
    (b'{"contract": 1, "replies": {}}', "replies must be a list"),
    (b'{"contract": 1}', "replies must be a list"),
    (b'{"contract": 1, "replies": [], "debug": 1}', "unexpected fields debug"),
    (b'{"contract": 1, "replies": [{"ok": true}]}', r"replies\[0\]"),
    (b'{"contract": 1, "replies": ["op-1"]}', r"replies\[0\]"),
])
def test_decode_reply_document_refuses(raw, fragment):
    with pytest.raises(ContractError, match=fragment):
        decode_reply_document(raw)


def test_package_exports_are_lazy_but_complete():
    import xce.providers as p

    for name in p.__all__:
        assert getattr(p, name) is not None
    with pytest.raises(AttributeError):
        p.no_such_name  # noqa: B018
    assert OPS[0] == "create" and len(OPS) == 13


def test_simfs_imports_no_xce_module_but_the_package():
    """simfs is spawned per batch: importing it must not pull in the rest of XCE (or pydantic); the
    helpers XCE's providers share (``kit``, stdlib only) are all it takes."""
    code = ("import json, sys, xce.providers.simfs; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('xce', 'pydantic', 'fastapi')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["xce", "xce.providers", "xce.providers.kit", "xce.providers.simfs"]


def test_btrfs_imports_no_xce_module_but_the_package():
    """Like simfs, the btrfs provider is spawned per batch and speaks the contract from its text."""
    code = ("import json, sys, xce.providers.btrfs; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('xce', 'pydantic', 'fastapi')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["xce", "xce.providers", "xce.providers.btrfs", "xce.providers.kit"]


# ---------------------------------------------------------------------------
# The schema


SCHEMA = json.loads(SCHEMA_PATH.read_text())


@pytest.fixture(scope="module")
def schema():
    """Validators for the two documents (jsonschema_rs comes with schemathesis, a test dependency)."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    body = {k: v for k, v in SCHEMA.items() if k != "oneOf"}

    class Validators:
        meta = jsonschema_rs.meta
        request = jsonschema_rs.Draft202012Validator({**body, "$ref": "#/$defs/requestDocument"})
        reply = jsonschema_rs.Draft202012Validator({**body, "$ref": "#/$defs/replyDocument"})

    return Validators


def errors(v, instance) -> list[str]:
    return [f"{list(e.instance_path)}: {e.message}" for e in v.iter_errors(instance)]


def test_schema_is_a_valid_draft_2020_12_schema(schema):
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema.meta.is_valid(SCHEMA)
    assert {"requestDocument", "replyDocument"} <= set(SCHEMA["$defs"])


def test_docs_hold_the_worked_example():
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", DOCS.read_text(), re.S)]
    assert blocks == [EXAMPLE_REQUEST, EXAMPLE_REPLY]


def test_worked_example_is_valid_against_schema_and_contract(schema):
    assert errors(schema.request, EXAMPLE_REQUEST) == []
    assert errors(schema.reply, EXAMPLE_REPLY) == []
    reqs = [ProviderRequest.from_json(r) for r in EXAMPLE_REQUEST["requests"]]
    assert encode_request_document(EXAMPLE_REQUEST["cluster_id"], EXAMPLE_REQUEST["config"], reqs) == \
        json.dumps(EXAMPLE_REQUEST, separators=(",", ":")).encode()
    replies = [ProviderReply.from_json(e) for e in decode_reply_document(json.dumps(EXAMPLE_REPLY))]
    for req, rep in zip(reqs, replies):
        check_reply(req, rep)
    assert reply_document(replies) == EXAMPLE_REPLY


def test_worked_example_is_what_simfs_answers(tmp_path):
    root = tmp_path / "simfs"
    root.mkdir()
    doc = json.loads(json.dumps(EXAMPLE_REQUEST))
    doc["config"]["root"] = str(root)
    out = subprocess.run(simfs.command(), input=json.dumps(doc), capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace(str(root), "/srv/simfs")) == EXAMPLE_REPLY


def test_every_request_the_contract_builds_is_valid_against_schema(schema):
    reqs = [
        create_request(size_bytes=5, access_mode="RWX", params={"a": "b"}),
        ProviderRequest(op_id="a", op="attach", handle="v1", host="h1"),
        ProviderRequest(op_id="d", op="detach", handle="v1", host="h1"),
        ProviderRequest(op_id="r", op="release", handle="v1"),
        ProviderRequest(op_id="r2", op="release", handle="v1", host="h1"),
        ProviderRequest(op_id="h", op="health"),
        ProviderRequest(op_id="l", op="list"),
        ProviderRequest(op_id="np", op="node_prepare", claim_id=3, host="h1", tags=owner_tags("c1", 3, "np")),
        ProviderRequest(op_id="np2", op="node_prepare", handle="n1", host="h1", tags=owner_tags("c1", 3, "np2")),
        ProviderRequest(op_id="pub", op="node_publish", handle="n1", host="h1", target_path="/x/y", readonly=True),
        ProviderRequest(op_id="unp", op="node_unpublish", handle="n1", host="h1"),
        create_request("clone", 8, size_bytes=5, source_handle="s1"),
        ProviderRequest(op_id="cs", op="create_snapshot", claim_id=3, handle="v1", tags=owner_tags("c1", 3, "cs")),
        ProviderRequest(op_id="ds", op="delete_snapshot", handle="s1"),
        ProviderRequest(op_id="ex", op="expand", handle="v1", size_bytes=10),
        ProviderRequest(op_id="cap", op="capabilities"),
    ]
    assert {r.op for r in reqs} == set(OPS)
    assert errors(schema.request, json.loads(encode_request_document("c1", {"k": "v"}, reqs))) == []


@pytest.mark.parametrize("mutate", [
    lambda r: r.update(op="mount"),
    lambda r: r.update(size_bytes=-1),
    lambda r: r.update(access_mode="rw"),
    lambda r: r.pop("readonly"),
    lambda r: r.update(extra=1),
    lambda r: r["tags"].pop("xce.op"),
    lambda r: r.update(claim_id=None),
    lambda r: r.update(op="attach"),  # attach without handle/host
    lambda r: r.update(target_path="relative"),
    lambda r: r.update(source_handle=""),
    lambda r: r.update(op="create_snapshot", handle=None),
    lambda r: r.update(op="expand", handle="v1", size_bytes=0),
])
def test_schema_refuses_malformed_requests(schema, mutate):
    doc = json.loads(encode_request_document("c1", {}, [create_request()]))
    mutate(doc["requests"][0])
    assert errors(schema.request, doc) != []


def test_schema_and_from_json_agree_on_replies(schema):
    good = [FULL_OK.to_json(), reply_ok("x").to_json(), reply_error("e", "X_1", "m", False).to_json()]
    assert errors(schema.reply, {"contract": 1, "replies": good}) == []
    for fragment, wire in MALFORMED_REPLIES:
        try:
            json.dumps(wire, allow_nan=False)
        except ValueError:
            continue  # NaN cannot be written in JSON: only from_json sees it
        if wire is SIZE_AS_FLOAT:
            continue
        assert errors(schema.reply, {"contract": 1, "replies": [wire]}) != [], fragment


def test_real_simfs_replies_are_valid_against_schema(schema, tmp_path):
    """Every op simfs answers, ok and error, through a real simfs process."""
    root = tmp_path / "simfs"
    root.mkdir()
    t = owner_tags
    reqs = [
        create_request("c1", 1, size_bytes=100),
        ProviderRequest(op_id="a1", op="attach", handle=simfs.derive_handle(1, "c1"), host="h1"),
        ProviderRequest(op_id="a2", op="attach", handle=simfs.derive_handle(1, "c1"), host="h9"),
        ProviderRequest(op_id="a3", op="attach", handle="v-none", host="h1"),
        ProviderRequest(op_id="d1", op="detach", handle=simfs.derive_handle(1, "c1"), host="h1"),
        ProviderRequest(op_id="h1", op="health"),
        ProviderRequest(op_id="l1", op="list"),
        ProviderRequest(op_id="np", op="node_prepare", claim_id=2, host="h1", tags=t("c1", 2, "np")),
        ProviderRequest(op_id="pub", op="node_publish", handle=simfs.derive_handle(2, "np"), host="h1",
                        target_path="/mnt/x"),
        ProviderRequest(op_id="unp", op="node_unpublish", handle=simfs.derive_handle(2, "np"), host="h1"),
        ProviderRequest(op_id="ln", op="list", host="h1"),
        ProviderRequest(op_id="r1", op="release", handle=simfs.derive_handle(1, "c1")),
        ProviderRequest(op_id="r2", op="release", handle="../../etc"),
        create_request("c2", 3, size_bytes=10**9),
    ]
    config = {"root": str(root), "capacity_bytes": 1000, "reachable_hosts": ["h1"], "host_labels": {"fs": "sim"}}
    out = subprocess.run(simfs.command(), input=encode_request_document("c1", config, reqs),
                         capture_output=True, check=True).stdout
    doc = json.loads(out)
    assert errors(schema.reply, doc) == []
    replies = {e["op_id"]: ProviderReply.from_json(e) for e in decode_reply_document(out)}
    for req in reqs:
        check_reply(req, replies[req.op_id])
    assert [replies[r.op_id].ok for r in reqs] == [True, True, False, False, True, True, True, True, True, True,
                                                  True, True, False, False]
    assert {r.error_code for r in replies.values() if not r.ok} == {
        "NOT_REACHABLE", "NOT_FOUND", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}


def test_simfs_capabilities(schema, tmp_path):
    """simfs says it can do all of it: expand (online), snapshot and clone (copies: it is a simulator)."""
    root = tmp_path / "simfs"
    root.mkdir()
    reqs = [ProviderRequest(op_id="cap", op="capabilities"),
            ProviderRequest(op_id="ex", op="expand", handle="v1", size_bytes=10)]
    out = subprocess.run(simfs.command(), input=encode_request_document("c1", {"root": str(root)}, reqs),
                         capture_output=True, check=True).stdout
    assert errors(schema.reply, json.loads(out)) == []
    replies = {e["op_id"]: ProviderReply.from_json(e) for e in decode_reply_document(out)}
    for req in reqs:
        check_reply(req, replies[req.op_id])
    cap = replies["cap"].capabilities
    assert {f: cap[f] for f in CAPABILITY_FLAGS} == dict.fromkeys(CAPABILITY_FLAGS, True)
    assert cap["access_modes"] == ["RWO", "ROX", "RWX", "RWOP"]
    assert (replies["ex"].error_code, replies["ex"].retryable) == ("NOT_FOUND", False)  # no volume v1


@pytest.fixture(params=["simfs", "btrfs"])
def snapshotting(request, tmp_path):
    """(run, root) of a provider that can snapshot and clone: simfs, and btrfs on a loop-file
    filesystem (root only)."""
    if request.param == "simfs":
        root = tmp_path / "simfs"
        root.mkdir()
        yield (lambda *reqs: run_provider(simfs.command(), {"root": str(root)}, "c1", list(reqs), 60.0)), root
        return
    import os

    if os.geteuid() != 0:
        pytest.skip("btrfs needs root to mount a loop-file filesystem")
    from xce.providers import btrfs
    from tests.providers.test_btrfs import loop_btrfs

    with loop_btrfs(tmp_path) as mnt:
        root = mnt / "xce"
        root.mkdir()
        yield (lambda *reqs: run_provider(btrfs.command(), {"root": str(root)}, "c1", list(reqs), 60.0)), root


def test_snapshots_and_clones_through_the_contract(snapshotting, schema):
    """create_snapshot keeps the volume's content of that moment; create with a source_handle starts
    from a snapshot's or a volume's content; each is idempotent by op_id; list says which is which;
    delete_snapshot deletes snapshots only, and again is ok."""
    run, root = snapshotting

    def one(req: ProviderRequest) -> ProviderReply:
        [reply] = run(req)
        check_reply(req, reply)
        return reply

    def ok(req: ProviderRequest) -> ProviderReply:
        reply = one(req)
        assert reply.ok, (reply.error_code, reply.message, reply.stderr_tail)
        return reply

    size = 8 << 20
    vol = ok(create_request("c1", 1, size_bytes=size))
    (Path(vol.path) / "a").write_text("one")
    snap_req = ProviderRequest(op_id="s1", op="create_snapshot", claim_id=1, handle=vol.handle,
                               tags=owner_tags("c1", 1, "s1", **{"xce.snapshot": "5"}))
    snap = ok(snap_req)
    assert snap.handle != vol.handle and snap.size_bytes >= size
    assert ok(snap_req).handle == snap.handle, "the same op_id answers the same snapshot"
    (Path(vol.path) / "a").write_text("two")
    clone_req = create_request("c2", 2, size_bytes=size, source_handle=snap.handle)
    clone = ok(clone_req)
    assert (Path(clone.path) / "a").read_text() == "one", "a clone of the snapshot has the snapshot's content"
    assert ok(clone_req).handle == clone.handle
    (Path(clone.path) / "a").write_text("three")  # writable, and apart from its source
    assert (Path(vol.path) / "a").read_text() == "two"
    of_volume = ok(create_request("c3", 3, size_bytes=size, source_handle=vol.handle))
    assert (Path(of_volume.path) / "a").read_text() == "two"
    small = one(create_request("c4", 4, size_bytes=size // 2, source_handle=snap.handle))
    assert (small.ok, small.error_code, small.retryable) == (False, "INVALID_ARGUMENT", False)
    missing = one(create_request("c5", 5, size_bytes=size, source_handle="s9-0000000000"))
    assert (missing.ok, missing.error_code, missing.retryable) == (False, "NOT_FOUND", False)
    listed = {o["handle"]: o for o in ok(ProviderRequest(op_id="ls", op="list")).objects}
    assert listed[snap.handle]["kind"] == "snapshot" and listed[snap.handle]["source_handle"] == vol.handle
    assert listed[snap.handle]["tags"]["xce.snapshot"] == "5"
    assert listed[vol.handle].get("kind", "volume") == "volume"
    assert listed[clone.handle]["source_handle"] == snap.handle
    refused = one(ProviderRequest(op_id="d0", op="delete_snapshot", handle=vol.handle))
    assert (refused.ok, refused.error_code, refused.retryable) == (False, "INVALID_ARGUMENT", False)
    ok(ProviderRequest(op_id="r1", op="release", handle=vol.handle))  # a volume with snapshots may go
    assert (Path(clone.path) / "a").read_text() == "three"
    for _ in range(2):
        ok(ProviderRequest(op_id="d1", op="delete_snapshot", handle=snap.handle))
    listed = {o["handle"] for o in ok(ProviderRequest(op_id="ls2", op="list")).objects}
    assert snap.handle not in listed and vol.handle not in listed and clone.handle in listed


def test_simfs_faults_apply_to_snapshots(tmp_path):
    """A create_snapshot that acted and crashed is found again by its op_id: one snapshot, not two."""
    root = tmp_path / "simfs"
    root.mkdir()

    def run(*reqs):
        return run_provider(simfs.command(), {"root": str(root)}, "c1", list(reqs), 60.0)

    [vol] = run(create_request("c1", 1, size_bytes=100))
    simfs.inject(str(root), crash_after_act_next=1, fail_ops=["create_snapshot"])
    req = ProviderRequest(op_id="s1", op="create_snapshot", claim_id=1, handle=vol.handle,
                          tags=owner_tags("c1", 1, "s1"))
    [crashed] = run(req)
    assert (crashed.ok, crashed.error_code) == (False, "PROVIDER_FAILED")
    [again] = run(req)
    assert again.ok and len(list((root / "snapshots").iterdir())) == 1
    simfs.inject(str(root), fail_next=1, fail_code="UNAVAILABLE", fail_ops=["delete_snapshot"])
    [failed] = run(ProviderRequest(op_id="d1", op="delete_snapshot", handle=again.handle))
    assert (failed.ok, failed.error_code, failed.retryable) == (False, "UNAVAILABLE", True)


def test_schema_lists_the_contracts_ops_and_capabilities():
    assert SCHEMA["$defs"]["op"]["enum"] == list(OPS)
    assert set(SCHEMA["$defs"]["capabilities"]["required"]) == {*CAPABILITY_FLAGS, "access_modes"}


# ---------------------------------------------------------------------------
# expand: one behaviour, every provider that says it can (simfs always; btrfs as root, on a loop file)


@pytest.fixture(scope="module", params=["simfs", "btrfs"])
def expanding(request, tmp_path_factory):
    """(command, config) of a provider whose capabilities say expand, with a fresh root."""
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "simfs":
        yield simfs.command(), {"root": str(root), "capacity_bytes": 64 << 20}
        return
    import os

    if os.geteuid() != 0:
        pytest.skip("mounting a loop-file btrfs filesystem needs root (CI runs these tests as root)")
    from tests.providers.test_btrfs import loop_btrfs
    from xce.providers import btrfs

    with loop_btrfs(root) as mnt:
        yield btrfs.command(), {"root": str(mnt)}


def test_expand_grows_refuses_to_shrink_and_is_idempotent_by_op_id(expanding, schema):
    from xce.providers import run_provider

    command, config = expanding
    MiB = 1 << 20

    def call(*reqs: ProviderRequest) -> list[ProviderReply]:
        replies = run_provider(command, config, "c1", list(reqs), 60.0)
        for req, reply in zip(reqs, replies):
            check_reply(req, reply)
        return replies

    def ex(op_id: str, handle: str, size: int) -> ProviderRequest:
        return ProviderRequest(op_id=op_id, op="expand", handle=handle, size_bytes=size)

    [cap] = call(ProviderRequest(op_id="cap", op="capabilities"))
    assert cap.capabilities["expand"] is True
    [vol] = call(create_request("c-ex", 41, size_bytes=8 * MiB))
    assert vol.ok and vol.size_bytes == 8 * MiB
    grown, same, shrink, missing = call(ex("ex-1", vol.handle, 12 * MiB), ex("ex-same", vol.handle, 12 * MiB),
                                        ex("ex-shrink", vol.handle, 4 * MiB), ex("ex-none", "v99-0000000000", 20 * MiB))
    assert (grown.ok, grown.size_bytes, grown.handle) == (True, 12 * MiB, vol.handle)
    assert isinstance(grown.used_bytes, int) and grown.used_bytes >= 0
    assert (same.ok, same.size_bytes) == (True, 12 * MiB), "the current size is a no-op success"
    assert (shrink.ok, shrink.error_code, shrink.retryable) == (False, "INVALID_ARGUMENT", False)
    assert (missing.ok, missing.error_code, missing.retryable) == (False, "NOT_FOUND", False)
    [later] = call(ex("ex-2", vol.handle, 20 * MiB))
    [again] = call(ex("ex-1", vol.handle, 12 * MiB))  # ex-1 re-driven after ex-2: ok, nothing shrinks
    assert (later.size_bytes, again.ok, again.size_bytes) == (20 * MiB, True, 20 * MiB)
    [listing] = call(ProviderRequest(op_id="l", op="list"))
    assert {o["handle"]: o["size_bytes"] for o in listing.objects}[vol.handle] == 20 * MiB
    call(ProviderRequest(op_id="r", op="release", handle=vol.handle))


def test_simfs_expand_stays_within_its_capacity_and_injected_faults_apply(tmp_path):
    from xce.providers import run_provider

    root = tmp_path / "simfs"
    root.mkdir()
    config = {"root": str(root), "capacity_bytes": 100}
    [vol] = run_provider(simfs.command(), config, "c1", [create_request("c1", 1, size_bytes=60)], 30)
    [full] = run_provider(simfs.command(), config, "c1", [ProviderRequest(
        op_id="ex", op="expand", handle=vol.handle, size_bytes=101)], 30)
    assert (full.error_code, full.retryable) == ("RESOURCE_EXHAUSTED", True)
    simfs.inject(str(root), fail_next=1, fail_code="UNAVAILABLE", fail_ops=["expand"])
    [failed] = run_provider(simfs.command(), config, "c1", [ProviderRequest(
        op_id="ex", op="expand", handle=vol.handle, size_bytes=90)], 30)
    assert (failed.error_code, failed.retryable) == ("UNAVAILABLE", True)
    simfs.inject(str(root), clear=True, crash_after_act_next=1, fail_ops=["expand"])
    [crashed] = run_provider(simfs.command(), config, "c1", [ProviderRequest(
        op_id="ex", op="expand", handle=vol.handle, size_bytes=90)], 30)
    assert not crashed.ok  # acted, never answered
    [health] = run_provider(simfs.command(), config, "c1", [ProviderRequest(op_id="h", op="health")], 30)
    assert (health.capacity_bytes, health.available_bytes) == (100, 10), "the crashed expand had acted"
    [retry] = run_provider(simfs.command(), config, "c1", [ProviderRequest(
        op_id="ex", op="expand", handle=vol.handle, size_bytes=90)], 30)
    assert (retry.ok, retry.size_bytes) == (True, 90)
