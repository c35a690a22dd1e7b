"""``Client``: the REST API as Python calls, raw (``get``/``post``/``request``) and typed helpers.

The helpers are thin: each is one route of ``/v1/`` (see ``/openapi.json``), takes the request's
fields as keyword arguments and returns the controller's JSON document, typed by ``xce.wire``: a
job is a ``JobDoc`` (what ``GET /v1/jobs/{id}`` answers, the shape ``xce --json job show`` prints),
a claim a ``ClaimDoc``.  They are ``TypedDict``s: the decoded JSON itself, so ``job["state"]``
reads as always, and a type checker knows every key.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, TypeVar, cast
from urllib.parse import quote

from xce.client._errors import WaitTimeout
from xce.client._http import DEFAULT_TIMEOUT, FAILOVER_WAIT, Params, Transport
from xce.client.states import JOB_FINISHED, RESIZE_ENDED, ClaimState, SnapshotState
from xce.wire import Submission

if TYPE_CHECKING:  # (xce.wire loads its documents when first named at run time: the CLI starts faster)
    from xce.wire import ClaimDoc, HistoryRow, JobDoc, SnapshotDoc

Doc = TypeVar("Doc", "JobDoc", "ClaimDoc", "SnapshotDoc")

CLAIM_FAILED = ClaimState.FAILED  # a claim stays FAILED until someone deletes it
SNAPSHOT_FAILED = SnapshotState.FAILED  # as claims: until someone deletes it


class Client:
    """A connection to the controllers (one, or several sharing a store) with one bearer token.

    Safe to share between threads: each thread keeps its own kept-alive connection.  Every call
    returns decoded JSON or raises a ``ClientError``.  ``with Client(...) as c:`` closes the
    calling thread's connection at the end.
    """

    def __init__(self, url: str | Sequence[str], token: str, timeout: float = DEFAULT_TIMEOUT, *,
                 failover: float = FAILOVER_WAIT, retry_mutations: bool = False) -> None:
        """``url``: ``http[s]://HOST[:PORT]`` (a bare ``HOST:PORT`` means http), or several controllers
        as ``"URL1,URL2"`` or a list; raises ``InvalidURL``.

        ``timeout`` bounds each call's connect and each wait for bytes, in seconds.  With several
        controllers a call follows the leader and looks for one for up to ``failover`` seconds;
        ``retry_mutations`` lets it send again a change whose answer was lost (only for callers whose
        changes are idempotent: the daemons).  See ``Transport``."""
        self._transport = Transport(url, token, timeout, failover=failover, retry_mutations=retry_mutations)

    @property
    def url(self) -> str:
        """The controller calls go to now: the leader, as far as this client knows."""
        return self._transport.url

    @property
    def urls(self) -> list[str]:
        """Every controller this client knows of (those it was given, then leaders it was sent to)."""
        return list(self._transport.urls)

    @property
    def timeout(self) -> float:
        return self._transport.timeout

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close this thread's connection (the next call opens a new one)."""
        self._transport.close()

    # ------------------------------------------------------------ raw calls

    def request(self, method: str, path: str, *, params: Params = None, body: Any = None,
                idempotent: bool | None = None, timeout: float | None = None) -> Any:
        """One call: ``path`` under the URL's prefix (``/v1/...``), ``params`` as the query, ``body`` as JSON.

        ``idempotent``: the call may be sent again after its answer was lost (default: GETs, or all
        with ``retry_mutations``); ``timeout``: this call's own (a long-poll's)."""
        return self._transport.request(method, path, params=params, body=body, idempotent=idempotent,
                                       timeout=timeout)

    def get(self, path: str, params: Params = None, *, timeout: float | None = None) -> Any:
        return self._transport.request("GET", path, params=params, timeout=timeout)

    def post(self, path: str, body: Any) -> Any:
        return self._transport.request("POST", path, body=body)

    def delete(self, path: str, params: Params = None) -> Any:
        return self._transport.request("DELETE", path, params=params)

    def get_page(self, path: str, params: Params = None) -> tuple[Any, str | None]:
        """One page of a paged listing (``GET /v1/jobs``, ``/v1/claims``, ``/v1/snapshots``,
        ``/v1/audit``): the decoded body and the cursor of the next page, from the ``X-Next-Cursor``
        header (None: that was the last).  Pass the cursor back as ``cursor``, with the same filters."""
        return self._transport.get_page(path, params)

    def pages(self, path: str, params: Params = None, *, page_size: int | None = None) -> Iterator[list[Any]]:
        """Every page of a paged listing, newest first (each page in id order), following
        ``X-Next-Cursor`` until the last: each record exactly once, even while new ones arrive (they
        come in front of the first page, so a walk never sees them).  ``page_size``: ``limit`` per page
        (default: the controller's)."""
        base = list(params.items()) if isinstance(params, dict) else list(params or [])
        base = [(k, v) for k, v in base if k not in ("cursor", "limit")]
        if page_size is not None:
            base.append(("limit", page_size))
        cursor: str | None = None
        while True:
            page, cursor = self.get_page(path, base + ([("cursor", cursor)] if cursor else []))
            yield page
            if cursor is None:
                return

    def get_all(self, path: str, params: Params = None, *, limit: int | None = None,
                page_size: int | None = None) -> list[Any]:
        """The records of a paged listing across its pages (``pages``), fetched newest first page by
        page and returned oldest first (id order); at most ``limit`` (the newest) when given."""
        out: list[Any] = []
        if page_size is None and limit is not None:
            page_size = min(limit, 1000)  # the controller's default page
        for page in self.pages(path, params, page_size=page_size):
            out[:0] = page
            if limit is not None and len(out) >= limit:
                return out[len(out) - limit:]
        return out

    # ------------------------------------------------------------ jobs

    def ping(self) -> dict[str, Any]:
        """The controller's version, cluster id, leader epoch and log position (``GET /v1/ping``)."""
        return cast("dict[str, Any]", self.get("/v1/ping"))

    def submit(self, command: Iterable[str] | Submission = (), **fields: Any) -> JobDoc:
        """Submit a job (``POST /v1/jobs``); returns it as submitted (``state`` PEND or PSUSP).

        ``command`` is the job's argument vector (with ``shell=True``, one command line for ``/bin/sh -c``;
        with ``script="..."``, the script's arguments) and ``fields`` the rest of a ``xce.wire.Submission``
        (``xce submit``'s options: ``name="sweep[1-100]"`` submits an array, of which the parent is
        returned; ``resreq`` is ``-R``; ``claims`` are ``"NAME"``, ``"NAME:rw"`` or ``"NAME:ro"``;
        ``scratch`` is ``"SIZE[:CLASS]"``; ``mem_limit`` is ``-M``, ``"512Mi"`` or bytes), or
        ``command`` is a whole ``Submission`` (``xce.jobspec`` makes one from a command line) and
        ``fields`` replace some of it.  Paths (``cwd``, ``stdout``, ``stderr``, ``stage_in`` sources,
        ``stage_out`` destinations) are taken as given: make them absolute, as ``xce submit`` does,
        since the job runs elsewhere.

        This is the one place a submission becomes a request body.  Every submission carries a
        ``request_id`` (a fresh one unless given): sent again after a lost answer or a failover, it
        returns the job the first one made, never a second job.
        """
        if isinstance(command, Submission):
            submission = command if not fields else Submission.from_body({**command.to_body(), **fields})
        else:
            submission = Submission(command=command if isinstance(command, str) else tuple(command), **fields)
        body = submission.to_body()
        if submission.request_id is None:  # (into the body: a Submission made again costs a one-shot CLI ~5%)
            body["request_id"] = os.urandom(16).hex()
        doc: JobDoc = self.request("POST", "/v1/jobs", body=body, idempotent=True)
        return doc

    def kill(self, job_id: int, *, signal: str | int | None = None) -> JobDoc:
        """End a job (``xce kill``): a running one gets SIGINT and SIGTERM, then SIGKILL after its queue's
        grace; with ``signal`` (``"USR1"``, ``10``), that one signal to its processes instead, and nothing
        else (``xce kill -s``)."""
        if signal is not None:
            return cast("JobDoc", self.post(f"/v1/jobs/{job_id}/signal", {"signal": str(signal)}))
        return cast("JobDoc", self.post(f"/v1/jobs/{job_id}/kill", {}))

    def stop(self, job_id: int) -> JobDoc:
        """Suspend a running job: its processes frozen, state USUSP (``xce stop``)."""
        return cast("JobDoc", self.post(f"/v1/jobs/{job_id}/stop", {}))

    def resume(self, job_id: int) -> JobDoc:
        """Resume a stopped job (``xce resume``)."""
        return cast("JobDoc", self.post(f"/v1/jobs/{job_id}/resume", {}))

    def jobs(self, *, states: Iterable[str] = (), queue: str | None = None, user: str | None = None,
             all_users: bool = False, array: int | None = None, limit: int | None = None,
             all_pages: bool = False, ids: Iterable[int] = ()) -> list[JobDoc]:
        """Jobs (``GET /v1/jobs``), the newest, in id order: yours, or ``user``'s / everyone's
        (``all_users``) for admins.

        ``states`` filters (``("PEND", "RUN")``), ``array`` gives the elements of one job array, and
        ``limit`` caps the answer (one page: the controller's default is 1000); ``all_pages`` follows
        the pages instead, for every job that matches (at most ``limit`` if given).  ``ids`` (at most
        1,000) asks for those jobs, finished ones too, live or archived (an array's id: its elements),
        unpaged: what a poller asks, and an id it does not answer for does not exist for you.
        """
        params: list[tuple[str, Any]] = [("user", user), ("queue", queue), ("array", array)]
        params += [("id", i) for i in ids]
        if all_users:
            params.append(("all", True))
        params += [("state", s) for s in states]
        if all_pages:
            return cast("list[JobDoc]", self.get_all("/v1/jobs", params, limit=limit))
        return cast("list[JobDoc]", self.get("/v1/jobs", params + [("limit", limit)]))

    def history(self, *, since: float | None = None, until: float | None = None, user: str | None = None,
                all_users: bool = False, project: str | None = None, states: Iterable[str] = (),
                name: str | None = None, array: int | None = None, limit: int | None = None,
                all_pages: bool = False) -> list[HistoryRow]:
        """Finished jobs, live or archived (``GET /v1/history/jobs``), the newest, in id order: yours, or
        ``user``'s / everyone's (``all_users``) for admins; the columns ``sacct`` shows (``job()`` has
        every field).  ``since``/``until`` bound their end time (seconds since the epoch); ``states``
        is DONE and/or EXIT.  ``limit`` caps the answer (one page; the controller's default is 100);
        ``all_pages`` follows the pages instead (at most ``limit`` if given)."""
        params: list[tuple[str, Any]] = [("since", since), ("until", until), ("user", user), ("project", project),
                                         ("name", name), ("array", array)]
        if all_users:
            params.append(("all", True))
        params += [("state", s) for s in states]
        if all_pages:
            return cast("list[HistoryRow]", self.get_all("/v1/history/jobs", params, limit=limit))
        return cast("list[HistoryRow]", self.get("/v1/history/jobs", params + [("limit", limit)]))

    def usage(self, *, since: float | None = None, until: float | None = None, user: str | None = None,
              all_users: bool = False, project: str | None = None) -> list[dict[str, Any]]:
        """Per-project totals (``GET /v1/usage``) of jobs that ended and claims released in the window:
        ``jobs``, ``slot_hours``, ``claims``, ``claim_byte_hours``.  Yours; admins: ``user``'s or
        everyone's (``all_users``)."""
        params: list[tuple[str, Any]] = [("since", since), ("until", until), ("user", user), ("project", project)]
        if all_users:
            params.append(("all", True))
        return cast("list[dict[str, Any]]", self.get("/v1/usage", params))

    def job(self, job_id: int) -> JobDoc:
        """One job by id (``GET /v1/jobs/{id}``), live or archived (a finished job retired after
        ``[controller] keep_finished``); ``ApiError`` 404 if it does not exist for you."""
        return cast("JobDoc", self.get(f"/v1/jobs/{int(job_id)}"))

    def wait_job(self, job_id: int, states: Iterable[str] = JOB_FINISHED, timeout: float = 600.0, *,
                 interval: float = 0.2, on_change: Callable[[JobDoc], None] | None = None) -> JobDoc:
        """Poll the job until its state is one of ``states`` (default: finished) and return it.

        A job that finishes (DONE or EXIT) ends the wait too, whatever ``states`` says: check
        ``job["state"]``.  ``on_change(job)`` is called with each new state seen.  Raises
        ``WaitTimeout`` after ``timeout`` seconds.
        """
        wanted = set(states) | set(JOB_FINISHED)
        return self._wait(lambda: self.job(job_id), lambda j: (j["state"],), lambda j: j["state"] in wanted,
                          timeout, interval, on_change,
                          lambda j: f"job {j['display_id']} is still {j['state']} after {timeout:g}s")

    # ------------------------------------------------------------ claims

    def create_claim(self, name: str, *, claim_class: str | None = None, size: str | int | None = None,
                     access_mode: str | None = None, reclaim_policy: str | None = None,
                     params: dict[str, str] | None = None, project: str | None = None,
                     from_snapshot: str | None = None, from_claim: str | None = None,
                     populate_from: str | None = None, hosts: Iterable[str] = (),
                     replicas: int | None = None, cache: bool = False,
                     snapshot_on_preempt: bool = False) -> ClaimDoc:
        """Create a standalone claim (``POST /v1/claims``); returns it PENDING.

        ``size``: bytes or ``"10Gi"``; ``access_mode``: RWO, ROX, RWX or RWOP; ``reclaim_policy``:
        ``"retain"`` or ``"delete"`` (default: the class's); ``project``: default your first.
        ``from_snapshot`` / ``from_claim``: a clone, whose content is that READY snapshot's or claim's
        (class, size and access mode default to the source's).  ``populate_from``: a URL or
        ``REMOTE:path`` the provisioner fills the claim from (READY once the data is complete).
        ``hosts`` / ``replicas``: a node-scope class's claim, a replica on each of these hosts, or on this
        many hosts the scheduler chooses (its ``replicas`` list each one; READY while one is).  ``cache``: a
        node-scope ROX claim with a source whose replicas are made where its jobs go (and evicted, unused
        and least recently used, when their host's room is needed).  ``snapshot_on_preempt``: an RWO claim
        that a run preempted while it has it attached has snapshotted before it is attached again.
        Follow it with ``wait_claim(claim["id"])`` to wait until it is READY.
        """
        body: dict[str, Any] = {"name": name, "params": dict(params or {})}
        if hosts:
            body["hosts"] = list(hosts)
        if cache:
            body["cache"] = True
        if snapshot_on_preempt:
            body["snapshot_on_preempt"] = True
        for key, value in (("class", claim_class), ("size", size), ("access_mode", access_mode),
                           ("reclaim_policy", reclaim_policy), ("project", project),
                           ("from_snapshot", from_snapshot), ("from_claim", from_claim),
                           ("populate_from", populate_from), ("replicas", replicas)):
            if value is not None:
                body[key] = value
        return cast("ClaimDoc", self.post("/v1/claims", body))

    def claims(self, *, project: str | None = None, states: Iterable[str] = (), all_states: bool = False,
               retained: bool = False, limit: int | None = None) -> list[ClaimDoc]:
        """Your projects' claims (``GET /v1/claims``), in id order; ``all_states`` includes RELEASED
        ones.  Follows the listing's pages: every claim that matches, or the newest ``limit``."""
        params: list[tuple[str, Any]] = [("project", project)]
        if all_states:
            params.append(("all", True))
        if retained:
            params.append(("retained", True))
        params += [("state", s) for s in states]
        return cast("list[ClaimDoc]", self.get_all("/v1/claims", params, limit=limit))

    def claim(self, name: str | int, project: str | None = None) -> ClaimDoc:
        """One claim by name (``project``: when yours are in several) or by id (an int)."""
        if isinstance(name, int):
            return cast("ClaimDoc", self.get(f"/v1/claims/by-id/{name}"))
        return cast("ClaimDoc", self.get(f"/v1/claims/{quote(name, safe=':')}", {"project": project}))

    def delete_claim(self, name: str, project: str | None = None) -> ClaimDoc:
        """Delete a claim (``DELETE /v1/claims/{name}``): its reclaim policy decides the object's fate.

        Returns the claim, on its way to RELEASED; ``wait_claim(claim["id"], ("RELEASED",))`` waits.
        """
        return cast("ClaimDoc", self.delete(f"/v1/claims/{quote(name, safe=':')}", {"project": project}))

    def resize_claim(self, name: str, size: str | int, project: str | None = None) -> ClaimDoc:
        """Grow a READY claim (``POST /v1/claims/{name}/resize``); ``size``: bytes or ``"20Gi"``.

        Returns the claim with ``resize`` REQUESTED; ``wait_resize(claim["id"])`` waits until it is
        DONE (the claim's ``size_bytes`` is the new size) or FAILED (the claim keeps its old size).
        """
        return cast("ClaimDoc", self.request("POST", f"/v1/claims/{quote(name, safe=':')}/resize",
                                             body={"size": size}, params={"project": project} if project else None))

    def warm_claim(self, name: str, hosts: Iterable[str], project: str | None = None) -> ClaimDoc:
        """A node-local claim's replica more on each of ``hosts`` (``POST /v1/claims/{name}/warm``):
        each PENDING, then made (and filled from the claim's source) by its host's worker."""
        return cast("ClaimDoc", self.request("POST", f"/v1/claims/{quote(name, safe=':')}/warm",
                                             body={"hosts": list(hosts)},
                                             params={"project": project} if project else None))

    def evict_claim(self, name: str, hosts: Iterable[str], project: str | None = None) -> ClaimDoc:
        """Release a node-local claim's replica on each of ``hosts`` (``POST /v1/claims/{name}/evict``);
        refused (409 ``in_use``) while a job on one of them has it attached."""
        return cast("ClaimDoc", self.request("POST", f"/v1/claims/{quote(name, safe=':')}/evict",
                                             body={"hosts": list(hosts)},
                                             params={"project": project} if project else None))

    def wait_resize(self, claim: str | int, timeout: float = 600.0, *, project: str | None = None,
                    interval: float = 0.2, on_change: Callable[[ClaimDoc], None] | None = None) -> ClaimDoc:
        """Poll the claim until its latest resize is DONE or FAILED; return the claim."""
        return self._wait(lambda: self.claim(claim, project),
                          lambda c: (c["resize"] and c["resize"]["state"], c["resize"] and c["resize"]["waiting"],
                                     c["last_error"], c["next_retry"]),
                          lambda c: c["resize"] is None or c["resize"]["state"] in RESIZE_ENDED, timeout,
                          interval, on_change,
                          lambda c: f"claim {c['name']}: its resize is still {(c['resize'] or {}).get('state')} after "
                                    f"{timeout:g}s")

    def wait_claim(self, claim: str | int, states: Iterable[str] = (ClaimState.READY,), timeout: float = 600.0, *,
                   project: str | None = None, interval: float = 0.2,
                   on_change: Callable[[ClaimDoc], None] | None = None) -> ClaimDoc:
        """Poll the claim (by id, or name and ``project``) until its state is in ``states``; return it.

        FAILED ends the wait too (a claim stays FAILED until deleted): check ``claim["state"]``.
        ``on_change(claim)`` is called whenever its state, what it waits for or its last error
        changes (not for the retry countdown).  Raises ``WaitTimeout`` after ``timeout`` seconds.
        """
        wanted = set(states) | {CLAIM_FAILED}
        return self._wait(lambda: self.claim(claim, project),
                          lambda c: (c["state"], c["waiting"], c["last_error"], c["next_retry"]),
                          lambda c: c["state"] in wanted, timeout, interval, on_change,
                          lambda c: f"claim {c['name']} is still {c['state']} after {timeout:g}s")

    # ------------------------------------------------------------ snapshots

    def create_snapshot(self, claim: str, name: str, project: str | None = None) -> SnapshotDoc:
        """Take a snapshot ``name`` of the claim ``claim`` (``POST /v1/snapshots``); returns it PENDING.
        ``wait_snapshot(snapshot["id"])`` waits until it is READY."""
        body: dict[str, Any] = {"name": name, "claim": claim}
        if project is not None:
            body["project"] = project
        return cast("SnapshotDoc", self.post("/v1/snapshots", body))

    def snapshots(self, *, project: str | None = None, claim: str | None = None, states: Iterable[str] = (),
                  all_states: bool = False, limit: int | None = None) -> list[SnapshotDoc]:
        """Your projects' snapshots (``GET /v1/snapshots``), in id order; ``all_states`` includes
        RELEASED ones.  Follows the listing's pages: every snapshot that matches, or the newest ``limit``."""
        params: list[tuple[str, Any]] = [("project", project), ("claim", claim)]
        if all_states:
            params.append(("all", True))
        params += [("state", s) for s in states]
        return cast("list[SnapshotDoc]", self.get_all("/v1/snapshots", params, limit=limit))

    def snapshot(self, name: str | int, project: str | None = None) -> SnapshotDoc:
        """One snapshot by name (``project``: when yours are in several) or by id (an int)."""
        if isinstance(name, int):
            return cast("SnapshotDoc", self.get(f"/v1/snapshots/by-id/{name}"))
        return cast("SnapshotDoc", self.get(f"/v1/snapshots/{quote(name)}", {"project": project}))

    def delete_snapshot(self, name: str, project: str | None = None) -> SnapshotDoc:
        """Delete a snapshot (``DELETE /v1/snapshots/{name}``); returns it on its way to RELEASED."""
        return cast("SnapshotDoc", self.delete(f"/v1/snapshots/{quote(name)}", {"project": project}))

    def wait_snapshot(self, snapshot: str | int, states: Iterable[str] = (SnapshotState.READY,), timeout: float = 600.0, *,
                      project: str | None = None, interval: float = 0.2,
                      on_change: Callable[[SnapshotDoc], None] | None = None) -> SnapshotDoc:
        """Poll the snapshot until its state is in ``states`` (FAILED ends the wait too); return it."""
        wanted = set(states) | {SNAPSHOT_FAILED}
        return self._wait(lambda: self.snapshot(snapshot, project),
                          lambda s: (s["state"], s["waiting"], s["last_error"], s["next_retry"]),
                          lambda s: s["state"] in wanted, timeout, interval, on_change,
                          lambda s: f"snapshot {s['name']} is still {s['state']} after {timeout:g}s")

    # ------------------------------------------------------------ waiting

    @staticmethod
    def _wait(read: Callable[[], Doc], key: Callable[[Doc], tuple[Any, ...]], done: Callable[[Doc], bool],
              timeout: float, interval: float, on_change: Callable[[Doc], None] | None,
              too_long: Callable[[Doc], str]) -> Doc:
        deadline = time.monotonic() + timeout
        last: tuple[Any, ...] | None = None
        while True:
            doc = read()
            if on_change is not None and key(doc) != last:
                on_change(doc)
            last = key(doc)
            if done(doc):
                return doc
            if time.monotonic() > deadline:
                raise WaitTimeout(too_long(doc))
            time.sleep(interval)
