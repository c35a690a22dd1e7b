"""Snapshot + replay of the tail == the live model, for random fact sequences of every type."""

from __future__ import annotations

import dataclasses
import json
import types
import typing

from hypothesis import given, settings
from hypothesis import strategies as st

from xce.model import Model, decode, encode
from xce.model.transitions import ImpossibleTransition
from xce.model.facts import (
    AttachmentAdded, AttachmentRemoved, ClaimCreated, ClaimDeleteRequested, ClaimOpFailed, ClaimOpIntent,
    ClaimOpSucceeded, ClaimPlaced, ClaimPurgeRequested, ClaimResizeRequested, ClaimResizeReserved,
    ClassCapabilitiesReported, Fact, HostRegistered, HostStateChanged, JobAllocated, JobFinished, JobModified,
    JobProcessEnded, JobRequeued, JobSubmitted, OrphanSeen, REGISTRY, RecordsRetired, SnapshotCreated,
    SnapshotDeleteRequested, SnapshotOpFailed,
    SnapshotOpIntent, SnapshotOpSucceeded, UserDefined,
)
from xce.model.hosts import HostState
from xce.model.identity import Role
from xce.model.fold import FOLDS

NAMES = st.sampled_from(["a", "b", "default", "gpu", "x-1"])
SCALARS: dict[type, st.SearchStrategy] = {
    str: st.one_of(NAMES, st.text(max_size=8)),
    int: st.integers(min_value=-3, max_value=50),
    float: st.floats(min_value=0, max_value=2e9, allow_nan=False),
    bool: st.booleans(),
}


def strategy_for(tp) -> st.SearchStrategy:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy_for(a) for a in typing.get_args(tp)))
    if tp is type(None):
        return st.none()
    if origin is list:
        return st.lists(strategy_for(typing.get_args(tp)[0]), max_size=3)
    if origin is dict:
        key, value = typing.get_args(tp)
        return st.dictionaries(strategy_for(key), strategy_for(value), max_size=3)
    if tp in SCALARS:
        return SCALARS[tp]
    raise AssertionError(f"no strategy for field type {tp!r}: extend tests/model/test_snapshot_property.py")


# fields whose values come from a closed set in every fact the controller writes
DOMAIN: dict[tuple[type, str], st.SearchStrategy] = {
    (UserDefined, "role"): st.sampled_from([r.value for r in Role]),
    (HostStateChanged, "state"): st.sampled_from([s.value for s in HostState]),
    (JobFinished, "state"): st.sampled_from(["DONE", "EXIT"]),
    (JobSubmitted, "array_indices"): st.lists(st.integers(1, 5), max_size=3, unique=True),
    # a dependency as resolved at submission: conditions on a few job ids, and and/or/not of them
    (JobSubmitted, "dependency_tree"): st.one_of(st.none(), st.recursive(
        st.builds(lambda func, ids, value: ["cond", func, {"jobs": ids, "label": "x"},
                                            "==" if value is not None else None, value],
                  st.sampled_from(["done", "ended", "exit", "started", "post_done", "numdone", "numexit"]),
                  st.lists(st.integers(1, 6), min_size=1, max_size=3),
                  st.sampled_from([None, 0, 1, "*"])).map(
            lambda t: t if t[1].startswith("num") == (t[4] is not None) else [*t[:3], None, None] if
            not t[1].startswith("num") else [*t[:3], None, "*"]),
        lambda inner: st.one_of(st.builds(lambda items: ["and", items], st.lists(inner, min_size=2, max_size=3)),
                                st.builds(lambda items: ["or", items], st.lists(inner, min_size=2, max_size=3)),
                                st.builds(lambda item: ["not", item], inner)),
        max_leaves=4)),
    (JobSubmitted, "array_limit"): st.one_of(st.none(), st.integers(1, 3)),
    # xce mod: new values of waiting jobs (a dependency comes with its resolved tree)
    (JobModified, "changes"): st.fixed_dictionaries({}, optional={
        "queue": NAMES, "slots": st.integers(1, 4), "user_priority": st.integers(1, 9), "name": NAMES,
        "run_limit": st.sampled_from([None, 60.0]), "array_limit": st.integers(1, 3),
        "dependency": st.just("done(1)"), "dependency_tree": st.just(["cond", "done", {"jobs": [1], "label": "1"},
                                                                      None, None]),
        "resreq": st.sampled_from(["", "select[gpu]"])}),
    (ClaimCreated, "form"): st.sampled_from(["standalone", "template"]),
    (ClaimCreated, "scope"): st.sampled_from(["shared", "node"]),
    (ClaimCreated, "access_mode"): st.sampled_from(["RWO", "ROX", "RWX", "RWOP"]),
    (ClaimCreated, "reclaim_policy"): st.sampled_from(["delete", "retain"]),
}
# claim facts refer to a few claims and their real op ids, so that sequences exercise the lifecycle
CLAIM_IDS = st.integers(1, 3)
OP_IDS = st.sampled_from([f"c{c}.{op}.{n}" for c in (1, 2, 3) for op in ("create", "release", "expand")
                          for n in (1, 2)])
for cls in (ClaimCreated, ClaimPlaced, ClaimOpIntent, ClaimOpSucceeded, ClaimOpFailed,
            ClaimDeleteRequested, ClaimPurgeRequested, AttachmentAdded, AttachmentRemoved,
            ClaimResizeRequested, ClaimResizeReserved):
    DOMAIN[(cls, "claim_id")] = CLAIM_IDS
for cls in (ClaimOpIntent, ClaimOpSucceeded, ClaimOpFailed):
    DOMAIN[(cls, "op_id")] = OP_IDS
DOMAIN[(AttachmentRemoved, "attachment_id")] = st.integers(1, 3)
for cls in (ClaimResizeRequested, ClaimResizeReserved):  # the sizes a request and its reservation share
    DOMAIN[(cls, "size_bytes")] = st.sampled_from([5, 30, 2**31])
DOMAIN[(AttachmentAdded, "mode")] = st.sampled_from(["rw", "ro"])
# claims in jobs: references, template specs, and what an allocation makes
_PATHS = st.lists(st.tuples(st.sampled_from(["/in/a", "b"]), st.sampled_from(["a", "/out/b"])).map(list), max_size=2)
_TEMPLATE = st.fixed_dictionaries({"kind": st.sampled_from(["scratch", "stage", "kv"]), "class": st.just("scratch"),
                                   "size_bytes": st.integers(0, 2**20), "counter": st.sampled_from([None, "scratch"]),
                                   "stage_in": _PATHS, "stage_out": _PATHS})
DOMAIN[(JobSubmitted, "claim_refs")] = st.lists(st.fixed_dictionaries(
    {"claim_id": CLAIM_IDS, "name": NAMES, "mode": st.sampled_from(["rw", "ro"])}), max_size=2)
DOMAIN[(JobSubmitted, "templates")] = st.lists(_TEMPLATE, max_size=2)
DOMAIN[(JobAllocated, "templates")] = st.lists(
    st.builds(lambda t, i: dict(t, claim_id=i), _TEMPLATE, st.integers(4, 6)), max_size=2)
DOMAIN[(JobAllocated, "attachments")] = st.lists(st.fixed_dictionaries(
    {"attachment_id": st.integers(1, 4), "claim_id": CLAIM_IDS, "host": NAMES, "mode": st.sampled_from(["rw", "ro"])}),
    max_size=2)
DOMAIN[(ClaimOpIntent, "agent")] = st.sampled_from(["provisioner", "node:a"])
DOMAIN[(ClassCapabilitiesReported, "class_name")] = NAMES
DOMAIN[(ClassCapabilitiesReported, "capabilities")] = st.fixed_dictionaries(
    {}, optional={"expand": st.booleans(), "online_expand": st.booleans(), "clone": st.booleans(),
                  "access_modes": st.lists(st.sampled_from(["RWO", "ROX"]), max_size=2), "other": st.integers(-2**63, 2**63 - 1)})
# clones, capabilities and snapshots
DOMAIN[(ClaimCreated, "source")] = st.one_of(st.none(), st.fixed_dictionaries(
    {"kind": st.sampled_from(["snapshot", "claim"]), "id": st.integers(1, 3), "name": NAMES,
     "handle": st.sampled_from(["s1-abc", "v2-def"])}))
SNAPSHOT_IDS = st.integers(1, 3)
SNAPSHOT_OP_IDS = st.sampled_from([f"s{s}.{op}.{n}" for s in (1, 2, 3)
                                   for op in ("create_snapshot", "delete_snapshot") for n in (1, 2)])
for cls in (SnapshotCreated, SnapshotOpIntent, SnapshotOpSucceeded, SnapshotOpFailed,
            SnapshotDeleteRequested):
    DOMAIN[(cls, "snapshot_id")] = SNAPSHOT_IDS
for cls in (SnapshotOpIntent, SnapshotOpSucceeded, SnapshotOpFailed):
    DOMAIN[(cls, "op_id")] = SNAPSHOT_OP_IDS
DOMAIN[(SnapshotCreated, "claim_id")] = CLAIM_IDS
DOMAIN[(SnapshotCreated, "access_mode")] = st.sampled_from(["RWO", "ROX", "RWX", "RWOP"])
DOMAIN[(SnapshotOpIntent, "agent")] = st.just("provisioner")
DOMAIN[(OrphanSeen, "kind")] = st.sampled_from(["volume", "snapshot"])
# what a run used, as workers report it with its end
for cls in (JobFinished, JobRequeued, JobProcessEnded):
    DOMAIN[(cls, "usage")] = st.one_of(st.none(), st.fixed_dictionaries(
        {"max_rss_bytes": st.one_of(st.none(), st.integers(0, 2**40)), "cpu_user_s": st.floats(0, 1e6),
         "cpu_sys_s": st.floats(0, 1e6)}))
# GPUs as devices: a job's request, a host's GPUs
DOMAIN[(JobSubmitted, "gpu")] = st.one_of(st.none(), st.fixed_dictionaries(
    {"num": st.integers(1, 4), "mode": st.sampled_from(["shared", "exclusive_process"]), "j_exclusive": st.booleans(),
     "gmodel": st.one_of(st.none(), st.just("A100")), "gmem": st.one_of(st.none(), st.integers(1, 2**34))}))
DOMAIN[(HostRegistered, "gpus")] = st.lists(st.fixed_dictionaries(
    {"id": st.integers(0, 3), "uuid": st.text(max_size=8), "model": st.sampled_from(["A100", "T4"]),
     "memory": st.integers(0, 2**36)}), max_size=3, unique_by=lambda g: g["id"])
# retirement names jobs (arrays' elements among them) and claims, standalone and template, that exist
DOMAIN[(RecordsRetired, "jobs")] = st.lists(st.integers(1, 8), max_size=4)
DOMAIN[(RecordsRetired, "claims")] = st.lists(st.integers(1, 6), max_size=4)


def fact_strategy(cls: type[Fact]) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    fields = {f.name: DOMAIN[(cls, f.name)] if (cls, f.name) in DOMAIN else strategy_for(hints[f.name])
              for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


ALL_FACTS = st.one_of(*(fact_strategy(cls) for cls in REGISTRY.values()))


def test_every_fact_type_has_a_fold():
    assert set(REGISTRY.values()) == set(FOLDS)


def fold(facts, model=None, start=0):
    """Arbitrary facts may ask for transitions no decide function makes: those folds raise (after
    changing what they changed), the same way on both sides, and the fold goes on."""
    model = model or Model()
    for i, f in enumerate(facts, start=start + 1):
        try:
            model.apply(i, f)
        except ImpossibleTransition:
            model.position = i
    return model


@settings(max_examples=400, deadline=None)
@given(st.lists(ALL_FACTS, max_size=40), st.data())
def test_snapshot_plus_tail_equals_live_model(facts, data):
    cut = data.draw(st.integers(min_value=0, max_value=len(facts)))
    live = fold(facts)
    snap = json.loads(json.dumps(fold(facts[:cut]).to_snapshot()))
    expected = json.loads(json.dumps(live.to_snapshot()))
    assert json.loads(live.snapshot_json()) == expected, "the controller's encoding of a snapshot is not to_snapshot()'s"
    chunk = data.draw(st.integers(min_value=1, max_value=3))  # entities per orjson call: parts joined
    assert json.loads(live.snapshot_json(chunk=chunk)) == expected, f"a snapshot encoded {chunk} at a time differs"
    restored = fold(facts[cut:], Model.from_snapshot(snap), start=cut)
    assert restored.to_snapshot() == live.to_snapshot()
    assert restored == live


@settings(max_examples=200, deadline=None)
@given(ALL_FACTS)
def test_facts_round_trip_through_the_log_encoding(fact):
    t, v, payload = encode(fact)
    assert decode(t, v, payload) == fact
