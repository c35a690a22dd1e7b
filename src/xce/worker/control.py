"""What the worker tells a run's shepherd, and what the shepherd leaves for the worker.

The shepherd (``native/xce-launch.c``) owns everything done to the job's processes: it signals,
freezes and kills them.  The worker only writes the run's control files, whole or not at all (a
temporary name, then a rename), and then writes a byte to ``RUN/wake``, a FIFO the shepherd reads:

- ``RUN/kill``: ``GRACE`` seconds; SIGINT and SIGTERM once, SIGKILL after the grace;
- ``RUN/signals``: ``SEQ SIGNUM`` lines, each signal sent once (``xce kill -s``);
- ``RUN/freeze``: ``1`` or ``0`` (``xce stop`` / ``xce resume``);
- ``RUN/orders``: the newest order number the worker has passed on (for itself: a restarted worker
  tells the controller which orders it has, so none is passed on twice);
- ``TASK/stdin``: a task's standard input is over (its shepherd closes its write end of the task's FIFO);
- ``RUN/limit``: ``LIMIT WARN SIGNUM GRACE``, written before the shepherd starts: the run limit in
  seconds from the job's start (``-W``), when before it the warning signal comes (0: none), and the
  kill path's grace.  The shepherd keeps the time itself, so the limit holds while the worker restarts.

And for every run at once, ``WORK/lease``: the moment (``CLOCK_BOOTTIME`` nanoseconds) until which
the shepherds may let their runs go on without word from the controller.  The worker renews it after
each heartbeat the controller answered, to the time it *sent* that heartbeat plus the fence: the
controller heard from the host no sooner than that, so the shepherds give up no later than the fence
after the controller's last word of the host (``docs/decisions/runs-and-fencing.md``).

What the shepherd leaves: ``RUN/status`` (the exit status), ``RUN/usage`` (``MAXRSS_BYTES USER_S
SYS_S`` from wait4), ``RUN/fenced`` (it ended the run because the lease ran out), ``RUN/limited``
(it ended the run at its run limit).
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from typing import Any

LEASE = "lease"
WAKE = "wake"
KILL = "kill"
SIGNALS = "signals"
FREEZE = "freeze"
ORDERS = "orders"
USAGE = "usage"
FENCED = "fenced"
LIMIT = "limit"
LIMITED = "limited"
STDIN = "stdin"


def clock() -> float:
    """Seconds on the clock the shepherds measure leases with (it goes on while the host sleeps)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _write(path: str, text: str) -> None:
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.w"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, 1 << 16).decode(errors="replace")
    finally:
        os.close(fd)


def renew_lease(work_dir: str, until: float) -> None:
    """Every run here may go on until ``until`` (seconds on ``clock()``) without word from the controller."""
    _write(os.path.join(work_dir, LEASE), f"{int(until * 1e9)}\n")


def lease_path(work_dir: str) -> str:
    return os.path.join(work_dir, LEASE)


def applied(run_dir: str) -> int:
    """The newest order of this run passed on to its shepherd (0: none)."""
    text = (_read(os.path.join(run_dir, ORDERS)) or "").strip()
    return int(text) if text.isdigit() else 0


def pass_on(run_dir: str, orders: dict[str, Any], task: int | None = None) -> bool:
    """Write what the controller ordered the run (``model.jobs.orders``) for its shepherd (or its ``task``'s,
    in the task's directory), wake it, and record the order number; False when the shepherd is gone
    (nothing to tell).  A signal for one task (``[seq, signal, task]``: its blaunch's) goes to that task's
    shepherd only."""
    if orders["kill"] is not None and not os.path.exists(os.path.join(run_dir, KILL)):
        grace = orders["kill"]["grace"]
        _write(os.path.join(run_dir, KILL), f"{10.0 if grace is None else float(grace):g}\n")
    signals = [(seq, sig) for seq, sig, *to in orders["signals"] if not to or to[0] == task]
    if signals:
        _write(os.path.join(run_dir, SIGNALS), "".join(f"{seq} {sig}\n" for seq, sig in signals))
    _write(os.path.join(run_dir, FREEZE), "1\n" if orders["suspend"] else "0\n")
    woke = wake(run_dir)
    _write(os.path.join(run_dir, ORDERS), f"{orders['seq']}\n")
    return woke


def set_run_limit(run_dir: str, limit: float, warn_before: float | None, warn_signal: int | None,
                  grace: float | None) -> None:
    """The run limit its shepherd keeps (``RUN/limit``), before the shepherd starts."""
    warn = warn_before if warn_before is not None and warn_signal else 0.0
    _write(os.path.join(run_dir, LIMIT),
           f"{limit:g} {warn:g} {warn_signal or 0} {10.0 if grace is None else float(grace):g}\n")


def run_limit(run_dir: str) -> float | None:
    """The run limit written for the run's shepherd, in seconds (None: none)."""
    parts = (_read(os.path.join(run_dir, LIMIT)) or "").split()
    try:
        return float(parts[0]) if parts else None
    except ValueError:
        return None


def end_now(run_dir: str) -> bool:
    """The run is not this host's any more (given up while the worker was away): SIGKILL at once."""
    if not os.path.exists(os.path.join(run_dir, KILL)):
        _write(os.path.join(run_dir, KILL), "0\n")
    return wake(run_dir)


def end_input(task_dir: str) -> bool:
    """A task's standard input is over (``TASK/stdin``): its shepherd closes its write end of the task's FIFO."""
    _write(os.path.join(task_dir, STDIN), "end\n")
    return wake(task_dir)


def wake(run_dir: str) -> bool:
    """A byte to the shepherd's FIFO: it reads the control files again.  False: no shepherd reads it."""
    try:
        fd = os.open(os.path.join(run_dir, WAKE), os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno in (errno.ENXIO, errno.ENOENT):  # no reader: the shepherd is gone (or not yet there)
            return False
        raise
    try:
        os.write(fd, b"!")
    except BlockingIOError:
        pass  # the FIFO is full of wake-ups the shepherd has yet to read: one more changes nothing
    finally:
        os.close(fd)
    return True


@dataclass(frozen=True)
class Ended:
    """How a run ended, as its shepherd left it."""

    max_rss_bytes: int | None
    cpu_user_s: float | None
    cpu_sys_s: float | None
    fenced: bool
    limited: bool = False  # its shepherd ended it at its run limit


def ended(run_dir: str) -> Ended:
    parts = (_read(os.path.join(run_dir, USAGE)) or "").split()
    rss = user = sys_ = None
    if len(parts) == 3:
        try:
            rss, user, sys_ = int(parts[0]), float(parts[1]), float(parts[2])
        except ValueError:
            pass
    return Ended(max_rss_bytes=rss, cpu_user_s=user, cpu_sys_s=sys_,
                 fenced=os.path.exists(os.path.join(run_dir, FENCED)),
                 limited=os.path.exists(os.path.join(run_dir, LIMITED)))
