"""simfs through run_provider: real simfs processes on a real directory, faults injected at run time."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from xce.providers import ErrorCode, ProviderReply, ProviderRequest, owner_tags, run_provider
from xce.providers import simfs

CLUSTER = "c1"
GOOD = 20.0  # timeout for calls expected to finish; never reached in a passing test


class Sim:
    """One simfs root and its config; ``run`` calls a real simfs process."""

    def __init__(self, root: Path, **config) -> None:
        self.root = root
        self.config = {"root": str(root), **config}

    def run(self, *requests: ProviderRequest, timeout: float = GOOD, **config) -> list[ProviderReply]:
        return run_provider(simfs.command(), {**self.config, **config}, CLUSTER, list(requests), timeout)

    def one(self, request: ProviderRequest, **kw) -> ProviderReply:
        [reply] = self.run(request, **kw)
        return reply

    def volumes(self) -> list[dict]:
        [r] = self.run(ProviderRequest(op_id="list-volumes", op="list"))
        assert r.ok, r.message
        return r.objects

    def inject(self, **faults) -> dict:
        return simfs.inject(str(self.root), **faults)

    def faults(self) -> dict:
        return json.loads((self.root / "faults.json").read_text())


@pytest.fixture
def sim(tmp_path) -> Sim:
    root = tmp_path / "simfs"
    root.mkdir()
    return Sim(root)


def create(op_id: str, claim_id: int = 1, size: int = 100, **tags: str) -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="create", claim_id=claim_id, claim_name=f"claim-{claim_id}",
                           class_name="sim", size_bytes=size, access_mode="RWX", params={"tier": "fast"},
                           tags=owner_tags(CLUSTER, claim_id, op_id, **tags))


def attach(handle: str, host: str, op_id: str = "att") -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="attach", handle=handle, host=host)


def detach(handle: str, host: str, op_id: str = "det") -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="detach", handle=handle, host=host)


def release(handle: str, op_id: str = "rel", host: str | None = None) -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="release", handle=handle, host=host)


def health(op_id: str = "h") -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="health")


def meta(sim: Sim, handle: str) -> dict:
    return json.loads((sim.root / "volumes" / handle / "meta.json").read_text())


# ---------------------------------------------------------------------------
# Operations


def test_create_then_list_shows_owner_tags(sim):
    r = sim.one(create("op-1", 7, 4096, **{"xce.project": "llm"}))
    assert r.ok, r.message
    assert r.handle == simfs.derive_handle(7, "op-1") and r.size_bytes == 4096
    assert r.reachable_hosts is None and r.host_labels == {}
    assert r.path == str(sim.root / "volumes" / r.handle / "data") and os.path.isdir(r.path)
    [obj] = sim.volumes()
    assert obj["handle"] == r.handle and obj["size_bytes"] == 4096 and obj["created"] > 0
    assert obj["tags"] == {"xce.cluster": CLUSTER, "xce.claim": "7", "xce.op": "op-1", "xce.project": "llm"}
    m = meta(sim, r.handle)
    assert (m["class"], m["params"], m["attachments"]) == ("sim", {"tier": "fast"}, [])


def test_same_op_id_twice_makes_one_volume(sim):
    first = sim.one(create("op-1", 7))
    (Path(first.path) / "payload").write_text("data")
    again = sim.one(create("op-1", 7))
    assert again == first
    assert len(sim.volumes()) == 1 and (Path(again.path) / "payload").read_text() == "data"
    other = sim.one(create("op-2", 7))  # a new intent is a new object
    assert other.ok and other.handle != first.handle and len(sim.volumes()) == 2


def test_same_op_id_twice_in_one_batch(sim):
    a, b = sim.run(create("op-1", 7), create("op-2", 8))
    assert a.ok and b.ok
    replies = sim.run(create("op-1", 7), create("op-2", 8), create("op-3", 9))
    assert [r.handle for r in replies[:2]] == [a.handle, b.handle]
    assert len(sim.volumes()) == 3


def test_capacity_exhausted_and_min_size(sim):
    sim.config.update(capacity_bytes=1000, min_size_bytes=300)
    small = sim.one(create("op-1", 1, size=10))
    assert small.ok and small.size_bytes == 300  # rounded up, actual size reported
    big = sim.one(create("op-2", 2, size=800))
    assert (big.ok, big.error_code, big.retryable) == (False, ErrorCode.RESOURCE_EXHAUSTED, True)
    assert big.message == "simfs: no room for 800 bytes: 300 of 1000 bytes are in use"
    fits = sim.one(create("op-3", 3, size=700))
    assert fits.ok and fits.size_bytes == 700
    # the existing volume is still answered when full: idempotency beats capacity
    assert sim.one(create("op-1", 1, size=10)) == small
    assert sim.one(release(small.handle)).ok
    assert sim.one(create("op-2", 2, size=300)).ok  # room again after a release
    assert sorted(v["size_bytes"] for v in sim.volumes()) == [300, 700]


def test_reachability_is_reported_and_enforced(sim):
    sim.config.update(reachable_hosts=["host1", "host3"], host_labels={"fs": "sim"})
    r = sim.one(create("op-1", 1))
    assert r.reachable_hosts == ["host1", "host3"] and r.host_labels == {"fs": "sim"}
    a = sim.one(attach(r.handle, "host1"))
    assert a.ok and a.path == r.path
    assert sim.one(attach(r.handle, "host1")).ok  # again: fine
    bad = sim.one(attach(r.handle, "host2"))
    assert (bad.ok, bad.error_code, bad.retryable) == (False, ErrorCode.NOT_REACHABLE, False)
    assert bad.message == f"simfs: {r.handle} cannot be reached from host host2 (reachable from host1, host3)"
    assert meta(sim, r.handle)["attachments"] == ["host1"]
    missing = sim.one(attach("v9-0000000000", "host1"))
    assert (missing.error_code, missing.retryable) == (ErrorCode.NOT_FOUND, False)


def test_detach(sim):
    r = sim.one(create("op-1", 1))
    assert all(x.ok for x in sim.run(attach(r.handle, "h1", "a1"), attach(r.handle, "h2", "a2")))
    assert meta(sim, r.handle)["attachments"] == ["h1", "h2"]
    assert sim.one(detach(r.handle, "h1")).ok
    assert meta(sim, r.handle)["attachments"] == ["h2"]
    assert sim.one(detach(r.handle, "h1")).ok  # not attached: fine
    assert sim.one(release(r.handle)).ok
    assert sim.one(detach(r.handle, "h2")).ok  # volume gone: fine


def test_release_is_idempotent(sim):
    r = sim.one(create("op-1", 1))
    assert sim.one(release(r.handle)).ok
    assert sim.volumes() == [] and not os.path.exists(r.path)
    assert sim.one(release(r.handle, "rel-2")).ok
    assert sim.one(release("v77-never-made")).ok
    assert os.listdir(sim.root / "volumes") == []  # no leftovers, dot-named or not


def test_node_prepare_publish_unpublish_release(sim):
    tags = owner_tags(CLUSTER, 5, "np-1")
    prep = ProviderRequest(op_id="np-1", op="node_prepare", claim_id=5, host="host2", size_bytes=50, tags=tags)
    p = sim.one(prep)
    assert p.ok and p.handle == simfs.derive_handle(5, "np-1")
    assert p.path == str(sim.root / "nodes" / "host2" / p.handle / "data") and os.path.isdir(p.path)
    assert sim.one(prep) == p  # idempotent by op_id
    named = sim.one(ProviderRequest(op_id="np-2", op="node_prepare", handle="scratch-9", host="host2",
                                    tags=owner_tags(CLUSTER, 9, "np-2")))
    assert named.ok and named.handle == "scratch-9"
    [listed] = [o for o in sim.one(ProviderRequest(op_id="ln", op="list", host="host2")).objects
                if o["handle"] == p.handle]
    assert listed["tags"] == tags and listed["size_bytes"] == 50
    assert sim.volumes() == []  # node-local objects are not volumes

    pub = sim.one(ProviderRequest(op_id="pub", op="node_publish", handle=p.handle, host="host2",
                                  target_path="/xce/claims/scratch", readonly=True))
    assert pub.ok and pub.path == p.path
    elsewhere = sim.one(ProviderRequest(op_id="pub2", op="node_publish", handle=p.handle, host="host3",
                                        target_path="/xce/claims/scratch"))
    assert (elsewhere.error_code, elsewhere.retryable) == (ErrorCode.NOT_FOUND, False)
    assert sim.one(ProviderRequest(op_id="unpub", op="node_unpublish", handle=p.handle, host="host2")).ok
    assert sim.one(release(p.handle, host="host2")).ok
    assert not os.path.exists(p.path)


def test_node_publish_of_an_attached_volume(sim):
    v = sim.one(create("op-1", 1))
    pub = ProviderRequest(op_id="pub", op="node_publish", handle=v.handle, host="h1", target_path="/x")
    assert sim.one(pub).error_code == ErrorCode.NOT_FOUND  # not attached to h1 yet
    assert sim.one(attach(v.handle, "h1")).ok
    assert sim.one(pub).path == v.path


def test_node_ops_respect_reachability(sim):
    sim.config.update(reachable_hosts=["h1"])
    r = sim.one(ProviderRequest(op_id="np", op="node_prepare", claim_id=1, host="h2",
                                tags=owner_tags(CLUSTER, 1, "np")))
    assert (r.error_code, r.retryable) == (ErrorCode.NOT_REACHABLE, False)


def test_health(sim, tmp_path):
    r = sim.one(health())
    assert r.ok and r.healthy is True
    gone = sim.one(health(), root=str(tmp_path / "not-mounted"))
    assert gone.ok and gone.healthy is False and "not a writable directory" in gone.message


def test_unmounted_root_is_retryable(sim, tmp_path):
    r = sim.one(create("op-1"), root=str(tmp_path / "not-mounted"))
    assert (r.error_code, r.retryable) == (ErrorCode.UNAVAILABLE, True)
    assert "is not a directory" in r.message


def test_bad_config_fails_every_request(sim):
    for config in ({"root": "relative/dir"}, {"capacity_bytes": "1G"}, {"reachable_host": ["h1"]}):
        replies = sim.run(health("a"), create("b"), **config)
        assert [(r.error_code, r.retryable) for r in replies] == [(ErrorCode.INVALID_CONFIG, True)] * 2


def test_handles_and_hosts_cannot_escape_the_root(sim):
    for req in (release("../../etc"), attach(".hidden", "h1"), detach("v1", "../h"),
                ProviderRequest(op_id="l", op="list", host="a/b")):
        r = sim.one(req)
        assert (r.error_code, r.retryable) == (ErrorCode.INVALID_ARGUMENT, False), req


# ---------------------------------------------------------------------------
# Faults


def test_fail_next_k_then_success(sim):
    sim.inject(fail_next=2)
    first, second, third = sim.run(health("a"), health("b"), health("c"))
    for r in (first, second):
        assert (r.ok, r.error_code, r.retryable) == (False, "UNAVAILABLE", True)
        assert r.message == "simfs: injected fault UNAVAILABLE"
    assert third.ok
    assert sim.faults()["fail_next"] == 0
    assert sim.one(create("op-1")).ok


def test_permanent_code_scoped_to_some_ops(sim):
    sim.inject(fail_next=1, fail_code="QUOTA_DENIED", fail_retryable=False, fail_message="over quota",
               fail_ops=["create"])
    assert sim.one(health()).ok  # not a create: the fault waits
    r = sim.one(create("op-1"))
    assert (r.ok, r.error_code, r.retryable, r.message) == (False, "QUOTA_DENIED", False, "over quota")
    assert sim.volumes() == []
    assert sim.one(create("op-1")).ok


def test_probability(sim):
    sim.inject(fail_probability=1.0)
    assert {r.error_code for r in sim.run(health("a"), health("b"))} == {"UNAVAILABLE"}
    sim.inject(clear=True)
    assert sim.one(health()).ok


def test_hang_is_killed_by_the_timeout_then_success(sim):
    sim.inject(hang_next=1)
    r = sim.one(create("op-1"), timeout=1.0)
    assert (r.error_code, r.retryable) == (ErrorCode.PROVIDER_TIMEOUT, True)
    assert r.message == "provider simfs timed out after 1 s and was killed"
    assert sim.volumes() == []  # it hung before doing anything
    assert sim.faults()["hang_next"] == 0
    ok = sim.one(create("op-1"))
    assert ok.ok and len(sim.volumes()) == 1


def test_short_hang_then_the_request_goes_on(sim):
    sim.inject(hang_next=1, hang_seconds=0.05)
    assert sim.one(create("op-1")).ok


def test_crash_after_create_then_retry_makes_exactly_one_volume(sim):
    sim.inject(crash_after_act_next=1)
    crashed = sim.one(create("op-1", 3))
    assert (crashed.ok, crashed.error_code, crashed.retryable) == (False, ErrorCode.PROVIDER_FAILED, True)
    assert crashed.message == "provider simfs exited with 137 without a reply"
    [vol] = sim.volumes()  # it acted before it died
    retry = sim.one(create("op-1", 3))  # the agent re-drives its intent with the same op_id
    assert retry.ok and retry.handle == vol["handle"]
    assert len(sim.volumes()) == 1


def test_crash_mid_batch_loses_every_reply_but_retry_is_exact(sim):
    sim.inject(crash_after_act_next=1, fail_ops=["release"])
    v = sim.one(create("op-1", 1))
    replies = sim.run(create("op-2", 2), release(v.handle), create("op-3", 3))
    assert {r.error_code for r in replies} == {ErrorCode.PROVIDER_FAILED}
    # op-2 acted, the release acted and crashed, op-3 never ran
    assert [o["handle"] for o in sim.volumes()] == [simfs.derive_handle(2, "op-2")]
    replies = sim.run(create("op-2", 2), release(v.handle), create("op-3", 3))
    assert all(r.ok for r in replies)
    assert sorted(o["handle"] for o in sim.volumes()) == sorted(
        [simfs.derive_handle(2, "op-2"), simfs.derive_handle(3, "op-3")])


def test_garbage_then_success(sim):
    sim.inject(garbage_next=1)
    r = sim.one(health())
    assert (r.error_code, r.retryable) == (ErrorCode.PROVIDER_GARBAGE, True)
    assert "output is not JSON" in r.message
    assert sim.one(health()).ok


def test_inject_and_list_from_the_command_line(sim):
    def cli(*args: str) -> str:
        return subprocess.run([*simfs.command(), *args], capture_output=True, text=True, check=True).stdout

    out = json.loads(cli("inject", "--root", str(sim.root), "--fail-next", "1", "--code", "NOT_FOUND",
                         "--permanent", "--ops", "create,release"))
    assert out == {"fail_next": 1, "fail_code": "NOT_FOUND", "fail_retryable": False,
                   "fail_ops": ["create", "release"]}
    r = sim.one(create("op-1"))
    assert (r.error_code, r.retryable) == ("NOT_FOUND", False)
    assert json.loads(cli("inject", "--root", str(sim.root), "--clear", "--hang-next", "2",
                          "--hang-seconds", "5")) == {"hang_next": 2, "hang_seconds": 5.0}
    cli("inject", "--root", str(sim.root), "--clear")
    assert sim.faults() == {}
    v = sim.one(create("op-1", 4, **{"xce.project": "llm"}))
    table = cli("list", "--root", str(sim.root))
    assert v.handle in table and "xce.project=llm" in table
    assert [m["handle"] for m in json.loads(cli("list", "--root", str(sim.root), "--json"))] == [v.handle]


def test_inject_refuses_unknown_keys(sim):
    with pytest.raises(ValueError, match="unknown fault keys: fail_nxt"):
        sim.inject(fail_nxt=1)


# ---------------------------------------------------------------------------
# Concurrency


def test_concurrent_creates_from_several_processes_respect_capacity(sim):
    sim.config.update(capacity_bytes=5 * 1000)
    results: dict[int, ProviderReply] = {}

    def one(i: int) -> None:
        results[i] = sim.one(create(f"op-{i}", i, size=1000))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [r for r in results.values() if r.ok]
    full = [r for r in results.values() if not r.ok]
    assert len(ok) == 5 and len(results) == 12
    assert {r.error_code for r in full} == {ErrorCode.RESOURCE_EXHAUSTED}
    assert sorted(v["handle"] for v in sim.volumes()) == sorted(r.handle for r in ok)


def test_concurrent_retries_of_one_op_id_make_one_volume(sim):
    results: list[ProviderReply] = []

    def one() -> None:
        results.append(sim.one(create("op-same", 1)))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results) and len({r.handle for r in results}) == 1
    assert len(sim.volumes()) == 1


# ---------------------------------------------------------------------------
# Requests the contract would never build (simfs is also a model for providers in other languages)


def raw_simfs(document: object) -> subprocess.CompletedProcess:
    return subprocess.run(simfs.command(), input=json.dumps(document), capture_output=True, text=True)


def test_malformed_requests_get_error_replies_and_the_batch_goes_on(sim):
    base = {"claim_id": 1, "tags": {}, "size_bytes": 1}
    reqs = [
        {"op_id": "a", "op": ["create"]},
        {"op_id": "b", "op": "mount"},
        {"op_id": "c", "op": "create", **base, "size_bytes": -5},
        {"op_id": "d", "op": "create", **base, "tags": {"xce.claim": 1}},
        {"op_id": "e", "op": "create", **base, "claim_id": "1"},
        {"op": "health"},  # no op_id: nothing to answer to
        {"op_id": "f", "op": "health"},
    ]
    done = raw_simfs({"contract": 1, "cluster_id": CLUSTER, "config": sim.config, "requests": reqs})
    assert done.returncode == 0 and "without an op_id" in done.stderr
    replies = {r["op_id"]: r for r in json.loads(done.stdout)["replies"]}
    assert sorted(replies) == ["a", "b", "c", "d", "e", "f"]
    assert [replies[k]["error"]["code"] for k in "abcde"] == [
        "UNSUPPORTED", "UNSUPPORTED", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "INVALID_ARGUMENT"]
    assert not any(replies[k]["error"]["retryable"] for k in "abcde")
    assert replies["f"]["ok"] is True and sim.volumes() == []


@pytest.mark.parametrize("document", ["not json", {"contract": 2, "requests": []}, {"contract": 1}])
def test_unreadable_request_document_exits_nonzero(document):
    done = raw_simfs(document) if not isinstance(document, str) else subprocess.run(
        simfs.command(), input=document, capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith("simfs: ")


def test_a_snapshot_copies_the_volume_s_tree_following_nothing_a_job_planted(sim, tmp_path):
    """A job wrote the volume: links stay links (never read through, even as the copy meets them),
    a fifo is left out (it would hang the copy), a set-uid file copied by root loses its set-uid bit."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the job's\n")
    vol = sim.one(create("op-1", 7))
    data = Path(vol.path)
    (data / "sub").mkdir()
    (data / "sub" / "mine.txt").write_text("mine\n")
    (data / "link").symlink_to(outside)
    (data / "sub" / "filelink").symlink_to(outside / "secret.txt")
    os.mkfifo(data / "pipe")
    (data / "tool").write_text("#!/bin/sh\n")
    os.chmod(data / "tool", 0o4755)
    if os.geteuid() == 0:
        os.chown(data / "tool", 4321, 4321)
        os.chmod(data / "tool", 0o4755)
    snap = sim.one(ProviderRequest(op_id="snap-1", op="create_snapshot", claim_id=7, handle=vol.handle,
                                   tags=owner_tags(CLUSTER, 7, "snap-1")))
    assert snap.ok, snap.message
    copy = sim.root / "snapshots" / snap.handle / "data"
    assert (copy / "sub" / "mine.txt").read_text() == "mine\n"
    assert os.readlink(copy / "link") == str(outside) and os.readlink(copy / "sub" / "filelink") == str(
        outside / "secret.txt")
    assert not (copy / "pipe").exists()
    mode = os.stat(copy / "tool").st_mode
    assert bool(mode & 0o4000) == (os.geteuid() != 0), oct(mode)  # root's copy of uid 4321's file: no set-uid
