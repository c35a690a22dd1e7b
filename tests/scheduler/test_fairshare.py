"""Fair share order (``xce.scheduler.fairshare``) on hand-built views: within a queue, the project and
then the user furthest below its share goes first; over many cycles, usage converges to the shares."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from xce.scheduler.core import schedule
from xce.scheduler.view import ClusterView, FairShare, JobView, Policy

from tests.scheduler.test_core import check_plan, host


def job(id: int, project: str, user: str = "u", priority: int = 50) -> JobView:
    return JobView(id=id, run=0, queue="normal", priority=priority, slots=1, resreq="", project=project, user=user)


def fs(usage: dict | None = None, running: dict | None = None, projects: dict | None = None,
       users: dict | None = None) -> FairShare:
    return FairShare(project_shares=MappingProxyType(projects or {"a": 2.0, "b": 1.0}),
                     user_shares=MappingProxyType({p: MappingProxyType(u) for p, u in (users or {}).items()}),
                     usage=MappingProxyType(usage or {}), running=MappingProxyType(running or {}))


def cycle(hosts, jobs, share: FairShare):
    view = ClusterView(position=1, hosts=tuple(hosts), pending=tuple(jobs), policy=Policy(fairshare=share))
    plan = schedule(view)
    check_plan(view, plan)
    return plan


def owners(plan, jobs) -> dict[str, int]:
    by_id = {j.id: j for j in jobs}
    out: dict[str, int] = {}
    for a in plan.allocations:
        key = by_id[a.job_id].project + "/" + by_id[a.job_id].user
        out[key] = out.get(key, 0) + 1
    return out


def test_one_cycle_shares_its_slots_by_share_whoever_submitted_first():
    jobs = [job(i, "b") for i in range(1, 101)] + [job(i, "a") for i in range(101, 201)]
    plan = cycle([host("h", 30)], jobs, fs())
    assert owners(plan, jobs) == {"a/u": 20, "b/u": 10}


def test_usage_counts_against_a_project_and_queue_priority_still_comes_first():
    jobs = [job(1, "a"), job(2, "b"), job(3, "a", priority=90)]
    plan = cycle([host("h", 2)], jobs, fs(usage={("a", "u"): 1000.0}))
    assert [a.job_id for a in plan.allocations] == [3, 2]


def test_users_share_their_projects_part():
    jobs = [job(i, "a", "bob") for i in range(1, 51)] + [job(i, "a", "alice") for i in range(51, 101)]
    plan = cycle([host("h", 12)], jobs, fs(users={"a": {"alice": 2.0, "bob": 1.0}}))
    assert owners(plan, jobs) == {"a/alice": 8, "a/bob": 4}


@pytest.mark.parametrize("shares", [(2.0, 1.0), (3.0, 1.0), (1.0, 1.0)])
def test_shares_converge_over_many_cycles_of_short_jobs(shares):
    """Every cycle the whole cluster frees (jobs of one time unit); usage decays by half every 20 cycles."""
    usage = {("a", "u"): 0.0, ("b", "u"): 0.0}
    total = {"a": 0, "b": 0}
    next_id = 1
    for _ in range(200):
        jobs = []
        for p in ("b", "a"):  # b always submits first
            jobs += [job(next_id + i, p) for i in range(40)]
            next_id += 40
        plan = cycle([host("h1", 7), host("h2", 6)], jobs,
                     fs(usage=dict(usage), projects={"a": shares[0], "b": shares[1]}))
        got = owners(plan, jobs)
        for p in ("a", "b"):
            usage[(p, "u")] = usage[(p, "u")] * 0.5 ** (1 / 20) + got.get(f"{p}/u", 0)
            total[p] += got.get(f"{p}/u", 0)
    assert total["a"] / total["b"] == pytest.approx(shares[0] / shares[1], rel=0.1)
