"""GPUs as devices in one scheduling cycle: which of a host's GPUs a job gets, and why it gets none.

A job asks for ``num`` GPUs on each of its hosts (``xce.jobspec_gpu.GpuRequest``).  Exclusive
requests (``j_exclusive=yes``, LSF's default, and ``mode=exclusive_process``) take GPUs that no job
holds; shared ones (``j_exclusive=no``) take GPUs that no exclusive job holds, the least shared
first, with room for their ``gmem`` beside what the GPU's other jobs reserved.  Lowest ids first
otherwise, so a host's GPUs fill in order.  The ids chosen go into the plan (``Allocation.gpus``);
the applier checks them again against the model.

Cost.  Each host keeps the ids of its idle GPUs (no holder), ascending: the common request
(exclusive, any model, any memory: ``GpuRequest.any_idle``) is answered and taken from that list,
O(1) and O(num).  What this cycle's plan did to a GPU beyond that (held exclusively with a model or
memory asked, shared) is kept per host only once such a request touches it, and other requests walk
the host's GPUs (8 or so).  Free GPUs only shrink during a cycle, as slots do, so the core's cursors
and skips stay sound for GPU jobs.
"""

from __future__ import annotations

from xce.jobspec_gpu import GpuRequest, model_matches
from xce.scheduler.view import GpuView, HostView


class _Held:
    """The shared GPUs of a host: their sharers and the gmem those reserved.  (A GPU neither idle nor
    shared is held by an exclusive job.)"""

    __slots__ = ("sharers", "gmem")

    def __init__(self, gpus: tuple[GpuView, ...]) -> None:
        self.sharers = {g.id: g.sharers for g in gpus if g.sharers}
        self.gmem = {g.id: g.gmem_used for g in gpus if g.gmem_used}


class Devices:
    """The GPUs of a cycle's hosts (by index into the view's hosts), as this cycle's plan leaves them."""

    def __init__(self, hosts: tuple[HostView, ...]) -> None:
        self.hosts = hosts
        self.idle = [[g.id for g in h.gpus if not g.exclusive and not g.sharers] if h.gpus else [] for h in hosts]
        self._held: dict[int, _Held] = {}

    def _state(self, i: int) -> _Held:
        held = self._held.get(i)
        if held is None:
            held = self._held[i] = _Held(self.hosts[i].gpus)
        return held

    def _usable(self, i: int, req: GpuRequest) -> list[GpuView]:
        """Host ``i``'s GPUs that ``req`` could take now (not for ``any_idle`` requests: ``idle`` says)."""
        idle = self.idle[i]
        held = self._held.get(i)
        out = []
        for g in self.hosts[i].gpus:
            if req.gmodel is not None and not model_matches(req.gmodel, g.model):
                continue
            if req.exclusive:
                if g.id in idle and (req.gmem is None or g.memory >= req.gmem):
                    out.append(g)
                continue
            if g.id not in idle and not (held.sharers.get(g.id) if held is not None else g.sharers):
                continue  # held by an exclusive job
            used = held.gmem.get(g.id, 0) if held is not None else g.gmem_used
            if req.gmem is None or g.memory - used >= req.gmem:
                out.append(g)
        return out

    def usable(self, i: int, req: GpuRequest) -> int:
        """How many of host ``i``'s GPUs ``req`` could take now."""
        if req.any_idle:
            return len(self.idle[i])
        return len(self._usable(i, req)) if self.hosts[i].gpus else 0

    def fits(self, i: int, req: GpuRequest) -> bool:
        if req.any_idle:
            return len(self.idle[i]) >= req.num
        return self.usable(i, req) >= req.num

    def take(self, i: int, req: GpuRequest, avoid: frozenset[int] = frozenset()) -> list[int]:
        """Choose ``req.num`` of host ``i``'s GPUs for a job and hold them for the rest of the cycle
        (the caller checked ``fits``), none of ``avoid`` (a reservation's, for a job ending after its
        start: only ``any_idle`` requests are placed there).  Their ids, ascending."""
        idle = self.idle[i]
        if req.any_idle:
            chosen = [d for d in idle if d not in avoid][:req.num] if avoid else idle[:req.num]
            if len(chosen) < req.num:
                raise ValueError(f"host {self.hosts[i].name} has {len(chosen)} idle GPUs for {req.text()}")
            if avoid:
                idle[:] = [d for d in idle if d not in chosen]
            else:
                del idle[:req.num]
            return chosen
        held = self._state(i)
        devs = self._usable(i, req)
        if not req.exclusive:
            devs.sort(key=lambda g: (held.sharers.get(g.id, 0), g.id))
        chosen = sorted(g.id for g in devs[:req.num])
        if len(chosen) < req.num:
            raise ValueError(f"host {self.hosts[i].name} has {len(chosen)} GPUs for {req.text()}")
        for d in chosen:
            if d in idle:
                idle.remove(d)
            if not req.exclusive:
                held.sharers[d] = held.sharers.get(d, 0) + 1
                held.gmem[d] = held.gmem.get(d, 0) + (req.gmem or 0)
        return chosen

    def reason(self, cands: list[int], req: GpuRequest) -> str:
        """Why no host of ``cands`` has room for ``req`` now, in a sentence: ``gpu: 0 of 4 free on host1``."""
        with_gpus = [i for i in cands if self.hosts[i].gpus]
        if not with_gpus:
            return "gpu: no matching host has GPUs" if len(cands) != 1 else \
                f"gpu: {self.hosts[cands[0]].name} has no GPUs"
        if req.gmodel is not None:
            models = {g.model for i in with_gpus for g in self.hosts[i].gpus}
            if not any(model_matches(req.gmodel, m) for m in models):
                have = ", ".join(sorted(models))
                return f"gpu: no GPU of model {req.gmodel} on the matching hosts (they have {have})"
        free = sorted(((self.usable(i, req), i) for i in with_gpus), key=lambda t: (-t[0], t[1]))
        what = "free" if req.exclusive else "shareable"
        shown = "; ".join(f"{n} of {len(self.hosts[i].gpus)} {what} on {self.hosts[i].name}" for n, i in free[:3])
        more = f"; {len(free) - 3} more host(s) with GPUs" if len(free) > 3 else ""
        need = f" ({req.num} needed a host)" if req.num > 1 or len(free) > 1 else ""
        return f"gpu: {shown}{more}{need}" if len(free) > 1 else f"gpu: {shown}"
