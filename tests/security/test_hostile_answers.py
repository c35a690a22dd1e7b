"""Issue 27, finding 7: the ``xce`` command prints no traceback on odd settings or hostile answers.

A "controller" on loopback (``tests/raw_server.py``) answers what no XCE controller sends; the real
``xce`` command, through its native front (``native/xce.c``, built here) and the Python CLI, must end
each case with one ``xce: ...`` line and exit 1.  Both fronts bound an answer's status line and
headers alike (64 KiB): the native front used to take a 2 MB header line the Python client refused.
"""

from __future__ import annotations

import sys

import pytest

from tests.cli.test_native import build
from tests.helpers import XCE, run_command
from tests.raw_server import RawServer, response

JOB = b'{"id":1,"display_id":"1","user":"u","state":"RUN","queue":"q","name":"n","slots":1,"exec_host":"h"}'
ANSWERS = {
    "[] to a submission": response(b"[]"),
    "a 48 MB answer of rows no controller sends": response(b"[" + b",".join([b'{"id":1,"pad":"' + b"x" * 990 + b'"}']
                                                                            * 48_000) + b"]"),
    "a 200,000-deep answer": response(b"[" * 200_000 + b"]" * 200_000),
    "a 2 MB header line": response(b"[" + JOB + b"]", headers=b"X-Big: " + b"a" * (2 << 20) + b"\r\n"),
    "null": response(b"null"),
    "a job that is a number": response(b"[1]"),
    "a malformed Content-Length": b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n[]",
    "a malformed chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n[]\r\n0\r\n\r\n",
}


@pytest.fixture(scope="module")
def fronts(tmp_path_factory):
    return {"native": [build(str(tmp_path_factory.mktemp("native") / "xce"), sys.executable)], "python": XCE}


@pytest.fixture(scope="module")
def server():
    s = RawServer()
    yield s
    s.close()


def clean_refusal(r, what: str) -> None:
    assert r.returncode == 1, (what, r.returncode, r.stdout[:300], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stderr.startswith("xce: ") and r.stderr.count("\n") == 1, \
        (what, r.stderr[-2000:])


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_a_hostile_answer_ends_in_one_line_and_exit_1(fronts, server, case):
    server.answer = ANSWERS[case]
    env = {"XCE_URL": server.url, "XCE_TOKEN": "xce_0123456789ab_fine", "XCE_CONFIG": ""}
    for front, argv in fronts.items():
        for command in (["jobs"], ["submit", "--", "true"])[case == "[] to a submission":]:  # ([]: no jobs)
            clean_refusal(run_command(argv + command, env), (front, command, case))
    if case == "a 2 MB header line":  # refused alike, in the same words, by both
        said = {front: run_command(argv + ["submit", "--", "true"], env).stderr for front, argv in fronts.items()}
        assert said["native"] == said["python"] == "xce: the controller sent a response header larger than " \
                                                   "65536 bytes\n", said


def test_a_300_character_host_name_ends_in_one_line_and_exit_1(fronts):
    env = {"XCE_URL": f"http://{'a' * 300}:7600", "XCE_TOKEN": "xce_0123456789ab_fine", "XCE_CONFIG": ""}
    for front, argv in fronts.items():
        r = run_command(argv + ["jobs"], env)
        clean_refusal(r, front)
        assert "is not a valid host name" in r.stderr
