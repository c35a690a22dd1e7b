"""Fair share on a real cluster (issue 34): two projects with shares 2:1 on one queue, each with a
backlog of short jobs, get about 2:1 of the slot-seconds, whichever submitted first; ``xce fairshare``
shows the shares, the usage and the priority."""

from __future__ import annotations

import json

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.conftest import cluster_config

pytestmark = pytest.mark.long  # a saturated run of a few hundred short jobs: about a minute

SHARES = """
[[projects]]
name = "a"
shares = 2

[[projects]]
name = "b"
shares = 1
"""


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("fairshare")
    cfg = root / "xce.toml"
    cfg.write_text(cluster_config(2.0).replace('projects = ["default"]', 'projects = ["default", "a", "b"]')
                   + SHARES)
    c = Cluster(str(root), config=str(cfg)).start()
    c.add_worker("host1", slots=3)
    c.add_worker("host2", slots=3)
    yield c
    c.stop()


def submit_array(cl, name: str, project: str, n: int) -> int:
    with cl.api() as c:
        r = c.post("/v1/jobs", json={"command": ["sleep", "0.5"], "name": f"{name}[1-{n}]", "project": project})
        assert r.status_code in (200, 201), r.text
        return r.json()["id"]


def elements(cl, array: int) -> list[dict]:
    with cl.api() as c:
        return c.get("/v1/jobs", params={"array": array, "limit": 10_000}).json()


def test_two_projects_with_shares_2_to_1_get_2_to_1_of_the_slot_seconds(cl):
    b = submit_array(cl, "b", "b", 300)  # b's backlog first: oldest first would serve it alone
    a = submit_array(cl, "a", "a", 300)

    def done() -> list[dict] | None:
        jobs = [j for arr in (a, b) for j in elements(cl, arr) if j["state"] in ("DONE", "EXIT")]
        return jobs if len(jobs) >= 180 else None

    finished = wait_for(done, timeout=150, interval=1.0, what="180 short jobs done")
    assert all(j["state"] == "DONE" for j in finished)
    used = {"a": 0.0, "b": 0.0}
    for j in finished:
        used[j["project"]] += (j["end_time"] - j["start_time"]) * j["slots"]
    assert used["a"] / used["b"] == pytest.approx(2.0, rel=0.10)
    # both backlogs still wait: the run was saturated throughout
    pending = {p: sum(1 for j in elements(cl, arr) if j["state"] == "PEND") for p, arr in (("a", a), ("b", b))}
    assert pending["a"] > 0 and pending["b"] > 0

    doc = json.loads(cl.xce("--json", "fairshare").stdout)
    assert doc["enabled"] is True
    rows = {(r["project"], r["user"]): r for r in doc["rows"]}
    # default (share 1 when not set), a and b: 1 + 2 + 1
    assert [rows[(p, None)]["share"] for p in ("a", "b", "default")] == pytest.approx([0.5, 0.25, 0.25])
    assert rows[("a", None)]["usage"] > rows[("b", None)]["usage"] > 0
    assert rows[("a", "admin")]["usage"] == pytest.approx(rows[("a", None)]["usage"])
    table = cl.xce("fairshare").stdout
    assert table.split("\n")[0].split() == ["PROJECT", "USER", "SHARE", "USAGE", "RUNNING", "PRIORITY"]
