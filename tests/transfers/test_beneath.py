"""``xce.transfers.beneath``: paths inside a claim opened with no link on the way, on the real kernel."""

from __future__ import annotations

import os

import pytest

from xce.transfers import beneath


@pytest.fixture
def claim(tmp_path):
    (tmp_path / "claim" / "d").mkdir(parents=True)
    (tmp_path / "claim" / "d" / "f.txt").write_text("mine\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("not mine\n")
    (tmp_path / "claim" / "dirlink").symlink_to(tmp_path / "outside")
    (tmp_path / "claim" / "filelink").symlink_to(tmp_path / "outside" / "secret.txt")
    fd = beneath.open_dir(str(tmp_path / "claim"))
    yield fd
    os.close(fd)


@pytest.mark.parametrize("rel, code", [
    ("dirlink", "SYMLINK"), ("filelink", "SYMLINK"), ("dirlink/secret.txt", "SYMLINK"),
    ("../outside/secret.txt", "OUTSIDE"), ("/etc/hostname", "OUTSIDE"), ("d/nothing", "NOT_FOUND"),
])
def test_a_link_anywhere_on_the_path_or_a_way_out_is_refused(claim, rel, code):
    with pytest.raises(beneath.Refused) as e:
        beneath.open_beneath(claim, rel)
    assert e.value.code == code


def test_what_is_inside_is_held_by_its_descriptor_whatever_the_name_becomes(claim, tmp_path):
    fd = beneath.open_beneath(claim, "d/f.txt")
    try:
        assert beneath.kind(fd) == "file"
        os.rename(tmp_path / "claim" / "d" / "f.txt", tmp_path / "claim" / "d" / "was.txt")
        os.symlink(tmp_path / "outside" / "secret.txt", tmp_path / "claim" / "d" / "f.txt")
        with open(f"/proc/self/fd/{fd}") as fh:  # how a child reads it (as fd 3)
            assert fh.read() == "mine\n"
    finally:
        os.close(fd)


def test_a_destination_s_directories_are_made_beneath_and_a_link_on_the_way_is_refused(claim, tmp_path):
    fd, name = beneath.dest_beneath(claim, "new/deeper/x.bin", None)
    try:
        assert name == "x.bin" and (tmp_path / "claim" / "new" / "deeper").is_dir()
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "claim" / "new" / "deeper"))
    finally:
        os.close(fd)
    with pytest.raises(beneath.Refused) as e:
        beneath.dest_beneath(claim, "dirlink/x.bin", None)
    assert e.value.code == "SYMLINK" and not (tmp_path / "outside" / "x.bin").exists()
    fd, name = beneath.dest_beneath(claim, ".", None)  # the claim itself
    os.close(fd)
    assert name == ""
