"""Every list that grows with history pages: GET /v1/jobs, /v1/claims, /v1/snapshots take ``limit`` and
an opaque ``cursor`` and answer ``X-Next-Cursor``, newest first, so no answer grows with history."""

from __future__ import annotations


import httpx
import pytest

from xce.client import Client


def walk(c: httpx.Client, path: str, limit: int, between=None, **params) -> list[list[dict]]:
    """Every page of ``path``; ``between()`` is called after each page (to make new records meanwhile)."""
    out, cursor = [], None
    while True:
        r = c.get(path, params={**params, "limit": limit, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        assert len(r.json()) <= limit
        out.append(r.json())
        cursor = r.headers.get("X-Next-Cursor")
        if cursor is None:
            return out
        if between is not None:
            between()


def check_pages(walked: list[list[dict]], existing: set[int]) -> list[int]:
    """Pages run newest first, each in id order; no id twice; every record there before the walk is in it."""
    for page in walked:
        assert [r["id"] for r in page] == sorted(r["id"] for r in page)
    for newer, older in zip(walked, walked[1:]):
        assert older and older[-1]["id"] < newer[0]["id"]
    ids = [r["id"] for page in walked for r in page]
    assert len(ids) == len(set(ids)), "a record shown twice"
    assert existing <= set(ids), f"records skipped: {sorted(existing - set(ids))[:10]}"
    return ids


class Arrivals:
    """Makes one new record per call, on a connection of its own: called between pages."""

    def __init__(self, ctl, make) -> None:
        self.make, self.made, self.c = make, 0, ctl.client()

    def __call__(self) -> None:
        r = self.make(self.c, self.made)
        assert r.status_code == 201, r.text
        self.made += 1

    def __enter__(self) -> Arrivals:
        return self

    def __exit__(self, *exc) -> None:
        self.c.close()


def submit(c: httpx.Client, i: int) -> httpx.Response:
    return c.post("/v1/jobs", json={"command": ["true"], "name": f"meanwhile-{i}"})


def create_claim(c: httpx.Client, i: int) -> httpx.Response:
    return c.post("/v1/claims", json={"name": f"meanwhile-{i}", "class": "simfs", "size": "1Mi",
                                      "access_mode": "RWO"})


def test_jobs_page_every_job_exactly_once_while_jobs_arrive(ctl):
    with ctl.client() as c:
        for i in range(45):
            assert c.post("/v1/jobs", json={"command": ["true"], "name": f"page-{i}"}).status_code == 201
        existing = {j["id"] for page in walk(c, "/v1/jobs", 1000, all="true") for j in page}
        assert len(existing) >= 45
        with Arrivals(ctl, submit) as new:
            walked = walk(c, "/v1/jobs", 4, new, all="true")
        assert new.made >= 10
        ids = check_pages(walked, existing)
        # the walk started below the newest job of its first page: every job up to it, nothing above
        everything = {j["id"] for page in walk(c, "/v1/jobs", 10_000, all="true") for j in page}
        assert sorted(ids) == sorted(i for i in everything if i <= walked[0][-1]["id"])
        # filters hold across pages
        named = [j for page in walk(c, "/v1/jobs", 3, all="true", state="PEND") for j in page]
        assert named and all(j["state"] == "PEND" for j in named)


def test_the_brief_view_is_each_full_documents_row_and_pages_alike(ctl):
    """``view=brief`` (what ``xce jobs`` asks): the same jobs on the same pages, each the listing's columns
    of its full document and nothing more."""
    with ctl.client() as c:
        for i in range(7):
            assert c.post("/v1/jobs", json={"command": ["true"], "name": f"brief-{i}"}).status_code == 201
        full = walk(c, "/v1/jobs", 3, all="true")
        brief = walk(c, "/v1/jobs", 3, all="true", view="brief")
        assert [[j["id"] for j in page] for page in brief] == [[j["id"] for j in page] for page in full]
        columns = {"id", "display_id", "name", "user", "project", "queue", "state", "slots", "hosts",
                   "submit_time", "start_time", "end_time"}
        for page_full, page_brief in zip(full, brief):
            for f, b in zip(page_full, page_brief):
                assert set(b) == columns and b == {k: f[k] for k in columns}
        r = c.get("/v1/jobs", params={"view": "everything"})
        assert r.status_code == 422 and "view" in r.text


def test_claims_page_every_claim_exactly_once_while_claims_arrive(ctl):
    with ctl.client() as c:
        for i in range(23):
            assert create_claim(c, 1000 + i).status_code == 201
        existing = {x["id"] for page in walk(c, "/v1/claims", 1000) for x in page}
        assert len(existing) >= 23
        with Arrivals(ctl, lambda c, i: create_claim(c, 2000 + i)) as new:
            walked = walk(c, "/v1/claims", 5, new)
        assert new.made >= 4
        ids = check_pages(walked, existing)
        everything = {x["id"] for page in walk(c, "/v1/claims", 10_000) for x in page}
        assert sorted(ids) == sorted(i for i in everything if i <= walked[0][-1]["id"])


def test_snapshots_listing_pages(ctl):
    with ctl.client() as c:
        r = c.get("/v1/snapshots", params={"limit": 1})
        assert r.status_code == 200 and r.json() == [] and "X-Next-Cursor" not in r.headers


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/claims", "/v1/snapshots"])
def test_bad_limits_and_cursors_are_refused(ctl, path):
    with ctl.client() as c:
        for params, status in (({"limit": 10_001}, 422), ({"limit": 0}, 422), ({"cursor": "!!"}, 400),
                               ({"cursor": "YXVkaXQ6NQ"}, 400)):  # another listing's cursor (audit:5)
            r = c.get(path, params=params)
            assert r.status_code == status, (params, r.text)


def test_the_client_follows_pages_while_jobs_and_claims_arrive(ctl):
    with ctl.client() as c:
        for i in range(12):
            assert c.post("/v1/jobs", json={"command": ["true"], "name": f"client-{i}"}).status_code == 201
            assert create_claim(c, 3000 + i).status_code == 201
    with Client(ctl.url, ctl.token) as xce:
        jobs_before = {j["id"] for j in xce.jobs(all_users=True, all_pages=True)}
        claims_before = {x["id"] for x in xce.claims()}
        with Arrivals(ctl, submit) as new_job, Arrivals(ctl, lambda c, i: create_claim(c, 4000 + i)) as new_claim:
            job_pages, claim_pages = [], []
            for page in xce.pages("/v1/jobs", {"all": True}, page_size=3):
                job_pages.append(page)
                new_job()
            for page in xce.pages("/v1/claims", page_size=3):
                claim_pages.append(page)
                new_claim()
            jobs = xce.jobs(all_users=True, all_pages=True)
            claims = xce.claims()
        assert new_job.made >= 4 and new_claim.made >= 4
        check_pages(job_pages, jobs_before)
        check_pages(claim_pages, claims_before)
        for listed, before in ((jobs, jobs_before), (claims, claims_before)):
            ids = [r["id"] for r in listed]
            assert ids == sorted(set(ids)) and before <= set(ids)
        # limit: the newest N, in id order
        newest = xce.jobs(all_users=True, all_pages=True, limit=5)
        assert [j["id"] for j in newest] == sorted(j["id"] for j in newest) and len(newest) == 5
        assert newest[0]["id"] > max(jobs_before) - 5
        page, cursor = xce.get_page("/v1/claims", {"limit": 2})
        assert len(page) == 2 and cursor is not None
        older, _ = xce.get_page("/v1/claims", {"limit": 2, "cursor": cursor})
        assert older[-1]["id"] < page[0]["id"]


def test_tokens_page_every_token_exactly_once_while_tokens_arrive(ctl):
    with ctl.client() as c:
        r = c.post("/v1/users", json={"name": "pager", "role": "user", "projects": ["default"]})
        assert r.status_code == 201, r.text
        for _ in range(9):
            assert c.post("/v1/tokens", json={"user": "pager"}).status_code == 201
        existing = [t["token_id"] for t in c.get("/v1/tokens", params={"user": "pager"}).json()]
        assert len(existing) == 9
        with Arrivals(ctl, lambda c, i: c.post("/v1/tokens", json={"user": "pager"})) as new:
            walked = walk(c, "/v1/tokens", 2, new, user="pager")
        assert new.made >= 4
        ids = [t["token_id"] for page in walked for t in page]
        assert len(ids) == len(set(ids)) and sorted(ids) == sorted(existing)
        keys = [(t["created"], t["token_id"]) for page in reversed(walked) for t in page]
        assert keys == sorted(keys)  # pages run newest first, each oldest first
        r = c.get("/v1/tokens", params={"cursor": "am9iczo1"})  # another listing's cursor (jobs:5)
        assert r.status_code == 400
    with Client(ctl.url, ctl.token) as xce, ctl.client() as c:
        assert [t["token_id"] for t in xce.get_all("/v1/tokens", {"user": "pager"}, page_size=3)] == \
            [t["token_id"] for t in c.get("/v1/tokens", params={"user": "pager"}).json()]
