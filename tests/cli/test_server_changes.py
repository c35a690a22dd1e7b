"""How the warm CLI server knows its code changed on disk (``xce.cli.server.Changes``): at once, by
inotify, for a module written in place or replaced by a rename, as ``pip install`` does; not for another
file beside them; by comparing mtimes where there is no inotify."""

from __future__ import annotations

import os

import pytest

from xce.cli.server import Changes, _loaded_files


@pytest.fixture()
def modules(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name in ("a.py", "b.py"):
        (pkg / name).write_text("x = 1\n")
    return pkg


def _changes(pkg, every: float = 3600.0) -> Changes:
    c = Changes(_loaded_files([str(pkg / "a.py"), str(pkg / "b.py")]), every=every)
    assert not c.changed()  # (the first call compares the mtimes)
    return c


def test_a_module_written_in_place_is_a_change_at_once(modules):
    c = _changes(modules)
    assert c.fd is not None, "no inotify on this machine"
    (modules / "a.py").write_text("x = 2\n")
    assert c.changed()  # long before the next look at the mtimes (an hour)
    assert c.changed()  # and it stays changed


def test_a_module_replaced_by_a_rename_is_a_change(modules):
    c = _changes(modules)
    (modules / "b.py.new").write_text("x = 3\n")
    assert not c.changed()  # a file beside ours is none of ours
    os.replace(modules / "b.py.new", modules / "b.py")
    assert c.changed()


def test_other_files_beside_the_modules_are_no_change(modules):
    c = _changes(modules)
    (modules / ".a.py.swp").write_text("editor")
    (modules / "__pycache__").mkdir()
    (modules / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert not c.changed()


def test_the_package_directory_moved_away_is_a_change(modules, tmp_path):
    c = _changes(modules)
    os.rename(modules, tmp_path / "elsewhere")
    assert c.changed()


def test_without_inotify_the_mtimes_are_compared_at_every_call(modules, monkeypatch):
    monkeypatch.setattr(Changes, "_watch", lambda self: None)
    c = _changes(modules)
    st = os.stat(modules / "a.py")
    os.utime(modules / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert c.changed()


def test_a_change_made_before_the_watch_began_is_found_at_the_first_call(modules):
    files = _loaded_files([str(modules / "a.py"), str(modules / "b.py")])
    (modules / "a.py").write_text("x = 4\n")  # after the server read the mtimes, before a worker watched
    os.utime(modules / "a.py", ns=(0, files[str(modules / "a.py")] + 1_000_000))
    assert Changes(files).changed()
