"""The claim state machine, driven through its decide functions by hypothesis (with snapshots and clones).

Whatever order creates, placements, intents, provider results, deletions,
attachments, purges and agent restarts come in, the claim folds keep their
invariants and a snapshot taken at any point restores the same model.  A node-local
claim ``r`` (replicas on h1 and h2, or a cache, populated or not) goes through its
hosts' node agents, warm and evict, placements on demand with evictions that make
room, and the loss and return of h1.  Jobs
come in too, the way the controller makes them: submitted with a shared
scratch template claim and references to standalone claims, allocated (the
plan applier's facts: template ``ClaimCreated`` and attachments), started
once the readiness gate opens, ended, killed, requeued, or lost with their
host; their claims go through the same agent rounds.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from xce.config import ClaimsConfig, parse_config
from xce.errors import XceError
from xce.model import Model
from xce.model import capabilities
from xce.model import claims
from xce.model.facts import (
    AttachmentAdded, ClaimPlaced, ClaimResizeReserved, HostRegistered, JobAllocated, ProjectDefined, QueueDefined,
    ReplicaEvicted, ReplicaPlaced,
)
from xce.model import agents, job_claims, jobs, status
from xce.model import snapshots
from xce.model.claims import ATTACHMENT_TRANSITIONS, LIVE, TRANSITIONS, AttachmentState, ClaimForm, ClaimSpec, ClaimState
from xce.model.identity import Role, User
from xce.model.job_claims import JobClaimsSpec
from xce.model.jobs import JobSpec, JobState

pytestmark = pytest.mark.long  # started first under make test (tests/conftest.py)

CONFIG = parse_config("""
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[queues]]
name = "default"
[[projects]]
name = "default"
[[pools]]
name = "p"
capacity = "1Ti"
[[claim_classes]]
name = "simfs"
provider = "simfs"
pools = ["p"]
[[claim_classes]]
name = "scr"
provider = "simfs"
pools = ["p"]
[[claim_classes]]
name = "loc"
provider = "simfs"
scope = "node"
counter = "scratch"
[claims]
scratch_class = "scr"
[[quotas]]
project = "default"
max_claims = 4
""")
ADMIN = User(name="admin", role=Role.ADMIN, projects=["default"])
RETRIES = ClaimsConfig(max_attempts=3, retry_base=0.1, retry_cap=0.2)
NAMES = st.sampled_from(["a", "b"])
SNAPSHOT_NAMES = st.sampled_from(["s1", "s2"])
HOSTS = st.sampled_from(["h1", "h2"])
GiB = 2**30
CAN = {"create_snapshot": True, "clone": True, "expand": True, "online_expand": True, "access_modes": ["RWO"]}


class ClaimMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = Model(cluster_id="k")
        self.model.apply(1, ProjectDefined(time=0, name="default"))
        self.model.apply(2, QueueDefined(time=0, name="default", priority=30))
        self.now = 1.0
        self.rng = random.Random(7)
        self.epoch = 0
        self.restart_agent()
        self.node_epochs: dict[str, int] = {}
        for h in ("h1", "h2"):
            self.commit([HostRegistered(time=0, name=h, slots=4, counters={"scratch": 4.0 * GiB})])
            self.restart_node_agent(h)
        self.commit(capabilities.report(self.model, CONFIG, claims.SHARED_AGENT, claims.SHARED_AGENT, "simfs", "simfs",
                                        CAN, self.tick()))

    def commit(self, facts) -> None:
        for f in facts:
            self.model.apply(self.model.position + 1, f)

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def try_(self, fn):
        try:
            out = fn()
        except XceError:
            return None
        facts = out[0] if isinstance(out, tuple) else out
        self.commit(facts)
        return out

    def claim(self, name: str):
        return claims.live_by_name(self.model, "default", name)

    @initialize()
    def two_ready_claims(self):
        """Start where the interesting paths begin: ``a`` (delete) and ``b`` (retain) READY."""
        self.create("a", "delete")
        self.create("b", "retain")
        self.schedule()
        self.intents_for_due_ops()
        self.provider_round("ok", False, False)
        assert [c.state for c in self.model.claims.values()] == [ClaimState.READY, ClaimState.READY]

    @rule(name=NAMES, policy=st.sampled_from(["delete", "retain"]))
    def create(self, name, policy):
        spec = ClaimSpec(name=name, class_name="simfs", size="1Gi", access_mode="RWO", reclaim_policy=policy)
        self.try_(lambda: claims.create(self.model, CONFIG, ADMIN, spec, self.tick()))

    @rule()
    def schedule(self):
        """The scheduler places every pending shared claim (a node-local claim's replicas are placed host by
        host: ``place_replicas``) and reserves every resize (the pool never runs out here)."""
        for c in list(self.model.claims.values()):
            if c.state is ClaimState.PENDING and not c.placed and not c.delete_requested and c.scope is claims.Scope.SHARED:
                self.commit([ClaimPlaced(time=self.tick(), claim_id=c.id, pool="p")])
            elif c.resize is not None and c.resize.state is claims.ResizeState.REQUESTED and c.op is None \
                    and c.state is ClaimState.READY and not c.delete_requested:
                self.commit([ClaimResizeReserved(time=self.tick(), claim_id=c.id, size_bytes=c.resize.size_bytes)])

    @rule(name=NAMES, size=st.sampled_from(["512Mi", "2Gi", "3Gi"]))
    def resize(self, name, size):
        self.try_(lambda: claims.resize(self.model, CONFIG, ADMIN, name, size, self.tick()))

    @rule()
    def restart_agent(self):
        _, self.epoch = self.try_(lambda: claims.lease(self.model, claims.SHARED_AGENT, "h", self.tick()))

    @rule()
    def intents_for_due_ops(self):
        now = self.tick()
        for c, op, _ in claims.due_ops(self.model, claims.SHARED_AGENT, now + 10):
            self.try_(lambda c=c, op=op: claims.record_intent(self.model, claims.SHARED_AGENT, self.epoch, op.op_id,
                                                              c.id, now))

    @rule(outcome=st.sampled_from(["ok", "ok", "ok", "retry", "permanent"]), stale=st.sampled_from([False] * 4 + [True]),
          impostor=st.sampled_from([False] * 4 + [True]))
    def provider_round(self, outcome, stale, impostor):
        """The agent reports every op it has an intent for (or, stale, an older epoch tries to; or an
        impostor: another agent whose epoch happens to be the same)."""
        epoch = self.epoch - 1 if stale else self.epoch
        agent = claims.node_agent("h1") if impostor else claims.SHARED_AGENT
        for c in list(self.model.claims.values()):
            for op, a in c.open_ops():  # the claim's own op, and its attachments'
                if op.epoch is None:
                    continue
                intent_epoch = op.epoch
                result = claims.OpResult(op_id=op.op_id, claim_id=c.id, ok=outcome == "ok", handle=f"h-{c.id}",
                                         size_bytes=2**30, path=f"/data/{c.id}", code="E", retryable=outcome == "retry")
                facts = self.try_(lambda r=result: job_claims.agent_report(
                    self.model, RETRIES, agent, epoch, [r], self.tick(), self.rng)[0] or self._refused(r, agent, epoch))
                assert (facts is None) == (intent_epoch != epoch or impostor), \
                    "only the agent holding the intent, in the intent's epoch, may report"

    def _refused(self, r: claims.OpResult, agent: str, epoch: int):
        """``agent_report`` says a refusal in its answer, not by raising: ask ``record_result`` why."""
        claims.record_result(self.model, RETRIES, agent, epoch, r, self.now, self.rng)  # raises for a refusal
        return []  # a duplicate: nothing to do

    # ------------------------------------------------------------ jobs (what the controller does with them)

    @rule(refs=st.sampled_from([(), ("a",), ("a", "b")]), scratch=st.booleans())
    def submit(self, refs, scratch):
        claims = JobClaimsSpec(claims=tuple(refs), scratch="1Gi" if scratch else None)
        self.try_(lambda: job_claims.submit(self.model, ADMIN, JobSpec(command=["true"]), claims, self.tick(), CONFIG))

    @rule()
    def allocate(self):
        """The plan applier's facts for every pending job whose claims can be used: one host, h1."""
        for job in list(self.model.jobs.values()):
            if job.state is not JobState.PEND or job.allocated or job_claims.unusable_ref(self.model, job):
                continue
            now = self.tick()
            templates, attachments = job_claims.plan_claims(job, job.run + 1, ["h1"], self.model.next_claim_id,
                                                            self.model.next_attachment_id, {"scratch": "p"}, now)
            self.commit([JobAllocated(time=now, job_id=job.id, run=job.run + 1, hosts=["h1"], slots={"h1": 1},
                                      attachments=attachments), *templates])

    @rule()
    def start(self):
        """The worker starts every run whose readiness gate is open."""
        for job in list(self.model.jobs.values()):
            if job.state is JobState.PEND and job.allocated and status.blocking(self.model, job) is None:
                self.try_(lambda job=job: jobs.report_started(self.model, "h1", job.id, job.run, 1, self.tick(),
                                                              "", "", ""))

    @rule(code=st.sampled_from([0, 0, 1]))
    def end(self, code):
        for job in list(self.model.jobs.values()):
            if job.state is JobState.RUN:
                self.try_(lambda job=job: job_claims.report_finished(self.model, "h1", job.id, job.run, self.tick(),
                                                                     code, None))

    @rule()
    def everything_goes_well(self):
        """One round of the whole system in which every call succeeds: so runs do get to the end."""
        self.schedule()
        self.allocate()
        for _ in range(2):  # create, then stage/attach ops opened by the first round
            self.intents_for_due_ops()
            self.provider_round("ok", False, False)
        self.start()

    @rule(requeue=st.booleans(), which=st.integers(0, 3))
    def kill(self, requeue, which):
        ids = sorted(self.model.jobs)
        if which < len(ids):
            self.try_(lambda: jobs.kill(self.model, ADMIN, ids[which], self.tick(), requeue))

    @rule()
    def lose_the_host(self):
        self.try_(lambda: job_claims.host_lost(self.model, "h1", self.tick()))


    @rule(name=NAMES)
    def delete(self, name):
        self.try_(lambda: claims.delete(self.model, ADMIN, name, self.tick()))

    @rule(name=NAMES, host=st.sampled_from(["h1", "h2"]))
    def attach(self, name, host):
        self.try_(lambda: claims.add_attachment(self.model, ADMIN, name, host, "rw", self.tick()))

    @rule(name=NAMES)
    def detach(self, name):
        c = self.claim(name)
        if c is not None and c.attachments:
            self.try_(lambda: claims.remove_attachment(self.model, ADMIN, name, c.attachments[0].id, self.tick()))

    @rule()
    def purge(self):
        for c in list(self.model.claims.values()):
            if c.retained:
                self.try_(lambda c=c: claims.purge(self.model, ADMIN, c.id, self.tick()))

    # ------------------------------------------------------------ snapshots and clones

    @rule(claim=NAMES, name=SNAPSHOT_NAMES)
    def take_snapshot(self, claim, name):
        self.try_(lambda: snapshots.create(self.model, CONFIG, ADMIN, claim, name, self.tick()))

    @rule()
    def snapshot_intents(self):
        now = self.tick()
        for s, op in snapshots.due_ops(self.model, claims.SHARED_AGENT, now + 10):
            self.try_(lambda s=s, op=op: snapshots.record_intent(self.model, claims.SHARED_AGENT, self.epoch, op.op_id,
                                                                 s.id, now))

    @rule(outcome=st.sampled_from(["ok", "ok", "retry", "permanent"]), stale=st.sampled_from([False] * 4 + [True]))
    def snapshot_round(self, outcome, stale):
        epoch = self.epoch - 1 if stale else self.epoch
        for s in list(self.model.snapshots.values()):
            if s.op is None or s.op.epoch is None:
                continue
            intent_epoch = s.op.epoch
            r = snapshots.SnapshotResult(op_id=s.op.op_id, snapshot_id=s.id, ok=outcome == "ok", handle=f"s-{s.id}",
                                         size_bytes=2**30, code="E", retryable=outcome == "retry")
            facts = self.try_(lambda r=r: snapshots.record_result(self.model, RETRIES, claims.SHARED_AGENT, epoch, r,
                                                                  self.tick(), self.rng))
            assert (facts is None) == (intent_epoch != epoch), "only the intent's epoch may report"

    @rule(name=SNAPSHOT_NAMES)
    def delete_snapshot(self, name):
        self.try_(lambda: snapshots.delete(self.model, ADMIN, name, self.tick()))

    @rule(name=NAMES, snapshot=st.one_of(st.none(), SNAPSHOT_NAMES), claim=NAMES)
    def clone(self, name, snapshot, claim):
        spec = ClaimSpec(name=name, class_name=None, size=None, access_mode=None)
        self.try_(lambda: snapshots.clone(self.model, CONFIG, ADMIN, spec, self.tick(), from_snapshot=snapshot,
                                          from_claim=None if snapshot else claim))

    # ------------------------------------------------------------ node-local claims' replicas

    @rule(hosts=st.sampled_from([(), ("h1",), ("h1", "h2")]), cache=st.booleans(), populated=st.booleans())
    def create_replicated(self, hosts, cache, populated):
        spec = ClaimSpec(name="r", class_name="loc", size="1Gi", access_mode="ROX", hosts=hosts, cache=cache,
                         populate_from="https://example.org/w/" if populated or cache else None)
        self.try_(lambda: claims.create(self.model, CONFIG, ADMIN, spec, self.tick()))

    @rule(on_demand=HOSTS, make_room=st.booleans())
    def place_replicas(self, on_demand, make_room):
        """The plan applier's facts: each named host's replica placed; a cache's on demand, evicting
        (``make_room``) the unattached READY replica of another cache there first, as the applier checks."""
        for c in list(self.model.claims.values()):
            if not c.replicated or not c.live or c.delete_requested:
                continue
            for h in c.unplaced_hosts():
                self.commit([ReplicaPlaced(time=self.tick(), claim_id=c.id, host=h, counter="scratch",
                                           size_bytes=c.size_bytes)])
            if c.cache and c.replica_on(on_demand) is None:
                victims = [v for v in self.model.claims.values() if v.cache and v.id != c.id and v.live
                           and not v.delete_requested and (r := v.replica_on(on_demand)) is not None
                           and r.state is claims.ReplicaState.READY and r.op is None
                           and not any(a.host == on_demand for a in v.attachments)] if make_room else []
                self.commit([ReplicaEvicted(time=self.tick(), claim_id=v.id, host=on_demand, by="scheduler",
                                            make_room=True) for v in victims])
                self.commit([ReplicaPlaced(time=self.tick(), claim_id=c.id, host=on_demand, counter="scratch",
                                           size_bytes=c.size_bytes)])

    @rule(host=HOSTS)
    def restart_node_agent(self, host):
        facts, self.node_epochs[host] = claims.lease(self.model, claims.node_agent(host), host, self.tick())
        self.commit(facts)

    @rule(host=HOSTS)
    def node_agent_takes(self, host):
        agent = claims.node_agent(host)
        self.try_(lambda: agents.take(self.model, agent, self.node_epochs[host], 100, self.tick() + 10, 300.0))

    @rule(host=HOSTS, outcome=st.sampled_from(["ok", "ok", "retry", "permanent"]))
    def node_agent_reports(self, host, outcome):
        """The node agent reports every replica op its epoch holds."""
        agent = claims.node_agent(host)
        for o in agents.held(self.model, agent, 100).replica_ops:
            gone = outcome == "permanent" and o.part is not None and claims.replicas.must_exist(o.owner, o.part, o.op)
            r = claims.OpResult(o.op.op_id, o.owner.id, outcome == "ok", handle=f"n-{o.owner.id}-{host}",
                                path=f"/n/{host}/{o.owner.id}", code="DATA_LOST" if gone else "E",
                                retryable=outcome == "retry")
            done = agents.report(self.model, RETRIES, agent, self.node_epochs[host], [r], [], self.tick(), self.rng)
            assert not done.refused, done.refused
            self.commit(done.facts)

    @rule(host=HOSTS, vanish=st.booleans(), stray=st.booleans())
    def node_agent_lists(self, host, vanish, stray):
        """The node agent's orphan scan of its host: the objects its replicas made (one vanished, maybe: a
        READY one's is made again or FAILED), and maybe one no claim owns (an orphan of that host)."""
        objects = [{"handle": r.handle, "tags": {"xce.cluster": "k", "xce.claim": str(c.id)}}
                   for c in self.model.claims.values() if c.class_name == "loc" for r in c.replicas
                   if r.host == host and r.handle is not None and r.data_exists]
        if vanish and objects:
            objects.pop(0)
        if stray:
            objects.append({"handle": f"stray-{host}", "tags": {"xce.cluster": "k", "xce.claim": "999"}})
        self.try_(lambda: agents.inventory(self.model, claims.node_agent(host), self.node_epochs[host], "loc", "simfs",
                                           objects, self.tick()))
        for o in self.model.orphans.values():
            assert o.handle.startswith("stray-") or o.host is None, "a replica's object is never an orphan"

    @rule()
    def replicas_go_well(self):
        """A round in which placements, the node agents and their providers all succeed: so replicas do
        get READY (made, then filled)."""
        self.place_replicas("h2", True)
        for _ in range(2):
            for h in ("h1", "h2"):
                self.node_agent_takes(h)
                self.node_agent_reports(h, "ok")

    @rule(host=HOSTS)
    def warm(self, host):
        self.try_(lambda: claims.warm(self.model, CONFIG, ADMIN, "r", (host,), self.tick()))

    @rule(host=HOSTS)
    def evict(self, host):
        if self.try_(lambda: claims.evict(self.model, ADMIN, "r", (host,), self.tick())) is not None:
            assert not any(a.host == host for a in self.claim("r").attachments), "never while attached"

    @rule(host=HOSTS)
    def attach_replicated(self, host):
        self.try_(lambda: claims.add_attachment(self.model, ADMIN, "r", host, "ro", self.tick()))

    @rule()
    def detach_replicated(self):
        c = self.claim("r")
        if c is not None and c.attachments:
            self.try_(lambda: claims.remove_attachment(self.model, ADMIN, "r", c.attachments[0].id, self.tick()))

    @rule()
    def h1_comes_back(self):
        self.commit([HostRegistered(time=self.tick(), name="h1", slots=4, counters={"scratch": 4.0 * GiB})])

    # ------------------------------------------------------------ invariants

    @invariant()
    def replicas_follow_their_table_and_hold_their_hosts_room(self):
        for c in self.model.claims.values():
            for r in c.replicas:
                event(f"replica reached {r.state.value}{' (cache)' if c.cache else ''}")
                states = [claims.ReplicaState(h["state"]) for h in r.history]
                assert states[0] is claims.ReplicaState.PENDING and states[-1] is r.state
                for x, y in zip(states, states[1:]):
                    assert x == y or y in claims.REPLICA_TRANSITIONS[x], f"replica of {c.name} on {r.host}: {x} -> {y}"
                held = self.model.hosts[r.host].held_counters.get(f"claim:{c.id}")
                R = claims.ReplicaState
                if r.placed and r.state in (R.PENDING, R.PREPARING, R.READY, R.LOST):
                    assert held == {"scratch": float(c.size_bytes)}, "its size is reserved on its host"
            live = [r.host for r in c.replicas if r.state is not claims.ReplicaState.RELEASED]
            assert len(set(live)) == len(live), "one replica of a claim a host"
            for h in self.model.hosts.values():
                if f"claim:{c.id}" in h.held_counters:
                    assert c.replica_on(h.name) is not None, "nothing reserved for a replica that is gone"
            if c.cache and not c.delete_requested:
                assert c.state is ClaimState.READY, "a cache serves whatever its replicas"
            if c.state is ClaimState.RELEASED:
                assert all(r.state is claims.ReplicaState.RELEASED for r in c.replicas)
            if c.state is ClaimState.READY and c.replicated and not c.cache:
                assert c.replicas and any(r.state in (claims.ReplicaState.READY, claims.ReplicaState.LOST,
                                                      claims.ReplicaState.PREPARING, claims.ReplicaState.PENDING)
                                          for r in c.replicas)
        assert self.model.open_replica_ops == {c.id for c in self.model.claims.values()
                                               if any(r.op is not None for r in c.replicas)}

    @invariant()
    def snapshots_follow_their_table_and_indexes(self):
        for s in self.model.snapshots.values():
            event(f"snapshot reached {s.state.value}")
            states = [snapshots.SnapshotState(h["state"]) for h in s.history]
            assert states[0] is snapshots.SnapshotState.PENDING and states[-1] is s.state
            for x, y in zip(states, states[1:]):
                assert y in snapshots.TRANSITIONS[x], f"snapshot {s.id}: {x} -> {y}"
            if s.being_made:  # its claim stays until the provider has made it
                assert self.model.claims[s.claim_id].state not in (ClaimState.RELEASING, ClaimState.RELEASED)
            if s.state is snapshots.SnapshotState.RELEASED:
                assert s.op is None and not s.data_exists
        live = {claims.name_key(s.project, s.name): s.id for s in self.model.snapshots.values() if s.live}
        assert self.model.snapshot_names == live
        assert self.model.open_snapshot_ops == {s.id for s in self.model.snapshots.values() if s.op is not None}

    @invariant()
    def a_clone_being_made_keeps_its_source(self):
        for c in self.model.claims.values():
            if c.source is None or c.state not in (ClaimState.PENDING, ClaimState.PREPARING):
                continue
            event(f"clone from a {c.source['kind']} {c.state.value}")
            if c.source["kind"] == "snapshot":
                src = self.model.snapshots[c.source["id"]]
                assert src.state is not snapshots.SnapshotState.RELEASED and not src.delete_requested
            else:
                assert self.model.claims[c.source["id"]].state not in (ClaimState.RELEASING, ClaimState.RELEASED)

    @invariant()
    def transitions_follow_the_table(self):
        for c in self.model.claims.values():
            event(f"reached {c.state.value}{' retained' if c.retained else ''}")
            states = [ClaimState(h["state"]) for h in c.history]
            assert states[0] is ClaimState.PENDING
            for a, b in zip(states, states[1:]):
                assert a == b or b in TRANSITIONS[a], f"{c.name}: {a} -> {b}"
            assert states[-1] is c.state

    @invariant()
    def indexes_agree_with_claims(self):
        live = {claims.name_key(c.project, c.name): c.id for c in self.model.claims.values()
                if c.state in LIVE and c.form is ClaimForm.STANDALONE}
        assert self.model.claim_names == live, "template claims are in no name space"
        assert self.model.open_ops == {c.id for c in self.model.claims.values() if c.open_ops()}

    @invariant()
    def attachments_follow_their_table(self):
        for c in self.model.claims.values():
            for a in c.attachments:
                states = [AttachmentState(h["state"]) for h in a.history]
                for x, y in zip(states, states[1:]):
                    assert y in ATTACHMENT_TRANSITIONS[x], f"attachment {a.id}: {x} -> {y}"
                assert states[-1] is a.state

    @invariant()
    def jobs_follow_their_table_and_runs_own_their_claims(self):
        for job in self.model.jobs.values():
            event(f"job reached {job.state.value}")
            states = [JobState(h["state"]) for h in job.history]
            for x, y in zip(states, states[1:]):
                assert y in jobs.TRANSITIONS[x], f"job {job.id}: {x} -> {y}"
            assert states[-1] is job.state
            mine = job_claims.run_claims(self.model, job)
            if job.state is JobState.RUN:
                assert len(mine) == len(job.templates), "never running without a template claim it declared"
            if job.finished or job.state is JobState.PEND and not job.allocated:
                for c in mine:  # a run that is over lets its template claims go (or keeps failed data)
                    assert c.delete_requested or c.keep or c.state in (ClaimState.RELEASED, ClaimState.FAILED)
        for c in self.model.claims.values():
            if c.form is ClaimForm.TEMPLATE:
                event(f"template claim reached {c.state.value}")
                assert c.job_id in self.model.jobs and c.name == claims.template_name(c.job_id, c.run, c.kind)

    @invariant()
    def resizes_follow_their_table_and_leave_the_claim_ready(self):
        for c in self.model.claims.values():
            r = c.resize
            if r is None:
                continue
            event(f"resize reached {r.state.value}")
            states = [claims.ResizeState(h["state"]) for h in r.history]
            assert states[0] is claims.ResizeState.REQUESTED and states[-1] is r.state
            for x, y in zip(states, states[1:]):
                assert y in claims.RESIZE_TRANSITIONS[x], f"resize of {c.name}: {x} -> {y}"
            if r.open:
                assert c.state is ClaimState.READY, "a claim is READY and usable while it is resized"
                assert c.charged_bytes == r.size_bytes >= c.reserved_bytes, "charged when asked, reserved after"
            if r.state is claims.ResizeState.EXPANDING and c.op is not None:
                assert c.op.kind is claims.OpKind.EXPAND
            if r.state is claims.ResizeState.DONE:
                assert c.size_bytes == r.size_bytes
            if r.state is claims.ResizeState.FAILED:
                assert max(c.size_bytes, c.actual_bytes or 0) == r.old_bytes, "a failed resize changes no size"

    @invariant()
    def released_claims_hold_nothing(self):
        for c in self.model.claims.values():
            if c.state is ClaimState.RELEASED:
                assert not c.attachments
                assert c.op is None or c.retained, "only a purge works on a released claim"
            if c.retained:
                assert c.state is ClaimState.RELEASED and c.data_exists

    @invariant()
    def the_reclaim_policy_decides_the_objects_fate(self):
        for c in self.model.claims.values():
            states = [h["state"] for h in c.history]
            if c.reclaim_policy is claims.ReclaimPolicy.RETAIN:
                assert "RELEASING" not in states, "retain never releases the object on delete"
            else:
                assert not c.retained

    @invariant()
    def a_deletion_nothing_holds_up_goes_ahead(self):
        for c in self.model.claims.values():
            if c.delete_requested and not c.attachments and (c.op is None or c.op.epoch is None):
                assert c.state is not ClaimState.READY
                if c.state is ClaimState.FAILED and c.data_exists and c.op is None:
                    # only a release that failed for good waits, FAILED with its data, for a new delete
                    assert [h["state"] for h in c.history][-2:] == ["RELEASING", "FAILED"]

    @invariant()
    def quota_counts_live_claims_only(self):
        count, _ = claims.quota_use(self.model, "default", None)
        assert count == sum(1 for c in self.model.claims.values() if c.live)
        assert sum(1 for c in self.model.claims.values() if c.live and c.form is ClaimForm.STANDALONE) <= 4

    @invariant()
    def snapshots_restore_the_same_model(self):
        restored = Model.from_snapshot(json.loads(json.dumps(self.model.to_snapshot())))
        assert restored == self.model


TestClaimMachine = ClaimMachine.TestCase
TestClaimMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


def test_a_model_loaded_from_a_snapshot_still_offers_open_attachment_ops():
    m = ClaimMachine()
    m.two_ready_claims()
    claim = claims.live_by_name(m.model, "default", "a")
    m.commit([AttachmentAdded(time=m.tick(), claim_id=claim.id, attachment_id=9, host="h1", mode="rw",
                              by="admin", job_id=1, run=1)])
    assert [op.op_id for _, op, _ in claims.due_ops(m.model, claims.SHARED_AGENT, m.now)] == ["a9.attach"]
    restored = Model.from_snapshot(json.loads(json.dumps(m.model.to_snapshot())))
    assert [op.op_id for _, op, _ in claims.due_ops(restored, claims.SHARED_AGENT, m.now)] == ["a9.attach"]


def test_every_list_of_access_modes_is_the_enums():
    """The config (below the model) and the provider contract (a spec of its own) keep plain tuples;
    they must say what ``AccessMode`` says."""
    import typing

    from xce.api.schemas import AccessModeName, ClaimCreateRequest
    from xce.config import ACCESS_MODES
    from xce.providers.contract import ACCESS_MODES as CONTRACT_MODES

    modes = tuple(m.value for m in claims.AccessMode)
    assert ACCESS_MODES == CONTRACT_MODES == modes
    assert typing.get_args(AccessModeName) == modes
    assert AccessModeName in typing.get_args(ClaimCreateRequest.model_fields["access_mode"].annotation)
