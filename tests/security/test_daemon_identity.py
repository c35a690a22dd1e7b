"""Finding 4 (and /metrics from finding 9), as the attacker does it: a stolen daemon or scrape token.

Each test uses the token through the real REST API or ``xce`` against a real cluster, asserts the
refusal, and asserts that nothing changed: jobs still RUN with the same run, hosts as they were,
no job created, every refusal in the audit trail under the token's identity.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.security.conftest import as_user, new_user, xce_as

HOST_ROUTES = [  # (method, path, body): everything a worker does for its host
    ("GET", "/v1/hosts/{h}/work", None),
    ("POST", "/v1/hosts/{h}/heartbeat", {}),
    ("POST", "/v1/hosts/{h}/register", {"slots": 64, "running": []}),
    ("POST", "/v1/hosts/{h}/reports", {"started": [], "finished": [{"job_id": 1, "run": 1, "exit_code": 0}]}),
]


def call(client: httpx.Client, method: str, path: str, body=None) -> httpx.Response:
    return client.request(method, path, json=body) if body is not None else client.request(method, path)


@pytest.fixture
def on_host1(cl):
    """A job RUN on host1: what a forged re-register (no runs) would requeue or end."""
    job_id = cl.submit("-R", "select[node==host1]", "--", "sleep", "300")
    job = cl.wait_state(job_id, "RUN")
    assert job["hosts"] == ["host1"]
    yield job
    cl.xce("kill", str(job_id))
    cl.wait_state(job_id, "EXIT", "DONE")


def hosts(cl) -> dict[str, dict]:
    with cl.api() as c:
        return {h["name"]: h for h in c.get("/v1/hosts").json()}


def audit_after(cl, seq: int) -> list[tuple[str, str, str]]:
    with cl.api() as c:
        return [(a["user"], a["action"], a["result"]) for a in c.get("/v1/audit", params={"limit": 200}).json()
                if a["seq"] > seq]


def last_seq(cl) -> int:
    with cl.api() as c:
        return c.get("/v1/audit", params={"limit": 1}).json()[-1]["seq"]


def test_the_provisioner_token_cannot_act_as_any_worker_host(cl, on_host1):
    """Fetch host1's work, heartbeat for it, re-register it with no runs, register a new host 'evil'."""
    before, seq = hosts(cl), last_seq(cl)
    with as_user(cl, cl.provisioner.token) as p:
        for host in ("host1", "evil"):
            for method, path, body in HOST_ROUTES:
                r = call(p, method, path.format(h=host), body)
                assert r.status_code == 403, (method, path, host, r.text)
                assert r.json()["error"]["message"] == f"'provisioner' may not act for host {host!r}: " \
                                                       "it is bound to no host"
        assert p.get("/v1/hosts/host1/work", params={"wait": 0}).status_code == 403
    job = cl.job(on_host1["id"])
    assert (job["state"], job["run"], job["hosts"]) == ("RUN", on_host1["run"], ["host1"])
    after = hosts(cl)
    assert "evil" not in after
    assert after["host1"]["registered"] == before["host1"]["registered"]
    assert after["host1"]["slots"] == before["host1"]["slots"]
    tried = [a for a in audit_after(cl, seq) if a[0] == "provisioner" and "/v1/hosts/" in a[1]]
    assert len(tried) == 2 * len(HOST_ROUTES) + 1 and {r[2] for r in tried} == {"forbidden"}  # each one audited


def test_a_worker_token_acts_only_for_its_own_host(cl, on_host1):
    """host2's token against host1: work, heartbeat, register (would requeue host1's job), reports."""
    before = hosts(cl)
    with as_user(cl, cl.workers["host2"].token) as w2:
        for method, path, body in HOST_ROUTES:
            r = call(w2, method, path.format(h="host1"), body)
            assert r.status_code == 403, (method, path, r.text)
        # its own host still works: the same token is not broken, only bounded
        assert w2.post("/v1/hosts/host2/heartbeat", json={}).status_code == 200
    job = cl.job(on_host1["id"])
    assert (job["state"], job["run"]) == ("RUN", on_host1["run"])
    assert hosts(cl)["host1"]["registered"] == before["host1"]["registered"]


@pytest.mark.parametrize("who, agent", [
    ("provisioner", "node:host1"),      # the provisioner is not a node agent
    ("host1", "provisioner"),           # a worker is not the shared agent
    ("host1", "node:host2"),            # nor another host's node agent
])
def test_claim_agent_routes_only_for_the_identitys_own_agent(cl, who, agent):
    token = cl.provisioner.token if who == "provisioner" else cl.workers[who].token
    with as_user(cl, token) as c:
        r = c.post(f"/v1/agents/{agent}/lease", json={"holder": "attacker"})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["message"] == f"'{'provisioner' if who == 'provisioner' else 'worker-' + who}' " \
                                               f"may not act as claim agent {agent!r}"
        assert c.get(f"/v1/agents/{agent}/work", params={"epoch": 1}).status_code == 403
        assert c.post(f"/v1/agents/{agent}/reports", json={"epoch": 1, "results": []}).status_code == 403


USER_ROUTES = [  # user-facing routes a daemon has no business with: (method, path, body)
    ("POST", "/v1/jobs", {"command": ["sh", "-c", "id > /tmp/pwned"]}),
    ("GET", "/v1/jobs", None),
    ("POST", "/v1/claims", {"name": "loot", "class": "simfs", "size": "1Gi", "access_mode": "RWO"}),
    ("GET", "/v1/claims", None),
    ("GET", "/v1/users", None),
    ("POST", "/v1/users", {"name": "mallory", "role": "admin"}),
    ("POST", "/v1/tokens", {"user": "admin"}),
    ("GET", "/v1/tokens", None),
    ("GET", "/v1/audit", None),
    ("GET", "/v1/hosts", None),
    ("GET", "/metrics", None),
]


@pytest.mark.parametrize("who", ["provisioner", "host1"])
def test_daemon_tokens_reach_no_user_facing_route(cl, who, on_host1):
    token = cl.provisioner.token if who == "provisioner" else cl.workers[who].token
    with cl.api() as adm:
        jobs_before = {j["id"]: j["state"] for j in adm.get("/v1/jobs", params={"all": "true"}).json()}
        claims_before = adm.get("/v1/claims", params={"all": "true"}).json()
    with as_user(cl, token) as c:
        for method, path, body in USER_ROUTES:
            r = call(c, method, path, body)
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["error"]["message"].startswith("daemon '"), r.text
        for action in ("kill", "requeue", "hold"):
            assert c.post(f"/v1/jobs/{on_host1['id']}/{action}").status_code == 403
        # what the claim agents need is still open to them
        assert c.get("/v1/claimclasses").status_code == 200
        assert c.get("/v1/ping").json()["role"] == "daemon"
    r = xce_as(cl, token, "submit", "--", "true")  # and through the CLI
    assert r.returncode == 1 and "may not POST /v1/jobs (for admin and user identities only)" in r.stderr
    with cl.api() as adm:
        assert {j["id"]: j["state"] for j in adm.get("/v1/jobs", params={"all": "true"}).json()} == jobs_before
        assert adm.get("/v1/claims", params={"all": "true"}).json() == claims_before
        assert "mallory" not in {u["name"] for u in adm.get("/v1/users").json()}
    assert cl.job(on_host1["id"])["state"] == "RUN"


def test_metrics_answer_only_admins_and_scrape_identities(cl):
    """Finding 9: /metrics was open to every user.  A metrics identity reads it and nothing else."""
    user = new_user(cl, "metrics-snoop")
    scrape = new_user(cl, "prom", role="metrics")
    assert {u["name"]: u["role"] for u in json.loads(cl.xce("--json", "users").stdout)}["prom"] == "metrics"
    with as_user(cl, user) as u:
        r = u.get("/metrics")
        assert r.status_code == 403
        assert r.json()["error"]["message"] == \
            "user 'metrics-snoop' may not GET /metrics (for admin and metrics identities only)"
    with as_user(cl, scrape) as m:
        assert m.get("/metrics").status_code == 200 and "xce_log_position" in m.get("/metrics").text
        assert httpx.get(cl.ctl.url + "/healthz").status_code == 200
        for method, path, body in [("GET", "/v1/ping", None), ("GET", "/v1/jobs", None),
                                   ("POST", "/v1/jobs", {"command": ["true"]}), ("GET", "/v1/claimclasses", None),
                                   ("GET", "/v1/hosts/host1/work", None), ("GET", "/v1/tokens", None)]:
            r = call(m, method, path, body)
            assert r.status_code == 403, (method, path, r.text)
    with cl.api() as adm:
        assert adm.get("/metrics").status_code == 200
