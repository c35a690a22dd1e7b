"""Bounded history through the API: finished jobs leave the live model for the archive and are still
shown (``GET /v1/jobs/{id}``, ``/v1/history/jobs``, ``/v1/usage``), to their owners only."""

from __future__ import annotations

import httpx
import pytest

from tests.api.test_paging import check_pages
from tests.helpers import ControllerProcess, wait_for
from xce.config import DEFAULT_CONFIG

# retire as soon as a job ended, and look often
CONFIG = (DEFAULT_CONFIG.replace('keep_finished = "1h"', 'keep_finished = "0s"')
          .replace("retire_every = 2.0", "retire_every = 0.1"))
assert 'keep_finished = "0s"' in CONFIG  # (the default changed once: 5m, then 1h as LSF's CLEAN_PERIOD)


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    d = tmp_path_factory.mktemp("hist")
    (d / "xce.toml").write_text(CONFIG)
    c = ControllerProcess(state_dir=str(d / "ctl"), config=str(d / "xce.toml")).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def tokens(ctl):
    out = {}
    with ctl.client() as c:
        for name in ("alice", "bob"):
            assert c.post("/v1/users", json={"name": name, "role": "user", "projects": ["default"]}).status_code == 201
            out[name] = c.post("/v1/tokens", json={"user": name}).json()["token"]
    return out


def finished_job(c: httpx.Client, name: str = "h", **extra) -> dict:
    """A job that ends at once: submitted held, then killed (EXIT)."""
    r = c.post("/v1/jobs", json={"command": ["true"], "name": name, "hold": True, **extra})
    assert r.status_code == 201, r.text
    job = r.json()
    r = c.post(f"/v1/jobs/{job['id']}/kill")
    assert r.status_code == 200 and r.json()["state"] == "EXIT", r.text
    return r.json()


def live_ids(c: httpx.Client) -> set[int]:
    return {j["id"] for j in c.get("/v1/jobs", params={"all": "true", "limit": 10000}).json()}


def retired(c: httpx.Client, *ids: int) -> bool:
    return not (set(ids) & live_ids(c))


def test_a_retired_job_is_shown_as_it_ended(ctl, tokens):
    with ctl.client(tokens["alice"]) as c:
        ended = finished_job(c, "keepme")
        wait_for(lambda: retired(c, ended["id"]), what="the job to leave the live model")
        r = c.get(f"/v1/jobs/{ended['id']}")
        assert r.status_code == 200, r.text
        assert r.json() == ended  # every field, its claims and its history, as it was
        assert [h["state"] for h in r.json()["history"]] == ["PSUSP", "EXIT"]
        hist = c.get("/v1/history/jobs", params={"name": "keepme"}).json()
        assert [(j["id"], j["state"], j["archived"]) for j in hist] == [(ended["id"], "EXIT", True)]
    with ctl.client() as admin:
        assert admin.get(f"/v1/jobs/{ended['id']}").json() == ended


def test_another_users_archived_job_is_a_404_like_one_that_never_was(ctl, tokens):
    with ctl.client(tokens["alice"]) as alice:
        ended = finished_job(alice, "secret")
        wait_for(lambda: retired(alice, ended["id"]), what="retirement")
    with ctl.client(tokens["bob"]) as bob:
        theirs = bob.get(f"/v1/jobs/{ended['id']}")
        never = bob.get("/v1/jobs/999999")
        assert theirs.status_code == never.status_code == 404
        assert theirs.json()["error"]["code"] == never.json()["error"]["code"]
        assert theirs.json()["error"]["message"] == f"job {ended['id']} not found"
        assert all(j["user"] == "bob" for j in bob.get("/v1/history/jobs", params={"limit": 10000}).json())
        assert bob.get("/v1/history/jobs", params={"user": "alice"}).status_code == 400
        assert bob.get("/v1/history/jobs", params={"all": "true", "name": "secret"}).json() == []
        assert bob.get("/v1/history/jobs", params={"array": ended["id"]}).json() == []
        assert bob.get("/v1/usage", params={"user": "alice"}).status_code == 400


def test_an_array_retires_whole_and_history_lists_its_elements(ctl, tokens):
    with ctl.client(tokens["alice"]) as c:
        r = c.post("/v1/jobs", json={"command": ["true"], "name": "arr[1-5]", "hold": True})
        parent = r.json()["id"]
        ids = list(range(parent, parent + 5))
        for i in ids[:4]:
            assert c.post(f"/v1/jobs/{i}/kill").status_code == 200
        # four elements ended long ago (keep_finished is 0), one waits: the whole array stays live
        wait_for(lambda: c.get("/v1/history/jobs", params={"array": parent}).json(), what="history")
        assert ids[:4] == sorted(j["id"] for j in c.get("/v1/history/jobs", params={"array": parent}).json())
        assert not any(j["archived"] for j in c.get("/v1/history/jobs", params={"array": parent}).json())
        assert set(ids) <= live_ids(c)
        assert c.post(f"/v1/jobs/{ids[4]}/kill").status_code == 200
        wait_for(lambda: retired(c, *ids), what="the array to retire")
        hist = c.get("/v1/history/jobs", params={"array": parent}).json()
        assert sorted(j["id"] for j in hist) == ids and all(j["archived"] for j in hist)
        assert [j["display_id"] for j in sorted(hist, key=lambda j: j["id"])] == [f"{parent}[{i}]" for i in range(1, 6)]


def test_jobs_named_by_id_are_found_live_or_archived_so_no_poller_sees_one_vanish(ctl, tokens):
    """What a poller asks (LSF's ``bjobs ID...``): ``GET /v1/jobs?id=...`` answers for finished jobs whether
    they are still live or retired, an array's id for its elements, another user's as never seen."""
    with ctl.client(tokens["alice"]) as c:
        ended = finished_job(c, "polled")
        running = c.post("/v1/jobs", json={"command": ["true"], "name": "waits", "hold": True}).json()
        arr = c.post("/v1/jobs", json={"command": ["true"], "name": "parr[1-3]", "hold": True}).json()["id"]
        for i in range(arr, arr + 3):
            assert c.post(f"/v1/jobs/{i}/kill").status_code == 200
        wait_for(lambda: retired(c, ended["id"], arr, arr + 2), what="retirement")
        got = c.get("/v1/jobs", params=[("id", ended["id"]), ("id", running["id"]), ("id", arr), ("id", 999999)])
        assert got.status_code == 200, got.text
        docs = got.json()
        assert [j["id"] for j in docs] == sorted([ended["id"], running["id"], arr, arr + 1, arr + 2])
        assert next(j for j in docs if j["id"] == ended["id"]) == ended  # as it ended, whole
        assert {j["state"] for j in docs if j["id"] != running["id"]} == {"EXIT"}
        brief = c.get("/v1/jobs", params={"id": ended["id"], "view": "brief"}).json()
        assert [(j["id"], j["state"]) for j in brief] == [(ended["id"], "EXIT")]
        assert c.get("/v1/jobs", params={"id": ended["id"], "state": "PEND"}).json() == []
        c.post(f"/v1/jobs/{running['id']}/kill")
    with ctl.client(tokens["bob"]) as bob:
        assert bob.get("/v1/jobs", params={"id": ended["id"]}).json() == []
    with ctl.client() as admin:
        assert [j["id"] for j in admin.get("/v1/jobs", params={"id": ended["id"]}).json()] == [ended["id"]]


def test_history_filters_and_refusals(ctl, tokens):
    with ctl.client(tokens["bob"]) as c:
        a = finished_job(c, "filt-a")
        finished_job(c, "filt-b")
        got = c.get("/v1/history/jobs", params={"name": "filt-a"}).json()
        assert [j["id"] for j in got] == [a["id"]]
        assert c.get("/v1/history/jobs", params={"name": "filt-a", "state": "DONE"}).json() == []
        assert len(c.get("/v1/history/jobs", params={"name": "filt-a", "state": "EXIT"}).json()) == 1
        assert c.get("/v1/history/jobs", params={"name": "filt-a", "since": a["end_time"] + 1}).json() == []
        assert len(c.get("/v1/history/jobs", params={"name": "filt-a", "until": a["end_time"] + 1}).json()) == 1
        assert c.get("/v1/history/jobs", params={"state": "PEND"}).status_code == 400
        assert c.get("/v1/history/jobs", params={"since": 10, "until": 5}).status_code == 400
        assert c.get("/v1/history/jobs", params={"cursor": "bogus"}).status_code == 400
        assert c.get("/v1/history/jobs", params={"project": "nope"}).json() == []


def test_history_pages_every_job_exactly_once_while_jobs_finish_and_retire(ctl, tokens):
    with ctl.client(tokens["alice"]) as c:
        existing = {finished_job(c, "pg")["id"] for _ in range(25)}
        pages, cursor, made = [], None, 0
        while True:
            r = c.get("/v1/history/jobs", params={"name": "pg", "limit": 4, **({"cursor": cursor} if cursor else {})})
            assert r.status_code == 200
            pages.append(r.json())
            cursor = r.headers.get("X-Next-Cursor")
            if cursor is None:
                break
            finished_job(c, "pg")  # a new job ends (and retires) between pages
            made += 1
        ids = check_pages(pages, existing)
        assert existing <= set(ids) and made > 0


def test_usage_counts_each_job_once_live_or_archived(ctl, tokens):
    with ctl.client() as admin:
        admin.post("/v1/users", json={"name": "carol", "role": "user", "projects": ["default"]})
        token = admin.post("/v1/tokens", json={"user": "carol"}).json()["token"]
    with ctl.client(token) as c:
        before = c.get("/v1/usage").json()
        assert before == []
        for _ in range(3):
            finished_job(c, "u")
        got = c.get("/v1/usage").json()
        assert [(u["project"], u["jobs"]) for u in got] == [("default", 3)]
        assert got[0]["slot_hours"] == 0  # never started
        wait_for(lambda: retired(c, *{j["id"] for j in c.get("/v1/history/jobs").json()}), what="retirement")
        assert c.get("/v1/usage").json() == got
        assert c.get("/v1/usage", params={"since": 4e9}).json() == []


# ---------------------------------------------------------------- the CLI: xce hist, xce jobs --done, xce usage


def test_cli_hist_jobs_done_usage_and_show_of_an_archived_array(ctl, tokens):
    import json

    from tests.helpers import cli

    env = {"XCE_URL": ctl.url, "XCE_TOKEN": tokens["alice"], "XCE_CONFIG": ""}
    with ctl.client(tokens["alice"]) as c:
        parent = c.post("/v1/jobs", json={"command": ["true"], "name": "clisweep[1-3]", "hold": True}).json()["id"]
        for i in range(parent, parent + 3):
            c.post(f"/v1/jobs/{i}/kill")
        wait_for(lambda: retired(c, parent, parent + 1, parent + 2), what="the array to retire")
    r = cli(env, "hist", "--name", "clisweep", "--since", "1h")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["JOBID", "USER", "PROJECT", "STAT"]
    assert [line.split()[0] for line in lines[1:]] == [f"{parent}[{i}]" for i in (1, 2, 3)]
    done = json.loads(cli(env, "--json", "jobs", "--done", "--name", "clisweep").stdout)
    assert [j["id"] for j in done] == [parent, parent + 1, parent + 2] and all(j["archived"] for j in done)
    assert json.loads(cli(env, "--json", "hist", "--name", "clisweep", "--limit", "1").stdout)[0]["id"] == parent + 2
    paged = json.loads(cli(env, "--json", "hist", "--name", "clisweep", "--all-pages").stdout)
    assert [j["id"] for j in paged] == [parent, parent + 1, parent + 2]
    # job show of the array's id shows every element, from the archive
    shown = json.loads(cli(env, "--json", "job", "show", str(parent)).stdout)
    assert [j["display_id"] for j in shown] == [f"{parent}[{i}]" for i in (1, 2, 3)]
    assert cli(env, "hist", "--state", "RUN").returncode == 2
    assert cli(env, "jobs", "--since", "1h").returncode == 2
    usage = json.loads(cli(env, "--json", "usage", "--since", "7d").stdout)
    assert [u["project"] for u in usage] == ["default"] and usage[0]["jobs"] >= 3
    table = cli(env, "usage", "--since", "7d").stdout.splitlines()
    assert table[0].split() == ["PROJECT", "JOBS", "SLOT_HOURS", "CPU_HOURS", "GPU_HOURS", "CLAIMS", "CLAIM_GIB_HOURS"]
    assert cli(env, "usage", "--since", "yesterday-ish").returncode == 2


# ---------------------------------------------------------------- the same on PostgreSQL


def test_on_postgresql_archived_jobs_are_shown_and_survive_a_sigkill(tmp_path):
    from tests import pg

    with pg.database() as dsn:
        (tmp_path / "xce.toml").write_text(CONFIG)
        c = ControllerProcess(state_dir=str(tmp_path / "ctl"), store=dsn, config=str(tmp_path / "xce.toml")).start()
        try:
            with c.client() as api:
                ended = finished_job(api, "pgjob")
                wait_for(lambda: retired(api, ended["id"]), what="retirement on PostgreSQL")
                assert api.get(f"/v1/jobs/{ended['id']}").json() == ended
            c.kill()
            c.start()
            with c.client() as api:
                assert api.get(f"/v1/jobs/{ended['id']}").json() == ended
                hist = api.get("/v1/history/jobs", params={"name": "pgjob"}).json()
                assert [(j["id"], j["archived"]) for j in hist] == [(ended["id"], True)]
                assert api.get("/v1/usage").json()[0]["jobs"] >= 1
        finally:
            c.stop()


def test_metrics_count_live_finished_jobs_and_retired_records(ctl, tokens):
    def gauge(name: str) -> float:
        with ctl.client() as c:
            return next(float(line.split()[1]) for line in c.get("/metrics").text.splitlines()
                        if line.startswith(name + " "))

    before = gauge("xce_retired_records")
    with ctl.client(tokens["alice"]) as c:
        ended = finished_job(c, "metered")
        wait_for(lambda: retired(c, ended["id"]), what="retirement")
    assert gauge("xce_retired_records") >= before + 1
    assert gauge("xce_jobs_finished_live") >= 0 and gauge("xce_claims_live") >= 0


def test_fairshare_shows_each_user_their_own_projects(ctl, tokens):
    with ctl.client(tokens["alice"]) as c:
        doc = c.get("/v1/fairshare").json()
    assert doc["enabled"] is False and doc["half_life"] == 5 * 3600  # no [[projects]] table sets shares
    rows = {(r["project"], r["user"]): r for r in doc["rows"]}
    assert {p for p, _ in rows} == {"default"}
    assert rows[("default", None)]["share"] == 1.0 and ("default", "alice") in rows
    assert all(r["priority"] > 0 and r["usage"] >= 0 for r in doc["rows"])
    with ctl.client() as admin:
        assert admin.get("/v1/fairshare").json()["rows"] == doc["rows"]  # one project: the same rows
