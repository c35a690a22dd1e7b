"""What requests may do to snapshots: take one of a claim, find, delete; and make a claim from a
snapshot or a claim (a clone).

Snapshot names are per project, like claim names: a user sees and touches
only the snapshots of their projects, and another project's name looks
exactly like an unknown one (404).  Each function checks a request and
returns the facts to commit; a refusal is an ``XceError`` that changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Mapping

from xce.errors import Conflict, NotFound
from xce.model import capabilities
from xce.model.claims import decide as claims
from xce.model.entities.claims import ClaimForm, ClaimState, ContentSource, name_key
from xce.model.entities.identity import User
from xce.model.entities.snapshots import Snapshot, SnapshotState
from xce.model.facts import Fact, SnapshotCreated, SnapshotDeleteRequested
from xce.model.state import State
from xce.names import check_name
from xce.units import format_size

if TYPE_CHECKING:
    from xce.config import Config


def create(model: State, config: Config, actor: User, claim_name: str, name: str, now: float,
           project: str | None = None, free: Mapping[str, int] | None = None) -> tuple[list[Fact], int]:
    """``xce claim snapshot CLAIM NAME``: a snapshot of a READY standalone claim of a class whose
    provider can take them, in the claim's project; its bytes are charged to that project's quota
    and reserved in the claim's pool (``free``: each pool's free bytes now, as the scheduler counts
    them: ``controller.observed.pool_free``), and a project has at most ``[claims]
    max_snapshots_per_project`` of them, so a storm of snapshots cannot fill the storage behind a
    pool.  Allowed while the claim is attached: what that gives is the provider's consistency
    (btrfs: atomic, crash-consistent)."""
    check_name("snapshot", name)
    claim = claims.visible(model, actor, claim_name, project)
    if claim.form is ClaimForm.TEMPLATE:
        raise Conflict(f"claim {claim_name!r} belongs to job {claim.job_id}: only standalone claims are "
                       f"snapshotted", code="unsupported")
    cls = claims.class_or_404(config, claim.class_name)
    capabilities.require(model, cls, "create_snapshot")
    if claim.state is not ClaimState.READY or claim.handle is None:
        raise Conflict(f"claim {claim_name!r} is {claim.state.value}: only READY claims can be snapshotted")
    if claim.delete_requested:
        raise Conflict(f"claim {claim_name!r} is being deleted")
    if live_by_name(model, claim.project, name) is not None:
        raise Conflict(f"a snapshot named {name!r} already exists in project {claim.project!r}")
    size = claim.charged_bytes
    claims.check_quota(model, config, claim.project, claim.class_name, size, new_claims=0)
    limit = config.claims.max_snapshots_per_project
    if sum(1 for s in model.snapshots.values() if s.project == claim.project and s.live) >= limit:
        raise Conflict(f"project {claim.project!r} has {limit} snapshots, as many as it may ([claims] "
                       f"max_snapshots_per_project): delete one first", code="quota_exceeded")
    if claim.pool is not None and free is not None and free.get(claim.pool, 0) < size:
        raise Conflict(f"no room for a snapshot of claim {claim_name!r} ({format_size(size)}) in pool {claim.pool}: "
                       f"{format_size(max(free.get(claim.pool, 0), 0))} free", code="pool_full")
    snapshot_id = model.next_snapshot_id
    return [SnapshotCreated(time=now, snapshot_id=snapshot_id, name=name, project=claim.project,
                            owner=actor.name, claim_id=claim.id, claim_name=claim.name,
                            class_name=claim.class_name, size_bytes=size,
                            access_mode=claim.access_mode.value, pool=claim.pool)], snapshot_id


def live_by_name(model: State, project: str, name: str) -> Snapshot | None:
    snapshot_id = model.snapshot_names.get(name_key(project, name))
    return model.snapshots.get(snapshot_id) if snapshot_id is not None else None


def listing_match(actor: User, project: str | None, claim: str | None, states: set[SnapshotState] | None,
                  every_state: bool) -> Callable[[Snapshot], bool]:
    """A snapshot listing's filter: its project's members' (admins: all), of ``project`` and ``claim``;
    of ``states``, else those not RELEASED (those too with ``every_state``)."""
    def match(s: Snapshot) -> bool:
        if not (actor.is_admin or s.project in actor.projects):
            return False
        if project is not None and s.project != project or claim is not None and s.claim_name != claim:
            return False
        if states is not None:
            return s.state in states
        return s.state is not SnapshotState.RELEASED or every_state
    return match


def visible_by_id(model: State, actor: User, snapshot_id: int) -> Snapshot:
    """The snapshot ``snapshot_id`` if ``actor`` may see it (its project is theirs, or they are an
    admin); 404 otherwise, worded as for a snapshot that does not exist."""
    snap = model.snapshots.get(snapshot_id)
    if snap is None or not (actor.is_admin or snap.project in actor.projects):
        raise NotFound(f"snapshot {snapshot_id} not found")
    return snap


def visible(model: State, actor: User, name: str, project: str | None = None) -> Snapshot:
    """The snapshot ``name`` that ``actor`` may see: live (or else the newest released one) in
    ``project``, or in any of the actor's projects (every project, for admins).  404 if there is
    none (an unknown name and another project's look the same), 409 if it is in several."""
    if project is not None:
        projects = [project] if actor.is_admin or project in actor.projects else []
    elif actor.is_admin:
        projects = sorted({s.project for s in model.snapshots.values() if s.name == name})
    else:
        projects = list(actor.projects)
    found = [s for p in projects if (s := live_by_name(model, p, name)) is not None]
    if not found:  # the newest released one of each project
        newest: dict[str, Snapshot] = {}
        for s in model.snapshots.values():
            if s.name == name and s.project in projects and (s.project not in newest or s.id > newest[s.project].id):
                newest[s.project] = s
        found = list(newest.values())
    if len(found) > 1:
        raise Conflict(f"snapshot {name!r} exists in projects {', '.join(sorted(s.project for s in found))}: "
                       f"say which (--project)", code="ambiguous")
    if found:
        return found[0]
    raise NotFound(f"snapshot {name!r} not found" + (f" in project {project!r}" if project is not None else ""))


def delete(model: State, actor: User, name: str, now: float, project: str | None = None) -> tuple[list[Fact], int]:
    snap = visible(model, actor, name, project)
    if snap.state is SnapshotState.RELEASED:
        return [], snap.id
    if snap.delete_requested and not (snap.state is SnapshotState.FAILED and snap.op is None):
        return [], snap.id  # on its way; deleting a FAILED snapshot again retries its deletion
    if cloning := sorted(c.name for c in model.claims.values() if c.cloning_from("snapshot", snap.id)):
        raise Conflict(f"snapshot {name!r} cannot be deleted while claim(s) {', '.join(cloning)} are being made "
                       f"from it", code="in_use")
    return [SnapshotDeleteRequested(time=now, snapshot_id=snap.id, by=actor.name)], snap.id


def clone(model: State, config: Config, actor: User, spec: claims.ClaimSpec, now: float, *,
          from_snapshot: str | None = None, from_claim: str | None = None) -> tuple[list[Fact], int]:
    """``xce claim create NAME --from-snapshot SNAP`` or ``--from-claim CLAIM``: a new writable claim
    whose content is the READY snapshot's or claim's (the provider's ``create`` with a
    ``source_handle``), refused unless the class's provider can clone."""
    if (from_snapshot is None) == (from_claim is None):
        raise Conflict("a clone has one source: a snapshot or a claim")
    if from_snapshot is not None:
        snap = visible(model, actor, from_snapshot, spec.project)
        if snap.state is not SnapshotState.READY or snap.handle is None or snap.delete_requested:
            raise Conflict(f"snapshot {from_snapshot!r} is {snap.state.value}"
                           + (" and being deleted" if snap.delete_requested else "")
                           + ": only READY snapshots can be cloned")
        source = ContentSource(kind="snapshot", id=snap.id, name=snap.name, handle=snap.handle,
                               class_name=snap.class_name, project=snap.project, size_bytes=snap.charged_bytes,
                               access_mode=snap.access_mode)
    else:
        assert from_claim is not None
        claim = claims.visible(model, actor, from_claim, spec.project)
        if claim.form is ClaimForm.TEMPLATE:
            raise Conflict(f"claim {from_claim!r} belongs to job {claim.job_id}: only standalone claims are "
                           f"cloned", code="unsupported")
        if claim.state is not ClaimState.READY or claim.handle is None or claim.delete_requested:
            raise Conflict(f"claim {from_claim!r} is {claim.state.value}"
                           + (" and being deleted" if claim.delete_requested else "")
                           + ": only READY claims can be cloned")
        source = ContentSource(kind="claim", id=claim.id, name=claim.name, handle=claim.handle,
                               class_name=claim.class_name, project=claim.project,
                               size_bytes=claim.charged_bytes, access_mode=claim.access_mode.value)
    if spec.project is None:  # the source's project, unless told
        spec = dataclasses.replace(spec, project=source.project)
    return claims.create(model, config, actor, spec, now, source=source)
