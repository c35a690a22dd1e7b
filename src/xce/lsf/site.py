"""What LSF's commands say of the cluster: ``bqueues``, ``bhosts``, ``lsid``, ``lsclusters``,
``badmin showconf mbd`` and ``bparams -a``.  The site's settings are ``$LSF_ENVDIR``'s files
(``xce.lsfsite``: what ``xce up`` writes), the rest the controller's answers."""

from __future__ import annotations

import os
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import xce
from xce.lsf._base import LsfError, LsfParser, client, run
from xce.lsfsite import CLUSTER, LSB_PARAMS, LSF_CONF, conf_path, params_path, read_conf

LSF_STATUS = {"OK": "ok", "UNAVAIL": "unavail", "CLOSED": "closed"}


def _master(c: Any) -> str:
    return urlsplit(c.url).hostname or "-"


def bqueues(argv: list[str]) -> int:
    p = LsfParser(prog="bqueues")
    p.add_argument("-w", action="store_true", help="wide")
    p.add_argument("-l", dest="long", action="store_true", help="long format")
    p.add_argument("queues", nargs="*")
    args = p.parse_args(argv)
    queues = [q for q in client().get("/v1/queues") if not args.queues or q["name"] in args.queues]
    if args.queues and not queues:
        raise LsfError(f"{args.queues[0]}: No such queue")
    if args.long:
        for q in queues:
            print(f"QUEUE: {q['name']}\n  -- {q['description'] or 'No description provided.'}\n\n"
                  f"PARAMETERS/STATISTICS\nPRIO NICE STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN SSUSP USUSP\n"
                  f"{q['priority']:>4}    0 Open:Active       -    -    -    - {q['pending'] + q['running']:>5} "
                  f"{q['pending']:>5} {q['running']:>5}     0     0\n")
        return 0
    print("QUEUE_NAME      PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP")
    for q in queues:
        print(f"{q['name']:<15} {q['priority']:>4} {'Open:Active':<15} {'-':>3} {'-':>4} {'-':>4} {'-':>4} "
              f"{q['pending'] + q['running']:>5} {q['pending']:>5} {q['running']:>5} {0:>5}")
    return 0


def bhosts(argv: list[str]) -> int:
    p = LsfParser(prog="bhosts")
    p.add_argument("-w", action="store_true", help="wide")
    p.add_argument("hosts", nargs="*")
    args = p.parse_args(argv)
    hosts = [h for h in client().get("/v1/hosts") if not args.hosts or h["name"] in args.hosts]
    print("HOST_NAME          STATUS       JL/U    MAX  NJOBS    RUN  SSUSP  USUSP    RSV")
    for h in hosts:
        status = LSF_STATUS.get(h["state"], h["state"].lower())
        if status == "ok" and h["slots_used"] >= h["slots"]:
            status = "closed"  # LSF's word for a full host
        print(f"{h['name']:<18} {status:<12} {'-':>4} {h['slots']:>6} {h['slots_used']:>6} {h['slots_used']:>6} "
              f"{0:>6} {0:>6} {0:>6}")
    return 0


def lsid(argv: list[str]) -> int:
    LsfParser(prog="lsid").parse_args(argv)
    print(f"XCE {xce.__version__}, an LSF-style workload manager (LSF commands: IBM Spectrum LSF 10.1 compatible)")
    print(f"\nMy cluster name is {CLUSTER}")
    print(f"My master name is {_master(client())}")
    return 0


def lsclusters(argv: list[str]) -> int:
    p = LsfParser(prog="lsclusters")
    p.add_argument("-w", action="store_true", help="wide")
    p.parse_args(argv)
    c = client()
    hosts = c.get("/v1/hosts")
    print(f"{'CLUSTER_NAME':<15}{'STATUS':<9}{'MASTER_HOST':<26}{'ADMIN':<16}{'HOSTS':>6}{'SERVERS':>8}")
    print(f"{CLUSTER:<15}{'ok':<9}{_master(c):<26}{'admin':<16}{len(hosts):>6}{len(hosts):>8}")
    return 0


def settings() -> list[tuple[str, str]]:
    """The site's settings, as ``$LSF_ENVDIR``'s files hold them (XCE's defaults where there are none)."""
    conf = {**dict(LSF_CONF), **read_conf(conf_path(os.environ))}
    params = {**dict(LSB_PARAMS), **read_conf(params_path(os.environ))}
    params.pop("Begin Parameters", None)
    return sorted({**conf, **params}.items())


def badmin(argv: list[str]) -> int:
    p = LsfParser(prog="badmin")
    p.add_argument("subcommand", choices=("showconf",))
    p.add_argument("daemon", choices=("mbd",))
    p.parse_args(argv)
    print(f"MBD configuration at {time.strftime('%a %b %e %H:%M:%S %Y')}")
    for key, value in settings():
        print(f"    {key} = {value}")
    return 0


def bparams(argv: list[str]) -> int:
    p = LsfParser(prog="bparams")
    p.add_argument("-a", dest="all", action="store_true", help="every parameter")
    p.add_argument("-l", dest="long", action="store_true")
    args = p.parse_args(argv)
    params = {**dict(LSB_PARAMS), **read_conf(params_path(os.environ))}
    if not args.all:
        print(f"Default Queues:  {params.get('DEFAULT_QUEUE', 'default')}")
        print(f"Job Dispatch Interval:  {params.get('MBD_SLEEP_TIME', '1')} seconds")
        return 0
    print("System default queues for automatic queue selection:")
    print(f"    DEFAULT_QUEUE = {params.get('DEFAULT_QUEUE', 'default')}\n")
    print("System parameters:")
    for key, value in sorted(params.items()):
        if key != "DEFAULT_QUEUE":
            print(f"    {key} = {value}")
    return 0


def _main(prog: str, body: Any) -> Any:
    def main(argv: list[str] | None = None) -> int:
        return run(prog, lambda: body(sys.argv[1:] if argv is None else argv))
    return main


bqueues_main = _main("bqueues", bqueues)
bhosts_main = _main("bhosts", bhosts)
lsid_main = _main("lsid", lsid)
lsclusters_main = _main("lsclusters", lsclusters)
badmin_main = _main("badmin", badmin)
bparams_main = _main("bparams", bparams)
