"""A worker's work long-poll against a real controller, with the test playing two hosts' workers: a
poll answers when its own host has work, not when another host's does.  Nothing here is timed: a
poll that answered early shows as an answer without its host's run."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.helpers import ControllerProcess


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("api-work-polls") / "ctl")).start()
    with c.client() as api:
        for host, zone in (("h1", "a"), ("h2", "b")):
            r = api.post(f"/v1/hosts/{host}/register", json={"slots": 8, "attrs": {"zone": zone}})
            assert r.status_code == 200, r.text
    yield c
    c.stop()


def submit(api, zone: str) -> int:
    r = api.post("/v1/jobs", json={"command": ["sleep", "300"], "resreq": f"select[zone=={zone}]"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_a_hosts_poll_waits_through_other_hosts_allocations_and_answers_with_its_own_run(ctl):
    answers: list[dict] = []
    sent = threading.Event()

    def poll_h2() -> None:
        with httpx.Client(base_url=ctl.url, timeout=90.0, headers={"Authorization": f"Bearer {ctl.token}"},
                          event_hooks={"request": [lambda _: sent.set()]}) as api:
            r = api.get("/v1/hosts/h2/work", params={"wait": 60})
            answers.append(r.json() if r.status_code == 200 else {"status": r.status_code, "text": r.text})

    poller = threading.Thread(target=poll_h2, daemon=True)
    poller.start()
    assert sent.wait(30)
    with ctl.client() as api:
        # h1's runs are allocated one after another: each commit wakes every waiting poll
        for _ in range(4):
            job = submit(api, "a")
            work = api.get("/v1/hosts/h1/work", params={"wait": 20}).json()  # answers once h1 has work
            assert [d["job_id"] for d in work["dispatch"]] == [job]
            r = api.post("/v1/hosts/h1/reports", json={"started": [{"job_id": job, "run": 1, "pid": 4242}]})
            assert r.status_code == 200, r.text  # started: h1's next poll waits again
        assert not answers, f"h2's poll answered before h2 had work: {answers}"
        mine = submit(api, "b")
        poller.join(60)
    assert len(answers) == 1
    assert [d["job_id"] for d in answers[0]["dispatch"]] == [mine], answers[0]
