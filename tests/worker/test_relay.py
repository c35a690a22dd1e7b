"""A task's output relayed to its blaunch (``xce.worker.relay.Relay``): read from its spool from the
offsets asked, held until there is output, the end said once all of it was taken, the spool gone then."""

from __future__ import annotations

import base64
import os
import threading

import pytest

from tests.helpers import wait_for
from xce.worker.relay import PUNCH_EVERY, Relay

KEY = (7, 1, 2)


class Tasks:
    """Which tasks the relay's worker runs and which ended (as ``TaskRuns`` says)."""

    def __init__(self) -> None:
        self.running: set[tuple[int, int, int]] = set()
        self.ended: set[tuple[int, int, int]] = set()


@pytest.fixture
def relay(tmp_path):
    tasks, answers = Tasks(), []
    r = Relay(str(tmp_path), tasks.running.__contains__, tasks.ended.__contains__, answers.append)
    r.tasks, r.answers = tasks, answers  # type: ignore[attr-defined]
    return r


def ask(id_: int = 1, out: int = 0, err: int = 0, limit: int = 1 << 20, wait: float = 0.0) -> dict:
    return {"id": id_, "kind": "task_output", "job_id": KEY[0], "run": KEY[1], "task": KEY[2], "out": out,
            "err": err, "limit": limit, "wait": wait}


def write(path: str, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def data(reply: dict) -> tuple[bytes, bytes]:
    return base64.b64decode(reply["data"]), base64.b64decode(reply["err_data"])


def test_output_is_read_from_the_offsets_asked_and_the_end_said_once_all_was_taken(relay):
    relay.tasks.running.add(KEY)
    out, err = relay.make(KEY, None, None)
    assert relay.runs() == {(7, 1)} and os.stat(out).st_mode & 0o777 == 0o600
    assert relay.read(ask()) is None  # nothing yet, the task goes on: held
    write(out, b"one\ntwo\n")
    write(err, b"oops\n")
    assert data(relay.read(ask())) == (b"one\ntwo\n", b"oops\n")
    assert data(relay.read(ask(out=4, err=5))) == (b"two\n", b"")
    relay.tasks.running.discard(KEY)  # it ended: what is left is final
    reply = relay.read(ask(out=8, err=5))
    assert reply["eof"] and data(reply) == (b"", b"") and relay.runs() == set()  # taken whole: the spool goes
    relay.tasks.ended.add(KEY)
    assert relay.read(ask(out=8, err=5)) == {"id": 1, "missing": True}  # (asked again: the model says the rest)


def test_an_answer_carries_at_most_its_limit_and_leaves_room_for_stderr(relay):
    relay.tasks.running.add(KEY)
    out, err = relay.make(KEY, None, None)
    write(out, b"x" * 1000)
    write(err, b"e" * 10)
    got_out, got_err = data(relay.read(ask(limit=100)))
    assert got_out == b"x" * 50 and got_err == b"e" * 10


def test_a_task_not_started_here_yet_is_held_until_its_wait_is_over(relay):
    assert relay.read(ask()) is None
    assert relay.read(ask(), final=True) == {"id": 1, "missing": True}
    relay.tasks.ended.add(KEY)  # ended here without a spool (it could not start): said at once
    assert relay.read(ask()) == {"id": 1, "missing": True}


def test_held_asks_are_answered_when_the_task_writes(relay):
    relay.tasks.running.add(KEY)
    out, _ = relay.make(KEY, None, None)
    stop = threading.Event()
    t = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    t.start()
    try:
        relay.ask(ask(wait=30))
        relay.ask(ask(wait=30))  # (the same ask again: held once)
        assert relay.held() == [1] and relay.answers == []
        write(out, b"late\n")
        wait_for(lambda: relay.answers, what="the held ask answered")
        assert data(relay.answers[0])[0] == b"late\n" and relay.held() == []
    finally:
        stop.set()
        t.join(5)


def test_what_blaunch_took_is_given_back_to_the_file_system(relay):
    relay.tasks.running.add(KEY)
    out, _ = relay.make(KEY, None, None)
    write(out, os.urandom(3 * PUNCH_EVERY))
    before = os.stat(out).st_blocks
    relay.read(ask(out=2 * PUNCH_EVERY + 5))
    st = os.stat(out)
    assert st.st_size == 3 * PUNCH_EVERY  # the offsets stay as they are
    if st.st_blocks == before:
        pytest.skip("this file system does not punch holes")
    assert st.st_blocks * 512 <= PUNCH_EVERY + 64 * 1024


def test_a_spool_replaced_by_something_else_is_not_read(relay, tmp_path):
    relay.tasks.running.add(KEY)
    out, err = relay.make(KEY, None, None)
    os.unlink(out)
    os.symlink("/etc/passwd", out)
    assert relay.read(ask()) == {"id": 1, "error": "cannot read its output: Too many levels of symbolic links"}


def test_a_runs_spools_go_when_it_is_over(relay):
    relay.make(KEY, None, None)
    relay.make((7, 1, 3), None, None)
    relay.make((8, 1, 1), None, None)
    relay.drop_run((7, 1))
    assert relay.runs() == {(8, 1)}


def put(id_: int = 1, offset: int = 0, data: bytes = b"", eof: bool = False) -> dict:
    return {"id": id_, "kind": "task_input", "job_id": KEY[0], "run": KEY[1], "task": KEY[2], "offset": offset,
            "data": base64.b64encode(data).decode(), "eof": eof, "wait": 0}


def test_input_goes_into_the_tasks_fifo_as_far_as_it_has_room_and_its_end_to_the_shepherd(tmp_path):
    tasks, ended_input = Tasks(), []
    relay = Relay(str(tmp_path), tasks.running.__contains__, tasks.ended.__contains__, lambda _: None,
                  ended_input.append)
    tasks.running.add(KEY)
    relay.make(KEY, None, None, stdin=True)
    fifo = relay.input_path(KEY)
    assert relay.write(put(data=b"early")) is None  # no shepherd holds it yet (the task is starting): held
    reader = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # the shepherd's end, as xce-launch --stdin opens it
    try:
        assert relay.write(put(data=b"abc")) == {"id": 1, "offset": 3}
        assert relay.write(put(offset=1, data=b"bc")) == {"id": 1, "offset": 3}  # (sent again: from what was taken)
        big = b"x" * (1 << 20)
        taken = relay.write(put(offset=3, data=big))["offset"] - 3
        assert 0 < taken < len(big)  # the pipe's room, no more
        assert relay.write(put(offset=3 + taken, data=big[taken:])) is None  # full: held until the task reads
        assert relay.write(put(offset=3 + taken, data=big[taken:]), final=True) == {"id": 1, "offset": 3 + taken}
        assert os.read(reader, 3) == b"abc"
        assert relay.write(put(offset=3 + taken, eof=True)) == {"id": 1, "offset": 3 + taken, "eof": True}
        assert ended_input == [KEY]
    finally:
        os.close(reader)
    tasks.running.discard(KEY)
    tasks.ended.add(KEY)
    assert relay.write(put(offset=3 + taken, data=b"late"))["eof"]  # ended: it takes no more
