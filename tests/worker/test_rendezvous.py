"""A run's rendezvous port and secret (``xce.worker.rendezvous``)."""

from __future__ import annotations

import hashlib
import os
import socket

import pytest

from tests.helpers import process_alive, wait_for
from xce.worker import rendezvous, sandbox
from xce.worker.rendezvous import Ports, RendezvousDirError


def test_no_two_runs_hold_the_same_port_and_a_run_keeps_its_own(monkeypatch, tmp_path):
    picks = iter([5000, 5000, 5000, 5001, 5002])
    monkeypatch.setattr(rendezvous, "_free_port", lambda: next(picks))  # the kernel's picks, made to collide
    ports = Ports(str(tmp_path))
    assert ports.reserve((1, 1)) == 5000
    assert ports.reserve((1, 1)) == 5000  # the same run: the same port
    assert ports.reserve((2, 1)) == 5001  # 5000 is held: picked again
    ports.release((1, 1))
    ports.adopt((3, 1), 5002)  # a run of an earlier life keeps its port
    assert ports.held() == {(2, 1): 5001, (3, 1): 5002}


def test_a_reserved_port_is_free_when_chosen(tmp_path):
    port = Ports(str(tmp_path)).reserve((1, 1))
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing listens there: the job can


def test_a_runs_secret_is_reported_only_as_its_sha256():
    secret, key = rendezvous.new_secret()
    assert len(secret) >= 40 and key == hashlib.sha256(secret.encode()).hexdigest() and secret not in key
    assert rendezvous.new_secret()[0] != secret


def test_two_workers_on_one_machine_never_hand_out_the_same_port_while_a_run_holds_it(monkeypatch, tmp_path):
    picks = iter([5000, 5000, 5001, 5000])
    monkeypatch.setattr(rendezvous, "_free_port", lambda: next(picks))  # the kernel's picks, made to collide
    first, second = Ports(str(tmp_path)), Ports(str(tmp_path))  # two workers of one machine (xce up's hosts)
    assert first.reserve((1, 1)) == 5000
    assert second.reserve((1, 1)) == 5001  # (the same job and run of another cluster, too)
    # the run's shepherd keeps the lock (here a plain process given it as the worker gives it, HOLD_FD)
    shepherd = os.posix_spawn("/bin/sleep", ["sleep", "300"], {}, file_actions=[
        (os.POSIX_SPAWN_DUP2, first.lock_fd((1, 1)), sandbox.HOLD_FD)])
    first.handed_over((1, 1))
    assert first.lock_fd((1, 1)) is None
    first.release((1, 1))  # even a worker that forgot it (killed, restarted) cannot give it away
    assert second._take(5000) is None
    os.kill(shepherd, 9)
    os.waitpid(shepherd, 0)
    wait_for(lambda: not process_alive(shepherd), what="the shepherd gone")
    assert second.reserve((2, 1)) == 5000  # the run is over: its port is free again


def test_reservations_are_kept_only_in_a_directory_of_the_workers_user_alone(tmp_path):
    """The non-root default is under the shared temporary directory: a directory another local user made
    there first (or a link they planted, or one anybody may write in) is refused, not used."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)  # nobody's
    with pytest.raises(RendezvousDirError, match="owned by uid 65534"):
        Ports(str(theirs))
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RendezvousDirError, match="is a link"):
        Ports(str(tmp_path / "link"))
    assert not os.listdir(tmp_path / "elsewhere")  # nothing made through it
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RendezvousDirError, match="mode 777"):
        Ports(str(shared))
    (tmp_path / "mine" / "rendezvous-ports").mkdir(parents=True)
    (tmp_path / "mine" / "rendezvous-ports").chmod(0o733)
    with pytest.raises(RendezvousDirError, match="rendezvous-ports is mode 733"):
        Ports(str(tmp_path / "mine"))
    fresh = Ports(str(tmp_path / "new"))  # made here, 0700: used
    assert fresh.reserve((1, 1)) > 0 and os.stat(fresh.dir).st_mode & 0o777 == 0o700
