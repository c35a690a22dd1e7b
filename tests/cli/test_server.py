"""The warm CLI server (``xce.cli.server``) and the native front that forwards to it (``native/xce.c``).

What the front must carry to the call and back: signals (an interrupted wait exits 130 as in Python;
a SIGTERM ends the command and the front alike), pipes (a call's stdout is not held open after it:
``xce submit | cat`` ends), the working directory and the environment; daemons run cold, as a process
of the caller's own.  And what the front reads from a server it cannot trust to be sane: every
answer is bounded and refused cleanly, under ASan and UBSan.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading

import pytest

from tests.cli.test_native import build
from tests.helpers import XCE, ControllerProcess, process_alive, wait_for


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """A front that can only be served warm: running the Python CLI cold says so and fails."""
    return build(str(tmp_path_factory.mktemp("native") / "xce-alone"), sys.executable, cold=False)


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("server") / "ctl")).start()
    yield c
    c.stop()


@pytest.fixture()
def env(ctl, runtime):
    base = {k: v for k, v in os.environ.items() if not k.startswith("XCE_")}
    return {**base, "XCE_URL": ctl.url, "XCE_TOKEN": ctl.token, "XCE_CONFIG": "", "XCE_RUNTIME_DIR": runtime}


def _waiting(alone: str, env: dict[str, str], name: str) -> subprocess.Popen:
    """``xce claim create --wait`` on a controller with no provisioner: it waits until told otherwise
    (``--json``: its progress on stderr, which is line-buffered, as Python's is)."""
    p = subprocess.Popen([alone, "--json", "claim", "create", name, "--class", "simfs", "--size", "1Mi",
                          "--access", "RWO", "--wait"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    said = []
    threading.Thread(target=lambda: said.extend(iter(p.stderr.readline, "")), daemon=True).start()
    wait_for(lambda: any("PENDING" in line for line in said), what="the wait's first progress line")
    return p


def test_an_interrupted_call_exits_130_and_the_server_serves_on(alone, env):
    p = _waiting(alone, env, "interrupted")
    p.send_signal(2)  # SIGINT, as Ctrl-C sends it to the front
    assert p.wait(30) == 130  # the Python CLI's answer to KeyboardInterrupt
    r = subprocess.run([alone, "ping"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Leader epoch" in r.stdout, r.stderr


def test_a_terminated_call_ends_the_front_by_the_same_signal(alone, env):
    p = _waiting(alone, env, "terminated")
    p.terminate()
    assert p.wait(30) == -15  # as the Python CLI ends on SIGTERM: the shell sees the signal
    r = subprocess.run([alone, "ping"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_call_whose_front_was_killed_ends_as_if_hung_up(alone, env):
    """The front sends nothing after its call, so its end of the connection closes early only if it was
    killed (SIGKILL: nothing passed on); the worker notices (SIGIO, not a thread of its own) and the call
    ends as on a hang-up, instead of waiting on for nobody.  The server serves on."""
    p = _waiting(alone, env, "orphaned")
    pipe = f"pipe:[{os.fstat(p.stdout.fileno()).st_ino}]"
    worker = next(pid for pid in _holding(pipe) if pid != p.pid)  # the call's stdout is the front's, passed on
    p.kill()
    assert p.wait(30) == -9
    wait_for(lambda: not process_alive(worker), what="the killed front's call ended")
    r = subprocess.run([alone, "ping"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _holding(target: str) -> list[int]:
    """The processes whose standard output is ``target`` (as /proc shows a descriptor: pipe:[INODE])."""
    out = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.readlink(f"/proc/{name}/fd/1") == target:
                out.append(int(name))
        except OSError:
            continue
    return out


def test_a_pipe_is_not_held_open_after_the_call(alone, env, tmp_path):
    """``xce submit ... | cat`` ends when the call does: the worker gives the caller's descriptors back."""
    r = subprocess.run(f"{alone} submit -o out -- true | cat", shell=True, env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("Job <"), r.stderr


def test_the_call_runs_in_the_callers_directory_and_environment(alone, env, tmp_path, ctl):
    here = tmp_path / "here"
    here.mkdir()
    r = subprocess.run([alone, "--json", "submit", "-o", "out.%J", "-J", "where", "--", "true"], env=env,
                       cwd=str(here), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import json

    job = json.loads(r.stdout)
    assert job["stdout"] == str(here / "out.%J") and job["name"] == "where"
    # the environment is the caller's: without a token there, the call has none
    r = subprocess.run([alone, "jobs"], env={**env, "XCE_TOKEN": "", "HOME": str(tmp_path)}, cwd=str(here),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no controller token" in r.stderr


def test_daemons_run_cold_as_the_callers_own_process(alone, env, tmp_path):
    for command in (["controller", "--help"], ["up", "--help"]):
        r = subprocess.run([alone, *command], env=env, capture_output=True, text=True, timeout=60)
        assert "cannot run the Python CLI" in r.stderr, (command, r.stderr)  # it asked to run cold
        front = build(str(tmp_path / "xce"), sys.executable)
        r = subprocess.run([front, *command], env=env, capture_output=True, text=True, timeout=60)
        python = subprocess.run([*XCE, *command], env=env, capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (python.returncode, python.stdout, python.stderr)


# ---------------------------------------------------------------- a hostile server, under sanitizers


def _fnv(h: int, data: bytes) -> int:
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def socket_path(runtime_dir: str, python: str, environ: dict[str, str]) -> str:
    """Where a front built for ``python`` looks for its server (native/xce.c, server_base)."""
    basis = 0xCBF29CE484222325
    h = _fnv(basis, python.encode())
    total = 0
    for k, v in environ.items():
        entry = f"{k}={v}"
        if entry.startswith(("PYTHON", "LC_", "LANG=")):
            total = (total + _fnv(basis, entry.encode())) & 0xFFFFFFFFFFFFFFFF
    return os.path.join(runtime_dir, f"cli-{_fnv(h ^ total, b'xce-cli-2'):016x}.sock")


HOSTILE = [b"", b"pid\n", b"pid 0\n", b"pid -1\n", b"pid 99999999999999999999\n", b"pid 12 13\n", b"x" * 100_000,
           b"pid 1" + b"0" * 70 + b"\n", b"pid 1\nexit\n", b"pid 1\nexit 256\n", b"pid 1\nexit -1\n",
           b"pid 1\nsignal 0\n", b"pid 1\nsignal 65\n", b"pid 1\n\x00exit 0\n", b"pid 1\nexit 0", b"\xff\xfe\n",
           b"stale\nstale\n", b"cold\x00\n", b"pid 1\n" + b"\n" * 1000]


@pytest.mark.parametrize("seed", range(3))
def test_the_front_reads_any_answer_safely_under_asan_and_ubsan(tmp_path, seed):
    """Whatever a server says, the front ends with one clean ``xce:`` line and exit 1 (or exits as a
    well-formed answer says), and the sanitizers find nothing: the hostile answers above, then random
    bytes and random mutations of good answers."""
    flags = ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
    front = build(str(tmp_path / "xce-asan"), "/nonexistent/python3", cold=False, flags=flags)
    runtime_dir = tmp_path / "rt"
    runtime_dir.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XCE_", "ASAN", "UBSAN"))}
    env.update(XCE_RUNTIME_DIR=str(runtime_dir), ASAN_OPTIONS="exitcode=86:detect_leaks=0",
               UBSAN_OPTIONS="exitcode=87:print_stacktrace=1")
    rng = random.Random(seed)
    answers = list(HOSTILE) if seed == 0 else []
    good = [b"pid 7\nexit 0\n", b"pid 7\nsignal 15\n", b"cold\n", b"stale\n"]
    while len(answers) < 40:
        if rng.random() < 0.5:
            answers.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
        else:
            b = bytearray(rng.choice(good))
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            answers.append(bytes(b))
    path = socket_path(str(runtime_dir), "/nonexistent/python3", env)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    current = {"answer": b""}

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    _, fds, _, _ = socket.recv_fds(conn, 1 << 16, 4)
                    for fd in fds:  # (held, they would keep the front's pipes open after it ended)
                        os.close(fd)
                    conn.sendall(current["answer"])
                    conn.shutdown(socket.SHUT_WR)
                    conn.recv(1)  # until the front closes
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    try:
        for answer in answers:
            current["answer"] = answer
            r = subprocess.run([front, "jobs"], env=env, capture_output=True, text=True, timeout=60,
                               errors="replace")
            assert r.returncode not in (86, 87) and "Sanitizer" not in r.stderr, (answer[:80], r.stderr[-3000:])
            # one clean line (the front's own refusal, or that it may not run cold), or nothing at all
            # when the answer was a well-formed end ("exit N": that code; "signal N": that signal)
            assert r.stderr == "" or (r.stderr.startswith("xce: ") and r.stderr.count("\n") == 1), \
                (answer[:80], r.stderr)
            if answer in HOSTILE:
                assert r.returncode == 1 and r.stderr, (answer[:80], r.returncode)
    finally:
        listener.close()
