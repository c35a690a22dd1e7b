"""Orphans: provider objects no claim owns, and claims no owner holds.

A provider object is ours when its ``xce.cluster`` tag is our cluster id.  It
is owned when its claim exists and either knows it (same handle, data still
there) or has an open op with the op id it is tagged with (a create in
flight).  An object the provider lists as ``kind: snapshot`` is owned the same
way by the snapshot its ``xce.snapshot`` tag names: a snapshot object with
no snapshot record is an orphan, whatever its claim.  Anything else of ours is an orphan: recorded (``OrphanSeen``)
with the time it was first seen, reported by ``xce orphans``, and released
by the provisioner once older than the grace period, unless it is tagged
``xce.reclaim=retain``.  Nothing is released without that record.

Node objects (a node-scope class's, under a worker's storage roots: replicas' and template claims') are
listed by that host's worker (its node agent) and released by it, under the same rules: an orphan
records its ``host``, and a host's listing only resolves that host's orphans.

Claim orphans are live claims with no owner: their project is gone, or they
are template claims whose job has ended or vanished.
"""

from __future__ import annotations

from typing import Any

from xce.model import audit
from xce.model.entities.claims import Claim, ReplicaState
from xce.model.entities.orphans import Orphan
from xce.model.entities.snapshots import Snapshot
from xce.model.facts import Fact, OrphanResolved, OrphanSeen
from xce.model.state import State


def _owns(claim: Claim | Snapshot | None, handle: str, op_id: str | None) -> bool:
    if claim is None:
        return False
    if claim.handle == handle and claim.data_exists:
        return True
    if isinstance(claim, Claim) and any(r.handle == handle and (r.data_exists or r.state is ReplicaState.FAILED)
                                        or r.op is not None and r.op.op_id == op_id for r in claim.replicas):
        # a node-local claim's replica on some host (made, or its create in flight); or one FAILED when
        # its object was not listed, whose object is listed again (a storage root that listed empty while
        # its disk was not mounted): it goes with its claim's deletion, never as an orphan
        return True
    return claim.op is not None and op_id is not None and claim.op.op_id == op_id


def _tag_id(tags: dict[str, str], key: str) -> int | None:
    try:
        return int(tags.get(key, ""))
    except ValueError:
        return None


def _owner(model: State, kind: str, tags: dict[str, str]) -> Claim | Snapshot | None:
    """The record that would own an object of this kind with these tags (None: none exists)."""
    if kind == "snapshot":
        snapshot_id = _tag_id(tags, "xce.snapshot")
        return model.snapshots.get(snapshot_id) if snapshot_id is not None else None
    claim_id = _tag_id(tags, "xce.claim")
    return model.claims.get(claim_id) if claim_id is not None else None


def inventory(model: State, class_name: str, provider: str, objects: list[dict[str, Any]],
              now: float, host: str | None = None) -> list[Fact]:
    """What the provider listed for ``class_name`` (with ``host``: that host's node objects, as its
    worker listed them): new orphans, and orphans no longer there."""
    facts: list[Fact] = []
    listed = set()
    for obj in objects:
        tags = {str(k): str(v) for k, v in (obj.get("tags") or {}).items()}
        handle = str(obj.get("handle") or "")
        if not handle or tags.get("xce.cluster") != model.cluster_id:
            continue  # not ours: another cluster's, or made by hand
        listed.add(handle)
        kind = "snapshot" if obj.get("kind") == "snapshot" else "volume"
        if _owns(_owner(model, kind, tags), handle, tags.get("xce.op")) or handle in model.orphans:
            continue
        size = obj.get("size_bytes")
        facts.append(OrphanSeen(time=now, handle=handle, class_name=class_name, provider=provider,
                                claim_id=_tag_id(tags, "xce.claim"), tags=tags,
                                size_bytes=size if isinstance(size, int) else None, kind=kind, host=host))
    for o in model.orphans.values():
        if o.class_name == class_name and o.host == host and o.handle not in listed:
            facts.append(OrphanResolved(time=now, handle=o.handle, how="gone"))
    return facts


def due_for_release(model: State, grace: float, now: float, host: str | None = None) -> list[Orphan]:
    """The orphans older than the grace that still no record owns: the provisioner's (``host`` None), or
    that host's worker's."""
    return [o for o in model.orphans.values() if o.host == host and not o.retain and now - o.first_seen >= grace
            and not _owns(_owner(model, o.kind, o.tags), o.handle, o.tags.get("xce.op"))]


def claim_orphans(model: State) -> list[tuple[Claim, str]]:
    """Live claims nobody owns any more, with why."""
    out = []
    for c in model.claims.values():
        if not c.live or c.delete_requested:
            continue
        if c.project not in model.projects:
            out.append((c, f"project {c.project} no longer exists"))
        elif c.form.value == "template":
            job = model.jobs.get(c.job_id) if c.job_id is not None else None
            if job is None:
                out.append((c, f"its job {c.job_id} no longer exists"))
            elif job.finished:
                out.append((c, f"its job {job.display_id} ended ({job.state.value})"))
    return out


def _audit(model: State, time: float, result: str, handle: str, detail: str) -> None:
    audit.record(model, time, "-", "orphan", f"object/{handle}", result, detail)


def apply_orphan_seen(model: State, f: OrphanSeen) -> None:
    if f.handle in model.orphans:
        return
    model.orphans[f.handle] = Orphan(handle=f.handle, class_name=f.class_name, provider=f.provider,
                                     claim_id=f.claim_id, first_seen=f.time, tags=dict(f.tags),
                                     size_bytes=f.size_bytes, kind=f.kind, host=f.host)
    what = f"snapshot {f.tags.get('xce.snapshot', '?')} of claim {f.claim_id}" if f.kind == "snapshot" \
        else f"object of claim {f.claim_id}" + (f" on {f.host}" if f.host else "")
    _audit(model, f.time, "seen", f.handle, f"{f.class_name} {what} has no owner")


def apply_orphan_resolved(model: State, f: OrphanResolved) -> None:
    if model.orphans.pop(f.handle, None) is not None:
        _audit(model, f.time, f.how, f.handle, "released after the grace period" if f.how == "released"
               else "no longer listed by its provider")
