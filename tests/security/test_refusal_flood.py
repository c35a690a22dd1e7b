"""Finding 8: whoever can reach the port cannot grow the log at will with refused requests.

Refusals are still audited, but per source (client address; the user once authenticated) and result
code through a token bucket: repeats beyond it are summed into one fact.  The bounds below are
computed from the configured rates and the attack's own duration (measured, never asserted).
"""

from __future__ import annotations

import math
import re
import time

import httpx
import pytest

from tests.helpers import ControllerProcess, audit_trail, wait_for
from xce.api.refusals import RefusalLimiter
from xce.config import DEFAULT_CONFIG

RATE, BURST, WINDOW = 1.0, 20, 2.0
CONFIG = DEFAULT_CONFIG.replace("refusal_audit_window = 10.0", f"refusal_audit_window = {WINDOW}")
ATTACK = 2000


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    root = tmp_path_factory.mktemp("flood")
    cfg = root / "xce.toml"
    cfg.write_text(CONFIG)
    c = ControllerProcess(state_dir=str(root / "ctl"), config=str(cfg)).start()
    yield c
    c.stop()


def position(ctl) -> int:
    with ctl.client() as c:
        return c.get("/v1/ping").json()["log_position"]


def bound(elapsed: float) -> int:
    """Facts one (source, code) can add in ``elapsed`` s: the burst and the refill let through, each
    possibly preceded by a summary, plus one summary per flush of the window (every WINDOW / 2)."""
    let_through = BURST + math.ceil(RATE * elapsed)
    return 2 * let_through + math.ceil(elapsed / (WINDOW / 2)) + 2


def refusals_recorded(ctl, result: str, detail_has: str = "") -> int:
    """Refusals the trail accounts for: one per record, N more per summary."""
    with ctl.client() as c:
        trail = audit_trail(c)
    n = 0
    for rec in trail:
        if rec["result"] != result or detail_has not in rec["detail"]:
            continue
        m = re.match(r"(\d+) more refusal", rec["detail"])
        n += int(m.group(1)) if m else 1
    return n


def test_a_bad_token_loop_adds_a_bounded_number_of_facts_and_every_refusal_is_counted(ctl):
    before = position(ctl)
    t0 = time.monotonic()
    with httpx.Client(base_url=ctl.url, timeout=30) as c:
        for i in range(ATTACK):
            r = c.get("/v1/jobs", headers={"Authorization": f"Bearer xce_stolen_{i}"})
            assert r.status_code == 401
    elapsed = time.monotonic() - t0
    added = position(ctl) - before
    assert added <= bound(elapsed) < ATTACK // 10, (added, elapsed)
    # nothing is lost: once the window closes, the summaries account for every refusal
    wait_for(lambda: refusals_recorded(ctl, "unauthenticated", "") >= ATTACK, timeout=8 * WINDOW,
             what="the summary of the held-back refusals")
    with ctl.client() as c:
        trail = audit_trail(c)
    summary = [r for r in trail if "more refusal(s) like this from 127.0.0.1" in r["detail"]]
    assert summary and summary[-1]["action"] == "GET /v1/jobs" and summary[-1]["user"] == "-"
    assert position(ctl) - before <= bound(time.monotonic() - t0)


def test_an_authenticated_user_is_bounded_too_refused_by_role_and_by_decision(ctl):
    with ctl.client() as c:
        assert c.post("/v1/users", json={"name": "mallory", "projects": ["default"]}).status_code == 201
        token = c.post("/v1/tokens", json={"user": "mallory"}).json()["token"]
    before = position(ctl)
    t0 = time.monotonic()
    with httpx.Client(base_url=ctl.url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as c:
        for _ in range(ATTACK // 4):
            assert c.get("/v1/users").status_code == 403  # refused by role, before any decision
            # refused by the model's decision (committed through mutate)
            assert c.post("/v1/jobs", json={"command": ["true"], "queue": "nope"}).status_code == 404
    elapsed = time.monotonic() - t0
    added = position(ctl) - before
    assert added <= 2 * bound(elapsed), (added, elapsed)  # two (user, code) keys
    wait_for(lambda: refusals_recorded(ctl, "forbidden") >= ATTACK // 4 and
             refusals_recorded(ctl, "not_found", "") >= ATTACK // 4, timeout=8 * WINDOW,
             what="every refusal accounted for")
    with ctl.client() as c:
        mine = audit_trail(c, user="mallory")
    assert any("more refusal(s) like this from mallory" in r["detail"] for r in mine)


def test_a_forged_x_forwarded_for_does_not_make_a_new_source(ctl):
    """Issue 27, finding 5: uvicorn believed X-Forwarded-For from 127.0.0.1, so each bad-token request
    naming another address was a new source with a burst of its own.  Proxy headers are believed only
    from ``[controller] trusted_proxies`` (none here): all of them count against the real peer."""
    before = position(ctl)
    t0 = time.monotonic()
    with httpx.Client(base_url=ctl.url, timeout=30) as c:
        for i in range(ATTACK // 4):
            r = c.get("/v1/jobs", headers={"Authorization": f"Bearer xce_forged_{i}",
                                           "X-Forwarded-For": f"10.99.{i // 250}.{i % 250 + 1}"})
            assert r.status_code == 401
    elapsed = time.monotonic() - t0
    added = position(ctl) - before
    assert added <= bound(elapsed), (added, elapsed)  # one source's worth, not one per forged address
    with ctl.client() as c:
        trail = audit_trail(c)
    assert not [r for r in trail if "10.99." in r["detail"]]


def test_the_limiter_tracks_a_bounded_number_of_sources_and_loses_no_count():
    now = [0.0]
    lim = RefusalLimiter(rate=1.0, burst=2, window=10.0, max_sources=8, global_rate=1000.0,
                         clock=lambda: now[0], wall=lambda: 1000.0 + now[0])
    facts = []
    for i in range(1000):  # an attacker rotating addresses
        facts += lim.admit(f"addr 10.0.{i % 50}.1", "-", "GET /v1/jobs", "/v1/jobs", "unauthenticated", "bad")
        assert lim.tracked() <= 8
    facts += lim.flush(force=True)
    counted = sum(int(m.group(1)) if (m := re.match(r"(\d+) more", f.detail)) else 1 for f in facts)
    assert counted == 1000
    assert len(facts) < 200


def test_the_limiter_lets_a_burst_through_then_the_rate_and_summarises_the_rest():
    now = [0.0]
    lim = RefusalLimiter(rate=1.0, burst=3, window=10.0, max_sources=8, global_rate=1000.0,
                         clock=lambda: now[0], wall=lambda: now[0])
    got = [len(lim.admit("addr 127.0.0.1", "-", "GET /x", "/x", "unauthenticated", "bad")) for _ in range(10)]
    assert got == [1, 1, 1] + [0] * 7
    assert lim.flush() == []  # the window has not closed
    now[0] = 1.0  # one token back: the summary of the 7 comes with the next record
    facts = lim.admit("addr 127.0.0.1", "-", "GET /x", "/x", "unauthenticated", "bad")
    assert [f.detail.split(" (")[0] for f in facts] == ["7 more refusal(s) like this from 127.0.0.1 in the last 1 s",
                                                       "bad"]
    for _ in range(5):
        lim.admit("addr 127.0.0.1", "-", "GET /x", "/x", "unauthenticated", "bad")
    now[0] = 11.5
    assert [f.detail.split(" (")[0] for f in lim.flush()] == [
        "5 more refusal(s) like this from 127.0.0.1 in the last 10 s"]
    # another code, another user: buckets of their own
    assert len(lim.admit("user alice", "alice", "GET /x", "/x", "forbidden", "no")) == 1
