"""Job dependencies (``-w``): what an expression's targets name, whether it holds, and who waits on whom.

A submission's expression (``xce.depend``'s tree) is *resolved* when the job is submitted: every
target becomes the ids of the live jobs it names, as the submitter may see them (a job id: that job,
or every element of the array it is; ``ID[I]``: that element; a name: the submitter's own jobs of
that name, the most recently submitted one, as LSF's ``JOB_DEP_LAST_SUB=1``; a name with ``*``:
every one of the submitter's jobs it matches).  The resolved tree goes into the ``JobSubmitted``
fact, so the fold, and a replay, read the same ids.

A condition is three-valued (``Verdict``): it holds now, it may hold later, or it never can (the job
it names ended the other way: ``done()`` of a job that exited).  The model keeps, for every waiting
job (PEND or PSUSP, never started) with a dependency, the jobs it names (``State.dependents``, the
reverse index) and, while its condition does not hold, the verdict (``State.dependency_blocked``).
Both change only in the fold (``watch``, ``changed``): a job's state change re-evaluates the jobs
waiting on it, and nothing polls.  The view builder leaves blocked jobs out of the scheduler's view,
so a dependent job is planned in the cycle that follows its parent's end (that fact wakes the loop).

An array's elements are read from the last (the first that does not hold decides): a fan-in on
10,000 elements costs O(N) over their ends, and an element that exited is found to make ``done()``
of its array impossible once the elements after it have ended.

A job whose condition can never hold stays PEND with the reason "dependency condition never
satisfied" (LSF's behaviour); with ``-ti`` (``terminate_orphan``) the scheduling loop ends it
(``orphans``, then ``xce.model.jobs.kill`` semantics: EXIT, never started).  A job that a waiting
dependent names is not retired from the live model (``xce.model.history.retirable``) until the
dependent starts or ends, so its outcome is still there to read.
"""

from __future__ import annotations

import enum
import fnmatch
from typing import Any, Iterable

from xce.depend import COUNTS, Tree, describe, target_label
from xce.errors import InvalidRequest, NotFound
from xce.model.entities.identity import User
from xce.model.entities.jobs import Job, JobState
from xce.model.facts import Fact, JobFinished
from xce.model.state import State

J = JobState
_NOT_STARTED = frozenset({J.PEND, J.PSUSP})


class Verdict(enum.StrEnum):
    HOLDS = "holds"
    WAITS = "waits"  # may hold later
    NEVER = "never"  # cannot hold: what it names ended the other way


NEVER_REASON = "dependency condition never satisfied"


# ---------------------------------------------------------------- resolution (at submission)


def resolve(model: State, actor: User, tree: Tree) -> Tree:
    """``tree`` with every target replaced by ``{"jobs": [ids], "label": text}``.  Raises ``NotFound``
    for a target that names no job ``actor`` may see (another user's job looks the same as none)."""
    tag = tree[0]
    if tag in ("and", "or"):
        return [tag, [resolve(model, actor, t) for t in tree[1]]]
    if tag == "not":
        return ["not", resolve(model, actor, tree[1])]
    _, func, target, op, value = tree
    return ["cond", func, {"jobs": _target_jobs(model, actor, target), "label": target_label(target)}, op, value]


def _visible(actor: User, job: Job) -> bool:
    return actor.is_admin or job.user == actor.name


def array_or_job(model: State, job: Job) -> list[int]:
    """Every element of the array whose first element ``job`` is; else ``job`` alone."""
    if job.array_parent != job.id:
        return [job.id]
    return array_elements(model, job.id)


def array_elements(model: State, parent: int) -> list[int]:
    """The ids of the live elements of the array whose first element is ``parent``: an array's
    elements take consecutive ids from its first, so the walk stops at the first id that is not one."""
    ids, job_id = [], parent
    while (element := model.jobs.get(job_id)) is not None and element.array_parent == parent:
        ids.append(job_id)
        job_id += 1
    return ids


def _target_jobs(model: State, actor: User, target: dict[str, Any]) -> list[int]:
    label = target_label(target)
    if "id" in target:
        job = model.jobs.get(target["id"])
        if job is None or not _visible(actor, job):
            raise NotFound(f"dependency names job {label}, which is not in the system (a job that finished "
                           "more than the history's keep time ago has left it)")
        if "index" not in target:
            return array_or_job(model, job)
        element = next((model.jobs[i] for i in array_or_job(model, job)
                        if model.jobs[i].array_index == target["index"]), None)
        if element is None:
            raise NotFound(f"dependency names {label}: job {target['id']} has no element {target['index']}")
        return [element.id]
    pattern = target["name"]
    mine = [j for j in model.jobs.values() if j.user == actor.name and fnmatch.fnmatchcase(j.name, pattern)]
    if not mine:
        raise NotFound(f"dependency names {label}: you have no job of that name")
    if "*" in pattern:
        return sorted(j.id for j in mine)
    latest = max(mine, key=lambda j: j.id)  # JOB_DEP_LAST_SUB=1: the most recent submission of that name
    first = model.jobs.get(latest.array_parent) if latest.array_parent is not None else latest
    return array_or_job(model, first or latest)


def check_tree(tree: Tree) -> None:
    """What the grammar lets through but a condition cannot mean (raises ``InvalidRequest``)."""
    tag = tree[0]
    if tag in ("and", "or"):
        for t in tree[1]:
            check_tree(t)
    elif tag == "not":
        check_tree(tree[1])
    elif tree[1] in COUNTS and tree[4] != "*" and not isinstance(tree[4], int):
        raise InvalidRequest(f"{describe(tree)}: a count is a number or *")


# ---------------------------------------------------------------- evaluation


def evaluate(model: State, tree: Tree) -> Verdict:
    tag = tree[0]
    if tag == "and":
        verdicts = [evaluate(model, t) for t in tree[1]]
        if Verdict.NEVER in verdicts:
            return Verdict.NEVER
        return Verdict.HOLDS if all(v is Verdict.HOLDS for v in verdicts) else Verdict.WAITS
    if tag == "or":
        verdicts = [evaluate(model, t) for t in tree[1]]
        if Verdict.HOLDS in verdicts:
            return Verdict.HOLDS
        return Verdict.NEVER if all(v is Verdict.NEVER for v in verdicts) else Verdict.WAITS
    if tag == "not":  # a state a job may leave again (a requeue) is never final: no NEVER from a negation
        return Verdict.WAITS if evaluate(model, tree[1]) is Verdict.HOLDS else Verdict.HOLDS
    _, func, target, op, value = tree
    jobs = model.jobs
    if func in COUNTS:
        return _count(func, [jobs.get(i) for i in target["jobs"]], op, value)
    for job_id in reversed(target["jobs"]):  # an array: every element.  The first that does not hold
        # decides, read from the last (no list of them made): elements end roughly in id order, so while
        # an array runs its last element answers at once, and a fan-in on N elements costs O(N) over
        # their ends, not O(N^2)
        verdict = _one(func, jobs.get(job_id), op, value)
        if verdict is not Verdict.HOLDS:
            return verdict
    return Verdict.HOLDS


def _compare(op: str | None, a: int, b: int) -> bool:
    return {"==": a == b, "!=": a != b, ">": a > b, "<": a < b, ">=": a >= b, "<=": a <= b}[op or "=="]


def _post_failed(job: Job) -> bool:
    """Its post-processing failed: the stage-out (the job ended EXIT for it) or its -Ep."""
    return job.state is J.EXIT and (job.exit_reason or "").startswith("stage-out") or \
        job.post_exec_exit not in (None, 0)


def _one(func: str, job: Job | None, op: str | None, value: Any) -> Verdict:
    if job is None:  # gone from the live model although named (cannot happen while it is named): nothing to wait for
        return Verdict.NEVER
    state = job.state
    if func == "started":
        return Verdict.WAITS if state in _NOT_STARTED else Verdict.HOLDS
    if not job.finished:
        return Verdict.WAITS
    if func == "ended":
        return Verdict.HOLDS
    if func == "done":
        return Verdict.HOLDS if state is J.DONE else Verdict.NEVER
    if func == "exit":
        ok = state is J.EXIT and (value is None or (job.exit_code is not None and _compare(op, job.exit_code, value)))
        return Verdict.HOLDS if ok else Verdict.NEVER
    if func == "post_done":
        return Verdict.NEVER if _post_failed(job) else Verdict.HOLDS
    if func == "post_err":
        return Verdict.HOLDS if _post_failed(job) else Verdict.NEVER
    raise AssertionError(f"unknown dependency condition {func!r}")  # the parser knows no other


def _counted(func: str, job: Job) -> bool:
    s = job.state
    return {"numdone": s is J.DONE, "numended": job.finished, "numexit": s is J.EXIT,
            "numrun": s in (J.RUN, J.USUSP, J.STAGE_OUT), "numpend": s in _NOT_STARTED,
            "numstart": s not in _NOT_STARTED}[func]


def _count(func: str, jobs: list[Job | None], op: str | None, value: Any) -> Verdict:
    live = [j for j in jobs if j is not None]
    n = sum(1 for j in live if _counted(func, j))
    want, op = (len(jobs), "==") if value == "*" else (int(value), op)
    if _compare(op, n, want):
        return Verdict.HOLDS
    if func in ("numdone", "numended", "numexit"):  # these only grow, up to what has not ended yet
        could = n + sum(1 for j in live if not j.finished)
        if not any(_compare(op, k, want) for k in range(n, could + 1)):
            return Verdict.NEVER
    return Verdict.WAITS


def unmet(model: State, tree: Tree) -> str:
    """The parts of ``tree`` that do not hold now, as LSF writes them, each with the states of the jobs
    it names (for ``xce job why``)."""
    parts: list[str] = []

    def walk(t: Tree) -> None:
        if evaluate(model, t) is Verdict.HOLDS:
            return
        if t[0] in ("and", "or"):
            for sub in t[1]:
                walk(sub)
            return
        if t[0] == "not":
            parts.append(describe(t))
            return
        states = sorted({(model.jobs[i].state.value if i in model.jobs else "gone") for i in t[2]["jobs"]})
        parts.append(f"{describe(t)} ({t[2]['label']} is {'/'.join(states)})")

    walk(tree)
    return "; ".join(parts)


# ---------------------------------------------------------------- the indexes (the fold keeps them)


def waits(job: Job) -> bool:
    """Does ``job``'s dependency decide when it may start (it has one, waits, and never started)?"""
    return job.dependency_tree is not None and job.state in _NOT_STARTED and job.run == 0


def named_jobs(tree: Tree) -> Iterable[int]:
    if tree[0] in ("and", "or"):
        for t in tree[1]:
            yield from named_jobs(t)
    elif tree[0] == "not":
        yield from named_jobs(tree[1])
    else:
        yield from tree[2]["jobs"]


def watch(model: State, job: Job) -> None:
    """Index ``job``'s dependency (or drop it, once it no longer waits): the jobs it names, and whether
    it is blocked now."""
    if job.dependency_tree is None:
        return
    if not waits(job):
        forget(model, job)
        return
    if job.id not in model.watching:
        named_ids = sorted(set(named_jobs(job.dependency_tree)))
        model.watching[job.id] = named_ids
        for named in named_ids:
            model.dependents.setdefault(named, set()).add(job.id)
    _judge(model, job)


def forget(model: State, job: Job) -> None:
    """Drop ``job``'s dependency from the indexes (it no longer waits, or ``xce mod -w`` replaces it)."""
    if model.dependency_blocked.pop(job.id, None) is not None or job.id in model.watching:
        for named in model.watching.pop(job.id, ()):
            dependents = model.dependents.get(named)
            if dependents is not None:
                dependents.discard(job.id)
                if not dependents:
                    del model.dependents[named]


def _judge(model: State, job: Job) -> None:
    assert job.dependency_tree is not None
    verdict = evaluate(model, job.dependency_tree)
    if verdict is Verdict.HOLDS:
        if model.dependency_blocked.pop(job.id, None) is not None:
            model.dependency_releases += 1
    else:
        model.dependency_blocked[job.id] = verdict


def changed(model: State, job: Job) -> None:
    """``job`` changed state: judge again the jobs waiting on it."""
    for dependent_id in list(model.dependents.get(job.id, ())):
        dependent = model.jobs.get(dependent_id)
        if dependent is not None and waits(dependent):
            _judge(model, dependent)


def rebuild(model: State) -> None:
    """The indexes from the jobs (a model read back from a snapshot)."""
    model.dependents, model.watching, model.dependency_blocked = {}, {}, {}
    for job in model.jobs.values():
        if job.dependency_tree is not None and waits(job):
            watch(model, job)


def orphans(model: State) -> list[int]:
    """Jobs submitted with ``-ti`` whose dependency can never hold (PEND or PSUSP): the scheduling
    loop ends them (``terminate_orphans``)."""
    return [i for i, v in model.dependency_blocked.items() if v == Verdict.NEVER and model.jobs[i].terminate_orphan]


def terminate_orphans(model: State, now: float) -> list[Fact]:
    """End every ``-ti`` job whose dependency can never hold, as a kill of a job that never started
    (``JobFinished`` EXIT), judged on the model at commit time."""
    return [JobFinished(time=now, job_id=i, run=model.jobs[i].run, state=J.EXIT.value,
                        reason=f"{NEVER_REASON} (-ti): {unmet(model, model.jobs[i].dependency_tree or [])}")
            for i in orphans(model)]
