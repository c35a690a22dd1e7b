"""Findings 6 and 9 (names): published claim names must not collide, reserved names stay reserved,
and claim names are per project, so no answer tells one project's names to another.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import cli
from tests.integration.test_job_claims import make_job_cluster


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_job_cluster(tmp_path_factory.mktemp("claim-names"), hosts=("host1",))
    yield c
    c.stop()


def user_env(cl, name: str, project: str | None = None) -> dict[str, str]:
    """A token for user ``name`` (created in ``project`` first if given)."""
    with cl.api() as c:
        if project is not None:
            assert c.post("/v1/users", json={"name": name, "projects": [project]}).status_code in (201, 409)
        return {**cl.env, "XCE_TOKEN": c.post("/v1/tokens", json={"user": name}).json()["token"]}


def create(env, name: str, *extra: str):
    return cli(env, "claim", "create", name, "--class", "simfs", "--size", "1Mi", "--access", "RWX", "--wait", *extra)


def test_claims_whose_variables_or_mount_points_would_meet_are_refused_at_submission(cl):
    alice = user_env(cl, "carol", "default")
    for name in ("x-y", "x.y", "x_y", "kv-cache"):
        assert create(alice, name).returncode == 0
    r = cli(alice, "submit", "--claim", "x-y", "--claim", "x_y", "--", "true")
    assert r.returncode == 1
    assert r.stderr.strip() == ("xce: claim x_y and claim x-y would both be published as $XCE_CLAIM_X_Y: "
                                "rename one of them")
    r = cli(alice, "submit", "--claim", "x.y", "--claim", "x-y", "--", "true")
    assert r.returncode == 1 and "$XCE_CLAIM_X_Y" in r.stderr
    # the serve profile makes a template claim kv-cache: a standalone kv-cache would be mounted over it
    r = cli(alice, "submit", "--app", "serve", "--claim", "kv-cache", "--", "true")
    assert r.returncode == 1 and "would both be published as" in r.stderr, r.stderr
    assert json.loads(cli(alice, "--json", "jobs").stdout) == [], "nothing was submitted"


def test_reserved_names_stay_reserved(cl):
    alice = user_env(cl, "carol", "default")
    for name in ("scratch", "stage", "workspace"):
        r = create(alice, name)
        assert r.returncode == 1 and f"claim name '{name}' is reserved" in r.stderr, r.stderr


def test_claim_names_are_per_project_and_reveal_nothing_across_projects(cl):
    alice, bob = user_env(cl, "alice"), user_env(cl, "bob")  # team-a, team-b
    assert create(alice, "ckpt").returncode == 0
    # bob cannot learn that team-a has a claim called ckpt: an unknown name and alice's look the same
    unknown, foreign = cli(bob, "claim", "show", "nosuch"), cli(bob, "claim", "show", "ckpt")
    assert (unknown.returncode, foreign.returncode) == (1, 1)
    assert foreign.stderr.replace("ckpt", "NAME") == unknown.stderr.replace("nosuch", "NAME")
    r = cli(bob, "claim", "delete", "ckpt")
    assert r.returncode == 1 and r.stderr.strip() == "xce: claim 'ckpt' not found"
    r = cli(bob, "submit", "--claim", "ckpt", "--", "true")
    assert r.returncode == 1 and r.stderr.strip() == "xce: claim 'ckpt' not found in project 'team-b' (--claim ckpt)"
    # and creating the same name is bob's own business, not a 409 that reveals alice's
    assert create(bob, "ckpt").returncode == 0
    mine = json.loads(cli(bob, "--json", "claim", "show", "ckpt").stdout)
    theirs = json.loads(cli(alice, "--json", "claim", "show", "ckpt").stdout)
    assert (mine["project"], theirs["project"]) == ("team-b", "team-a") and mine["id"] != theirs["id"]
    r = create(bob, "ckpt")
    assert r.returncode == 1 and r.stderr.strip() == "xce: a claim named 'ckpt' already exists in project 'team-b'"
    # an admin sees both, and must say which
    r = cl.xce("claim", "show", "ckpt", ok=False)
    assert r.returncode == 1 and "exists in projects team-a, team-b" in r.stderr
    shown = json.loads(cl.xce("--json", "claim", "show", "ckpt", "--project", "team-a").stdout)
    assert shown["id"] == theirs["id"]
    # bob's job uses bob's ckpt
    job = json.loads(cli(bob, "--json", "submit", "--claim", "ckpt", "--", "true").stdout)["id"]
    claims = cl.wait_state(job, "DONE")["claims"]
    assert [c["claim_id"] for c in claims if c["form"] == "standalone"] == [mine["id"]]
