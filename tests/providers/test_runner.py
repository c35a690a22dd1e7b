"""run_provider against tiny throwaway providers: real processes, every way a provider can misbehave."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from xce.providers import (
    ContractError,
    ErrorCode,
    ProviderReply,
    ProviderRequest,
    owner_tags,
    request_document,
    run_provider,
)
from xce.providers.runner import OUTPUT_CAP, STDERR_TAIL, provider_name

GOOD = 20.0  # timeout for providers expected to finish; never reached in a passing test


def health(op_id: str) -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="health")


def create(op_id: str, claim_id: int = 1) -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="create", claim_id=claim_id, size_bytes=10,
                           tags=owner_tags("c1", claim_id, op_id))


def write_script(tmp_path: Path, name: str, body: str, interpreter: str = "/bin/sh") -> str:
    path = tmp_path / name
    path.write_text(f"#!{interpreter}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def python_provider(tmp_path: Path, name: str, body: str) -> list[str]:
    """A Python provider; ``doc`` is the request document, ``reply(list)`` writes the reply document."""
    prelude = ("import json, os, sys\n"
               "doc = json.load(sys.stdin)\n"
               "def reply(replies):\n"
               "    sys.stdout.write(json.dumps({'contract': 1, 'replies': replies}))\n"
               "    sys.stdout.flush()\n")
    return [write_script(tmp_path, name, prelude + body, interpreter=sys.executable)]


def live_members(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` that are not zombies."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat_line = fh.read()
        except OSError:
            continue
        fields = stat_line.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def wait_until(cond, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def assert_one_line(reply: ProviderReply):
    assert reply.message and "\n" not in reply.message


# ---------------------------------------------------------------------------
# Providers that behave


def test_good_batch_replies_in_request_order(tmp_path):
    cmd = python_provider(tmp_path, "good", (
        "out = []\n"
        "for r in reversed(doc['requests']):\n"  # any order on the wire
        "    if r['op'] == 'create':\n"
        "        out.append({'op_id': r['op_id'], 'ok': True, 'handle': 'v' + r['op_id'], 'size_bytes': 4096,\n"
        "                    'reachable_hosts': ['h1'], 'host_labels': {'fs': 'x'}, 'path': '/d/' + r['op_id']})\n"
        "    else:\n"
        "        out.append({'op_id': r['op_id'], 'ok': False, 'error': {'code': 'UNAVAILABLE',\n"
        "                    'message': 'down', 'retryable': True}})\n"
        "print('a warning', file=sys.stderr)\n"
        "reply(out)\n"))
    reqs = [create("a"), health("b"), create("c", 2)]
    replies = run_provider(cmd, {}, "c1", reqs, GOOD)
    assert [r.op_id for r in replies] == ["a", "b", "c"]
    a, b, c = replies
    assert a == ProviderReply(op_id="a", ok=True, handle="va", size_bytes=4096, reachable_hosts=["h1"],
                              host_labels={"fs": "x"}, path="/d/a")
    assert (b.ok, b.error_code, b.message, b.retryable) == (False, "UNAVAILABLE", "down", True)
    assert b.stderr_tail == "a warning\n"  # error replies carry the provider's stderr tail
    assert c.ok and c.handle == "vc" and c.stderr_tail == ""


def test_provider_gets_the_request_document_and_a_minimal_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("XCE_CALLER_SECRET", "caller-only")
    seen = tmp_path / "seen.json"
    cmd = python_provider(tmp_path, "spy", (
        f"json.dump({{'doc': doc, 'env': dict(os.environ), 'argv': sys.argv}}, open({str(seen)!r}, 'w'))\n"
        "reply([{'op_id': r['op_id'], 'ok': True, 'healthy': True} for r in doc['requests']])\n"))
    config = {"token": "s3cr3t"}
    reqs = [health("h1"), health("h2")]
    replies = run_provider(cmd, config, "c1", reqs, GOOD, env={"XCE_PROVIDER_MODE": "test"})
    assert all(r.ok and r.healthy for r in replies)
    got = json.loads(seen.read_text())
    assert got["doc"] == request_document("c1", config, reqs)
    assert set(got["env"]) <= {"PATH", "LANG", "XCE_PROVIDER_MODE", "LC_CTYPE"}
    assert got["env"]["XCE_PROVIDER_MODE"] == "test" and got["env"]["LANG"] == "C.UTF-8"
    assert "s3cr3t" not in json.dumps(got["argv"]) + json.dumps(got["env"])


def test_empty_batch_spawns_nothing(tmp_path):
    marker = tmp_path / "ran"
    cmd = [write_script(tmp_path, "p", f"touch {marker}\n")]
    assert run_provider(cmd, {}, "c1", [], GOOD) == []
    assert not marker.exists()


def test_caller_mistakes_raise(tmp_path):
    with pytest.raises(ContractError, match="appears twice"):
        run_provider(["/bin/true"], {}, "c1", [health("x"), health("x")], GOOD)
    with pytest.raises(ValueError, match="timeout"):
        run_provider(["/bin/true"], {}, "c1", [health("x")], 0)
    with pytest.raises(ValueError, match="empty"):
        run_provider([], {}, "c1", [health("x")], GOOD)


def test_provider_names_in_messages():
    assert provider_name([sys.executable, "-m", "xce.providers.simfs"]) == "simfs"
    assert provider_name(["/usr/bin/python3", "/opt/prov/lustre.py"]) == "lustre.py"
    assert provider_name(["/opt/providers/nfs", "--verbose"]) == "nfs"
    assert provider_name(["sh", "-c", "exit 1"]) == "sh"


# ---------------------------------------------------------------------------
# Providers that misbehave


def test_garbage_stdout(tmp_path):
    cmd = [write_script(tmp_path, "garbage", "cat >/dev/null; echo 'Traceback: oops'; echo 'bad' >&2\n")]
    replies = run_provider(cmd, {}, "c1", [health("a"), create("b")], GOOD)
    for r in replies:
        assert (r.ok, r.error_code, r.retryable) == (False, ErrorCode.PROVIDER_GARBAGE, True)
        assert r.message.startswith("provider garbage wrote an invalid reply document: output is not JSON")
        assert r.stderr_tail == "bad\n"
        assert_one_line(r)


def test_nonzero_exit_keeps_the_stderr_tail(tmp_path):
    # 10 KiB of stderr: only the last ~2 KiB is kept, ending with the last line written
    cmd = [write_script(tmp_path, "failing", (
        "cat >/dev/null\n"
        "i=0; while [ $i -lt 200 ]; do echo \"line $i: something went wrong here\" >&2; i=$((i+1)); done\n"
        "echo 'FINAL: cannot reach backend' >&2\n"
        "exit 3\n"))]
    [r] = run_provider(cmd, {}, "c1", [health("a")], GOOD)
    assert (r.ok, r.error_code, r.retryable) == (False, ErrorCode.PROVIDER_FAILED, True)
    assert r.message == "provider failing exited with 3 without a reply"
    assert r.stderr_tail.endswith("FINAL: cannot reach backend\n")
    assert 0 < len(r.stderr_tail.encode()) <= STDERR_TAIL
    assert "line 0:" not in r.stderr_tail


def test_killed_by_a_signal(tmp_path):
    cmd = [write_script(tmp_path, "segv", "cat >/dev/null; kill -SEGV $$\n")]
    [r] = run_provider(cmd, {}, "c1", [health("a")], GOOD)
    assert r.error_code == ErrorCode.PROVIDER_FAILED
    assert r.message == "provider segv was killed by signal 11 (SIGSEGV) without a reply"


def test_hang_is_killed_at_the_timeout_with_its_whole_process_group(tmp_path):
    pidfile = tmp_path / "pid"
    cmd = [write_script(tmp_path, "hang", f"echo $$ > {pidfile}\nsleep 300 &\nsleep 300 &\necho started >&2\nwait\n")]
    replies = run_provider(cmd, {}, "c1", [health("a"), health("b")], timeout=1.0)
    for r in replies:
        assert (r.ok, r.error_code, r.retryable) == (False, ErrorCode.PROVIDER_TIMEOUT, True)
        assert r.message == "provider hang timed out after 1 s and was killed"
        assert r.stderr_tail == "started\n"
    pgid = int(pidfile.read_text())
    assert wait_until(lambda: not live_members(pgid)), f"still alive in group {pgid}: {live_members(pgid)}"


def test_provider_that_closes_stdout_but_keeps_running_times_out(tmp_path):
    cmd = [write_script(tmp_path, "closer", "cat >/dev/null; exec >&- 2>&-; sleep 300\n")]
    [r] = run_provider(cmd, {}, "c1", [health("a")], timeout=1.0)
    assert r.error_code == ErrorCode.PROVIDER_TIMEOUT


def test_stragglers_left_in_the_group_are_killed_and_do_not_hold_the_reply(tmp_path):
    """It replies and exits, but a background child still holds stdout: the reply counts, the child dies."""
    pidfile = tmp_path / "pid"
    cmd = [write_script(tmp_path, "straggler", (
        f"cat >/dev/null; echo $$ > {pidfile}\n"
        "sleep 300 &\n"
        "printf '%s' '{\"contract\": 1, \"replies\": [{\"op_id\": \"a\", \"ok\": true, \"healthy\": true}]}'\n"))]
    [r] = run_provider(cmd, {}, "c1", [health("a")], timeout=GOOD)
    assert r.ok and r.healthy  # not PROVIDER_TIMEOUT: the leftover sleep did not keep us waiting
    pgid = int(pidfile.read_text())
    assert wait_until(lambda: not live_members(pgid))


def test_missing_and_unknown_op_ids(tmp_path):
    cmd = python_provider(tmp_path, "forgetful", (
        "reply([{'op_id': 'a', 'ok': True, 'healthy': True}, {'op_id': 'zz', 'ok': True}])\n"))
    a, b = run_provider(cmd, {}, "c1", [health("a"), health("b")], GOOD)
    assert a.ok and a.healthy
    assert (b.ok, b.error_code, b.retryable) == (False, ErrorCode.NO_REPLY, True)
    assert b.message == "provider forgetful gave no reply for b (it replied for unknown op_ids 'zz')"


def test_partial_reply_then_nonzero_exit_keeps_the_replies(tmp_path):
    cmd = python_provider(tmp_path, "partial", (
        "reply([{'op_id': 'a', 'ok': True, 'handle': 'v1'}])\n"
        "print('died on the second one', file=sys.stderr)\n"
        "sys.exit(4)\n"))
    a, b = run_provider(cmd, {}, "c1", [create("a"), create("b", 2)], GOOD)
    assert a.ok and a.handle == "v1"
    assert (b.error_code, b.retryable) == (ErrorCode.PROVIDER_FAILED, True)
    assert b.message == "provider partial exited with 4 without a reply"
    assert b.stderr_tail == "died on the second one\n"


def test_one_malformed_reply_does_not_spoil_the_others(tmp_path):
    cmd = python_provider(tmp_path, "sloppy", (
        "reply([{'op_id': 'a', 'ok': True, 'healthy': True},\n"
        "       {'op_id': 'b', 'ok': True, 'reachable_host': ['h1'], 'handle': 'v2'},\n"
        "       {'op_id': 'c', 'ok': True},\n"  # a create must answer its handle
        "       {'op_id': 'd', 'ok': True, 'healthy': True}, {'op_id': 'd', 'ok': True, 'healthy': False}])\n"))
    a, b, c, d = run_provider(cmd, {}, "c1", [health("a"), create("b"), create("c", 3), health("d")], GOOD)
    assert a.ok
    assert b.error_code == ErrorCode.PROVIDER_GARBAGE and "unexpected fields reachable_host" in b.message
    assert c.error_code == ErrorCode.PROVIDER_GARBAGE and "lacks handle" in c.message
    assert d.error_code == ErrorCode.PROVIDER_GARBAGE and "replied twice" in d.message
    for r in (b, c, d):
        assert r.retryable and r.message.startswith("provider sloppy sent a malformed reply for ")


def test_exit_zero_without_output(tmp_path):
    cmd = [write_script(tmp_path, "silent", "cat >/dev/null\n")]
    [r] = run_provider(cmd, {}, "c1", [health("a")], GOOD)
    assert (r.error_code, r.message) == (ErrorCode.NO_REPLY, "provider silent exited with 0 without a reply")


def test_wrong_contract_version(tmp_path):
    cmd = [write_script(tmp_path, "future", "cat >/dev/null; echo '{\"contract\": 2, \"replies\": []}'\n")]
    [r] = run_provider(cmd, {}, "c1", [health("a")], GOOD)
    assert r.error_code == ErrorCode.PROVIDER_GARBAGE and "contract must be 1, got 2" in r.message


@pytest.mark.parametrize("kind", ["missing", "not-on-path", "directory", "not-executable"])
def test_unspawnable_command(tmp_path, kind):
    if kind == "missing":
        cmd = [str(tmp_path / "does-not-exist")]
    elif kind == "not-on-path":
        cmd = ["xce-no-such-provider-anywhere"]
    elif kind == "directory":
        cmd = [str(tmp_path)]
    else:
        cmd = [write_script(tmp_path, "noexec", "exit 0\n")]
        os.chmod(cmd[0], 0o644)
    replies = run_provider(cmd, {}, "c1", [health("a"), health("b")], GOOD)
    for r in replies:
        assert (r.ok, r.error_code, r.retryable) == (False, ErrorCode.PROVIDER_SPAWN_FAILED, True)
        assert r.message.startswith(f"cannot start provider {os.path.basename(cmd[0])}: ")
        assert_one_line(r)


def test_oversized_output_is_garbage_and_the_provider_is_killed(tmp_path):
    pidfile = tmp_path / "pid"
    cmd = [write_script(tmp_path, "chatty", f"cat >/dev/null; echo $$ > {pidfile}; exec yes '{{\"contract\": 1}}'\n")]
    [r] = run_provider(cmd, {}, "c1", [health("a")], GOOD)
    assert (r.error_code, r.retryable) == (ErrorCode.PROVIDER_GARBAGE, True)
    assert r.message == f"provider chatty wrote more than {OUTPUT_CAP >> 20} MiB and was killed"
    assert wait_until(lambda: not live_members(int(pidfile.read_text())))


def test_provider_that_never_reads_a_large_request(tmp_path):
    """The request document is far larger than a pipe buffer and the provider never reads it."""
    cmd = [write_script(tmp_path, "deaf", "echo '{\"contract\": 1, \"replies\": []}'\n")]
    reqs = [create(f"op-{i:05d}", i) for i in range(2000)]
    replies = run_provider(cmd, {"pad": "x" * 200_000}, "c1", reqs, GOOD)
    assert len(replies) == 2000
    assert {r.error_code for r in replies} == {ErrorCode.NO_REPLY}


def test_concurrent_calls_from_threads_do_not_mix_pipes(tmp_path):
    """Threads spawning at once: every provider gets its own document and EOF (close-on-exec pipes)."""
    cmd = python_provider(tmp_path, "echoer", (
        "reply([{'op_id': r['op_id'], 'ok': True, 'handle': doc['cluster_id'] + '-' + r['op_id']}\n"
        "       for r in doc['requests']])\n"))
    results: dict[int, list[ProviderReply]] = {}

    def call(i: int) -> None:
        results[i] = run_provider(cmd, {}, f"cl{i}", [create(f"x{i}", i), create(f"y{i}", i)], GOOD)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(12):
        assert [(r.ok, r.handle) for r in results[i]] == [(True, f"cl{i}-x{i}"), (True, f"cl{i}-y{i}")]
