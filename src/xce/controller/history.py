"""Bounded history in the controller: the leader's retirement pass, and reading the archive back.

The pass is level-triggered and idempotent: every ``retire_every`` seconds the leader asks the model
which records may leave (``xce.model.history.retirable``, pure) and commits one ``RecordsRetired``
fact naming them, at most ``retire_batch``; a full batch is followed by the next one at once.  It
keeps no state of its own, so a new leader simply carries on.  The commit loop hands the retired
documents to the store with the fact, and folds the fact only once it is durable
(``fold_after_commit``): reads do not wait for the thousands of documents a large array's
retirement writes.

Reads merge the archive with what is still live.  A history page reads the live model first, at
its committed position P, then the archive up to P (``max_position``): a record retired after P was
still live at P, one retired before is no longer live, so every record is counted exactly once
whatever retires in between.
"""

from __future__ import annotations

import dataclasses

import asyncio
import logging
import time
from typing import Iterable

import orjson

from xce.controller.commit import Outcome
from xce.controller.core import Controller
from xce.controller.memory import release_free_memory
from xce.errors import XceError
from xce.model import Model
from xce.model.history import add_usage, live_history, live_usage, retirable
from xce.model.claims import Claim
from xce.model.jobs import Job
from xce.records import HistoryQuery, Usage, UsageQuery
from xce.store.base import ARCHIVE_IDS

log = logging.getLogger("xce.history")


class Retirement:
    """The leader's retirement pass (one per controller; only the leader acts)."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        ctl.listeners.background.append(self.run)

    def _decide(self, model: Model) -> Outcome:
        cfg = self.ctl.config.controller
        fact = retirable(model, time.time(), cfg.keep_finished_seconds, cfg.retire_batch)
        if fact is None:
            return Outcome(result=0)
        return Outcome([fact], result=len(fact.jobs) + len(fact.claims))

    async def run(self) -> None:
        cfg = self.ctl.config.controller
        while True:
            await asyncio.sleep(cfg.retire_every)
            if not self.ctl.serving:
                continue
            retired = 0
            try:
                while True:
                    n = await self.ctl.execute(self._decide, fold_after_commit=True)
                    self.ctl.stats.retired += n
                    retired += n
                    if n < cfg.retire_batch:
                        break
                    await asyncio.sleep(0)  # let requests in between two full batches
            except XceError as e:  # not leading any more, or the store refused: the next pass tries again
                log.warning("retirement pass: %s", e)
            if retired:
                release_free_memory()  # what the retired records held, back to the system


def job_of(doc: str) -> Job:
    return Job(**orjson.loads(doc))


def claim_of(doc: str) -> Claim:
    return Claim(**orjson.loads(doc))


async def archived_job(ctl: Controller, job_id: int) -> Job | None:
    rows = await ctl.read_store(ctl.store.archived_jobs, [job_id])
    return job_of(rows[0].doc) if rows else None


async def jobs_by_id(ctl: Controller, ids: Iterable[int]) -> tuple[list[Job], set[int]]:
    """The jobs ``ids``, live or retired into the archive, in the order asked (an id in neither is left
    out), an array's id standing for its elements, as LSF's ``bjobs ID`` lists them; and which of them
    are archived.  The live model is read first, then the archive: a job retired in between is found
    there (its document is written before its retirement is folded), so a poller never sees a job
    vanish.  (An array retires whole, and its elements' ids follow its own: ``apply_job_submitted``.)"""
    found: dict[int, Job] = {}
    missing: list[int] = []
    for job_id in ids:
        job = ctl.model.jobs.get(job_id)
        if job is None:
            missing.append(job_id)
        elif job.array_parent == job_id:
            found.update(_live_elements(ctl.model, job_id))
        else:
            found[job.id] = job
    archived: set[int] = set()
    for start in range(0, len(missing), ARCHIVE_IDS):
        for row in await ctl.read_store(ctl.store.archived_jobs, missing[start:start + ARCHIVE_IDS]):
            job = job_of(row.doc)
            elements = await _archived_elements(ctl, job.id) if job.array_parent == job.id else [job]
            found.update((j.id, j) for j in elements)
            archived.update(j.id for j in elements)
    return sorted(found.values(), key=lambda j: j.id), archived


async def claims_of(ctl: Controller, ended: Iterable[Job]) -> Model:
    """The claims archived jobs name (their run's, their early staging's, their templates'), as they ended:
    retired with them (template claims), or live or archived (standalone ones), for their documents."""
    claim_ids = [c for j in ended for c in
                 (*j.run_claims, *([j.early_claim] if j.early_claim is not None else ()),
                  *(r["claim_id"] for r in j.claim_refs))]
    return Model(claims=await claims_by_id(ctl, claim_ids)) if claim_ids else Model()


def _live_elements(model: Model, parent: int) -> Iterable[tuple[int, Job]]:
    job_id = parent
    while (job := model.jobs.get(job_id)) is not None and job.array_parent == parent:
        yield job_id, job
        job_id += 1


async def _archived_elements(ctl: Controller, parent: int) -> list[Job]:
    """An archived array's elements: the ids from its own on, a chunk at a time, until one is not its."""
    out: list[Job] = []
    start = parent
    while True:
        rows = await ctl.read_store(ctl.store.archived_jobs, list(range(start, start + ARCHIVE_IDS)))
        chunk = sorted((job_of(r.doc) for r in rows), key=lambda j: j.id)
        mine = [j for j in chunk if j.array_parent == parent]
        out += mine
        if len(mine) < ARCHIVE_IDS:
            return out
        start += ARCHIVE_IDS


async def claims_by_id(ctl: Controller, ids: Iterable[int]) -> dict[int, Claim]:
    """The claims ``ids``, live or archived (those in neither are left out)."""
    out: dict[int, Claim] = {}
    missing = []
    for claim_id in ids:
        claim = ctl.model.claims.get(claim_id)
        if claim is not None:
            out[claim_id] = claim
        else:
            missing.append(claim_id)
    for start in range(0, len(missing), ARCHIVE_IDS):  # (the store reads ARCHIVE_IDS at a time)
        for row in await ctl.read_store(ctl.store.archived_claims, missing[start:start + ARCHIVE_IDS]):
            out[row.id] = claim_of(row.doc)
    return out


async def archived_claims_named(ctl: Controller, name: str, projects: list[str] | None) -> list[Claim]:
    rows = await ctl.read_store(ctl.store.archived_claims_named, name, projects)
    return [claim_of(r.doc) for r in rows]


async def history(ctl: Controller, query: HistoryQuery) -> tuple[list[Job], set[int]]:
    """One page of finished jobs, live and archived, newest id first; and which of them are archived.
    The caller has passed ``read_barrier``: the live model is committed."""
    live = live_history(ctl.model, query)  # first, at the committed position ...
    position = ctl.model.position
    rows = await ctl.read_store(ctl.store.query_history, _at(query, position))  # ... then the archive up to it
    archived = {r.id: job_of(r.doc) for r in rows}
    merged = {j.id: j for j in live}
    merged.update((i, j) for i, j in archived.items() if i not in merged)
    page = sorted(merged.values(), key=lambda j: j.id, reverse=True)[:query.limit]
    return page, {j.id for j in page if j.id in archived and j.id not in {x.id for x in live}}


async def usage(ctl: Controller, query: UsageQuery) -> list[Usage]:
    live = live_usage(ctl.model, query)
    position = ctl.model.position
    stored = await ctl.read_store(ctl.store.usage, dataclasses.replace(query, max_position=position))
    return add_usage(live, stored)


def _at(query: HistoryQuery, position: int) -> HistoryQuery:
    return HistoryQuery(since=query.since, until=query.until, user=query.user, project=query.project,
                        states=query.states, name=query.name, array_parent=query.array_parent,
                        before_id=query.before_id, max_position=position, limit=query.limit)
