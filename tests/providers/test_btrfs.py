"""The btrfs provider through run_provider, on a real btrfs filesystem on a loop file.

The module mounts one sparse image (mkfs.btrfs, ``mount -o loop``, quotas on)
and gives each test its own root directory on it; the filesystem is
unmounted and the image removed at the end, whatever happened.  Root is
needed to mount: as any other user the module is skipped, saying so; as root
(CI) a machine that cannot make the filesystem fails, naming what is missing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from xce.providers import CAPABILITY_FLAGS, ErrorCode, ProviderReply, ProviderRequest, owner_tags, run_provider
from xce.providers import btrfs, simfs
from xce.providers.contract import check_reply, decode_reply_document, encode_request_document

CLUSTER = "c1"
GOOD = 60.0  # timeout for calls expected to finish; never reached in a passing test
MiB = 1 << 20
IMAGE_BYTES = 400 * MiB

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop-file btrfs filesystem needs root "
                                                          "(CI runs these tests as root)")


@contextlib.contextmanager
def loop_btrfs(workdir: Path, quotas: bool = True) -> Iterator[Path]:
    """A fresh btrfs filesystem mounted from a sparse file under ``workdir``; always unmounted and removed."""
    for tool in ("mkfs.btrfs", "btrfs", "mount", "umount"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: the btrfs provider tests need btrfs-progs (make deps)")
    image, mnt = workdir / "btrfs.img", workdir / "mnt"
    mnt.mkdir()
    with open(image, "wb") as fh:
        fh.truncate(IMAGE_BYTES)
    mounted = False
    try:
        run("mkfs.btrfs", "-q", str(image))
        run("mount", "-o", "loop", str(image), str(mnt))  # the loop device goes with the umount (autoclear)
        mounted = True
        if quotas:
            run("btrfs", "quota", "enable", str(mnt))
        yield mnt
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=True, timeout=60)
        image.unlink(missing_ok=True)
        mnt.rmdir()


def run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()} "
                    f"(the btrfs provider tests need a kernel with btrfs and loop devices, and btrfs-progs)")
    return done.stdout


@pytest.fixture(scope="module")
def fs(tmp_path_factory) -> Iterator[Path]:
    with loop_btrfs(tmp_path_factory.mktemp("btrfs")) as mnt:
        yield mnt


class Btrfs:
    """One provider root on the test filesystem; ``run`` calls a real provider process."""

    def __init__(self, root: Path, **config) -> None:
        self.root = root
        self.config = {"root": str(root), **config}

    def run(self, *requests: ProviderRequest, **config) -> list[ProviderReply]:
        return run_provider(btrfs.command(), {**self.config, **config}, CLUSTER, list(requests), GOOD)

    def one(self, request: ProviderRequest, **config) -> ProviderReply:
        [reply] = self.run(request, **config)
        return reply

    def ok(self, request: ProviderRequest, **config) -> ProviderReply:
        reply = self.one(request, **config)
        assert reply.ok, (reply.error_code, reply.message, reply.stderr_tail)
        return reply

    def objects(self) -> dict[str, dict]:
        return {o["handle"]: o for o in self.ok(ProviderRequest(op_id="list-all", op="list")).objects}


@pytest.fixture
def bt(fs, request) -> Btrfs:
    root = fs / request.node.name.replace("[", "-").replace("]", "")
    root.mkdir()
    return Btrfs(root)


def create(op_id: str, claim_id: int = 1, size: int = 8 * MiB, source: str | None = None, **tags: str):
    return ProviderRequest(op_id=op_id, op="create", claim_id=claim_id, claim_name=f"claim-{claim_id}",
                           class_name="btrfs", size_bytes=size, access_mode="RWO", params={"tier": "disk"},
                           tags=owner_tags(CLUSTER, claim_id, op_id, **tags), source_handle=source)


def snapshot(handle: str, op_id: str, claim_id: int = 1) -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="create_snapshot", claim_id=claim_id, handle=handle,
                           tags=owner_tags(CLUSTER, claim_id, op_id, **{"xce.snapshot": op_id}))


def expand(handle: str, size: int, op_id: str = "ex") -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="expand", handle=handle, size_bytes=size)


def release(handle: str, op_id: str = "rel", host: str | None = None) -> ProviderRequest:
    return ProviderRequest(op_id=op_id, op="release", handle=handle, host=host)


def write(path: Path, nbytes: int, fd: int | None = None) -> None:
    """Write ``nbytes`` to ``path`` (or the open ``fd``) and make them count: fsync, as a job's checkpoint would."""
    own = fd is None
    if own:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        chunk = b"x" * MiB
        for _ in range(nbytes // MiB):
            os.write(fd, chunk)
        os.write(fd, b"x" * (nbytes % MiB))
        os.fsync(fd)
    finally:
        if own:
            os.close(fd)


def assert_write_refused(path: Path, nbytes: int, fd: int | None = None) -> None:
    with pytest.raises(OSError) as e:
        write(path, nbytes, fd)
    assert e.value.errno in (errno.EDQUOT, errno.ENOSPC), e.value


def subvolumes(fs: Path) -> str:
    return run("btrfs", "subvolume", "list", str(fs))


def assert_error(reply: ProviderReply, code: str, retryable: bool, fragment: str = "") -> None:
    assert (reply.ok, reply.error_code, reply.retryable) == (False, code, retryable), reply.message
    assert fragment in reply.message


# ---------------------------------------------------------------------------
# create, sizes, idempotency


def test_create_enforces_its_size_and_leaves_a_second_volume_alone(bt):
    a = bt.ok(create("op-a", 1, size=4 * MiB, **{"xce.project": "llm"}))
    b = bt.ok(create("op-b", 2, size=8 * MiB))
    assert a.handle == btrfs.derive_handle(1, "op-a") and a.size_bytes == 4 * MiB
    assert a.path == str(bt.root / "volumes" / a.handle / "data") and a.reachable_hosts is None
    assert a.used_bytes is not None and a.used_bytes < MiB  # an empty subvolume
    write(Path(a.path) / "under", 2 * MiB)  # under the limit: fine
    assert_write_refused(Path(a.path) / "past", 4 * MiB)  # past it: EDQUOT inside the volume
    write(Path(b.path) / "other", 6 * MiB)  # the other volume on the same filesystem is unaffected
    objs = bt.objects()
    assert 2 * MiB <= objs[a.handle]["used_bytes"] <= 4 * MiB
    assert objs[b.handle]["used_bytes"] >= 6 * MiB
    assert objs[a.handle]["tags"] == {"xce.cluster": CLUSTER, "xce.claim": "1", "xce.op": "op-a",
                                      "xce.project": "llm"}


def test_small_sizes_are_rounded_up_and_reported(bt):
    r = bt.ok(create("op-1", 1, size=0))
    assert r.size_bytes == btrfs.MIN_SIZE_BYTES


def test_same_op_id_twice_makes_one_volume_and_release_twice_is_fine(bt, fs):
    first = bt.ok(create("op-1", 7))
    write(Path(first.path) / "payload", 100)
    again = bt.ok(create("op-1", 7))
    assert (again.handle, again.path, again.size_bytes) == (first.handle, first.path, first.size_bytes)
    assert list(bt.objects()) == [first.handle] and (Path(again.path) / "payload").stat().st_size == 100
    assert bt.ok(create("op-2", 7)).handle != first.handle  # a new intent is a new object
    assert bt.ok(release(first.handle, "rel-1")).ok
    assert bt.ok(release(first.handle, "rel-1")).ok  # the same release again
    assert bt.ok(release(first.handle, "rel-2")).ok  # and another one: gone already is success
    assert first.handle not in bt.objects() and not os.path.exists(first.path)
    assert f"{bt.root.name}/volumes/" in subvolumes(fs)  # op-2's volume
    assert f"volumes/{first.handle}" not in subvolumes(fs) and ".gone-" not in subvolumes(fs)


def test_crash_shaped_leftovers_are_swept(bt, fs):
    """A create that died after making its subvolume, and a release that died mid-delete, leave dot
    names; the next change removes them, and a retry of the dead create makes one whole volume."""
    keep = bt.ok(create("op-keep", 1))
    handle = btrfs.derive_handle(2, "op-dead")
    half_new = bt.root / "volumes" / f".new-{handle}"
    half_new.mkdir()
    run("btrfs", "subvolume", "create", str(half_new / "data"))
    (half_new / "data" / "junk").write_text("half built")
    half_gone = bt.root / "volumes" / ".gone-v9-0123456789"
    half_gone.mkdir()
    run("btrfs", "subvolume", "snapshot", "-r", keep.path, str(half_gone / "data"))  # read-only: rmtree can't
    assert handle not in bt.objects()  # a half-built object is no object
    retry = bt.ok(create("op-dead", 2))
    assert retry.handle == handle and os.listdir(retry.path) == []
    assert sorted(os.listdir(bt.root / "volumes")) == sorted([keep.handle, handle])
    listing = subvolumes(fs)
    assert ".new-" not in listing and ".gone-" not in listing


def test_concurrent_retries_of_one_op_id_make_one_volume(bt):
    results: list[ProviderReply] = []

    def one() -> None:
        results.append(bt.one(create("op-same", 1)))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results) and len({r.handle for r in results}) == 1 and len(results) == 6
    assert list(bt.objects()) == [results[0].handle]


def test_a_batch_of_creates_snapshots_and_clones_made_at_once_answers_each_and_is_idempotent(bt):
    """Runs of creates and snapshots in one document are made at the same time (threads, one hold of
    the lock); each still gets its own reply, used bytes read once at the end; a retry of the whole
    document answers the same objects; a bad request in the run costs only its own reply."""
    creates = [create(f"c{i}", i + 1) for i in range(12)] + [create("bad", 99, source="v0-nothing")]
    first = bt.run(*creates)
    assert [r.op_id for r in first] == [r.op_id for r in creates]
    assert all(r.ok for r in first[:-1]) and first[-1].error_code == "NOT_FOUND"
    assert len({r.handle for r in first[:-1]}) == 12 and all(r.used_bytes is not None for r in first[:-1])
    again = bt.run(*creates[:-1])
    assert [(r.handle, r.path) for r in again] == [(r.handle, r.path) for r in first[:-1]]
    for r in first[:-1]:
        (Path(r.path) / "data").write_text(r.handle)
    snaps = bt.run(*[snapshot(r.handle, f"s{i}", i + 1) for i, r in enumerate(first[:-1])])
    assert all(s.ok and s.used_bytes is not None for s in snaps) and len({s.handle for s in snaps}) == 12
    clones = bt.run(*[create(f"k{i}", 100 + i, source=s.handle) for i, s in enumerate(snaps)])
    assert all(c.ok for c in clones)
    assert [(Path(c.path) / "data").read_text() for c in clones] == [r.handle for r in first[:-1]]
    assert len(bt.objects()) == 36
    # in one document: a volume, a snapshot of it and a clone of that snapshot (each reads the one before)
    v = btrfs.derive_handle(50, "chain-v")
    s = btrfs.derive_handle(50, "chain-s", prefix="s")
    chain = bt.run(create("chain-v", 50), snapshot(v, "chain-s", 50), create("chain-c", 51, source=s),
                   create("chain-d", 52))
    assert [(r.ok, r.handle) for r in chain[:2]] == [(True, v), (True, s)] and chain[2].ok and chain[3].ok
    assert all(r.ok for r in bt.run(*[release(r.handle, f"rel-{r.handle}") for r in chain]))
    assert all(r.ok for r in bt.run(*[release(o.handle, f"rel-{o.handle}") for o in [*first[:-1], *snaps, *clones]]))
    assert bt.objects() == {} and not [n for n in os.listdir(bt.root / "volumes") if n.startswith(".")]


def test_without_sysfs_the_btrfs_command_checks_and_reads_used_bytes(bt, monkeypatch):
    """Quota groups are read from /sys/fs/btrfs/<fsid>/qgroups; where that is missing, from
    ``btrfs qgroup show`` (in process here, so that the provider's SYSFS can point nowhere)."""
    monkeypatch.setattr(btrfs, "SYSFS", str(bt.root / "no-sysfs"))
    doc = json.loads(encode_request_document(CLUSTER, bt.config, [create("ns-1", 1), create("ns-2", 2)]))
    replies = btrfs.handle_document(doc)["replies"]
    assert [r["ok"] for r in replies] == [True, True]
    assert all(isinstance(r.get("used_bytes"), int) for r in replies)


def test_set_owner_gives_the_volume_to_its_owner(bt):
    bt.config.update(set_owner=True)
    nobody = pwd.getpwnam("nobody")
    r = bt.ok(create("op-1", 1, **{"xce.owner": "nobody"}))
    st = os.stat(r.path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (nobody.pw_uid, nobody.pw_gid, 0o700)
    assert_error(bt.one(create("op-2", 2, **{"xce.owner": "no-such-user-xce"})), ErrorCode.NOT_FOUND, False,
                 "has no account")
    assert list(bt.objects()) == [r.handle]


# ---------------------------------------------------------------------------
# snapshots and clones


def test_snapshot_is_read_only_and_keeps_the_content_it_was_taken_with(bt):
    vol = bt.ok(create("op-v", 1, size=16 * MiB))
    (Path(vol.path) / "ckpt").write_text("step 100")
    s = bt.ok(snapshot(vol.handle, "snap-1"))
    assert s.handle == btrfs.derive_handle(1, "snap-1", prefix="s") and s.size_bytes == 16 * MiB
    assert s.used_bytes is not None and s.used_bytes > 0
    assert bt.ok(snapshot(vol.handle, "snap-1")).handle == s.handle  # idempotent by op_id
    (Path(vol.path) / "ckpt").write_text("step 200")  # the volume goes on changing
    (Path(vol.path) / "new").write_text("later")
    snap_data = bt.root / "snapshots" / s.handle / "data"
    assert (snap_data / "ckpt").read_text() == "step 100" and not (snap_data / "new").exists()
    with pytest.raises(OSError) as e:
        (snap_data / "ckpt").write_text("tamper")
    assert e.value.errno == errno.EROFS
    objs = bt.objects()
    assert set(objs) == {vol.handle, s.handle}
    assert (objs[s.handle]["kind"], objs[s.handle]["source_handle"]) == ("snapshot", vol.handle)
    assert objs[s.handle]["tags"]["xce.snapshot"] == "snap-1" and objs[vol.handle]["kind"] == "volume"
    assert_error(bt.one(snapshot(s.handle, "snap-of-snap")), ErrorCode.INVALID_ARGUMENT, False, "read-only snapshot")
    assert_error(bt.one(snapshot("v1-nothing", "snap-x")), ErrorCode.NOT_FOUND, False, "does not exist")


def test_clone_from_a_snapshot_is_writable_independent_and_limited(bt):
    vol = bt.ok(create("op-v", 1, size=8 * MiB))
    (Path(vol.path) / "weights").write_text("base model")
    s = bt.ok(snapshot(vol.handle, "snap-1"))
    clone = bt.ok(create("op-c", 2, size=12 * MiB, source=s.handle))
    cdata = Path(clone.path)
    assert clone.size_bytes == 12 * MiB and (cdata / "weights").read_text() == "base model"
    (cdata / "weights").write_text("fine-tuned")  # writable
    (Path(vol.path) / "weights").write_text("base v2")
    assert (cdata / "weights").read_text() == "fine-tuned"  # independent of the volume...
    assert (bt.root / "snapshots" / s.handle / "data" / "weights").read_text() == "base model"  # ...and the snapshot
    write(cdata / "more", 9 * MiB)  # past the source's size, within its own
    assert_write_refused(cdata / "too-much", 4 * MiB)  # its own limit holds
    again = bt.ok(create("op-c", 2, size=12 * MiB, source=s.handle))
    assert again.handle == clone.handle and bt.objects()[clone.handle]["source_handle"] == s.handle
    from_volume = bt.ok(create("op-c2", 3, size=8 * MiB, source=vol.handle))  # a volume is a source too
    assert (Path(from_volume.path) / "weights").read_text() == "base v2"


def test_clone_smaller_than_its_source_or_from_nothing_is_refused(bt):
    vol = bt.ok(create("op-v", 1, size=8 * MiB))
    s = bt.ok(snapshot(vol.handle, "snap-1"))
    assert_error(bt.one(create("op-small", 2, size=4 * MiB, source=s.handle)), ErrorCode.INVALID_ARGUMENT, False,
                 f"a volume made from {s.handle} needs at least {8 * MiB} bytes")
    assert_error(bt.one(create("op-none", 3, source="s9-0000000000")), ErrorCode.NOT_FOUND, False,
                 "content source s9-0000000000 does not exist")
    assert set(bt.objects()) == {vol.handle, s.handle}
    assert sorted(os.listdir(bt.root / "volumes")) == [vol.handle]  # nothing half-built left behind


# ---------------------------------------------------------------------------
# expand


def test_expand_online_while_a_file_is_open_for_writing(bt):
    vol = bt.ok(create("op-v", 1, size=4 * MiB))
    path = Path(vol.path) / "growing"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        write(path, 3 * MiB, fd)
        assert_write_refused(path, 2 * MiB, fd)  # the old limit holds
        grown = bt.ok(expand(vol.handle, 16 * MiB))
        assert grown.size_bytes == 16 * MiB and grown.handle == vol.handle
        write(path, 8 * MiB, fd)  # through the same open file: more than the old size in all
    finally:
        os.close(fd)
    assert path.stat().st_size >= 11 * MiB
    assert bt.objects()[vol.handle]["size_bytes"] == 16 * MiB


def test_expand_refuses_to_shrink_and_is_idempotent(bt):
    vol = bt.ok(create("op-v", 1, size=8 * MiB))
    assert_error(bt.one(expand(vol.handle, 4 * MiB, "ex-shrink")), ErrorCode.INVALID_ARGUMENT, False,
                 f"volume {vol.handle} is {8 * MiB} bytes and cannot shrink")
    assert bt.ok(expand(vol.handle, 8 * MiB, "ex-same")).size_bytes == 8 * MiB  # the current size: no-op
    assert bt.ok(expand(vol.handle, 12 * MiB, "ex-1")).size_bytes == 12 * MiB
    assert bt.ok(expand(vol.handle, 20 * MiB, "ex-2")).size_bytes == 20 * MiB
    # ex-1 re-driven after ex-2 (its reply was lost): ok, and nothing shrinks
    assert bt.ok(expand(vol.handle, 12 * MiB, "ex-1")).size_bytes == 20 * MiB
    s = bt.ok(snapshot(vol.handle, "snap-1"))
    assert_error(bt.one(expand(s.handle, 40 * MiB)), ErrorCode.INVALID_ARGUMENT, False, "read-only snapshot")
    assert_error(bt.one(expand("v5-0000000000", 40 * MiB)), ErrorCode.NOT_FOUND, False)


# ---------------------------------------------------------------------------
# release and delete_snapshot


def test_release_of_a_volume_with_a_snapshot(bt):
    vol = bt.ok(create("op-v", 1))
    (Path(vol.path) / "ckpt").write_text("kept")
    s = bt.ok(snapshot(vol.handle, "snap-1"))
    assert_error(bt.one(ProviderRequest(op_id="ds-vol", op="delete_snapshot", handle=vol.handle)),
                 ErrorCode.INVALID_ARGUMENT, False, "is a volume, not a snapshot")
    assert bt.ok(release(vol.handle)).ok
    assert set(bt.objects()) == {s.handle}  # the snapshot outlives its volume
    assert (bt.root / "snapshots" / s.handle / "data" / "ckpt").read_text() == "kept"
    clone = bt.ok(create("op-c", 2, source=s.handle))  # and can still be cloned
    assert (Path(clone.path) / "ckpt").read_text() == "kept"
    delete = ProviderRequest(op_id="ds", op="delete_snapshot", handle=s.handle)
    assert bt.ok(delete).ok and bt.ok(delete).ok  # gone already is success
    assert set(bt.objects()) == {clone.handle}


def test_release_of_a_volume_holding_a_nested_subvolume(bt, fs):
    """A user may make a subvolume inside a volume (btrfs lets anyone who can write there); release
    still deletes everything."""
    vol = bt.ok(create("op-v", 1))
    run("btrfs", "subvolume", "create", str(Path(vol.path) / "mine"))
    (Path(vol.path) / "mine" / "f").write_text("x")
    assert bt.ok(release(vol.handle)).ok
    assert bt.objects() == {} and f"{bt.root.name}/" not in subvolumes(fs)


# ---------------------------------------------------------------------------
# attach, detach, node ops


def test_attach_detach_publish_and_reachability(bt):
    bt.config.update(reachable_hosts=["h1", "h2"], host_labels={"fs": "btrfs"})
    vol = bt.ok(create("op-v", 1))
    assert vol.reachable_hosts == ["h1", "h2"] and vol.host_labels == {"fs": "btrfs"}
    att = ProviderRequest(op_id="a1", op="attach", handle=vol.handle, host="h1")
    assert bt.ok(att).path == vol.path and bt.ok(att).ok
    assert_error(bt.one(ProviderRequest(op_id="a9", op="attach", handle=vol.handle, host="h9")),
                 ErrorCode.NOT_REACHABLE, False, "(reachable from h1, h2)")
    pub = ProviderRequest(op_id="p", op="node_publish", handle=vol.handle, host="h1", target_path="/xce/c")
    assert bt.ok(pub).path == vol.path
    assert_error(bt.one(ProviderRequest(op_id="p2", op="node_publish", handle=vol.handle, host="h2",
                                        target_path="/xce/c")), ErrorCode.NOT_FOUND, False, "not attached")
    assert bt.ok(ProviderRequest(op_id="u", op="node_unpublish", handle=vol.handle, host="h1")).ok
    det = ProviderRequest(op_id="d", op="detach", handle=vol.handle, host="h1")
    assert bt.ok(det).ok and bt.ok(det).ok
    assert bt.one(pub).error_code == ErrorCode.NOT_FOUND  # detached
    s = bt.ok(snapshot(vol.handle, "snap-1"))
    assert_error(bt.one(ProviderRequest(op_id="as", op="attach", handle=s.handle, host="h1")),
                 ErrorCode.INVALID_ARGUMENT, False, "read-only snapshot")
    assert_error(bt.one(ProviderRequest(op_id="ax", op="attach", handle="v8-0000000000", host="h1")),
                 ErrorCode.NOT_FOUND, False)


def test_node_prepare_makes_a_limited_node_local_subvolume(bt):
    prep = ProviderRequest(op_id="np-1", op="node_prepare", claim_id=5, host="host2", size_bytes=4 * MiB,
                           tags=owner_tags(CLUSTER, 5, "np-1"))
    p = bt.ok(prep)
    assert p.handle == btrfs.derive_handle(5, "np-1") and p.size_bytes == 4 * MiB
    assert p.path == str(bt.root / "nodes" / "host2" / p.handle / "data")
    assert bt.ok(prep).handle == p.handle  # idempotent
    assert_write_refused(Path(p.path) / "big", 6 * MiB)
    listed = bt.ok(ProviderRequest(op_id="ln", op="list", host="host2")).objects
    assert [o["handle"] for o in listed] == [p.handle] and listed[0]["tags"] == owner_tags(CLUSTER, 5, "np-1")
    assert bt.objects() == {}  # node-local objects are not volumes
    pub = ProviderRequest(op_id="pub", op="node_publish", handle=p.handle, host="host2", target_path="/x")
    assert bt.ok(pub).path == p.path
    assert bt.ok(release(p.handle, host="host2")).ok and not os.path.exists(p.path)


# ---------------------------------------------------------------------------
# list, health, capabilities


def test_list_shows_every_object_with_tags_and_used_bytes(bt):
    a = bt.ok(create("op-a", 1, **{"xce.project": "p1"}))
    b = bt.ok(create("op-b", 2, size=16 * MiB))
    write(Path(b.path) / "f", 5 * MiB)
    s = bt.ok(snapshot(b.handle, "snap-b", claim_id=2))
    objs = bt.objects()
    assert set(objs) == {a.handle, b.handle, s.handle}
    for h, kind, size in ((a.handle, "volume", 8 * MiB), (b.handle, "volume", 16 * MiB),
                          (s.handle, "snapshot", 16 * MiB)):
        o = objs[h]
        assert (o["kind"], o["size_bytes"]) == (kind, size) and o["created"] > 0
        assert {"xce.cluster", "xce.claim", "xce.op"} <= set(o["tags"])
    assert objs[a.handle]["used_bytes"] < MiB
    assert objs[b.handle]["used_bytes"] >= 5 * MiB and objs[s.handle]["used_bytes"] >= 5 * MiB
    assert objs[a.handle]["tags"]["xce.project"] == "p1" and "source_handle" not in objs[a.handle]


def test_health_reports_capacity(bt, fs):
    h = bt.ok(ProviderRequest(op_id="h", op="health"))
    assert h.healthy is True
    st = os.statvfs(fs)
    assert h.capacity_bytes == st.f_blocks * st.f_frsize and 0 < h.capacity_bytes <= IMAGE_BYTES
    assert 0 < h.available_bytes <= h.capacity_bytes


def test_capabilities_of_btrfs_and_simfs(bt, tmp_path):
    cap = bt.ok(ProviderRequest(op_id="cap", op="capabilities")).capabilities
    assert cap == {**dict.fromkeys(CAPABILITY_FLAGS, True), "access_modes": ["RWO", "ROX", "RWX", "RWOP"]}
    [sim] = run_provider(simfs.command(), {"root": str(tmp_path)}, CLUSTER,
                         [ProviderRequest(op_id="cap", op="capabilities")], GOOD)
    assert sim.capabilities == {**dict.fromkeys(CAPABILITY_FLAGS, True),
                                "access_modes": ["RWO", "ROX", "RWX", "RWOP"]}


# ---------------------------------------------------------------------------
# refusals


def test_a_root_that_is_not_btrfs_or_has_no_quotas_is_refused(bt, tmp_path):
    plain = tmp_path / "plain"  # tmp is not btrfs here
    plain.mkdir()
    h = bt.ok(ProviderRequest(op_id="h", op="health"), root=str(plain))
    assert h.healthy is False and "is not on a btrfs filesystem" in h.message
    assert_error(bt.one(create("op-1"), root=str(plain)), ErrorCode.INVALID_CONFIG, True,
                 f"root {plain} is not on a btrfs filesystem")
    assert_error(bt.one(create("op-1"), root=str(tmp_path / "absent")), ErrorCode.UNAVAILABLE, True,
                 "is not a directory")
    (tmp_path / "nq").mkdir()
    with loop_btrfs(tmp_path / "nq", quotas=False) as noquota:
        assert_error(bt.one(create("op-1"), root=str(noquota)), ErrorCode.INVALID_CONFIG, True,
                     "quotas are not enabled")
        assert bt.ok(ProviderRequest(op_id="h", op="health"), root=str(noquota)).healthy is False
        assert os.listdir(noquota) == []  # nothing made


def test_bad_input_is_refused(bt):
    for config in ({"root": "relative/dir"}, {"capacity_bytes": 5}, {"set_owner": "yes"}):
        assert_error(bt.one(create("op-1"), **config), ErrorCode.INVALID_CONFIG, True)
    for req in (release("../../etc"), release("a/b"), release(".."), release(".gone-x"),
                ProviderRequest(op_id="a", op="attach", handle="v1", host="../h"),
                ProviderRequest(op_id="l", op="list", host="a/b"),
                snapshot("../volumes", "s-1"), create("op-2", source="../x")):
        assert_error(bt.one(req), ErrorCode.INVALID_ARGUMENT, False)
    raw = {"contract": 1, "cluster_id": CLUSTER, "config": bt.config, "requests": [
        {"op_id": "m", "op": "mount"}, {"op_id": "n", "op": "create", "claim_id": "1", "tags": {}},
        {"op_id": "e", "op": "expand", "handle": "v1", "size_bytes": "big"}]}
    done = subprocess.run(btrfs.command(), input=json.dumps(raw), capture_output=True, text=True, timeout=GOOD)
    replies = {r["op_id"]: r["error"] for r in json.loads(done.stdout)["replies"]}
    assert {k: (v["code"], v["retryable"]) for k, v in replies.items()} == {
        "m": ("UNSUPPORTED", False), "n": ("INVALID_ARGUMENT", False), "e": ("INVALID_ARGUMENT", False)}
    bad = subprocess.run(btrfs.command(), input="not json", capture_output=True, text=True, timeout=GOOD)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.startswith("btrfs: ")
    assert bt.objects() == {}


# ---------------------------------------------------------------------------
# conformance: every op, ok and error, is a valid reply by the schema and the contract


def test_real_btrfs_replies_are_valid_against_schema_and_contract(bt):
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "provider-contract.schema.json").read_text())
    validator = jsonschema_rs.Draft202012Validator(
        {**{k: v for k, v in schema.items() if k != "oneOf"}, "$ref": "#/$defs/replyDocument"})
    v1 = btrfs.derive_handle(1, "c1")
    s1 = btrfs.derive_handle(1, "cs", prefix="s")
    reqs = [
        create("c1", 1), ProviderRequest(op_id="a1", op="attach", handle=v1, host="h1"),
        ProviderRequest(op_id="a2", op="attach", handle=v1, host="h9"),
        ProviderRequest(op_id="a3", op="attach", handle="v-none", host="h1"),
        ProviderRequest(op_id="d1", op="detach", handle=v1, host="h1"),
        snapshot(v1, "cs"), create("clone", 2, source=s1), create("clone-small", 3, size=MiB, source=s1),
        expand(v1, 16 * MiB, "e1"), expand(v1, MiB, "e2"),
        ProviderRequest(op_id="h1", op="health"), ProviderRequest(op_id="cap", op="capabilities"),
        ProviderRequest(op_id="l1", op="list"),
        ProviderRequest(op_id="np", op="node_prepare", claim_id=4, host="h1", tags=owner_tags(CLUSTER, 4, "np")),
        ProviderRequest(op_id="pub", op="node_publish", handle=btrfs.derive_handle(4, "np"), host="h1",
                        target_path="/mnt/x"),
        ProviderRequest(op_id="unp", op="node_unpublish", handle=btrfs.derive_handle(4, "np"), host="h1"),
        ProviderRequest(op_id="ln", op="list", host="h1"),
        ProviderRequest(op_id="ds", op="delete_snapshot", handle=s1),
        release(v1, "r1"), release("../../etc", "r2"),
    ]
    config = {**bt.config, "reachable_hosts": ["h1"], "host_labels": {"fs": "btrfs"}}
    out = subprocess.run(btrfs.command(), input=encode_request_document(CLUSTER, config, reqs),
                         capture_output=True, check=True, timeout=GOOD).stdout
    assert [f"{list(e.instance_path)}: {e.message}" for e in validator.iter_errors(json.loads(out))] == []
    replies = {e["op_id"]: ProviderReply.from_json(e) for e in decode_reply_document(out)}
    for req in reqs:
        check_reply(req, replies[req.op_id])
    failed = {r.op_id: r.error_code for r in replies.values() if not r.ok}
    assert failed == {"a2": "NOT_REACHABLE", "a3": "NOT_FOUND", "clone-small": "INVALID_ARGUMENT",
                      "e2": "INVALID_ARGUMENT", "r2": "INVALID_ARGUMENT"}
    assert set(btrfs.OPS) == {r.op for r in reqs}
