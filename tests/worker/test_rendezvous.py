"""A run's rendezvous port and secret (``xce.worker.rendezvous``)."""

from __future__ import annotations

import hashlib
import socket

from xce.worker import rendezvous
from xce.worker.rendezvous import Ports


def test_no_two_runs_hold_the_same_port_and_a_run_keeps_its_own(monkeypatch):
    picks = iter([5000, 5000, 5000, 5001, 5002])
    monkeypatch.setattr(rendezvous, "_free_port", lambda: next(picks))  # the kernel's picks, made to collide
    ports = Ports()
    assert ports.reserve((1, 1)) == 5000
    assert ports.reserve((1, 1)) == 5000  # the same run: the same port
    assert ports.reserve((2, 1)) == 5001  # 5000 is held: picked again
    ports.release((1, 1))
    ports.adopt((3, 1), 5002)  # a run of an earlier life keeps its port
    assert ports.held() == {(2, 1): 5001, (3, 1): 5002}


def test_a_reserved_port_is_free_when_chosen():
    port = Ports().reserve((1, 1))
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing listens there: the job can


def test_a_runs_secret_is_reported_only_as_its_sha256():
    secret, key = rendezvous.new_secret()
    assert len(secret) >= 40 and key == hashlib.sha256(secret.encode()).hexdigest() and secret not in key
    assert rendezvous.new_secret()[0] != secret
