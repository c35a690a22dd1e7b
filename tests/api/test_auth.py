"""Authentication, roles, visibility and the audit trail of refusals."""

import httpx


def audit_tail(ctl, n=5):
    with ctl.client() as c:
        return c.get("/v1/audit", params={"limit": n}).json()


def test_healthz_needs_no_token_everything_else_does(ctl):
    assert httpx.get(ctl.url + "/healthz").status_code == 200
    for path in ("/v1/ping", "/v1/jobs", "/v1/queues", "/v1/audit", "/metrics", "/v1/jobs/1"):
        r = httpx.get(ctl.url + path)
        assert r.status_code == 401, path
        assert r.json()["error"]["code"] == "unauthenticated"


def test_wrong_token_is_401_and_audited(ctl):
    r = httpx.get(ctl.url + "/v1/jobs", headers={"Authorization": "Bearer xce_nope_nope"})
    assert r.status_code == 401
    last = audit_tail(ctl, 1)[0]
    assert (last["user"], last["action"], last["result"]) == ("-", "GET /v1/jobs", "unauthenticated")


def test_user_is_forbidden_admin_routes_and_that_is_audited(ctl, users):
    with ctl.client(users["alice"]) as c:
        r = c.get("/v1/users")
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        r = c.post("/v1/tokens", json={"user": "bob"})
        assert r.status_code == 403
    trail = audit_tail(ctl, 2)
    assert [(a["user"], a["action"], a["result"]) for a in trail] == [
        ("alice", "GET /v1/users", "forbidden"), ("alice", "POST /v1/tokens", "forbidden")]


def test_users_see_only_their_own_jobs_admins_see_all(ctl, users):
    with ctl.client(users["alice"]) as a, ctl.client(users["bob"]) as b, ctl.client() as adm:
        ja = a.post("/v1/jobs", json={"command": ["true"], "name": "alice-job"}).json()
        jb = b.post("/v1/jobs", json={"command": ["true"], "name": "bob-job"}).json()
        assert ja["user"] == "alice" and jb["user"] == "bob"
        assert {j["id"] for j in a.get("/v1/jobs").json()} >= {ja["id"]}
        assert jb["id"] not in {j["id"] for j in a.get("/v1/jobs").json()}
        assert a.get(f"/v1/jobs/{jb['id']}").status_code == 404  # foreign jobs are invisible
        assert a.get("/v1/jobs", params={"user": "bob"}).status_code == 400
        every = {j["id"] for j in adm.get("/v1/jobs", params={"all": "true"}).json()}
        assert {ja["id"], jb["id"]} <= every
        assert adm.get(f"/v1/jobs/{ja['id']}").json()["user"] == "alice"
        # a user's audit view is only their own trail
        assert {x["user"] for x in a.get("/v1/audit").json()} == {"alice"}


def test_user_cannot_submit_into_a_project_they_are_not_in(ctl, users):
    with ctl.client() as adm:
        assert adm.post("/v1/users", json={"name": "carol", "projects": []}).status_code == 201
        tok = adm.post("/v1/tokens", json={"user": "carol"}).json()["token"]
    with ctl.client(tok) as c:
        r = c.post("/v1/jobs", json={"command": ["true"], "project": "default"})
        assert r.status_code == 403
        assert "not a member" in r.json()["error"]["message"]


def test_mutations_are_audited_with_target(ctl, users):
    with ctl.client() as adm:
        r = adm.post("/v1/users", json={"name": "dave"})
        assert r.status_code == 201
        r = adm.post("/v1/users", json={"name": "dave"})
        assert r.status_code == 409
    trail = audit_tail(ctl, 2)
    assert [(a["action"], a["target"], a["result"]) for a in trail] == [
        ("POST /v1/users", "user/dave", "ok"), ("POST /v1/users", "user/dave", "conflict")]


def test_ping_reports_epoch_and_position(ctl):
    with ctl.client() as c:
        p1 = c.get("/v1/ping").json()
        c.post("/v1/jobs", json={"command": ["true"]})
        p2 = c.get("/v1/ping").json()
    assert p1["leader"] and p1["leader_epoch"] >= 1 and p1["store"] == "sqlite"
    assert p2["log_position"] > p1["log_position"]


def test_metrics_exposes_prometheus_text(ctl):
    with ctl.client() as c:
        body = c.get("/metrics").text
    assert "xce_log_position" in body and 'xce_http_requests_total{method="GET"' in body
    # one family per name: Prometheus refuses a scrape that declares a name twice
    declared = [line.split()[2] for line in body.splitlines() if line.startswith("# TYPE ")]
    assert sorted(n for n in set(declared) if declared.count(n) > 1) == []


def test_a_submission_is_audited_with_the_new_job_as_its_target(ctl):
    with ctl.client() as c:
        job = c.post("/v1/jobs", json={"command": ["true"]}).json()
        assert c.post("/v1/jobs", json={"command": ["true"], "queue": "nosuchqueue"}).status_code == 404
    trail = audit_tail(ctl, 2)
    assert [(a["action"], a["target"], a["result"]) for a in trail] == [
        ("POST /v1/jobs", f"job/{job['id']}", "ok"), ("POST /v1/jobs", "job", "not_found")]
