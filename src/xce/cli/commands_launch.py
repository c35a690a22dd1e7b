"""``xce launch`` and LSF's ``blaunch`` (one definition: ``add_arguments`` and ``launch``): run inside a
job, start a task on each of the given hosts of the job through their workers, and wait for them.

``blaunch [-n] [-z "HOST..."] [-u HOSTFILE] [HOST] COMMAND [ARG...]``, as LSF's: the task runs on each
host in the job's sandbox there (its user, environment, workspace and claims; ``XCE_TASK`` numbers it),
its stdout and stderr come back to blaunch, which writes them to its own (the job's output: a host that
cannot reach the job's output file runs tasks all the same), and blaunch exits with the task's exit
status once it has all its output (the first failed task's, of several; 128+N for a task killed by
signal N).  SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to blaunch are passed on to its
tasks; a blaunch that dies otherwise (SIGKILL) has its tasks killed when it stops asking for them (the
controller's ``launcher_lease``).  blaunch's standard input goes to its tasks (each gets all of it), as
LSF's does; ``-n``: they read nothing (/dev/null), which a blaunch in a loop that reads its own input wants.  The command line is run by ``/bin/sh -c``,
its words joined by spaces, as rsh and ssh run theirs (``mpirun --mca plm_rsh_agent blaunch`` quotes
for a shell); ``-no-shell`` quotes each word so that it reaches the program as given.  A task that
fails ends the job, unless ``--keep-going``.

The job proves it is the job with its run's secret, which the worker wrote to its environment
(``XCE_JOB_TOKEN``) and which is sent only as the bearer of these calls; ``XCE_JOB_URL`` names the
controller(s), ``XCE_JOBID`` the job.  blaunch may run in the warm CLI server's worker process
(``cli/server.py``), which must be left with no thread: each task's relay is a thread that ends with its
task, and standard input is read by the main thread.
"""

from __future__ import annotations

import argparse
import base64
import os
import queue
import select
import shlex
import signal
import sys
import threading
import time
from typing import Any

from xce.cli.errors import CliError, UsageError
from xce.client import ApiError, Client
from xce.wire import never_sent

USAGE = '[-z "HOST..."] HOST COMMAND [ARG...]'
WAIT = 30  # seconds each wait for a task's end or output may take (then asked again)
TIMEOUT = WAIT + 15.0
INPUT_CHUNK = 384 * 1024  # bytes of standard input sent at once (base64: the most an input request takes)
RETRY = 0.2  # seconds before a read the controller could not serve (busy, no answer) is asked again
# what blaunch passes on to its tasks, as LSF's does
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


class NotInJob(CliError):
    """blaunch was run outside a job (no run secret in its environment)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", dest="no_stdin", action="store_true",
                   help="the tasks read nothing (/dev/null), not blaunch's standard input")
    p.add_argument("-z", dest="hosts", metavar='"HOST..."',
                   help="the task on each of these hosts (one argument, space-separated), in parallel")
    p.add_argument("-u", dest="host_file", metavar="HOSTFILE", help="the task on each host listed in this file")
    p.add_argument("-no-shell", "--no-shell", dest="no_shell", action="store_true",
                   help="pass each word to the program as given (default: one line for /bin/sh -c)")
    p.add_argument("-use-login-shell", dest="login_shell", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--keep-going", action="store_true", help="a failed task does not end the job")
    p.add_argument("words", nargs=argparse.REMAINDER, metavar="[HOST] COMMAND [ARG...]")


def _hosts_and_command(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    words = list(args.words)
    if args.hosts is not None or args.host_file is not None:
        hosts = (args.hosts or "").split()
        if args.host_file is not None:
            try:
                with open(args.host_file) as fh:
                    hosts += fh.read().split()
            except OSError as e:
                raise CliError(f"cannot read host file {args.host_file}: {e.strerror}") from None
    else:
        hosts, words = words[:1], words[1:]
    if not hosts:
        raise UsageError(f"no host given (expected {USAGE})")
    if not words:
        raise UsageError(f"no command given (expected {USAGE})")
    return hosts, words


def launch(args: argparse.Namespace, environ: Any = os.environ) -> int:
    """Start the tasks, wait for their ends; the exit status as a shell would give it."""
    hosts, words = _hosts_and_command(args)
    secret, url, job = environ.get("XCE_JOB_TOKEN"), environ.get("XCE_JOB_URL"), environ.get("XCE_JOBID")
    if not secret or not url or not job or not job.isdigit():
        raise NotInJob("not inside an XCE job (XCE_JOB_TOKEN, XCE_JOB_URL and XCE_JOBID are the job's): "
                       "blaunch starts tasks of the job it runs in")
    command = shlex.join(words) if args.no_shell else " ".join(words)
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    client = Client(url, secret, timeout=TIMEOUT)
    signals: queue.SimpleQueue[int] = queue.SimpleQueue()
    previous = {sig: signal.signal(sig, lambda n, _: signals.put(n)) for sig in PASSED_ON}
    try:
        env = {k: v for k, v in environ.items() if not never_sent(k, v)}  # (the run's secret is XCE_JOB_TOKEN)
        started = [client.post(f"/v1/jobs/{job}/tasks", {"host": h, "command": command, "cwd": cwd, "env": env,
                                                         "keep_going": args.keep_going, "stdin": not args.no_stdin})
                   for h in hosts]
        relays = [_Relay(client, job, task) for task in started]
        for r in relays:
            r.start()
        stdin = _Input(client, relays) if not args.no_stdin else None
        while any(r.is_alive() for r in relays):
            if stdin is not None and not stdin.done:
                stdin.step(0.1)
            try:
                sig = signals.get(timeout=0.1 if stdin is None or stdin.done else 0)
            except queue.Empty:
                continue
            for r in relays:
                if r.is_alive():
                    r.pass_on(sig)
        status = 0
        for r in relays:
            if r.failed is not None:
                raise r.failed
            task = r.task
            code = 128 + task["signal"] if task["signal"] is not None else task["exit_code"]
            if task["reason"]:
                print(f"blaunch: task {task['task']} on {task['host']}: {task['reason']}", file=sys.stderr)
            if code and not status:
                status = code if 0 < code < 256 else 1
        return status
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        client.close()


class _Input:
    """blaunch's standard input to each of its tasks, chunk by chunk from the offset each has taken (the
    task's host takes what its input pipe has room for), then its end."""

    def __init__(self, client: Client, relays: list[_Relay]) -> None:
        self.client, self.relays = client, relays
        self.sent = 0  # bytes read from stdin and taken by every task still taking input
        self.done = False
        self._open = {r.path for r in relays}  # tasks that still take input

    def step(self, wait: float) -> None:
        """Send what stdin has now (waiting up to ``wait`` for it); its end once it has none."""
        try:
            ready, _, _ = select.select([0], [], [], wait)
            if not ready:
                return
            data = os.read(0, INPUT_CHUNK)
        except (OSError, ValueError):  # closed: no input
            data = b""
        for path in sorted(self._open):
            self._send(path, data)
        self.sent += len(data)
        if not data or not self._open:
            self.done = True

    def _send(self, path: str, data: bytes) -> None:
        offset, end = self.sent, self.sent + len(data)
        while True:
            try:
                got = self.client.post(f"{path}/input", {"offset": offset, "eof": not data,
                                                          "data": base64.b64encode(data[offset - self.sent:]).decode()})
            except ApiError as e:
                if e.status == 503 and e.code in ("busy", "no_answer"):
                    time.sleep(RETRY)
                    continue
                print(f"blaunch: standard input to {path.rsplit('/', 1)[1]}: {e}", file=sys.stderr)
                got = {"accepted": offset, "closed": True}
            if got["closed"]:
                self._open.discard(path)
                return
            offset = max(self.sent, min(end, got["accepted"]))
            if offset >= end and data:
                return


class _Relay(threading.Thread):
    """One task: its output, relayed from its host to blaunch's stdout and stderr in order and whole (asked
    from the offsets written), then its end.  Each ask keeps the task's launcher lease."""

    def __init__(self, client: Client, job: str, task: dict[str, Any]) -> None:
        super().__init__(daemon=True, name=f"task-{task['task']}")
        self.client, self.job, self.task = client, job, task
        self.path = f"/v1/jobs/{job}/tasks/{task['task']}"
        self.failed: Exception | None = None
        self._writable = {1: True, 2: True}

    def run(self) -> None:
        try:
            offsets = [0, 0]
            while True:
                got = self._ask(f"{self.path}/output", [("out", offsets[0]), ("err", offsets[1]), ("wait", WAIT)])
                for i, (fd, name) in enumerate(((1, "out"), (2, "err"))):
                    data = base64.b64decode(got[name])
                    self._write(fd, data)
                    offsets[i] += len(data)
                if got["eof"]:
                    break
            while not self.task["ended"]:
                self.task = self._ask(self.path, [("wait", WAIT)])
        except Exception as e:  # (said by the main thread)
            self.failed = e

    def _ask(self, path: str, params: list[tuple[str, Any]]) -> Any:
        while True:
            try:
                return self.client.get(path, params)
            except ApiError as e:
                if e.status != 503 or e.code not in ("busy", "no_answer"):
                    raise
            time.sleep(RETRY)

    def _write(self, fd: int, data: bytes) -> None:
        """All of ``data`` to ``fd``; a stream that cannot be written any more (closed) is drained still."""
        view = memoryview(data)
        while view and self._writable[fd]:
            try:
                view = view[os.write(fd, view):]
            except OSError:
                self._writable[fd] = False

    def pass_on(self, sig: int) -> None:
        try:
            self.client.post(f"{self.path}/signal", {"signal": int(sig)})
        except ApiError as e:
            print(f"blaunch: could not pass signal {int(sig)} on to task {self.task['task']}: {e}", file=sys.stderr)


def register(sub, common) -> None:
    p = sub.add_parser("launch", parents=[common], help="inside a job: start a task on its hosts (as LSF's blaunch)",
                       description=__doc__.split("\n\n")[1])
    add_arguments(p)
    p.set_defaults(func=cmd_launch)


def cmd_launch(args, ctx) -> int:
    return launch(args)
