"""The storage provider contract: what XCE sends a provider and what it must answer.

Pure data and validation, no I/O.  ``docs/providers.md`` is the text for
provider authors, ``docs/provider-contract.schema.json`` the schema; this
module is their executable form.

A provider is an executable.  It reads one *request document* on stdin::

    {"contract": 1, "cluster_id": "...", "config": {...private...},
     "requests": [ProviderRequest.to_json(), ...]}

and writes one *reply document* on stdout::

    {"contract": 1, "replies": [ProviderReply.to_json(), ...]}

Each request in a batch succeeds or fails on its own.  Providers are
idempotent by ``op_id``: a request seen again returns the first one's result
and never makes a second object.

Errors: everything malformed raises ``ContractError``, the only exception
defined here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Iterable

from xce.errors import XceError

CONTRACT_VERSION = 1

OPS = ("create", "attach", "detach", "release", "health", "list",
       "node_prepare", "node_publish", "node_unpublish",
       "create_snapshot", "delete_snapshot", "expand", "capabilities")

# What a provider says it can do (the ``capabilities`` op).  A provider that
# answers ``capabilities`` with UNSUPPORTED (one written before the op
# existed) can do none of the flags; callers refuse those operations for its
# classes rather than send them.
CAPABILITY_FLAGS = ("create_snapshot", "clone", "expand", "online_expand")
OBJECT_KINDS = ("volume", "snapshot")

ACCESS_MODES = ("RWO", "ROX", "RWX", "RWOP")

# Owner tags the caller puts on every request that makes an object (and that
# the provider stores on it): who owns it, for orphan scans.
TAG_CLUSTER = "xce.cluster"
TAG_CLAIM = "xce.claim"
TAG_OP = "xce.op"
OWNER_TAGS = (TAG_CLUSTER, TAG_CLAIM, TAG_OP)

MAX_OP_ID = 256  # characters


# ---------------------------------------------------------------------------
# Errors


class ContractError(XceError):
    """A document or value does not follow the provider contract.

    Raised by ``ProviderRequest(...)`` / ``ProviderRequest.from_json`` for a
    request the caller built wrongly (a bug in the caller), by
    ``ProviderReply.from_json`` / ``decode_reply_document`` / ``check_reply``
    for what a provider answered, and by ``run_provider`` for a batch with
    duplicate op_ids.  ``run_provider`` itself never lets one escape for
    provider output: it turns each into an error reply (``PROVIDER_GARBAGE``).
    Not raised for a well-formed error reply: that is a ``ProviderReply`` with
    ``ok=False``.
    """

    code = "provider_contract"


class ErrorCode(StrEnum):
    """Error codes with a meaning every caller knows.

    Providers may send other codes (upper-case, ``A-Z0-9_``); whether an
    error is worth retrying is always the reply's ``retryable``, never
    inferred from its code.  The comment says what the code usually is.
    """

    # sent by providers
    INVALID_ARGUMENT = "INVALID_ARGUMENT"      # permanent: this request can never succeed as written
    INVALID_CONFIG = "INVALID_CONFIG"          # retryable: the provider's configuration is wrong; fixing it helps
    NOT_FOUND = "NOT_FOUND"                    # permanent: the handle names no object
    NOT_REACHABLE = "NOT_REACHABLE"            # permanent: the host cannot reach the object
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"  # retryable: no capacity now
    UNAVAILABLE = "UNAVAILABLE"                # retryable: the backend is down or busy
    UNSUPPORTED = "UNSUPPORTED"                # permanent: this provider does not implement the op
    INTERNAL = "INTERNAL"                      # either: the provider failed in a way it did not expect
    # made by the runner when the provider misbehaves (always retryable)
    PROVIDER_SPAWN_FAILED = "PROVIDER_SPAWN_FAILED"  # the executable could not be started
    PROVIDER_FAILED = "PROVIDER_FAILED"        # exited nonzero or was killed by a signal, without a reply
    PROVIDER_TIMEOUT = "PROVIDER_TIMEOUT"      # did not finish in time; its process group was killed
    PROVIDER_GARBAGE = "PROVIDER_GARBAGE"      # wrote something that is not a valid reply (or too much)
    NO_REPLY = "NO_REPLY"                      # exited 0 with a valid document that lacks this op_id


# ---------------------------------------------------------------------------
# Requests

# Fields each op needs (beyond op_id/op); create and node_prepare also need owner tags.
REQUIRED: dict[str, tuple[str, ...]] = {
    "create": ("claim_id",),
    "attach": ("handle", "host"),
    "detach": ("handle", "host"),
    "release": ("handle",),
    "health": (),
    "list": (),
    "node_prepare": ("host",),  # and a handle, or a claim_id to derive one from
    "node_publish": ("handle", "host", "target_path"),
    "node_unpublish": ("handle", "host"),
    "create_snapshot": ("claim_id", "handle"),  # handle: the volume to snapshot
    "delete_snapshot": ("handle",),
    "expand": ("handle",),  # and size_bytes > 0: the new size
    "capabilities": (),
}
MAKES_OBJECTS = ("create", "node_prepare", "create_snapshot")
# Request fields added to contract 1 after its first text: sent only when set,
# so a provider written before them sees the documents it always saw.
OPTIONAL_WIRE_FIELDS = ("source_handle",)


@dataclass(frozen=True)
class ProviderRequest:
    """One operation for a provider.  Checked on construction: a malformed one raises ContractError."""

    op_id: str
    op: str
    claim_id: int | None = None
    claim_name: str = ""
    class_name: str = ""
    size_bytes: int = 0
    access_mode: str = ""  # "" or one of ACCESS_MODES
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)  # owner tags: xce.cluster, xce.claim, xce.op, ...
    handle: str | None = None  # the provider's object, for ops on an existing one
    host: str | None = None  # attach, detach, node_*
    target_path: str | None = None  # node_publish: where the caller will bind-mount
    readonly: bool = False
    # create: the content source (CSI VolumeContentSource), a snapshot or volume handle of the same
    # provider; the new volume starts as a copy of it.  Only a provider whose capabilities say
    # ``clone`` may be sent one.
    source_handle: str | None = None

    def __post_init__(self) -> None:
        where = f"request {self.op_id!r}" if isinstance(self.op_id, str) else "request"
        _op_id(self.op_id, where)
        if self.op not in OPS:
            raise ContractError(f"{where}: unknown op {self.op!r} (expected one of {', '.join(OPS)})")
        _opt_int(self.claim_id, f"{where}: claim_id")
        _str(self.claim_name, f"{where}: claim_name")
        _str(self.class_name, f"{where}: class_name")
        _int(self.size_bytes, f"{where}: size_bytes")
        if self.access_mode not in ("", *ACCESS_MODES):
            raise ContractError(f"{where}: access_mode must be one of {', '.join(ACCESS_MODES)}, "
                                f"got {self.access_mode!r}")
        # private copies: a frozen request must not change through a dict the caller still holds
        object.__setattr__(self, "params", _str_map(self.params, f"{where}: params"))
        object.__setattr__(self, "tags", _str_map(self.tags, f"{where}: tags"))
        for name in ("handle", "host", "target_path", "source_handle"):
            _opt_str(getattr(self, name), f"{where}: {name}", nonempty=True)
        if self.source_handle is not None and self.op != "create":
            raise ContractError(f"{where}: source_handle is only for create, not {self.op}")
        if self.target_path is not None and not self.target_path.startswith("/"):
            raise ContractError(f"{where}: target_path must be absolute, got {self.target_path!r}")
        _bool(self.readonly, f"{where}: readonly")
        for name in REQUIRED[self.op]:
            if getattr(self, name) is None:
                raise ContractError(f"{where}: {self.op} needs {name}")
        if self.op == "node_prepare" and self.handle is None and self.claim_id is None:
            raise ContractError(f"{where}: node_prepare needs a handle or a claim_id")
        if self.op == "expand" and self.size_bytes <= 0:
            raise ContractError(f"{where}: expand needs size_bytes, the new size")
        if self.op in MAKES_OBJECTS:
            missing = [t for t in OWNER_TAGS if t not in self.tags]
            if missing:
                raise ContractError(f"{where}: {self.op} needs owner tags {', '.join(missing)}")
            if self.tags[TAG_OP] != self.op_id:
                raise ContractError(f"{where}: tag {TAG_OP} is {self.tags[TAG_OP]!r}, not the op_id")
            if self.claim_id is not None and self.tags[TAG_CLAIM] != str(self.claim_id):
                raise ContractError(f"{where}: tag {TAG_CLAIM} is {self.tags[TAG_CLAIM]!r}, "
                                    f"not the claim_id {self.claim_id}")

    def to_json(self) -> dict[str, Any]:
        """The wire form: every field of contract 1's first text, always (providers can rely on each
        key being there); the fields added since (``OPTIONAL_WIRE_FIELDS``) only when they are set."""
        d = {"op_id": self.op_id, "op": self.op, "claim_id": self.claim_id,
             "claim_name": self.claim_name, "class_name": self.class_name,
             "size_bytes": self.size_bytes, "access_mode": self.access_mode,
             "params": dict(self.params), "tags": dict(self.tags), "handle": self.handle,
             "host": self.host, "target_path": self.target_path, "readonly": self.readonly}
        for name in OPTIONAL_WIRE_FIELDS:
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return d

    @classmethod
    def from_json(cls, d: Any) -> ProviderRequest:
        """Parse a wire request (for providers written in Python).  Absent keys take their defaults."""
        if not isinstance(d, dict):
            raise ContractError(f"a request must be an object, got {_kind(d)}")
        unknown = sorted(set(d) - _REQUEST_FIELDS)
        if unknown:
            raise ContractError(f"request {d.get('op_id')!r}: unknown fields {', '.join(unknown)}")
        if "op_id" not in d or "op" not in d:
            raise ContractError("a request needs op_id and op")
        return cls(**d)


_REQUEST_FIELDS = frozenset(ProviderRequest.__dataclass_fields__)


def owner_tags(cluster_id: str, claim_id: int, op_id: str, **more: str) -> dict[str, str]:
    """The owner tags every object-making request carries (plus any others)."""
    return {TAG_CLUSTER: cluster_id, TAG_CLAIM: str(claim_id), TAG_OP: op_id, **more}


# ---------------------------------------------------------------------------
# Replies

_OK_FIELDS = frozenset({"op_id", "ok", "handle", "size_bytes", "reachable_hosts", "host_labels",
                        "path", "objects", "healthy", "message",
                        "used_bytes", "capacity_bytes", "available_bytes", "capabilities"})
_ERROR_FIELDS = frozenset({"op_id", "ok", "error"})
_OBJECT_FIELDS = frozenset({"handle", "tags", "size_bytes", "created"})
# optional on a listed object; kept only when the provider sent them
_OBJECT_OPTIONAL_FIELDS = frozenset({"used_bytes", "kind", "source_handle"})
# the ok-reply fields that are null (absent on the wire) unless an op answers them
_VALUE_FIELDS = ("handle", "size_bytes", "reachable_hosts", "path", "objects", "healthy",
                 "used_bytes", "capacity_bytes", "available_bytes", "capabilities")


@dataclass(frozen=True)
class ProviderReply:
    """The outcome of one request.  ``ok=False`` carries ``error_code``, ``message`` and ``retryable``.

    ``stderr_tail`` is not part of the wire: the runner fills it on error
    replies with the last ~2 KiB the provider wrote on stderr.
    """

    op_id: str
    ok: bool
    handle: str | None = None
    size_bytes: int | None = None  # actual provisioned size
    reachable_hosts: list[str] | None = None  # hosts that can reach the object; None = all
    host_labels: dict[str, str] = field(default_factory=dict)  # labels a host needs to reach it
    path: str | None = None  # where the data is on the host (attach, node_prepare, node_publish)
    objects: list[dict[str, Any]] | None = None  # list: {"handle", "tags", "size_bytes", "created"}
    healthy: bool | None = None  # health
    message: str = ""
    used_bytes: int | None = None  # create, create_snapshot, expand: bytes the object's data takes now
    capacity_bytes: int | None = None  # health: the backend's total size (CSI GetCapacity)
    available_bytes: int | None = None  # health: what is free on it now
    capabilities: dict[str, Any] | None = None  # capabilities: CAPABILITY_FLAGS as booleans, access_modes
    error_code: str = ""
    retryable: bool = False
    stderr_tail: str = ""

    def __post_init__(self) -> None:
        where = f"reply {self.op_id!r}" if isinstance(self.op_id, str) else "reply"
        _op_id(self.op_id, where)
        _bool(self.ok, f"{where}: ok")
        _opt_str(self.handle, f"{where}: handle", nonempty=True)
        _opt_int(self.size_bytes, f"{where}: size_bytes")
        if self.reachable_hosts is not None:
            object.__setattr__(self, "reachable_hosts", _str_list(self.reachable_hosts,
                                                                  f"{where}: reachable_hosts"))
        object.__setattr__(self, "host_labels", _str_map(self.host_labels, f"{where}: host_labels"))
        _opt_str(self.path, f"{where}: path", nonempty=True)
        if self.path is not None and not self.path.startswith("/"):
            raise ContractError(f"{where}: path must be absolute, got {self.path!r}")
        if self.objects is not None:
            object.__setattr__(self, "objects", _objects(self.objects, f"{where}: objects"))
        if self.healthy is not None:
            _bool(self.healthy, f"{where}: healthy")
        for name in ("used_bytes", "capacity_bytes", "available_bytes"):
            _opt_int(getattr(self, name), f"{where}: {name}")
        if self.capabilities is not None:
            object.__setattr__(self, "capabilities", _capabilities(self.capabilities, f"{where}: capabilities"))
        _str(self.message, f"{where}: message")
        _str(self.error_code, f"{where}: error_code")
        _bool(self.retryable, f"{where}: retryable")
        _str(self.stderr_tail, f"{where}: stderr_tail")
        if self.ok:
            if self.error_code or self.retryable:
                raise ContractError(f"{where}: an ok reply has no error_code and is not retryable")
        else:
            _error_code(self.error_code, f"{where}: error code")
            if any(getattr(self, n) is not None for n in _VALUE_FIELDS) or self.host_labels:
                raise ContractError(f"{where}: an error reply carries only its error")

    def to_json(self) -> dict[str, Any]:
        """The wire form (without ``stderr_tail``); fields at their default are left out."""
        if not self.ok:
            return {"op_id": self.op_id, "ok": False,
                    "error": {"code": self.error_code, "message": self.message,
                              "retryable": self.retryable}}
        d: dict[str, Any] = {"op_id": self.op_id, "ok": True}
        for name in _VALUE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                d[name] = list(value) if isinstance(value, list) else value
        if self.host_labels:
            d["host_labels"] = dict(self.host_labels)
        if self.message:
            d["message"] = self.message
        return d

    @classmethod
    def from_json(cls, d: Any) -> ProviderReply:
        """Parse one wire reply strictly: unknown keys, wrong types and missing fields are refused.

        Unknown keys are refused rather than ignored: a misspelt
        ``reachable_hosts`` must not quietly mean "reachable from every host".
        """
        if not isinstance(d, dict):
            raise ContractError(f"a reply must be an object, got {_kind(d)}")
        op_id = d.get("op_id")
        where = f"reply {op_id!r}" if isinstance(op_id, str) else "reply"
        _op_id(op_id, where)
        ok = d.get("ok")
        if not isinstance(ok, bool):
            raise ContractError(f"{where}: ok must be true or false, got {_kind(ok)}")
        allowed = _OK_FIELDS if ok else _ERROR_FIELDS
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ContractError(f"{where}: unexpected fields {', '.join(unknown)} in an "
                                f"{'ok' if ok else 'error'} reply")
        if ok:
            if "host_labels" in d and not isinstance(d["host_labels"], dict):
                raise ContractError(f"{where}: host_labels must be an object, got {_kind(d['host_labels'])}")
            if "message" in d and not isinstance(d["message"], str):
                raise ContractError(f"{where}: message must be a string, got {_kind(d['message'])}")
            return cls(**d)
        err = d.get("error")
        if not isinstance(err, dict):
            raise ContractError(f"{where}: an error reply needs an error object, got {_kind(err)}")
        unknown = sorted(set(err) - {"code", "message", "retryable"})
        missing = sorted({"code", "message", "retryable"} - set(err))
        if unknown or missing:
            raise ContractError(f"{where}: error must have exactly code, message and retryable"
                                + (f"; missing {', '.join(missing)}" if missing else "")
                                + (f"; unexpected {', '.join(unknown)}" if unknown else ""))
        _error_code(err["code"], f"{where}: error code")
        _str(err["message"], f"{where}: error message")
        _bool(err["retryable"], f"{where}: error retryable")
        return cls(op_id=op_id, ok=False, error_code=err["code"], message=err["message"],
                   retryable=err["retryable"])


def reply_ok(op_id: str, **fields: Any) -> ProviderReply:
    """An ok reply: ``reply_ok("op-1", handle="v7-...", size_bytes=1024)``."""
    return ProviderReply(op_id=op_id, ok=True, **fields)


def reply_error(op_id: str, code: str, message: str, retryable: bool, stderr_tail: str = "") -> ProviderReply:
    """An error reply: ``reply_error("op-1", ErrorCode.NOT_FOUND, "volume v7 does not exist", False)``."""
    return ProviderReply(op_id=op_id, ok=False, error_code=str(code), message=message,
                         retryable=retryable, stderr_tail=stderr_tail)


# What an ok reply to each op must carry, beyond its op_id.
REPLY_NEEDS: dict[str, tuple[str, ...]] = {
    "create": ("handle",),
    "node_prepare": ("handle", "path"),
    "node_publish": ("path",),
    "health": ("healthy",),
    "list": ("objects",),
    "create_snapshot": ("handle", "size_bytes"),
    "expand": ("size_bytes",),
    "capabilities": ("capabilities",),
}


def check_reply(request: ProviderRequest, reply: ProviderReply) -> None:
    """Refuse an ok reply that lacks what its op must answer (a create without a handle would leak)."""
    if reply.op_id != request.op_id:
        raise ContractError(f"reply {reply.op_id!r} answers a different request ({request.op_id!r})")
    if not reply.ok:
        return
    missing = [n for n in REPLY_NEEDS.get(request.op, ()) if getattr(reply, n) is None]
    if missing:
        raise ContractError(f"ok reply to {request.op} {request.op_id!r} lacks {', '.join(missing)}")


# ---------------------------------------------------------------------------
# Documents


def request_document(cluster_id: str, config: dict[str, Any],
                     requests: Iterable[ProviderRequest]) -> dict[str, Any]:
    """The request document for a batch; ``config`` is the provider's private configuration."""
    if not isinstance(cluster_id, str) or not cluster_id:
        raise ContractError(f"cluster_id must be a non-empty string, got {_kind(cluster_id)}")
    if not isinstance(config, dict):
        raise ContractError(f"config must be an object, got {_kind(config)}")
    reqs = list(requests)
    if not reqs:
        raise ContractError("a request document carries at least one request")
    seen: set[str] = set()
    for r in reqs:
        if not isinstance(r, ProviderRequest):
            raise ContractError(f"requests must be ProviderRequest, got {_kind(r)}")
        if r.op_id in seen:
            raise ContractError(f"op_id {r.op_id!r} appears twice in one batch")
        seen.add(r.op_id)
    return {"contract": CONTRACT_VERSION, "cluster_id": cluster_id, "config": config,
            "requests": [r.to_json() for r in reqs]}


def encode_request_document(cluster_id: str, config: dict[str, Any],
                            requests: Iterable[ProviderRequest]) -> bytes:
    return json.dumps(request_document(cluster_id, config, requests), allow_nan=False,
                      separators=(",", ":")).encode()


def reply_document(replies: Iterable[ProviderReply]) -> dict[str, Any]:
    return {"contract": CONTRACT_VERSION, "replies": [r.to_json() for r in replies]}


def decode_reply_document(raw: bytes | str) -> list[dict[str, Any]]:
    """The reply entries of a reply document, each an object with a string op_id.

    Refuses (ContractError) what is wrong with the document as a whole: not
    UTF-8, not JSON (NaN, Infinity and duplicate keys included), a wrong
    contract version, no replies list, an entry that is not an object with an
    op_id.  Each entry's own content is checked by ``ProviderReply.from_json``,
    so one malformed reply does not spoil the others.
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ContractError(f"output is not UTF-8 ({e.reason} at byte {e.start})") from None
    if not raw.strip():
        raise ContractError("output is empty")
    try:
        doc = json.loads(raw, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except ValueError as e:
        raise ContractError(f"output is not JSON: {_first_line(str(e))}") from None
    if not isinstance(doc, dict):
        raise ContractError(f"the reply document must be an object, got {_kind(doc)}")
    unknown = sorted(set(doc) - {"contract", "replies"})
    if unknown:
        raise ContractError(f"unexpected fields {', '.join(unknown)} in the reply document")
    contract = doc.get("contract")
    if type(contract) is not int or contract != CONTRACT_VERSION:
        raise ContractError(f"contract must be {CONTRACT_VERSION}, got {contract!r}")
    replies = doc.get("replies")
    if not isinstance(replies, list):
        raise ContractError(f"replies must be a list, got {_kind(replies)}")
    for i, entry in enumerate(replies):
        if not isinstance(entry, dict) or not isinstance(entry.get("op_id"), str):
            raise ContractError(f"replies[{i}] is not an object with a string op_id")
    return replies


# ---------------------------------------------------------------------------
# Checks (each raises ContractError naming ``where``)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        keys = [k for k, _ in pairs]
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate key {dup!r}")
    return d


def _op_id(value: Any, where: str) -> None:
    if not isinstance(value, str) or not value:
        raise ContractError(f"{where}: op_id must be a non-empty string, got {_kind(value)}")
    if len(value) > MAX_OP_ID or not value.isprintable():
        raise ContractError(f"{where}: op_id must be printable and at most {MAX_OP_ID} characters")


def _error_code(value: Any, where: str) -> None:
    if not isinstance(value, str) or not value or not value[0].isascii() or not value[0].isupper() \
            or any(not (c.isascii() and (c.isupper() or c.isdigit() or c == "_")) for c in value):
        raise ContractError(f"{where} must be UPPER_SNAKE_CASE, got {_kind(value)}")


def _str(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise ContractError(f"{where} must be a string, got {_kind(value)}")


def _opt_str(value: Any, where: str, nonempty: bool = False) -> None:
    if value is None:
        return
    _str(value, where)
    if nonempty and not value:
        raise ContractError(f"{where} must not be empty (use null)")


def _bool(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        raise ContractError(f"{where} must be true or false, got {_kind(value)}")


def _int(value: Any, where: str) -> None:
    if type(value) is not int or value < 0:
        raise ContractError(f"{where} must be a non-negative integer, got {_kind(value)}")


def _opt_int(value: Any, where: str) -> None:
    if value is not None:
        _int(value, where)


def _str_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ContractError(f"{where} must be an object, got {_kind(value)}")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ContractError(f"{where} must map strings to strings; {k!r} maps to {_kind(v)}")
    return dict(value)


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ContractError(f"{where} must be a list of non-empty strings or null, got {_kind(value)}")
    return list(value)


def _objects(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ContractError(f"{where} must be a list or null, got {_kind(value)}")
    out = []
    for i, o in enumerate(value):
        w = f"{where}[{i}]"
        if not isinstance(o, dict):
            raise ContractError(f"{w} must be an object, got {_kind(o)}")
        unknown = sorted(set(o) - _OBJECT_FIELDS - _OBJECT_OPTIONAL_FIELDS)
        if unknown:
            raise ContractError(f"{w}: unexpected fields {', '.join(unknown)}")
        _opt_str(o.get("handle"), f"{w}: handle", nonempty=True)
        if o.get("handle") is None:
            raise ContractError(f"{w} needs a handle")
        if "tags" not in o:
            raise ContractError(f"{w} needs tags")
        tags = _str_map(o["tags"], f"{w}: tags")
        _opt_int(o.get("size_bytes"), f"{w}: size_bytes")
        created = o.get("created")
        if created is not None and (isinstance(created, bool) or not isinstance(created, (int, float))
                                    or not math.isfinite(created)):
            raise ContractError(f"{w}: created must be a number (unix seconds) or null, got {_kind(created)}")
        item = {"handle": o["handle"], "tags": tags, "size_bytes": o.get("size_bytes"), "created": created}
        if "used_bytes" in o:
            _opt_int(o["used_bytes"], f"{w}: used_bytes")
            item["used_bytes"] = o["used_bytes"]
        if "kind" in o:
            if o["kind"] not in OBJECT_KINDS:
                raise ContractError(f"{w}: kind must be one of {', '.join(OBJECT_KINDS)}, got {_kind(o['kind'])}")
            item["kind"] = o["kind"]
        if "source_handle" in o:
            _opt_str(o["source_handle"], f"{w}: source_handle", nonempty=True)
            item["source_handle"] = o["source_handle"]
        out.append(item)
    return out


def _capabilities(value: Any, where: str) -> dict[str, Any]:
    """Exactly the CAPABILITY_FLAGS as booleans and ``access_modes`` (a list of ACCESS_MODES)."""
    if not isinstance(value, dict):
        raise ContractError(f"{where} must be an object, got {_kind(value)}")
    expected = {*CAPABILITY_FLAGS, "access_modes"}
    unknown, missing = sorted(set(value) - expected), sorted(expected - set(value))
    if unknown or missing:
        raise ContractError(f"{where} must have exactly {', '.join(sorted(expected))}"
                            + (f"; missing {', '.join(missing)}" if missing else "")
                            + (f"; unexpected {', '.join(unknown)}" if unknown else ""))
    for flag in CAPABILITY_FLAGS:
        _bool(value[flag], f"{where}: {flag}")
    modes = value["access_modes"]
    if not isinstance(modes, list) or not all(m in ACCESS_MODES for m in modes):
        raise ContractError(f"{where}: access_modes must be a list of {', '.join(ACCESS_MODES)}, got {_kind(modes)}")
    return {**{f: value[f] for f in CAPABILITY_FLAGS}, "access_modes": list(modes)}
