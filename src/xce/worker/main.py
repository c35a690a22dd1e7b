"""``xce worker``: parse what the host offers, run the daemon until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import os
import re
import signal

from xce.agents.provisioner import load_provisioner_config
from xce.names import NAME_PATTERN
from xce.units import parse_amount


class WorkerConfigError(ValueError):
    """What ``xce worker`` was told about its host is malformed (``--attr``, ``--counter``,
    ``--storage-root``, the host name); ``xce worker`` reports it as bad usage (exit 2)."""


def parse_pairs(items: list[str] | None, what: str, numeric: bool) -> dict:
    """``k=v`` options (``--attr zone=a``, ``--counter scratch=100Gi``) as a dict."""
    out: dict = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not re.match(NAME_PATTERN, key):
            raise WorkerConfigError(f"--{what} {item!r}: expected NAME=VALUE with a name like [a-z0-9][a-z0-9-_.]*")
        if numeric:
            amount = parse_amount(value.strip())
            if amount is None:
                raise WorkerConfigError(f"--{what} {item!r}: invalid amount {value!r} (e.g. 8, 500M, 100Gi)")
            out[key] = amount
        else:
            out[key] = value
    return out


def run_worker(host: str, url: str, token: str, slots: int | None, attrs: list[str] | None,
               counters: list[str] | None, work_dir: str | None, heartbeat: float,
               run_as_users: bool = False, provider_config: str | None = None,
               storage_roots: list[str] | None = None, allow_system_users: bool = False,
               transfer_config: str | None = None, cgroups: str = "auto", allow_no_openat2: bool = False,
               gpus: str | None = None, address: str | None = None) -> int:
    from xce.names import check_name
    from xce.errors import InvalidRequest
    from xce.transfers import TransferConfigError, load_daemon_site
    from xce.worker.cgroups import CgroupError, open_hierarchy
    from xce.worker.daemon import Worker
    from xce.worker.rendezvous import RendezvousDirError
    from xce.worker.sandbox import StartFailed, launcher

    try:
        check_name("host", host)
    except InvalidRequest as e:
        raise WorkerConfigError(e.message) from None
    if address is not None and (not address or any(c.isspace() or c in ",/@" for c in address)):
        raise WorkerConfigError(f"--address {address!r}: expected a host name or an IP address")
    try:
        launcher()  # every run needs it: say so now, not at the first job
    except StartFailed as e:
        raise WorkerConfigError(str(e).removeprefix("failed to start: ")) from None
    try:
        transfers = load_daemon_site(transfer_config) if transfer_config else None
    except TransferConfigError as e:
        raise WorkerConfigError(str(e)) from None
    counters_given = parse_pairs(counters, "counter", numeric=True)
    if "mem" not in counters_given and (total := machine_memory()):
        counters_given["mem"] = total  # rusage[mem=...] reserves on it; -M and mem= limit a run's cgroup
    attrs_given = parse_pairs(attrs, "attr", numeric=False)
    from xce.worker.gpus import GpuConfigError, source_for

    work_dir = os.path.abspath(work_dir or os.path.join(os.path.expanduser("~"), ".xce", "worker", host))
    try:
        source = source_for(host, gpus, record=os.path.join(work_dir, "gpus"))
    except GpuConfigError as e:
        raise WorkerConfigError(str(e)) from None
    devices = source.devices() if source is not None else []
    roots = [_storage_root(r) for r in storage_roots or ()]
    providers = load_provisioner_config(provider_config).providers if provider_config else None
    logging.basicConfig(level=os.environ.get("XCE_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s worker[{host}] %(levelname)s %(message)s")
    log = logging.getLogger("xce.worker")
    os.makedirs(work_dir, mode=0o755, exist_ok=True)
    if run_as_users:
        closed = [d for d in _parents(work_dir) if not os.stat(d).st_mode & 0o001]
        if closed:
            log.warning("--run-as-users: %s is not searchable by other users, so jobs cannot reach their workspaces "
                        "and claims under %s", closed[0], work_dir)
    try:
        worker = Worker(host, url, token, slots if slots is not None else (os.cpu_count() or 1), attrs_given,
                        counters_given, work_dir, heartbeat=heartbeat, run_as_users=run_as_users,
                        providers=providers, storage_roots=roots, allow_system_users=allow_system_users,
                        transfers=transfers, allow_no_openat2=allow_no_openat2, gpus=devices, address=address,
                        gpu_source=source)
    except RendezvousDirError as e:
        raise WorkerConfigError(str(e)) from None
    # (said once what it was told is known good: a bad --controller is the first thing a typo shows)
    log.info("GPUs: %s", f"{len(devices)} ({source.name}): " + ", ".join(f"{g.id} {g.model}" for g in devices)
             if source is not None else "none (no --gpus, and NVML finds no NVIDIA GPU)")
    try:  # last: it makes this worker's cgroup directories, once everything else it was told is good
        hierarchy = open_hierarchy(host, cgroups, owner=work_dir)
    except CgroupError as e:
        raise WorkerConfigError(f"--cgroups {cgroups}: {e}") from None
    log.info("runs are confined by %s", hierarchy.describe() if hierarchy else
             "nothing but their process group (no cgroups: no memory or CPU limits)")
    if any(g.minor is not None for g in devices) and (hierarchy is None or hierarchy.devices is None
                                                     and hierarchy.tree.version != "v2"):
        log.warning("GPUs here, but no v1 devices cgroup: a run is kept to its GPUs by CUDA_VISIBLE_DEVICES only "
                    "(its cgroup cannot deny the others' /dev/nvidia* nodes)")
    worker.confine(hierarchy)

    def on_signal(signum, frame) -> None:
        logging.getLogger("xce.worker").info("signal %d: stopping", signum)
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return worker.run()
    finally:
        if hierarchy is not None:  # a clean stop leaves no idle cgroup behind (runs still going keep theirs)
            hierarchy.remove_all()


def machine_memory(meminfo: str = "/proc/meminfo") -> float | None:
    """The machine's memory in bytes (``MemTotal``): the ``mem`` counter a worker reports unless told."""
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return float(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _parents(path: str) -> list[str]:
    out = []
    while True:
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            return out
        path = parent


def _storage_root(path: str) -> str:
    if not os.path.isabs(path) or not os.path.isdir(path) or os.path.realpath(path) == "/":
        raise WorkerConfigError(f"--storage-root {path}: must be an existing directory given as an absolute path (not /)")
    return path
