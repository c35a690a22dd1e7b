"""A worker's GPUs: where it learns them (a ``DeviceSource``), what it tells the controller of them,
and what a run holding some of them sees (its environment) and may open (the devices cgroup's rules).

Two sources, one interface:

- ``NvmlDevices``: NVIDIA's management library (the ``nvidia-ml-py`` package, ``pynvml``), on a
  host with NVIDIA GPUs and their driver: each GPU's index (its id), UUID, name and memory, and its
  device node's minor number (``/dev/nvidia<minor>``).
- ``ConfiguredDevices``: ids given on the command line (``xce worker --gpus 0,1,2,3``; ``xce up
  --gpus N`` gives each host ``0..N-1``), for test and laptop clusters: fake devices with a UUID made
  from the host and the id, a model name that says they are fake, and no device node.

A run asking for ``mode=exclusive_process`` has its GPUs set to that compute mode for as long as it runs
(``set_compute_mode``: NVML's ``nvmlDeviceSetComputeMode``, as LSF does, so the driver lets one process
have each; the worker runs as root, which NVML requires), and back to ``default`` at its end; fake devices
record the mode (``ConfiguredDevices.record``), behind the same interface.

A run sees only its own GPUs: ``CUDA_VISIBLE_DEVICES`` is their ids, comma-separated, as LSF sets it
(ids are NVML's indices, which follow the PCI bus order; ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA
number them the same way), ``NVIDIA_VISIBLE_DEVICES`` the same for container runtimes, and
``XCE_GPUS`` / ``XCE_GPU_UUIDS`` say which they are.  Where the host has ``/dev/nvidia*`` nodes and
a devices cgroup, the run's cgroup denies the nodes of every GPU it does not hold
(``device_rules``).
"""

from __future__ import annotations

import logging
import os
import stat
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Protocol

log = logging.getLogger("xce.worker.gpus")

FAKE_MODEL = "XCE fake GPU"
FAKE_MEMORY = 16 * 2**30
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "XCE_GPUS", "XCE_GPU_UUIDS")
EXCLUSIVE_PROCESS = "exclusive_process"  # -gpu mode=exclusive_process: the compute mode set on the run's GPUs
DEFAULT_MODE = "default"  # NVML's NVML_COMPUTEMODE_DEFAULT, the mode a run's GPUs are given back in


class GpuConfigError(ValueError):
    """``--gpus`` is malformed, or names GPUs this host does not have."""


@dataclass(frozen=True)
class Gpu:
    id: int  # the id jobs get (CUDA_VISIBLE_DEVICES): NVML's index
    uuid: str
    model: str
    memory: int  # bytes
    minor: int | None = None  # /dev/nvidia<minor> (None: no device node, a fake GPU)

    def as_json(self) -> dict[str, Any]:
        """As registration reports it (the device node stays on the host)."""
        return {"id": self.id, "uuid": self.uuid, "model": self.model, "memory": self.memory}


class DeviceSource(Protocol):
    """Where a worker's GPUs come from."""

    name: str  # for the log: "nvml", "configured"

    def devices(self) -> list[Gpu]: ...

    def set_compute_mode(self, ids: list[int], mode: str) -> None:
        """The compute mode of GPUs ``ids``: ``EXCLUSIVE_PROCESS`` or ``DEFAULT_MODE``."""
        ...


class NvmlDevices:
    """The host's NVIDIA GPUs, through NVML (``pynvml``)."""

    name = "nvml"

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml as nvml  # nvidia-ml-py: loads libnvidia-ml.so at nvmlInit
        self.nvml = nvml

    def devices(self) -> list[Gpu]:
        n = self.nvml
        n.nvmlInit()
        try:
            out = []
            for index in range(n.nvmlDeviceGetCount()):
                h = n.nvmlDeviceGetHandleByIndex(index)
                name = n.nvmlDeviceGetName(h)
                uid = n.nvmlDeviceGetUUID(h)
                out.append(Gpu(id=index, uuid=uid.decode() if isinstance(uid, bytes) else str(uid),
                               model=name.decode() if isinstance(name, bytes) else str(name),
                               memory=int(n.nvmlDeviceGetMemoryInfo(h).total),
                               minor=int(n.nvmlDeviceGetMinorNumber(h))))
            return out
        finally:
            n.nvmlShutdown()

    def set_compute_mode(self, ids: list[int], mode: str) -> None:
        n = self.nvml
        value = n.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS if mode == EXCLUSIVE_PROCESS else n.NVML_COMPUTEMODE_DEFAULT
        n.nvmlInit()
        try:
            for index in ids:
                n.nvmlDeviceSetComputeMode(n.nvmlDeviceGetHandleByIndex(index), value)
        finally:
            n.nvmlShutdown()


class ConfiguredDevices:
    """Fake GPUs with the ids given (``--gpus 0,1,2,3``): same interface as NVML's."""

    name = "configured"

    def __init__(self, host: str, ids: list[int], model: str = FAKE_MODEL, memory: int = FAKE_MEMORY,
                 record: str | None = None) -> None:
        self.host, self.ids, self.model, self.memory = host, ids, model, memory
        self.record = record  # a directory where each device's compute mode is written (gpu<ID>.compute_mode)
        self.modes: dict[int, str] = {}

    def set_compute_mode(self, ids: list[int], mode: str) -> None:
        for index in ids:
            if index not in self.ids:
                raise GpuConfigError(f"no GPU {index} here")
            self.modes[index] = mode
            if self.record is not None:
                os.makedirs(self.record, mode=0o755, exist_ok=True)
                with open(os.path.join(self.record, f"gpu{index}.compute_mode"), "w") as fh:
                    fh.write(mode + "\n")

    def devices(self) -> list[Gpu]:
        return [Gpu(id=i, uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{i}.{self.host}.gpu.xce')}",
                    model=self.model, memory=self.memory) for i in self.ids]


def parse_ids(text: str) -> list[int]:
    """``--gpus 0,1,2,3`` (or ``0-3``, or ``none``) as ids, each once."""
    if text.strip().lower() in ("", "none"):
        return []
    ids: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise GpuConfigError(f"--gpus {text!r}: ids are whole numbers, as 0,1,2,3 or 0-3") from None
        if first < 0 or last < first or last > 1023:
            raise GpuConfigError(f"--gpus {text!r}: ids from 0 to 1023, ranges low-high")
        ids += range(first, last + 1)
    if len(set(ids)) != len(ids):
        raise GpuConfigError(f"--gpus {text!r}: an id given twice")
    return sorted(ids)


def nvml_present() -> bool:
    """Can NVML be loaded here (the package installed, the driver's library present)?"""
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded...: no NVIDIA GPU here
        return False
    pynvml.nvmlShutdown()
    return True


def source_for(host: str, gpus: str | None, record: str | None = None) -> DeviceSource | None:
    """The worker's device source: configured ids when ``--gpus`` is given (``none``: no GPUs; their compute
    modes recorded in ``record``), else NVML where it loads, else none."""
    if gpus is not None:
        ids = parse_ids(gpus)
        return ConfiguredDevices(host, ids, record=record) if ids else None
    return NvmlDevices() if nvml_present() else None


def job_env(held: list[dict[str, Any]]) -> dict[str, str]:
    """What a run is told of the GPUs it holds on this host (its dispatch's ``gpus``: {id, uuid} each;
    nothing for a run without GPUs)."""
    if not held:
        return {}
    text = ",".join(str(g["id"]) for g in held)
    return {"CUDA_VISIBLE_DEVICES": text, "NVIDIA_VISIBLE_DEVICES": text, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "XCE_GPUS": text, "XCE_GPU_UUIDS": ",".join(g.get("uuid", "") for g in held)}


def device_rules(gpus: list[Gpu], ids: list[int] | None,
                 stat_of: Callable[[str], os.stat_result] = os.stat) -> list[str]:
    """The devices cgroup's deny rules for a run holding GPUs ``ids`` (None: a run that asked for none):
    one ``c MAJOR:MINOR rwm`` for each other GPU's ``/dev/nvidia<minor>`` node that exists here (fake
    GPUs have none).  The shared nodes (``nvidiactl``, ``nvidia-uvm``) stay open: CUDA needs them."""
    mine = set(ids or ())
    rules = []
    for g in gpus:
        if g.id in mine or g.minor is None:
            continue
        try:
            st = stat_of(f"/dev/nvidia{g.minor}")
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            rules.append(f"c {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} rwm")
    return rules
