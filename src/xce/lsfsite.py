"""An LSF site's configuration files, as LSF's clients read them: ``$LSF_ENVDIR/lsf.conf`` and
``lsb.params``, in the layout ``xce up`` writes (``write_envdir``) and the LSF commands read
(``read_conf``, ``unit_for_limits``).

Tools that drive LSF look for these before they submit: dask-jobqueue reads
``LSF_UNIT_FOR_LIMITS`` from ``$LSF_ENVDIR/lsf.conf`` to say ``-M`` in the site's unit, and LSF's
own ``badmin showconf mbd`` / ``bparams -a`` report them.  XCE reads bare numbers in ``bsub -M``
and ``rusage[mem=]`` in that unit too (``xce.jobspec.lsf_size``).  Stdlib only, low in the house,
so ``xce up`` (which writes) and the LSF commands (which read) share the one definition.
"""

from __future__ import annotations

import os
from typing import Mapping

DEFAULT_UNIT = "MB"  # LSF's own default is KB; XCE's is what the clients assume of a modern site
CLEAN_PERIOD = 3600  # seconds a finished job stays in bjobs -a (lsb.params CLEAN_PERIOD)
CLUSTER = "xce"

# every key these files hold, with XCE's value: written by write_envdir, reported by badmin and bparams
LSF_CONF: tuple[tuple[str, str], ...] = (
    ("LSF_UNIT_FOR_LIMITS", DEFAULT_UNIT),
    ("LSB_JOB_OUTPUT_LOGGING", "Y"),
    ("LSF_VERSION", "10.1"),
)
LSB_PARAMS: tuple[tuple[str, str], ...] = (
    ("CLEAN_PERIOD", str(CLEAN_PERIOD)),
    ("MBD_SLEEP_TIME", "1"),
    ("SBD_SLEEP_TIME", "1"),
    ("DEFAULT_QUEUE", "default"),
)


def envdir_of(state_dir: str) -> str:
    """Where ``xce up`` keeps the site's LSF_ENVDIR."""
    return os.path.join(state_dir, "lsf", "conf")


def write_envdir(envdir: str, state_dir: str) -> None:
    """``lsf.conf`` in ``envdir`` and, as LSF lays them out, ``lsbatch/<cluster>/configdir/lsb.params``
    beside it; the log directory ``LSF_LOGDIR`` and the event log's place
    ``LSB_SHAREDIR/<cluster>/logdir/lsb.events`` (empty: XCE's events are its jobs' histories, which
    ``bhist`` prints; a tool that reads the file finds no event rather than no file), all under
    ``<state_dir>/lsf``."""
    base = os.path.join(state_dir, "lsf")
    logdir, sharedir = os.path.join(base, "log"), os.path.join(base, "work")
    configdir = os.path.join(envdir, "lsbatch", CLUSTER, "configdir")
    eventdir = os.path.join(sharedir, CLUSTER, "logdir")
    for d in (envdir, logdir, configdir, eventdir):
        os.makedirs(d, mode=0o755, exist_ok=True)
    conf = [*LSF_CONF, ("LSF_ENVDIR", envdir), ("LSF_CONFDIR", envdir), ("LSB_CONFDIR", os.path.join(envdir, "lsbatch")),
            ("LSF_LOGDIR", logdir), ("LSB_SHAREDIR", sharedir)]
    _write(os.path.join(envdir, "lsf.conf"), "# written by xce up: what LSF's clients read of this site\n",
           [f"{k}={v}" for k, v in conf])
    _write(os.path.join(configdir, "lsb.params"), "# written by xce up\n",
           ["Begin Parameters", *(f"{k} = {v}" for k, v in LSB_PARAMS), "End Parameters"])
    open(os.path.join(eventdir, "lsb.events"), "a").close()


def _write(path: str, head: str, lines: list[str]) -> None:
    with open(path + ".tmp", "w") as fh:
        fh.write(head + "\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


def read_conf(path: str) -> dict[str, str]:
    """``KEY=VALUE`` (or ``KEY = VALUE``) lines of an LSF file, the last one of a key winning; a
    missing file is empty."""
    out: dict[str, str] = {}
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return out
    for line in text.splitlines():
        key, eq, value = line.strip().partition("=")
        if eq and key and not key.startswith("#"):
            out[key.strip()] = value.strip().strip('"')
    return out


def conf_path(environ: Mapping[str, str]) -> str:
    """``lsf.conf`` where LSF's clients look: ``$LSF_ENVDIR``, else ``/etc``."""
    return os.path.join(environ.get("LSF_ENVDIR") or "/etc", "lsf.conf")


def params_path(environ: Mapping[str, str]) -> str:
    """``lsb.params`` of the site ``$LSF_ENVDIR`` names."""
    return os.path.join(environ.get("LSF_ENVDIR") or "/etc", "lsbatch", CLUSTER, "configdir", "lsb.params")


def unit_for_limits(environ: Mapping[str, str]) -> str:
    """``LSF_UNIT_FOR_LIMITS``: the environment's, else ``lsf.conf``'s, else ``DEFAULT_UNIT``."""
    unit = environ.get("LSF_UNIT_FOR_LIMITS") or read_conf(conf_path(environ)).get("LSF_UNIT_FOR_LIMITS")
    return (unit or DEFAULT_UNIT).upper()
