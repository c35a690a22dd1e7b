"""One scheduling cycle, in process, on generated clusters: how long and how it grows.

    python bench/scheduler_scale.py [--repeats N] [--seed S]

For each size a Model is built by applying facts (queues, HostRegistered,
JobSubmitted, and JobAllocated/JobStarted for a few running jobs so that
hosts are partly used), then:

- ``build_view(model)`` is timed (the real cycle pays for it too), and
- ``schedule(view)`` is timed on that view: best of N repeats with
  ``time.perf_counter``.  The resreq parse cache is warm after the first
  repeat, as it is in a running controller.

The mix: three queues with different priorities; a dozen resource
requirement shapes (select on zone/fs/gpu model/cpu speed, rusage on mem,
gpu and scratch counters, ``-n`` spread, ``span[hosts=1]``, ``span[ptile=K]``,
``order[]``, a few bad strings); hosts with varied slots, attributes and
counters.  Growth is printed as ratios, never asserted.  A last line times
a stress case that is not the realistic mix: every job its own ``-n`` and
``rusage`` amount (the scheduler's per-shape caches help least there).

GPU placement (issue 33): 10,000 pending GPU jobs (``-gpu num=1/2/4/8``, a
tenth of them ``j_exclusive=no``, a few ``gmodel=``) on 1,000 hosts with 8
GPUs and 8 slots each (one in five running a 2-GPU job), one cycle, against
the same jobs as plain slots (``num=N`` as ``-n N span[hosts=1]``, no GPU):
the goal is at most 2x the plain cycle.

``--policy-only``: one cycle with backfill (``reservation_depth`` 1) and fair share at 100,000 pending
jobs on 10,000 hosts, every host busy, in turns with the same view without the policy, ``--repeats``
times each: best and median of wall and CPU time (on a shared machine the wall time is mostly waiting
for a CPU: the CPU medians are what to compare), and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from xce.model import facts as F  # noqa: E402
from xce.model import Model  # noqa: E402
from xce.scheduler.core import schedule  # noqa: E402
from xce.controller.view import build_view  # noqa: E402
from xce.config import parse_config  # noqa: E402
from xce.scheduler.view import ClusterView, JobView, Policy  # noqa: E402

GiB = 2**30
QUEUES = (("high", 100, 1), ("normal", 50, 6), ("low", 10, 3))  # name, priority, weight

# (weight, slots, resreq)
SHAPES = (
    (30, 1, ""),
    (10, 1, "select[zone==a]"),
    (10, 4, "select[fs==lustre && cpu_speed>=2.5] rusage[mem=4G]"),
    (8, 1, "select[defined(gpumodel)] rusage[gpu=1,mem=16Gi]"),
    (4, 8, "select[gpumodel==h100] rusage[gpu=1,mem=32Gi] span[hosts=1]"),
    (8, 2, "select[zone==b || zone==c] rusage[mem=8G] order[-mem]"),
    (8, 1, "select[!(zone==d)] rusage[mem=1G] order[cpu_speed]"),
    (6, 32, "rusage[mem=2G] span[ptile=8]"),
    (6, 4, "rusage[scratch=100Gi] span[hosts=1]"),
    (5, 16, "select[fs==nfs] rusage[mem=1G]"),
    (4, 2, "select[zone==a && fs==lustre] rusage[mem=4G] span[hosts=1] order[-slots]"),
    (1, 1, "select[zone==a"),  # bad: unclosed bracket
)


# with --policy: run limits (seconds) drawn for every job, and projects with users for fair share
LIMITS = (600.0, 1800.0, 3600.0, 4 * 3600.0)
PROJECTS = (("default", 1), ("p1", 2), ("p2", 3), ("p3", 1))  # name, shares
USERS = ("u1", "u2", "u3")
POLICY_CONFIG = "[controller]\nreservation_depth = 1\n[[users]]\nname = \"admin\"\nrole = \"admin\"\n" + "".join(
    f"[[users]]\nname = \"{u}\"\nprojects = [{', '.join(repr(p) for p, _ in PROJECTS)}]\n".replace("'", '"')
    for u in USERS) + "".join(
    f"[[projects]]\nname = \"{p}\"\nshares = {s}\nuser_shares = {{u1 = 2, u2 = 1}}\n" for p, s in PROJECTS)


def cluster_facts(n_hosts: int, n_jobs: int, seed: int, policy: bool = False) -> list[F.Fact]:
    rnd = random.Random(seed)
    out: list[F.Fact] = [F.QueueDefined(time=0.0, name=q, priority=p) for q, p, _ in QUEUES]
    out += [F.ProjectDefined(time=0.0, name=p) for p, _ in (PROJECTS if policy else PROJECTS[:1])]

    def owner() -> dict:
        """Who a job is: bench/default, or (policy) a random user of a random project, with a run limit."""
        if not policy:
            return {"user": "bench", "project": "default"}
        return {"user": rnd.choice(USERS), "project": rnd.choice(PROJECTS)[0], "run_limit": rnd.choice(LIMITS)}
    hosts = []
    for i in range(n_hosts):
        name = f"h{i:05d}"
        slots = rnd.choice((8, 16, 32, 64))
        attrs = {"zone": rnd.choice("abcd"), "fs": rnd.choice(("lustre", "lustre", "nfs")),
                 "cpu_speed": f"{rnd.choice((2.0, 2.4, 2.8, 3.2))}"}
        counters = {"mem": float(rnd.choice((64, 128, 256, 512)) * GiB),
                    "scratch": float(rnd.choice((0.5, 1, 2)) * 1024 * GiB)}
        if rnd.random() < 0.15:
            attrs["gpumodel"] = rnd.choice(("a100", "h100"))
            counters["gpu"] = float(rnd.choice((4, 8)))
        out.append(F.HostRegistered(time=0.0, name=name, slots=slots, attrs=attrs, counters=counters))
        hosts.append((name, slots))
    queue_names = [q for q, _, w in QUEUES for _ in range(w)]
    shape_pick = [(s, r) for w, s, r in SHAPES for _ in range(w)]
    job_id = 1
    # a few running jobs (one on every fifth host) so that hosts are partly used; with the policy, the
    # steady state a backlog of pending jobs means: every host busy, all but 0-2 of its slots held
    for name, slots in (hosts if policy else hosts[::5]):
        n = slots - rnd.randint(0, 2) if policy else slots // 2
        out.append(F.JobSubmitted(time=1.0, id=job_id, name="running", queue="normal", command=["sleep", "1"],
                                  slots=n, resreq="rusage[mem=1G]", **owner()))
        out.append(F.JobAllocated(time=1.0, job_id=job_id, run=1, hosts=[name], slots={name: n},
                                  counters={name: {"mem": float(n * 10**9)}}))
        out.append(F.JobStarted(time=1.0, job_id=job_id, run=1, host=name, pid=1))
        job_id += 1
    for _ in range(n_jobs):
        slots, resreq = rnd.choice(shape_pick)
        out.append(F.JobSubmitted(time=2.0, id=job_id, name="j", queue=rnd.choice(queue_names), command=["true"],
                                  slots=slots, resreq=resreq, **owner()))
        job_id += 1
    return out


def build_model(n_hosts: int, n_jobs: int, seed: int, policy: bool = False) -> Model:
    m = Model()
    for pos, f in enumerate(cluster_facts(n_hosts, n_jobs, seed, policy), start=1):
        m.apply(pos, f)
    return m


def measure_policy(n_hosts: int, n_jobs: int, seed: int, repeats: int) -> dict:
    """One cycle with backfill (reservation_depth 1) and fair share (four projects, three users each), and
    the same view without the policy, timed in turns (a busy machine's slow moments fall on both): wall and
    CPU time of each repeat, so that medians can be read as well as the best."""
    model = build_model(n_hosts, n_jobs, seed, policy=True)
    config = parse_config(POLICY_CONFIG)
    now = 100.0  # the running jobs started at 1.0: their limits end between 601 and 14,401
    t_view, view = best_of(lambda: build_view(model, config, now=now), min(repeats, 3))
    assert isinstance(view, ClusterView) and view.policy.fairshare is not None and view.policy.reservation_depth == 1
    assert len(view.pending) == n_jobs
    plain_view = dataclasses.replace(view, policy=Policy())
    times: dict[str, list[tuple[float, float]]] = {"policy": [], "plain": []}  # (wall, CPU) per repeat
    plan = None
    for _ in range(repeats):
        for label, v in (("policy", view), ("plain", plain_view)):
            t0, c0 = time.perf_counter(), time.process_time()
            result = schedule(v)
            times[label].append((time.perf_counter() - t0, time.process_time() - c0))
            if label == "policy":
                plan = result
    assert plan is not None
    held = sum(1 for r in plan.pending_reasons.values() if r.startswith("would delay"))
    out = {"hosts": n_hosts, "jobs": n_jobs, "view": t_view, "alloc": len(plan.allocations),
           "reserved": len(plan.reservations), "held": held}
    for label, pairs in times.items():
        for k, what in enumerate(("wall", "cpu")):
            xs = [p[k] for p in pairs]
            out[f"{label}_{what}_best"], out[f"{label}_{what}_median"] = min(xs), statistics.median(xs)
    return out


def best_of(fn, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def measure(n_hosts: int, n_jobs: int, seed: int, repeats: int) -> dict:
    model = build_model(n_hosts, n_jobs, seed)
    t_view, view = best_of(lambda: build_view(model), repeats)
    assert isinstance(view, ClusterView) and len(view.pending) == n_jobs and len(view.hosts) == n_hosts
    t_cycle, plan = best_of(lambda: schedule(view), repeats)
    return {"hosts": n_hosts, "jobs": n_jobs, "cycle": t_cycle, "view": t_view,
            "alloc": len(plan.allocations), "pending": len(plan.pending_reasons)}


def distinct_shapes(view: ClusterView, seed: int) -> ClusterView:
    """The same hosts and job ids, but every job its own ``-n`` and ``rusage[mem=...]`` amount."""
    rnd = random.Random(seed)
    pending = tuple(JobView(id=j.id, run=j.run, queue=j.queue, priority=j.priority, slots=rnd.randint(1, 8),
                            resreq=f"rusage[mem={rnd.randint(100, 20000)}M]") for j in view.pending)
    return ClusterView(position=view.position, hosts=view.hosts, pending=pending)


GPU_SHAPES = ((50, "num=1"), (20, "num=2"), (10, "num=4"), (5, "num=8"), (10, "num=1:j_exclusive=no"),
              (5, "num=2:gmodel=H100"))


def gpu_facts(n_hosts: int, n_jobs: int, seed: int, gpus: bool) -> list[F.Fact]:
    """Hosts with 8 slots and 8 GPUs (A100s, a fifth H100s), one in five running a 2-GPU job; ``n_jobs``
    pending GPU jobs, or (``gpus`` False) the same jobs asking ``num`` slots on one host instead."""
    from xce.jobspec_gpu import parse_gpu

    rnd = random.Random(seed)
    out: list[F.Fact] = [F.QueueDefined(time=0.0, name="normal", priority=50), F.ProjectDefined(time=0.0, name="default")]
    names = []
    for i in range(n_hosts):
        name = f"g{i:05d}"
        model = "NVIDIA H100 80GB HBM3" if i % 5 == 4 else "NVIDIA A100-SXM4-80GB"
        devices = [{"id": d, "uuid": f"GPU-{i:05d}-{d}", "model": model, "memory": 80 * GiB} for d in range(8)]
        out.append(F.HostRegistered(time=0.0, name=name, slots=8, gpus=devices if gpus else []))
        names.append(name)
    job_id = 1
    for name in names[::5]:
        out.append(F.JobSubmitted(time=1.0, id=job_id, name="running", user="bench", project="default", queue="normal",
                                  command=["sleep", "1"], slots=1 if gpus else 2, resreq="" if gpus else
                                  "span[hosts=1]", gpu=parse_gpu("num=2").as_json() if gpus else None))
        out.append(F.JobAllocated(time=1.0, job_id=job_id, run=1, hosts=[name], slots={name: 1 if gpus else 2},
                                  gpus={name: [0, 1]} if gpus else {}))
        out.append(F.JobStarted(time=1.0, job_id=job_id, run=1, host=name, pid=1))
        job_id += 1
    pick = [g for w, g in GPU_SHAPES for _ in range(w)]
    for _ in range(n_jobs):
        req = parse_gpu(rnd.choice(pick))
        out.append(F.JobSubmitted(time=2.0, id=job_id, name="g", user="bench", project="default", queue="normal",
                                  command=["true"], slots=1 if gpus else req.num,
                                  resreq="" if gpus else "span[hosts=1]", gpu=req.as_json() if gpus else None))
        job_id += 1
    return out


def measure_gpus(n_hosts: int, n_jobs: int, seed: int, repeats: int) -> dict[bool, dict]:
    """The GPU jobs and the same jobs as plain slots (by ``gpus``), timed in turns, each best of ``repeats``
    (a busy machine's slow moments fall on both)."""
    models = {}
    for gpus in (False, True):
        models[gpus] = Model()
        for pos, f in enumerate(gpu_facts(n_hosts, n_jobs, seed, gpus), start=1):
            models[gpus].apply(pos, f)
    out: dict[bool, dict] = {g: {"cycle": float("inf"), "view": float("inf")} for g in models}
    for _ in range(repeats):
        for gpus, model in models.items():
            t_view, view = best_of(lambda: build_view(model), 1)
            assert isinstance(view, ClusterView) and len(view.pending) == n_jobs and len(view.hosts) == n_hosts
            t_cycle, plan = best_of(lambda: schedule(view), 1)
            r = out[gpus]
            r["cycle"], r["view"] = min(r["cycle"], t_cycle), min(r["view"], t_view)
            r["alloc"], r["pending"] = len(plan.allocations), len(plan.pending_reasons)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gpus-only", action="store_true", help="only the GPU placement comparison")
    ap.add_argument("--policy-only", action="store_true", help="only the backfill + fair share cycle")
    args = ap.parse_args()
    if args.policy_only:
        return policy(args)

    print(f"GPU placement: 10,000 pending GPU jobs on 1,000 hosts x 8 GPUs, best of {args.repeats}")
    print(f"{'jobs as':>12} {'cycle s':>9} {'allocs':>7} {'pending':>8} {'build_view s':>13}")
    rows = measure_gpus(1000, 10_000, args.seed, args.repeats)
    for label, gpus in (("plain slots", False), ("GPU devices", True)):
        r = rows[gpus]
        print(f"{label:>12} {r['cycle']:>9.3f} {r['alloc']:>7} {r['pending']:>8} {r['view']:>13.3f}")
    ratio = rows[True]["cycle"] / rows[False]["cycle"]
    print(f"goal: GPU cycle <= 2x the plain one: {ratio:.2f}x ({'met' if ratio <= 2.0 else 'NOT met'})\n")
    if args.gpus_only:
        return

    print(f"schedule(view), best of {args.repeats}; build_view(model) timed separately\n")
    print(f"{'hosts':>6} {'jobs':>6} {'cycle s':>9} {'allocs':>7} {'pending':>8} {'build_view s':>13} {'total s':>8}")
    for n_hosts in (1000, 5000):
        r = measure(n_hosts, 10_000, args.seed, args.repeats)
        print(f"{r['hosts']:>6} {r['jobs']:>6} {r['cycle']:>9.3f} {r['alloc']:>7} {r['pending']:>8} "
              f"{r['view']:>13.3f} {r['cycle'] + r['view']:>8.3f}")
    goal = r["cycle"]
    print(f"\ngoal: 10,000 pending jobs on 5,000 hosts in < 1 s: cycle {goal:.3f} s "
          f"({'met' if goal < 1.0 else 'NOT met'}); with build_view {goal + r['view']:.3f} s")

    reps = max(1, args.repeats - 2)
    for label, sizes in (("jobs (5,000 hosts)", [(5000, n) for n in (2500, 5000, 10_000)]),
                         ("hosts (10,000 jobs)", [(n, 10_000) for n in (1000, 2500, 5000)])):
        print(f"\ngrowth in {label}, best of {reps}")
        print(f"{'hosts':>6} {'jobs':>6} {'cycle s':>9} {'us/job':>7} {'allocs':>7} {'size x':>7} {'time x':>7}")
        first = None
        for n_hosts, n_jobs in sizes:
            r = measure(n_hosts, n_jobs, args.seed, reps)
            first = first or r
            size_x = (n_jobs / first["jobs"]) if "jobs" in label[:4] else (n_hosts / first["hosts"])
            print(f"{n_hosts:>6} {n_jobs:>6} {r['cycle']:>9.3f} {r['cycle'] / n_jobs * 1e6:>7.1f} "
                  f"{r['alloc']:>7} {size_x:>7.2f} {r['cycle'] / first['cycle']:>7.2f}")

    # not the realistic mix: shapes are cached per (resreq, -n), so this is the worst case for that cache
    view = distinct_shapes(build_view(build_model(5000, 10_000, args.seed)), args.seed)
    t, plan = best_of(lambda: schedule(view), 1)
    shapes = len({(j.resreq, j.slots) for j in view.pending})
    print(f"\nstress, not the realistic mix: 10,000 jobs on 5,000 hosts with {shapes} distinct (resreq, -n) shapes: "
          f"cycle {t:.3f} s, {len(plan.allocations)} allocations")


    policy(args)


def policy(args) -> None:
    reps = max(1, args.repeats)
    load = os.getloadavg()[0]
    r = measure_policy(10_000, 100_000, args.seed, reps)
    print(f"\nbackfill (reservation_depth 1) + fair share (4 projects x 3 users), run limits on every job, "
          f"{reps} repeats, in turns with the same view without the policy (load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs):")
    print(f"{'cycle':>16} {'wall best':>10} {'wall median':>12} {'CPU best':>9} {'CPU median':>11}")
    for label in ("policy", "plain"):
        print(f"{label:>16} {r[f'{label}_wall_best']:>10.3f} {r[f'{label}_wall_median']:>12.3f} "
              f"{r[f'{label}_cpu_best']:>9.3f} {r[f'{label}_cpu_median']:>11.3f}")
    ratio = r["policy_cpu_median"] / r["plain_cpu_median"]
    wall, cpu = r["policy_wall_median"], r["policy_cpu_median"]
    print(f"{r['jobs']:,} pending on {r['hosts']:,} hosts: policy cycle {wall:.3f} s wall, {cpu:.3f} s CPU (medians; "
          f"goal < 1 s: {'met' if wall < 1.0 and cpu < 1.0 else 'met in CPU time' if cpu < 1.0 else 'NOT met'}), "
          f"{ratio:.2f}x the cycle without the policy (CPU medians); build_view {r['view']:.3f} s; "
          f"{r['alloc']} allocations, {r['reserved']} reservation(s), {r['held']} jobs held back by it")


if __name__ == "__main__":
    main()
