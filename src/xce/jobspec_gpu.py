"""A job's GPU request: LSF's ``-gpu "num=N[:mode=shared|exclusive_process][:j_exclusive=yes|no]
[:gmodel=NAME][:gmem=SIZE]"`` and ``-R rusage[ngpus_physical=N]``, as one ``GpuRequest``.

The job-spec parser (``xce.jobspec``) reads ``-gpu`` with it on the way in, and the model reads the
request it sent (``GpuRequest.text``, ``gmem`` in bytes) with it again at submission, so a request that
came through the REST API alone means the same.  ``num`` is per host, as in LSF: a job on two hosts
with ``num=2`` holds two GPUs on each.

Defaults are LSF's (``num=1:mode=shared:j_exclusive=yes``): a job's GPUs are its own unless it says
``j_exclusive=no``, in which case it may share them with other ``j_exclusive=no`` jobs.
``mode=exclusive_process`` (one process per GPU) implies ``j_exclusive=yes``.

Stdlib and ``xce.units`` only, below the model: the scheduler and the CLI read requests with it too.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

GPU_RUSAGE = "ngpus_physical"  # -R rusage[ngpus_physical=N]: N GPUs per host, as -gpu num=N
MODES = ("shared", "exclusive_process")
MAX_GPUS = 1024  # per host
_KEYS = ("num", "mode", "j_exclusive", "gmodel", "gmem")


class GpuRequestError(ValueError):
    """A -gpu string that means nothing: ``message`` says what and where, for people."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class GpuRequest:
    """``num`` GPUs on each of the job's hosts; ``exclusive``: no other job uses them
    (``j_exclusive=yes``, LSF's default); ``mode`` the compute mode asked for; ``gmodel``: only GPUs
    whose model name holds this (spaces and case ignored, as ``TeslaV100``); ``gmem``: bytes of
    memory each GPU must have for the job (a shared GPU's memory is split among its jobs' gmem).
    (A plain class: importing ``dataclasses`` costs the CLI's start-up ~18 ms.)"""

    __slots__ = ("num", "mode", "exclusive", "gmodel", "gmem", "any_idle", "key", "_hash")

    def __init__(self, num: int = 1, mode: str = "shared", exclusive: bool = True, gmodel: str | None = None,
                 gmem: int | None = None) -> None:
        self.num, self.mode, self.exclusive, self.gmodel, self.gmem = num, mode, exclusive, gmodel, gmem
        self.any_idle = exclusive and gmodel is None and gmem is None  # any GPU no job holds answers it
        # immutable by convention: the scheduler keys its per-shape caches on this tuple, once per job
        self.key = (num, mode, exclusive, gmodel, gmem)
        self._hash = hash(self.key)

    def __eq__(self, other: object) -> bool:
        return self is other or isinstance(other, GpuRequest) and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"GpuRequest({self.text()!r})"

    def text(self, size: Callable[[int], str] = str) -> str:
        """The request in LSF's syntax, every field spelled, ``gmem`` in bytes (what is sent and stored), or
        as ``size`` writes it (``xce job show``: ``format_size``)."""
        out = f"num={self.num}:mode={self.mode}:j_exclusive={'yes' if self.exclusive else 'no'}"
        if self.gmodel is not None:
            out += f":gmodel={self.gmodel}"
        if self.gmem is not None:
            out += f":gmem={size(self.gmem)}"
        return out

    def as_json(self) -> dict[str, Any]:
        return {"num": self.num, "mode": self.mode, "j_exclusive": self.exclusive, "gmodel": self.gmodel,
                "gmem": self.gmem}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GpuRequest:
        return cls(num=int(d["num"]), mode=str(d.get("mode", "shared")), exclusive=bool(d.get("j_exclusive", True)),
                   gmodel=d.get("gmodel"), gmem=d.get("gmem"))


@lru_cache(maxsize=4096)
def model_matches(wanted: str, model: str) -> bool:
    """Does a GPU of ``model`` (``NVIDIA A100-SXM4-80GB``) answer ``gmodel=wanted`` (``A100``,
    ``a100-sxm4``)?  Case, spaces, hyphens and underscores are ignored; the wanted name is a part of it.
    (Cached: a cluster has few models and a queue few gmodel names, and the scheduler asks per GPU.)"""
    def squash(s: str) -> str:
        return "".join(ch for ch in s.lower() if ch.isalnum())

    return squash(wanted) in squash(model)


def bytes_of(text: str) -> int:
    """``gmem`` as sent: bytes (``xce.units.parse_size``: ``16Gi``, ``16G``, or a bare number of bytes)."""
    from xce.errors import InvalidRequest
    from xce.units import parse_size

    try:
        return parse_size(text, "gmem")
    except InvalidRequest as e:
        raise GpuRequestError(f"bad -gpu request: {e.message}") from None


def parse_gpu(text: str, size: Callable[[str], int] = bytes_of) -> GpuRequest:
    """``-gpu``'s value (``-``: LSF's default, one GPU of the job's own) as a ``GpuRequest``; ``size``
    reads ``gmem`` (the bsub path: LSF's units).  Raises ``GpuRequestError``."""
    text = text.strip()
    if text in ("", "-"):
        return GpuRequest()
    given: dict[str, str] = {}
    for item in text.split(":"):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not value:
            raise GpuRequestError(f"bad -gpu request {text!r}: {item.strip()!r} is not NAME=VALUE")
        if name not in _KEYS:
            raise GpuRequestError(f"bad -gpu request {text!r}: unknown field {name!r} (known: {', '.join(_KEYS)})")
        if name in given:
            raise GpuRequestError(f"bad -gpu request {text!r}: {name} given twice")
        given[name] = value
    num = 1
    if "num" in given:
        if not given["num"].isdigit() or not 1 <= int(given["num"]) <= MAX_GPUS:
            raise GpuRequestError(f"bad -gpu request {text!r}: num must be a whole number from 1 to {MAX_GPUS}, "
                                  f"got {given['num']!r}")
        num = int(given["num"])
    mode = given.get("mode", "shared")
    if mode not in MODES:
        raise GpuRequestError(f"bad -gpu request {text!r}: mode must be shared or exclusive_process, got {mode!r}")
    exclusive = True
    if "j_exclusive" in given:
        if given["j_exclusive"] not in ("yes", "no"):
            raise GpuRequestError(f"bad -gpu request {text!r}: j_exclusive must be yes or no, "
                                  f"got {given['j_exclusive']!r}")
        exclusive = given["j_exclusive"] == "yes"
        if mode == "exclusive_process" and not exclusive:
            raise GpuRequestError(f"bad -gpu request {text!r}: mode=exclusive_process keeps its GPUs to the job "
                                  "(j_exclusive=yes): drop j_exclusive=no or use mode=shared")
    gmodel = given.get("gmodel")
    if gmodel is not None and (len(gmodel) > 128 or not any(ch.isalnum() for ch in gmodel)):
        raise GpuRequestError(f"bad -gpu request {text!r}: gmodel must name a GPU model, got {gmodel!r}")
    gmem = size(given["gmem"]) if "gmem" in given else None
    return GpuRequest(num=num, mode=mode, exclusive=exclusive, gmodel=gmodel, gmem=gmem)


def from_rusage(rusage: dict[str, float]) -> GpuRequest | None:
    """``rusage[ngpus_physical=N]`` as a request for N GPUs per host (LSF's defaults otherwise), or None."""
    n = rusage.get(GPU_RUSAGE)
    if n is None:
        return None
    if n != int(n) or not 1 <= n <= MAX_GPUS:
        raise GpuRequestError(f"rusage[{GPU_RUSAGE}={n:g}]: a whole number of GPUs from 1 to {MAX_GPUS}")
    return GpuRequest(num=int(n))


def job_request(gpu: str | None, rusage: dict[str, float]) -> GpuRequest | None:
    """What a submission asks of GPUs: its ``-gpu`` or its ``rusage[ngpus_physical=N]`` (not both: which
    one was meant?), or None."""
    from_r = from_rusage(rusage)
    if gpu is None:
        return from_r
    if from_r is not None:
        raise GpuRequestError(f"-gpu and rusage[{GPU_RUSAGE}=] both ask for GPUs: give one")
    return parse_gpu(gpu)
