"""Bad input is refused with a 4xx and a message, and leaves no state behind."""

import pytest


def job_count(ctl):
    with ctl.client() as c:
        return len(c.get("/v1/jobs", params={"all": "true"}).json())


BAD_BODIES = [
    ({"command": []}, 400),  # (no command and no script: the model says so)
    ({"command": ["true"], "slots": -1}, 422),
    ({"command": ["true"], "slots": 0}, 422),
    ({"command": ["true"], "slots": "2"}, 422),
    ({"command": ["true"], "unknown_field": 1}, 422),
    ({"command": ["true"], "name": "Bad Name"}, 400),
    ({"command": ["true"], "name": "-leading-dash"}, 400),
    ({"command": ["true"], "name": "x" * 513}, 400),
    ({"command": ["true"], "name": "a/b"}, 400),
    ({"command": ["true"], "name": "a$b"}, 400),
    ({"command": ["echo a", "b"], "shell": True}, 400),
    ({"command": ["true"], "shell": True, "script": "true\n"}, 400),
    ({"command": ["true"], "env": {"A=B": "x"}}, 422),
    ({"command": ["true"], "env": {"A": "x\u0000y"}}, 422),
    ({"command": ["true"], "submit_dir": "relative"}, 400),
    ({"command": ["true"], "queue": "nosuchqueue"}, 404),
    ({"command": ["true"], "project": "nosuchproject"}, 404),
    ({"command": ["true"], "cwd": "relative/dir"}, 400),
    ({"command": [""]}, 400),
    ({"command": "true"}, 422),
    ([1, 2, 3], 422),
]


@pytest.mark.parametrize("body,status", BAD_BODIES)
def test_bad_job_bodies_are_refused_and_create_nothing(ctl, body, status):
    before = job_count(ctl)
    with ctl.client() as c:
        r = c.post("/v1/jobs", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] and err["message"]
    assert job_count(ctl) == before


def test_invalid_json_is_refused(ctl):
    before = job_count(ctl)
    with ctl.client() as c:
        r = c.post("/v1/jobs", content=b'{"command": ["tr', headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500
    assert "json" in r.json()["error"]["message"].lower()
    assert job_count(ctl) == before


def test_oversized_body_is_413(ctl):
    before = job_count(ctl)
    with ctl.client() as c:
        r = c.post("/v1/jobs", json={"command": ["echo", "x" * (2 << 20)]})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert job_count(ctl) == before


def test_unknown_ids_and_routes(ctl):
    with ctl.client() as c:
        assert c.get("/v1/jobs/999999").status_code == 404
        assert c.get("/v1/jobs/abc").status_code == 422
        r = c.get("/v1/nothing-here")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert c.delete("/v1/queues").status_code == 405


def test_bad_user_and_token_requests(ctl):
    with ctl.client() as c:
        assert c.post("/v1/users", json={"name": "UPPER"}).status_code == 422
        assert c.post("/v1/users", json={"name": "ok-name", "role": "root"}).status_code == 422
        assert c.post("/v1/users", json={"name": "ok-name2", "projects": ["nope"]}).status_code == 404
        assert c.post("/v1/tokens", json={"user": "ghost"}).status_code == 404
        names = {u["name"] for u in c.get("/v1/users").json()}
    assert not {"ok-name", "ok-name2", "ghost"} & names
