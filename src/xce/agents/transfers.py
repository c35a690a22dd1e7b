"""The provisioner's transfers: shared staging claims staged in before hosts are held, and populated claims.

Three ops of shared-scope claims are done by the provisioner itself, through
``xce.transfers`` (one rclone child per item, the remote's credentials from its
``--transfer-config`` in that child's environment only), rather than by a
provider:

- ``stage_in`` of a job's shared staging claim (``xce submit --stage-class
  CLASS``, CLASS shared): while the job waits in the queue, so that no host is
  held while its data moves; the scheduler places the job once the claim is
  READY;
- ``stage_out`` of that claim after the job's process ended;
- ``populate`` of a standalone claim made with ``xce claim create --source
  URL``: READY once every byte is in.

Only URLs and remotes: a path would be read or written as the provisioner's own
user, not the job's (the controller refuses paths for shared staging and
populate at submission; a forged one is refused here too).  The claim's volume
must lie strictly inside the root of one of the provisioner's providers.  The
remote must be configured here and, if its entry here lists projects, allow the
claim's project (the controller checked it at submission).

What a copy may touch inside the claim: a job ran there as its user and may have
left links (or swap them in while the op starts, from elsewhere on shared storage).
So each local side is resolved beneath the claim's directory with no link anywhere
on its path (``transfers.beneath``: ``openat2``), held by its descriptor, and
handed to rclone as ``/proc/self/fd/3``; and rclone runs as whoever owns the
claim's directory (its provider gives it to the claim's owner with ``set_owner``),
so what it meets inside a directory tree it reads and writes with that user's
rights only: a stage-out uploads nothing the user could not read, a stage-in or
populate writes nothing the user could not write.  A stage-out's sources are all
opened before the first byte moves.

Progress (bytes copied, total, rate, from rclone's stats every second) goes to the
controller as it happens (``report``: the agent's progress sender, at most a call a
second): the leader keeps it in memory (``controller/observed.py``), not in the log.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Iterable

from xce.providers.contract import ProviderReply
from xce.transfers import Location, TransferRefused, TransferSetupError, TransferSite, parse_canonical, \
    populate_destination
from xce.transfers import plan as plan_transfer
from xce.transfers import run as run_transfer
from xce.transfers import beneath
from xce.transfers.rclone import describe, plan_size
from xce.wire import AgentOp

log = logging.getLogger("xce.agent")

# (item, bytes copied, total bytes or None, rate in bytes/s or None)
ProgressReport = Callable[[AgentOp, int, int | None, float | None], None]


class SharedTransfers:
    """The provisioner's ``stage_in``, ``stage_out`` and ``populate`` ops (a ``ClaimAgent`` local op)."""

    def __init__(self, site: TransferSite | None, roots: Iterable[str], report: ProgressReport | None = None) -> None:
        self.site = site or TransferSite()  # without a --transfer-config: public URLs only
        self.roots = sorted({os.path.realpath(r) for r in roots if r})
        self.report = report

    def _inside(self, path: str | None) -> str | None:
        if not path or not os.path.isabs(path):
            return None
        real = os.path.realpath(path)
        return real if any(real != r and real.startswith(r.rstrip("/") + "/") for r in self.roots) else None

    def __call__(self, item: AgentOp) -> ProviderReply:
        op_id, op = item["op_id"], item["op"]
        what = op.replace("_", "-")

        def fail(code: str, message: str, retryable: bool = False) -> ProviderReply:
            return ProviderReply(op_id=op_id, ok=False, error_code=code, retryable=retryable, message=message)

        base = self._inside(item.get("path"))
        if base is None:
            return fail("PERMISSION_DENIED", f"{what}: the claim's volume {item.get('path')!r} is outside the "
                                             f"provisioner's provider roots ({', '.join(self.roots) or 'none'}): "
                                             "refused")
        try:  # the claim's directory itself, no link on the way from its root (one swapped in is refused)
            base_fd = beneath.open_inside(self.roots, base)
        except (OSError, beneath.Refused) as e:
            return fail("NOT_FOUND", f"{what}: the claim has no directory ({getattr(e, 'message', e)})",
                        retryable=True)
        try:
            return self._transfer(item, op, what, base, base_fd, fail)
        except beneath.Refused as e:
            return fail(e.code, f"{what}: {e.message}")
        finally:
            os.close(base_fd)

    def _transfer(self, item: AgentOp, op: str, what: str, base: str, base_fd: int,
                  fail: Callable[..., ProviderReply]) -> ProviderReply:
        """The op's copies, each through a descriptor beneath the claim's directory ``base_fd``, run as
        whoever owns that directory (its provider gave it to the claim's owner with ``set_owner``)."""
        try:
            pairs = self._pairs(op, item, base)
        except TransferRefused as e:
            return fail("INVALID", f"{what}: {e.message}")
        project = (item.get("tags") or {}).get("xce.project", "")
        for far, _ in pairs:
            if far.kind == "remote":
                remote = self.site.remote(far.remote or "")
                if remote is None:
                    return fail("NO_REMOTE", f"{what}: remote {far.remote} is not configured on the provisioner "
                                             "(its --transfer-config)")
                if not remote.allows(project):
                    return fail("PERMISSION_DENIED", f"{what}: project {project} may not use remote {remote.name}")
        st = os.fstat(base_fd)
        owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 and st.st_uid != 0 else None
        # stage-out: every source opened before anything is copied, and held
        sources = beneath.open_sources(base_fd, base, [rel for _, rel in pairs]) if op == "stage_out" else []
        try:
            return self._copy(item, op, what, base, base_fd, pairs, sources, owner, fail)
        finally:
            for fd in sources:
                os.close(fd)

    def _copy(self, item: AgentOp, op: str, what: str, base: str, base_fd: int,
              pairs: list[tuple[Location, str]], sources: list[int], owner: tuple[int, int] | None,
              fail: Callable[..., ProviderReply]) -> ProviderReply:
        op_id = item["op_id"]
        # measured before anything is copied: the total for progress, and a source larger than the claim
        # is refused whole
        total = 0
        if op != "stage_out":
            for src, _ in pairs:
                try:
                    sized = run_transfer(plan_size(src, self.site), timeout=min(self.site.timeout, 600.0))
                except TransferSetupError as e:
                    return fail("NO_REMOTE", f"{what}: {e}")
                if not sized.ok:
                    return fail(sized.error_code, f"{what} of {src.text}{self._via(src)}: {sized.message}",
                                sized.retryable)
                total += int(sized.stats.get("bytes") or 0)
            room = int(item.get("size_bytes") or 0)
            if room and total > room:
                return fail("RESOURCE_EXHAUSTED", f"{what} of {total} bytes from "
                                                  f"{', '.join(s.text for s, _ in pairs)} does not fit the claim's "
                                                  f"{room} bytes (a larger --stage-size or --size)")
        done = 0
        moved: dict[str, int] = {}
        for i, (far, rel) in enumerate(pairs):
            shown = os.path.normpath(os.path.join(base, rel))
            if op == "stage_out":
                fd, name = sources[i], ""
            else:
                fd, name = beneath.dest_beneath(base_fd, rel, owner, shown)
            try:
                local = Location("path", beneath.FD_PATH + (f"/{name}" if name else ""))
                src, dest = (local, far) if op == "stage_out" else (far, local)
                try:
                    transfer = plan_transfer(src, dest, self.site, fd=fd, shown=shown)
                except TransferSetupError as e:
                    return fail("NO_REMOTE", f"{what}: {e}")

                def progress(stats: dict[str, Any], done: int = done) -> None:
                    if self.report is not None:
                        speed = stats.get("speed")
                        self.report(item, done + int(stats.get("bytes") or 0), total or None,
                                    float(speed) if isinstance(speed, (int, float)) else None)

                out = run_transfer(transfer, run_as=owner, timeout=self.site.timeout, progress=progress)
                if not out.ok:
                    return fail(out.error_code, f"{what} {transfer.what}{self._via(far)}{self._as(owner)}: "
                                                f"{out.message}", out.retryable)
                if op != "stage_out" and not beneath.exists_at(fd, name):  # (rclone copies nothing from nothing)
                    return fail("NOT_FOUND", f"{what}: nothing at {far.text}{self._via(far)}")
            finally:
                if op != "stage_out":
                    os.close(fd)
            done += int(out.stats.get("bytes") or 0)
            for key in ("bytes", "transfers"):
                moved[key] = moved.get(key, 0) + int(out.stats.get(key) or 0)
            log.info("%s %s: %s", op_id, transfer.what, describe(out.stats))
        if self.report is not None and op != "stage_out":
            self.report(item, done, total or done, None)
        return ProviderReply(op_id=op_id, ok=True, message=f"{what}: {len(pairs)} item(s), {describe(moved)}, "
                                                           f"by the provisioner{self._as(owner)}")

    @staticmethod
    def _via(loc: Location) -> str:
        return f" via remote {loc.remote}" if loc.kind == "remote" else ""

    @staticmethod
    def _as(owner: tuple[int, int] | None) -> str:
        return f" as uid {owner[0]}" if owner is not None else ""

    @staticmethod
    def _pairs(op: str, item: AgentOp, base: str) -> list[tuple[Location, str]]:
        """(the far side, the local side's path relative to the claim) of each item; the far side a URL
        or remote, never a path.  The names are checked here for a clear message; what holds is the
        descriptor each is opened by (``beneath``)."""
        def far(text: str) -> Location:
            loc = parse_canonical(text)
            if loc.local:
                raise TransferRefused(f"{text} is a path: the provisioner moves data from and to URLs and remotes "
                                      "only")
            return loc

        def inside(rel: str) -> str:
            path = os.path.normpath(os.path.join(base, rel))
            if path != base and not path.startswith(base + "/"):
                raise TransferRefused(f"{rel!r} is outside the claim")
            return os.path.relpath(path, base)

        if op == "populate":
            src = far(item.get("source") or "")
            return [(src, populate_destination(src))]
        if op == "stage_in":
            return [(far(s), inside(d)) for s, d in item.get("items") or []]
        if op == "stage_out":
            return [(far(d), inside(s)) for s, d in item.get("items") or []]
        raise TransferRefused(f"unknown op {op}")
