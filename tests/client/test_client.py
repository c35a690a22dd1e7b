"""``xce.client`` against a real cluster: the typed helpers, waiting, and the error tree.

One controller (embedded defaults: class ``simfs``), the provisioner and one worker, real
processes on loopback, shared by the module's tests.
"""

from __future__ import annotations

import os
import socket
import threading

import pytest

from xce.client import (ApiError, BadResponse, Client, ClientError, InvalidURL, Unreachable, WaitTimeout)
from tests.helpers import Cluster, free_port


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = Cluster(str(tmp_path_factory.mktemp("client"))).start()
    c.add_provisioner()
    c.add_worker("h1", slots=2)
    yield c
    c.stop()


@pytest.fixture
def xce(cl):
    with Client(cl.ctl.url, cl.ctl.token) as client:
        yield client


# ---------------------------------------------------------------- jobs


def test_submit_wait_and_read_a_job(cl, xce, tmp_path):
    out = str(tmp_path / "out.txt")
    job = xce.submit(["sh", "-c", "echo hello from $XCE_JOBID"], name="hello", stdout=out)
    assert job["state"] == "PEND" and job["name"] == "hello" and job["queue"] == "default"
    seen: list[str] = []
    done = xce.wait_job(job["id"], timeout=60, on_change=lambda j: seen.append(j["state"]))
    assert done["state"] == "DONE" and done["exit_code"] == 0
    assert seen[-1] == "DONE" and len(seen) == len(set(seen))  # one call per new state
    assert xce.job(job["id"]) == done
    with open(out) as fh:
        assert fh.read() == f"hello from {job['id']}\n"


def test_jobs_filters_by_state_and_array(xce):
    parent = xce.submit(["true"], name="sweep[1-3]", hold=True)
    elements = xce.jobs(array=parent["id"])
    assert sorted(j["array_index"] for j in elements) == [1, 2, 3]
    held = {j["id"] for j in xce.jobs(states=["PSUSP"])}
    assert {j["id"] for j in elements} <= held
    assert len(xce.jobs(limit=1)) == 1
    for j in elements:
        xce.post(f"/v1/jobs/{j['id']}/kill", {})


def test_wait_job_gives_up_with_wait_timeout(xce):
    job = xce.submit(["true"], hold=True)  # PSUSP until released: never RUN
    with pytest.raises(WaitTimeout, match=rf"job {job['id']} is still PSUSP after 0.3s") as e:
        xce.wait_job(job["id"], ("RUN",), timeout=0.3, interval=0.05)
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, ClientError)
    xce.post(f"/v1/jobs/{job['id']}/kill", {})


# ---------------------------------------------------------------- claims


def test_claim_lifecycle_create_wait_delete(cl, xce):
    created = xce.create_claim("nb-ckpt", claim_class="simfs", size="1Gi", access_mode="RWO")
    assert created["state"] == "PENDING" and created["size_bytes"] == 2**30 and created["class"] == "simfs"
    states: list[str] = []
    ready = xce.wait_claim(created["id"], timeout=60, on_change=lambda c: states.append(c["state"]))
    assert ready["state"] == "READY" and states[-1] == "READY"
    assert xce.claim("nb-ckpt") == ready == xce.claim(created["id"])
    assert xce.claim("nb-ckpt", project="default")["id"] == created["id"]
    assert "nb-ckpt" in {c["name"] for c in xce.claims()}
    gone = xce.delete_claim("nb-ckpt")
    assert gone["id"] == created["id"]
    released = xce.wait_claim("nb-ckpt", ("RELEASED",), timeout=60)
    assert released["state"] == "RELEASED" and released["handle"] not in os.listdir(cl.provisioner.simfs_root)
    assert "nb-ckpt" not in {c["name"] for c in xce.claims()}
    assert "nb-ckpt" in {c["name"] for c in xce.claims(all_states=True)}


def test_a_job_uses_a_claim_made_through_the_client(cl, xce):
    claim = xce.create_claim("nb-data", claim_class="simfs", size="10Mi", access_mode="RWX")
    assert xce.wait_claim(claim["id"], timeout=60)["state"] == "READY"
    job = xce.submit(["sh", "-c", 'test -d "$XCE_CLAIM_NB_DATA"'], claims=["nb-data:rw"])
    assert xce.wait_job(job["id"], timeout=60)["state"] == "DONE"
    xce.delete_claim("nb-data")
    xce.wait_claim(claim["id"], ("RELEASED",), timeout=60)


# ---------------------------------------------------------------- errors


def test_refusals_are_api_errors_with_status_code_and_message(cl, xce):
    with pytest.raises(ApiError) as e:
        xce.job(999_999)
    assert (e.value.status, e.value.code) == (404, "not_found") and "999999" in e.value.message
    xce.create_claim("nb-twice", claim_class="simfs", size="1Mi", access_mode="RWO")
    with pytest.raises(ApiError) as e:
        xce.create_claim("nb-twice", claim_class="simfs", size="1Mi", access_mode="RWO")
    assert (e.value.status, e.value.code) == (409, "conflict")
    with pytest.raises(ApiError) as e:
        xce.create_claim("nb-bad", claim_class="simfs", size="lots", access_mode="RWO")
    assert e.value.status in (400, 422)
    with Client(cl.ctl.url, "not-a-token") as stranger, pytest.raises(ApiError) as e:
        stranger.jobs()
    assert (e.value.status, e.value.code) == (401, "unauthenticated")
    xce.delete_claim("nb-twice")


def test_no_controller_is_unreachable_and_a_bad_url_is_invalid():
    with pytest.raises(Unreachable, match=r"cannot reach the controller at http://127.0.0.1:\d+: connection refused"):
        Client(f"http://127.0.0.1:{free_port()}", "x", timeout=5).ping()
    for url in ("ftp://x", "http://h:99999", "http://h/?q=1", "http://"):
        with pytest.raises(InvalidURL, match="invalid controller URL") as e:
            Client(url, "x")
        assert isinstance(e.value, ValueError)


def test_a_success_that_is_not_json_is_a_bad_response():
    """A server that is not XCE's (here: a raw loopback socket answering 200 with text)."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)

        def answer() -> None:
            conn, _ = srv.accept()
            with conn:
                while b"\r\n\r\n" not in conn.recv(65536):
                    pass
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")

        t = threading.Thread(target=answer, daemon=True)
        t.start()
        with pytest.raises(BadResponse, match=r"not JSON \(HTTP 200\)"):
            Client(f"127.0.0.1:{srv.getsockname()[1]}", "x", timeout=5).ping()
        t.join(5)


def test_a_connection_the_server_closed_with_its_answer_is_not_used_again():
    """``Connection: close`` ends a kept-alive connection: the next call from the same client (a warm
    CLI worker's, kept for its life) connects afresh instead of writing to the closed socket."""
    from tests.raw_server import RawServer, response

    server = RawServer(response(b'{"pong": true}'))
    try:
        client = Client(server.url, "x", timeout=5)
        for _ in range(3):
            assert client.get("/v1/ping") == {"pong": True}
        assert len(server.received) == 3
    finally:
        server.close()
