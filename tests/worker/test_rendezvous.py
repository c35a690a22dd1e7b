"""A run's rendezvous port and secret (``xce.worker.rendezvous``)."""

from __future__ import annotations

import hashlib
import os
import socket

from tests.helpers import process_alive, wait_for
from xce.worker import rendezvous, sandbox
from xce.worker.rendezvous import Ports


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
