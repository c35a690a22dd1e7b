"""Fair share usage in the model (``xce.model.fairshare``): charged from the facts that end runs and
release claims, decayed with the configured half-life, kept across a redefinition and a snapshot."""

from __future__ import annotations

import json

import pytest

from xce.model import Model
from xce.model import facts as F
from xce.model.fairshare import decayed

H = 100.0  # half-life, seconds


def world() -> Model:
    m = Model()
    for f in [F.QueueDefined(time=0, name="q", priority=30), F.ProjectDefined(time=0, name="p", usage_half_life=H),
              F.HostRegistered(time=0, name="h", slots=8, attrs={}, counters={"gpu": 4.0})]:
        m.apply(m.position + 1, f)
    return m


def run(m: Model, job_id: int, slots: int, start: float, gpus: float = 0.0) -> None:
    for f in [F.JobSubmitted(time=start, id=job_id, name="j", user="alice", project="p", queue="q",
                             command=["x"], slots=slots),
              F.JobAllocated(time=start, job_id=job_id, run=1, hosts=["h"], slots={"h": slots},
                             counters={"h": {"gpu": gpus}} if gpus else {}),
              F.JobStarted(time=start, job_id=job_id, run=1, host="h", pid=1)]:
        m.apply(m.position + 1, f)


def test_a_runs_slot_and_gpu_seconds_are_charged_when_it_ends_and_halve_every_half_life():
    m = world()
    run(m, 1, slots=2, start=0.0, gpus=1.0)
    m.apply(m.position + 1, F.JobFinished(time=50.0, job_id=1, run=1, state="DONE", exit_code=0))
    p = m.projects["p"]
    assert decayed(p, "alice", 50.0) == pytest.approx((100.0, 50.0, 0.0))
    assert decayed(p, "alice", 150.0) == pytest.approx((50.0, 25.0, 0.0))
    assert decayed(p, "bob", 150.0) == (0.0, 0.0, 0.0)


def test_a_requeued_run_is_charged_and_a_finished_job_requeued_again_is_not_charged_twice():
    m = world()
    run(m, 1, slots=1, start=0.0)
    m.apply(m.position + 1, F.JobRequeued(time=10.0, job_id=1, run=1, reason="host lost"))
    assert decayed(m.projects["p"], "alice", 10.0)[0] == pytest.approx(10.0)
    for f in [F.JobAllocated(time=10.0, job_id=1, run=2, hosts=["h"], slots={"h": 1}, counters={}),
              F.JobStarted(time=10.0, job_id=1, run=2, host="h", pid=1),
              F.JobFinished(time=20.0, job_id=1, run=2, state="DONE", exit_code=0),
              F.JobRequeued(time=30.0, job_id=1, run=2, reason="requeued by alice")]:
        m.apply(m.position + 1, f)
    assert decayed(m.projects["p"], "alice", 20.0)[0] == pytest.approx(10.0 * 0.5 ** 0.1 + 10.0)


def test_usage_survives_a_redefinition_and_a_snapshot():
    m = world()
    run(m, 1, slots=4, start=0.0)
    m.apply(m.position + 1, F.JobFinished(time=100.0, job_id=1, run=1, state="EXIT", exit_code=1))
    m.apply(m.position + 1, F.ProjectDefined(time=200.0, name="p", description="again", usage_half_life=2 * H))
    p = m.projects["p"]
    assert p.usage_half_life == 2 * H
    assert decayed(p, "alice", 200.0)[0] == pytest.approx(200.0)  # 400 halved once at the old half-life
    assert decayed(p, "alice", 400.0)[0] == pytest.approx(100.0)  # then once more in 200 s
    back = Model.from_snapshot(json.loads(m.snapshot_json()))
    assert back.projects["p"] == p


def test_a_released_claims_byte_seconds_count_against_its_owner():
    from tests.model.test_job_claims import ADMIN, PROVISIONER, World
    from xce.model import claims

    w = World()
    claim = w.standalone("data")
    created = claim.created
    w.commit(claims.delete(w.model, ADMIN, "data", w.tick()))
    w.run_agent(PROVISIONER)
    assert claim.state is claims.ClaimState.RELEASED
    released = claim.history[-1]["time"]
    p = w.model.projects["default"]
    assert decayed(p, claim.owner, released) == pytest.approx((0.0, 0.0, claim.size_bytes * (released - created)))


def test_standings_list_each_projects_enabled_users_and_users_read_only_their_own_projects():
    from xce.model.fairshare import members, visible_projects
    from xce.model.identity import Role, User

    m = world()
    for f in [F.ProjectDefined(time=0, name="r"),
              F.UserDefined(time=0, name="alice", role="user", projects=["p", "r"]),
              F.UserDefined(time=0, name="bob", role="user", projects=["p"]),
              F.UserDisabled(time=0, name="bob", disabled=True)]:
        m.apply(m.position + 1, f)
    assert members(m) == {"p": {"alice"}, "r": {"alice"}}
    carol = User(name="carol", role=Role.USER, projects=["r"])
    assert visible_projects(carol, {"p", "r"}) == {"r"}
    assert visible_projects(User(name="root", role=Role.ADMIN, projects=[]), {"p", "r"}) == {"p", "r"}
