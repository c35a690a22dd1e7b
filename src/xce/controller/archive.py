"""The store's tables beside the log, as the controller writes and reads them: the archive (finished
jobs and released claims retired from the model) and the audit trail.

Writes ride on a batch's append (``commit.py``): a batch's audit records and the whole documents of
what it retires (``add_retiring``, asked before the fold drops them) go into the store in the same
transaction as its facts.  Reads (``StoreReads.read``) run on a thread of their own, off the event
loop and the writer thread (the stores read on their own connections).  Only the leader answers,
like every read: a row is in its table once its batch committed, so nothing read is not durable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Callable, TypeVar

import orjson

from xce.controller.term import Term
from xce.errors import Unavailable
from xce.model import Model
from xce.model.claims import Claim
from xce.model.facts import Fact, RecordsRetired
from xce.model.history import job_columns, released_time, retiring
from xce.model.jobs import Job
from xce.store import ArchivedClaim, ArchivedJob, StoreError

T = TypeVar("T")

#: the jobs and claims a batch retires, each with its retirement fact's position: archived with the batch
Retired = tuple[list[tuple[int, Job]], list[tuple[int, Claim]]]


def add_retiring(retired: Retired, model: Model, position: int, fact: Fact) -> None:
    """If ``fact`` is a retirement, add the archive documents of what its fold will drop, as
    ``model`` holds them now (before that fold): the store writes them with the fact."""
    if isinstance(fact, RecordsRetired):
        jobs, claims = retiring(model, fact)
        retired[0].extend((position, j) for j in jobs)
        retired[1].extend((position, c) for c in claims)


def archived_job(position: int, job: Job) -> ArchivedJob:
    """A retired job as its archive row: indexed columns, and every field (history too) as JSON."""
    return ArchivedJob(**job_columns(job), position=position, doc=orjson.dumps(job).decode())


def archived_claim(position: int, claim: Claim) -> ArchivedClaim:
    return ArchivedClaim(id=claim.id, name=claim.name, project=claim.project, owner=claim.owner,
                         form=claim.form.value, class_name=claim.class_name, job_id=claim.job_id,
                         size_bytes=claim.size_bytes, created=claim.created, released=released_time(claim),
                         position=position, doc=orjson.dumps(claim).decode())


class StoreReads:
    """Reads of the archive and the audit trail: ``read(store.query_audit, query)``,
    ``read(store.archived_jobs, ids)``..."""

    def __init__(self, term: Term) -> None:
        self.term = term
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xce-reader")

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, a store read, on the reader thread; ``Unavailable`` if the store cannot answer."""
        if not self.term.is_leader:
            raise self.term.not_leader()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._reader, fn, *args)
        except StoreError as e:
            raise Unavailable(f"the store cannot answer: {e}") from e

    def close(self) -> None:
        self._reader.shutdown(wait=True)
