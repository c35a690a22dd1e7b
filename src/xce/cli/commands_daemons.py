"""Daemon commands: ``controller``, ``worker``, ``up`` and ``down`` (the local cluster).

These run processes rather than call the API, so they take their own
``--config`` (the controller's TOML, not the client's settings).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys

from xce.cli.errors import UsageError

TOKEN_ON_COMMAND_LINE = ("--token puts the secret in every process listing (jobs can read it): "
                         "use --token-file PATH (mode 0600) or XCE_TOKEN")


def read_token_file(path: str) -> str:
    """A daemon's token from ``path``, which only its owner may read (like ssh's private keys)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise UsageError(f"--token-file {path}: {e.strerror}") from None
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"--token-file {path}: not a regular file")
        if st.st_mode & 0o077:
            raise UsageError(f"--token-file {path} is readable or writable by group or others "
                             f"(mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}")
        token = fh.read(4096).strip()
    if not token:
        raise UsageError(f"--token-file {path} is empty")
    return token


def daemon_token(args, what: str) -> str:
    """The daemon's token: from --token-file, else XCE_TOKEN; never from the command line."""
    if getattr(args, "command_line_token", None) or getattr(args, "token", None):  # (xce --token T worker)
        raise UsageError(f"xce {what}: {TOKEN_ON_COMMAND_LINE}")
    if args.token_file:
        return read_token_file(args.token_file)
    token = os.environ.get("XCE_TOKEN", "").strip()
    if not token:
        raise UsageError(f"xce {what} needs its daemon token: --token-file PATH (mode 0600) or XCE_TOKEN")
    return token


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    c = sub.add_parser("controller", help="run the controller")
    c.add_argument("--state-dir", required=True, help="where the embedded store, tokens and URL live")
    c.add_argument("--listen", default="127.0.0.1:7600", help="HOST:PORT (default 127.0.0.1:7600)")
    c.add_argument("--config", dest="server_config", help="controller config (TOML); default: embedded")
    c.add_argument("--store", help="postgresql://... (default: SQLite in the state dir)")
    c.add_argument("--advertise", metavar="URL",
                   help="the URL clients are sent to while this controller leads (default: the config's "
                        "[controller] advertise, else the --listen address)")
    c.set_defaults(func=cmd_controller)

    w = sub.add_parser("worker", help="run a worker host")
    w.add_argument("--host", required=True, help="this host's name in the cluster")
    w.add_argument("--controller", required=True, metavar="URL[,URL...]",
                   help="the controller, or every controller sharing the store (it follows the leader)")
    w.add_argument("--token-file", metavar="PATH",
                   help="file holding the host's daemon token, mode 0600 (or XCE_TOKEN)")
    w.add_argument("--token", dest="command_line_token", help=argparse.SUPPRESS)  # refused: see TOKEN_ON_COMMAND_LINE
    w.add_argument("--slots", type=int, help="job slots (default: CPU count)")
    w.add_argument("--address", metavar="ADDR",
                   help="where this host's other hosts reach it: a multi-host job's rendezvous "
                        "(XCE_RDZV_HOST) when this host is its first (default: the --host name)")
    w.add_argument("--attr", action="append", metavar="K=V", help="host attribute for select[] (repeatable)")
    w.add_argument("--counter", action="append", metavar="NAME=AMOUNT",
                   help="consumable counter for rusage[], e.g. scratch=100Gi (repeatable)")
    w.add_argument("--gpus", metavar="IDS", help="this host's GPUs as fake devices with these ids (0,1,2,3 or 0-3; "
                                                 "none: no GPUs), for test and laptop clusters (default: the NVIDIA "
                                                 "GPUs NVML finds, if any)")
    w.add_argument("--work-dir", help="journal, workspaces and output (default ~/.xce/worker/HOST)")
    w.add_argument("--heartbeat", type=float, default=2.0, help="seconds between heartbeats")
    w.add_argument("--run-as-users", action="store_true",
                   help="run each job as the unix account named like its XCE user (needs root)")
    w.add_argument("--allow-system-users", action="store_true",
                   help="with --run-as-users: also run jobs as root and system accounts (uid below UID_MIN "
                        "in /etc/login.defs); refused by default")
    w.add_argument("--provider-config", help="providers for node-scope claims ([providers.NAME] tables as for "
                                              "xce provisioner; default: simfs under the work dir)")
    w.add_argument("--storage-root", action="append", dest="storage_roots", metavar="DIR",
                   help="shared storage mounted on this host where shared claims live (repeatable); claims are "
                        "published into jobs only from these and the node providers' roots")
    w.add_argument("--transfer-config", metavar="PATH",
                   help="remotes and their credentials for stage-in/out of URLs ([transfers] TOML, mode 0600; "
                        "see xce transfers list)")
    w.add_argument("--cgroups", choices=("auto", "v2", "hybrid", "v1", "none"), default="auto",
                   help="each run in a cgroup of its own (memory and CPU limits, the whole process tree killed, "
                        "usage): v2 where /sys/fs/cgroup is the unified hierarchy, hybrid where the v1 "
                        "controllers sit beside a cgroup2 mount, else v1 (default auto; needs root; none: the "
                        "job's process group only)")
    w.add_argument("--allow-no-openat2", action="store_true",
                   help="on kernels before 5.6 (no openat2) still publish claims, though a symbolic link swapped "
                        "into a claim's path could then be followed; refused by default")
    w.set_defaults(func=cmd_worker)

    pr = sub.add_parser("provisioner", help="run the provisioner (the claim agent for shared storage)")
    pr.add_argument("--controller", required=True, metavar="URL[,URL...]",
                    help="the controller, or every controller sharing the store (it follows the leader)")
    pr.add_argument("--token-file", metavar="PATH",
                    help="file holding its daemon token, mode 0600 (or XCE_TOKEN)")
    pr.add_argument("--token", dest="command_line_token", help=argparse.SUPPRESS)  # refused
    pr.add_argument("--config", dest="provisioner_config", required=True,
                    help="providers and their private configs (TOML); read by nobody else")
    pr.add_argument("--transfer-config", metavar="PATH",
                    help="remotes and their credentials for shared staging claims (stage-in before hosts are "
                         "allocated) and populated claims ([transfers] TOML, mode 0600, as a worker's)")
    pr.set_defaults(func=cmd_provisioner)

    u = sub.add_parser("up", help="start a local cluster: controller and N worker hosts on loopback")
    u.add_argument("--hosts", type=int, default=4, help="worker hosts host1..hostN (default 4)")
    u.add_argument("--state-dir", default=os.path.join(os.path.expanduser("~"), ".xce", "cluster"))
    u.add_argument("--listen", default="127.0.0.1:7600", help="controller HOST:PORT (port 0: any free)")
    u.add_argument("--config", dest="server_config", help="controller config (TOML); default: embedded")
    u.add_argument("--slots", type=int, default=8, help="slots per host (default 8)")
    u.add_argument("--gpus", type=int, default=None, metavar="N", help="N fake GPUs per host, ids 0..N-1 (xce worker "
                                                                       "--gpus); default: each worker's NVML, if any")
    u.add_argument("--provisioner-config", help="the provisioner's providers (default: DIR/provisioner.toml, "
                                                 "written once with simfs under DIR/simfs)")
    bt = u.add_mutually_exclusive_group()
    bt.add_argument("--btrfs", metavar="DIR", help="add a claim class btrfs on DIR, a directory on a mounted btrfs "
                                                   "filesystem (root; quotas are enabled if off)")
    bt.add_argument("--btrfs-loop", metavar="SIZE", help="add a claim class btrfs on a loop-file btrfs filesystem "
                                                         "of SIZE under DIR/btrfs (root; made once, mounted by up, "
                                                         "unmounted by down)")
    u.add_argument("--transfer-config", metavar="PATH",
                   help="remotes and their credentials ([transfers] TOML, mode 0600), given to the provisioner and "
                        "every worker")
    u.add_argument("--attr", action="append", default=[], metavar="[HOST:]K=V",
                   help="a host attribute for select[] (zone=a), on every host or on HOST alone (host2:zone=b) "
                        "(repeatable)")
    u.add_argument("--counter", action="append", default=[], metavar="[HOST:]NAME=AMOUNT",
                   help="a consumable counter for rusage[] (mem=64Gi), on every host or on HOST alone "
                        "(repeatable; each host has scratch=64Gi unless given)")
    u.set_defaults(func=cmd_up)

    d = sub.add_parser("down", help="stop the local cluster started by xce up")
    d.add_argument("--state-dir", default=os.path.join(os.path.expanduser("~"), ".xce", "cluster"))
    d.set_defaults(func=cmd_down)


def cmd_controller(args, ctx) -> int:
    from xce.config import ConfigError
    from xce.api.server import run_controller
    from xce.store import StoreError

    try:
        if args.advertise:
            from xce.client import InvalidURL
            from xce.client._http import parse_url

            try:
                parse_url(args.advertise)
            except InvalidURL as e:
                raise UsageError(f"--advertise: {e.message}") from None
        return run_controller(args.state_dir, args.listen, args.server_config, args.store, args.advertise)
    except (ConfigError, StoreError, ValueError, OSError) as e:
        print(f"xce controller: {e}", file=sys.stderr)
        return 1


def cmd_worker(args, ctx) -> int:
    from xce.agents.provisioner import ProvisionerConfigError
    from xce.worker.main import WorkerConfigError, run_worker

    token = daemon_token(args, "worker")
    if args.run_as_users and os.geteuid() != 0:
        raise UsageError("--run-as-users needs the worker to run as root")
    if args.slots is not None and args.slots < 0:
        raise UsageError("--slots must be >= 0")
    if args.allow_system_users and not args.run_as_users:
        raise UsageError("--allow-system-users goes with --run-as-users")
    try:
        return run_worker(args.host, args.controller, token, args.slots, args.attr, args.counter,
                          args.work_dir, args.heartbeat, args.run_as_users, args.provider_config,
                          args.storage_roots, allow_system_users=args.allow_system_users,
                          transfer_config=args.transfer_config, cgroups=args.cgroups,
                          allow_no_openat2=args.allow_no_openat2, gpus=args.gpus, address=args.address)
    except (WorkerConfigError, ProvisionerConfigError) as e:
        raise UsageError(str(e)) from None


def cmd_provisioner(args, ctx) -> int:
    from xce.agents.provisioner import ProvisionerConfigError, run_provisioner

    token = daemon_token(args, "provisioner")
    try:
        return run_provisioner(args.controller, token, args.provisioner_config, args.transfer_config)
    except ProvisionerConfigError as e:
        raise UsageError(str(e)) from None


def cmd_up(args, ctx) -> int:
    from xce.localcluster import up

    if not 1 <= args.hosts <= 64:
        raise UsageError("--hosts must be between 1 and 64")
    if args.slots < 1:
        raise UsageError("--slots must be >= 1")
    if args.gpus is not None and not 0 <= args.gpus <= 1024:
        raise UsageError("--gpus must be between 0 and 1024")
    loop = None
    if args.btrfs_loop is not None:
        from xce.errors import InvalidRequest
        from xce.units import parse_size
        try:
            loop = parse_size(args.btrfs_loop, "--btrfs-loop size")
        except InvalidRequest as e:
            raise UsageError(str(e)) from None
    per_host = _per_host(args.hosts, [("--attr", a) for a in args.attr] + [("--counter", c) for c in args.counter])
    return up(args.state_dir, args.hosts, args.listen, args.server_config, args.slots, args.provisioner_config,
              btrfs=args.btrfs, btrfs_loop=loop, transfer_config=args.transfer_config, gpus=args.gpus,
              host_args=per_host)


def _per_host(hosts: int, given: list[tuple[str, str]]) -> dict[str, list[str]]:
    """``xce up --attr/--counter [HOST:]K=V``: each host's own ``xce worker`` options (its worker checks
    the values; here only that HOST is one of host1..hostN)."""
    names = [f"host{i}" for i in range(1, hosts + 1)]
    out: dict[str, list[str]] = {h: [] for h in names}
    for option, text in given:
        key, eq, value = text.partition("=")
        host, colon, key = key.rpartition(":")
        if not eq or not key:
            raise UsageError(f"{option} {text!r}: expected [HOST:]NAME=VALUE")
        if colon and host not in out:
            raise UsageError(f"{option} {text!r}: no host {host!r} here (host1..host{hosts})")
        for h in [host] if colon else names:
            out[h] += [option, f"{key}={value}"]
    return out


def cmd_down(args, ctx) -> int:
    from xce.localcluster import down

    return down(args.state_dir)
