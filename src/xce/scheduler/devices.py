"""GPUs as devices in one scheduling cycle: which of a host's GPUs a job gets, and why it gets none.

A job asks for ``num`` GPUs on each of its hosts (``xce.jobspec_gpu.GpuRequest``).  Exclusive
requests (``j_exclusive=yes``, LSF's default, and ``mode=exclusive_process``) take GPUs that no job
holds; shared ones (``j_exclusive=no``) take GPUs that no exclusive job holds, the least shared
first, with room for their ``gmem`` beside what the GPU's other jobs reserved.  Lowest ids first
otherwise, so a host's GPUs fill in order.  The ids chosen go into the plan (``Allocation.gpus``);
the applier checks them again against the model.

Cost.  The cycle keeps each host's devices as a small list, copied from the view only when a GPU
job first looks at that host, and a count of the host's wholly free GPUs: an exclusive request
without ``gmodel``/``gmem`` (the common one) is answered from the count, O(1); others walk the
host's devices (8 or so).  Free GPUs only shrink during a cycle, as slots do, so the core's
cursors and skips stay sound for GPU jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from xce.jobspec_gpu import GpuRequest, model_matches
from xce.scheduler.view import GpuView, HostView


@dataclass(slots=True)
class _Device:
    id: int
    model: str
    memory: int
    exclusive: bool  # an exclusive job holds it
    sharers: int  # shared jobs holding it
    gmem_used: int  # the gmem its shared jobs reserved

    @classmethod
    def of(cls, g: GpuView) -> _Device:
        return cls(g.id, g.model, g.memory, g.exclusive, g.sharers, g.gmem_used)

    @property
    def idle(self) -> bool:
        return not self.exclusive and self.sharers == 0

    def usable(self, req: GpuRequest) -> bool:
        if req.gmodel is not None and not model_matches(req.gmodel, self.model):
            return False
        if req.exclusive:
            return self.idle and (req.gmem is None or self.memory >= req.gmem)
        return not self.exclusive and (req.gmem is None or self.memory - self.gmem_used >= req.gmem)


def _plain(req: GpuRequest) -> bool:
    """Answered from the count of idle GPUs: exclusive, any model, any memory."""
    return req.exclusive and req.gmodel is None and req.gmem is None


class Devices:
    """The GPUs of a cycle's hosts (by index into the view's hosts), as this cycle's plan leaves them."""

    def __init__(self, hosts: tuple[HostView, ...]) -> None:
        self.hosts = hosts
        self.idle = [sum(1 for g in h.gpus if not g.exclusive and g.sharers == 0) for h in hosts]
        self._devices: dict[int, list[_Device]] = {}

    def _on(self, i: int) -> list[_Device]:
        devs = self._devices.get(i)
        if devs is None:
            devs = self._devices[i] = [_Device.of(g) for g in self.hosts[i].gpus]
        return devs

    def usable(self, i: int, req: GpuRequest) -> int:
        """How many of host ``i``'s GPUs ``req`` could take now."""
        if _plain(req):
            return self.idle[i]
        if not self.hosts[i].gpus:
            return 0
        return sum(1 for d in self._on(i) if d.usable(req))

    def fits(self, i: int, req: GpuRequest) -> bool:
        return self.usable(i, req) >= req.num

    def take(self, i: int, req: GpuRequest) -> list[int]:
        """Choose ``req.num`` of host ``i``'s GPUs for a job and hold them for the rest of the cycle
        (the caller checked ``fits``).  Their ids, ascending."""
        devs = [d for d in self._on(i) if d.usable(req)]
        if not req.exclusive:
            devs.sort(key=lambda d: (d.sharers, d.id))
        chosen = sorted(devs[:req.num], key=lambda d: d.id)
        if len(chosen) < req.num:
            raise ValueError(f"host {self.hosts[i].name} has {len(chosen)} GPUs for {req.text()}")
        for d in chosen:
            if d.idle:
                self.idle[i] -= 1
            if req.exclusive:
                d.exclusive = True
            else:
                d.sharers += 1
                d.gmem_used += req.gmem or 0
        return [d.id for d in chosen]

    def reason(self, cands: list[int], req: GpuRequest) -> str:
        """Why no host of ``cands`` has room for ``req`` now, in a sentence: ``gpu: 0 of 4 free on host1``."""
        with_gpus = [i for i in cands if self.hosts[i].gpus]
        if not with_gpus:
            return "gpu: no matching host has GPUs" if len(cands) != 1 else \
                f"gpu: {self.hosts[cands[0]].name} has no GPUs"
        if req.gmodel is not None:
            models = {d.model for i in with_gpus for d in self._on(i)}
            if not any(model_matches(req.gmodel, m) for m in models):
                have = ", ".join(sorted(models))
                return f"gpu: no GPU of model {req.gmodel} on the matching hosts (they have {have})"
        free = sorted(((self.usable(i, req), i) for i in with_gpus), key=lambda t: (-t[0], t[1]))
        what = "free" if req.exclusive else "shareable"
        shown = "; ".join(f"{n} of {len(self.hosts[i].gpus)} {what} on {self.hosts[i].name}" for n, i in free[:3])
        more = f"; {len(free) - 3} more host(s) with GPUs" if len(free) > 3 else ""
        need = f" ({req.num} needed a host)" if req.num > 1 or len(free) > 1 else ""
        return f"gpu: {shown}{more}{need}" if len(free) > 1 else f"gpu: {shown}"
