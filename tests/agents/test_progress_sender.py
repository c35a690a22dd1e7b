"""The agents' progress sender: a thread of its own, the newest reading per op, one call at a time."""

from __future__ import annotations

import threading

from xce.agents.agent import ProgressSender
from tests.helpers import wait_for


def item(op: str, claim: int = 1) -> dict:
    return {"op_id": op, "claim_id": claim}


def test_readings_that_come_while_a_call_is_out_are_replaced_by_the_newest_per_op_and_sent_together():
    calls: list[list[dict]] = []
    entered, release, stop = threading.Event(), threading.Event(), threading.Event()

    def send(readings: list[dict]) -> None:
        calls.append(readings)
        entered.set()
        release.wait(30)  # a slow controller: the transfer that reports must not wait on it

    sender = ProgressSender(send, stop, interval=0.01)
    try:
        sender.put(item("a"), 1, 100, 5.0)
        wait_for(entered.is_set, what="the first call")
        for copied in range(2, 50):  # all while the first call is out: put() never blocks
            sender.put(item("a"), copied, 100, 5.0)
        sender.put(item("b", 2), 7, None, None)
        release.set()
        wait_for(lambda: len(calls) >= 2, what="the second call")
        assert calls[0] == [{"op_id": "a", "claim_id": 1, "bytes": 1, "total_bytes": 100, "rate": 5.0}]
        assert sorted((r["op_id"], r["bytes"]) for r in calls[1]) == [("a", 49), ("b", 7)]
    finally:
        stop.set()
        release.set()


def test_nonsense_numbers_are_not_passed_on():
    got: list[list[dict]] = []
    stop = threading.Event()
    sender = ProgressSender(got.append, stop, interval=0.01)
    try:
        sender.put(item("a"), -5, -1, -2.0)
        wait_for(lambda: got, what="a call")
        assert got[0] == [{"op_id": "a", "claim_id": 1, "bytes": 0, "total_bytes": None, "rate": None}]
    finally:
        stop.set()
