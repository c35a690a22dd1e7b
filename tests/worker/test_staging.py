"""The node agent's copies (``xce.worker.staging``) on real files: small regular files are copied in
the worker's process, whole or not at all; everything else still goes to ``cp``, as before."""

from __future__ import annotations

import os
import stat

import pytest

from xce.worker import staging
from xce.worker.staging import copy_here, run_stage_op
from xce.worker.storage import StorageRoots


def test_copy_here_copies_the_bytes_with_the_sources_mode_and_makes_the_destinations_directories(tmp_path):
    src = tmp_path / "in.bin"
    src.write_bytes(os.urandom(4096) * 3)
    src.chmod(0o640)
    dest = tmp_path / "area" / "a" / "b" / "out.bin"
    assert copy_here(str(src), str(dest), durable=True)
    assert dest.read_bytes() == src.read_bytes()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640 & ~umask
    assert sorted(os.listdir(dest.parent)) == ["out.bin"]  # no temporary name left beside it


@pytest.mark.parametrize("case", ["dest exists", "dest is a directory", "src is a symlink", "src is a directory",
                                  "src is a fifo", "src is missing", "src is larger than INLINE_MAX"])
def test_copy_here_leaves_to_cp_what_is_not_a_small_regular_file_onto_nothing(tmp_path, monkeypatch, case):
    src = tmp_path / "src"
    dest = tmp_path / "dest"
    src.write_bytes(b"new")
    if case == "dest exists":
        dest.write_bytes(b"old")
    elif case == "dest is a directory":
        dest.mkdir()
    elif case == "src is a symlink":
        src.unlink()
        (tmp_path / "target").write_bytes(b"secret")
        src.symlink_to(tmp_path / "target")
    elif case == "src is a directory":
        src.unlink()
        src.mkdir()
    elif case == "src is a fifo":
        src.unlink()
        os.mkfifo(src)
    elif case == "src is missing":
        src.unlink()
    else:
        monkeypatch.setattr(staging, "INLINE_MAX", 2)
    before = sorted(os.listdir(tmp_path))
    assert not copy_here(str(src), str(dest), durable=False)
    assert sorted(os.listdir(tmp_path)) == before  # nothing made, nothing half-written
    if case == "dest exists":
        assert dest.read_bytes() == b"old"


def _op(op: str, area: str, items: list[list[str]], size: int = 0) -> dict:
    return {"op_id": f"c1.{op}.1", "op": op, "claim_id": 1, "claim_name": "j1.1:stage", "path": area,
            "user": "alice", "items": items, "size_bytes": size, "tags": {"xce.project": "default"}}


@pytest.fixture
def area(tmp_path):
    root = tmp_path / "root"
    (root / "stage").mkdir(parents=True)
    return StorageRoots([str(root)]), str(root / "stage")


def test_a_stage_in_and_out_of_files_symlinks_and_directories_copies_each_as_cp_would(tmp_path, area):
    roots, base = area
    (tmp_path / "data.csv").write_bytes(b"1,2\n")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "f").write_bytes(b"f")
    (tmp_path / "link").symlink_to("data.csv")
    items = [[str(tmp_path / "data.csv"), "in/data.csv"], [str(tmp_path / "tree"), "tree"],
             [str(tmp_path / "link"), "link"]]
    reply = run_stage_op(_op("stage_in", base, items, size=1 << 20), "h1", False, roots)
    assert reply.ok, reply.message
    assert open(os.path.join(base, "in", "data.csv"), "rb").read() == b"1,2\n"
    assert open(os.path.join(base, "tree", "f"), "rb").read() == b"f"
    assert os.readlink(os.path.join(base, "link")) == "data.csv"  # cp -R keeps a symlink a symlink
    # stage-out: a new file, and one over an existing file (cp rewrites it in place)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.csv").write_bytes(b"stale")
    items = [["in/data.csv", str(tmp_path / "out" / "new" / "data.csv")], ["in/data.csv",
                                                                            str(tmp_path / "out" / "old.csv")]]
    reply = run_stage_op(_op("stage_out", base, items), "h1", False, roots)
    assert reply.ok, reply.message
    assert (tmp_path / "out" / "new" / "data.csv").read_bytes() == b"1,2\n"
    assert (tmp_path / "out" / "old.csv").read_bytes() == b"1,2\n"


def test_a_stage_in_larger_than_its_area_is_refused_before_anything_is_copied(tmp_path, area):
    roots, base = area
    (tmp_path / "big").write_bytes(b"x" * 5000)
    reply = run_stage_op(_op("stage_in", base, [[str(tmp_path / "big"), "big"]], size=4096), "h1", False, roots)
    assert not reply.ok and reply.error_code == "RESOURCE_EXHAUSTED" and not reply.retryable
    assert "5000 bytes" in reply.message
    assert os.listdir(base) == []


def test_a_stage_out_of_a_missing_file_is_a_permanent_error_and_one_into_a_file_a_retryable_one(tmp_path, area):
    roots, base = area
    reply = run_stage_op(_op("stage_out", base, [["nothing", str(tmp_path / "x")]]), "h1", False, roots)
    assert not reply.ok and reply.error_code == "NOT_FOUND" and not reply.retryable
    open(os.path.join(base, "out"), "wb").write(b"o")
    (tmp_path / "blocker").write_bytes(b"a file where a directory should be")
    reply = run_stage_op(_op("stage_out", base, [["out", str(tmp_path / "blocker" / "out")]]), "h1", False, roots)
    assert not reply.ok and reply.error_code == "COPY_FAILED" and reply.retryable  # cp's own words
    assert "mkdir: cannot create directory" in reply.message
