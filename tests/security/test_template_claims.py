"""Finding 1: template claims must not be nameable, squattable or stealable.

Per-run claims used to be named ``j<job>-<run>-<kind>`` in the global claim name space.  Job ids
are sequential, so an attacker created a claim under the next job's template name: the template
claim was silently not made, the job was dispatched without ``$XCE_STAGE`` (its stage-out lost),
and the job's claim id went to the next claim anyone created, which the job then released.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from tests.helpers import cli, wait_for
from tests.integration.test_job_claims import make_job_cluster
from xce.model import Model
from xce.model.facts import ClaimCreated, JobAllocated, JobFinished, JobSubmitted
from xce.model import job_claims, status


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_job_cluster(tmp_path_factory.mktemp("template-squat"), hosts=("host1",))
    yield c
    c.stop()


def user_env(cl, name: str) -> dict[str, str]:
    with cl.api() as c:
        r = c.post("/v1/tokens", json={"user": name})
        assert r.status_code == 201, r.text
        return {**cl.env, "XCE_TOKEN": r.json()["token"]}


def test_the_next_jobs_template_claims_cannot_be_squatted_or_stolen(cl, tmp_path):
    alice, bob = user_env(cl, "alice"), user_env(cl, "bob")  # team-a and team-b
    probe = json.loads(cli(bob, "--json", "submit", "--", "true").stdout)["id"]
    victim = probe + 1  # the attacker guesses the next job id
    # the old template names are ordinary names now, and the new ones cannot be chosen at all
    for kind in ("stage", "scratch"):
        r = cli(bob, "claim", "create", f"j{victim}-1-{kind}", "--class", "simfs", "--size", "1Mi", "--access", "RWX",
                "--wait")
        assert r.returncode == 0, r.stderr
        r = cli(bob, "claim", "create", f"j{victim}.1:{kind}", "--class", "simfs", "--size", "1Mi", "--access", "RWX")
        assert r.returncode == 2 and "invalid claim name" in r.stderr, r.stderr  # the CLI's own check: bad usage
        # ... and the controller's, for a client that does not check (the API straight)
        r = httpx.post(f"{cl.ctl.url}/v1/claims", headers={"Authorization": f"Bearer {bob['XCE_TOKEN']}"},
                       json={"name": f"j{victim}.1:{kind}", "class": "simfs", "size": "1Mi", "access_mode": "RWX"})
        assert r.status_code == 422 and "String should match pattern" in r.text, r.text
    bob_claims = {c["name"]: c for c in json.loads(cli(bob, "--json", "claim", "list").stdout)}
    for c in bob_claims.values():
        with open(os.path.join(c["path"], "bobs"), "w") as fh:
            fh.write("bob's data\n")

    src = tmp_path / "in.txt"
    src.write_text("input\n")
    os.chmod(tmp_path, 0o755)
    dest = tmp_path / "result.txt"
    gate = tmp_path / "gate"
    script = (f'test -n "$XCE_STAGE" && test -n "$XCE_SCRATCH" || exit 3; while [ ! -e {gate} ]; do sleep 0.1; done; '
              'cat "$XCE_STAGE/in.txt" > "$XCE_STAGE/out.txt"; echo scratch > "$XCE_SCRATCH/s"')
    job = json.loads(cli(alice, "--json", "submit", "--scratch", "64Mi", "--stage-in", str(src),
                         "--stage-out", f"out.txt:{dest}", "--", "sh", "-c", script).stdout)["id"]
    assert job == victim
    running = cl.wait_state(job, "RUN", "EXIT", "DONE")
    assert running["state"] == "RUN", f"dispatched without its claims: {running['exit_reason']}"
    names = {c["name"] for c in running["claims"] if c["form"] == "template" and c["name"] != "workspace"}
    assert names == {f"j{job}.1:scratch", f"j{job}.1:stage"}
    # meanwhile the attacker makes another claim: it must not be the job's to release
    assert cli(bob, "claim", "create", "later", "--class", "simfs", "--size", "1Mi", "--access", "RWX",
               "--wait").returncode == 0
    gate.write_text("")
    done = cl.wait_state(job, "DONE", "EXIT", timeout=60)
    assert done["state"] == "DONE", done["exit_reason"]
    assert dest.read_text() == "input\n", "the stage-out happened"
    # the job's template claims are its own objects, visible to their owner only
    for kind in ("scratch", "stage"):
        name = f"j{job}.1:{kind}"
        shown = json.loads(cli(alice, "--json", "claim", "show", name).stdout)
        assert (shown["form"], shown["job_id"], shown["owner"]) == ("template", job, "alice")
        assert shown["id"] not in {c["id"] for c in bob_claims.values()}
        r = cli(bob, "claim", "show", name)
        assert r.returncode == 1 and f"claim '{name}' not found" in r.stderr
        wait_for(lambda: json.loads(cli(alice, "--json", "claim", "show", name).stdout)["state"] == "RELEASED",
                 what=f"{name} released")
    # and the attacker's claims are untouched, data and all
    for c in json.loads(cli(bob, "--json", "claim", "list").stdout):
        assert c["state"] == "READY" and c["delete_requested"] is False, c
        if c["name"] in bob_claims:
            with open(os.path.join(c["path"], "bobs")) as fh:
                assert fh.read() == "bob's data\n"


def test_a_jobs_template_claims_are_as_private_as_the_job_even_within_its_project(cl, tmp_path):
    """Issue 27, finding 6: another member of the job's project saw its staging claim (its stage-in
    paths) by name, by id and in ``GET /v1/claims?all=true``, while the job itself was 404 to them."""
    with cl.api() as c:
        assert c.post("/v1/users", json={"name": "amy", "projects": ["team-a"]}).status_code == 201
    alice, amy = user_env(cl, "alice"), user_env(cl, "amy")  # both in team-a
    src = tmp_path / "private-input.txt"
    src.write_text("input\n")
    os.chmod(tmp_path, 0o755)
    gate = tmp_path / "gate"
    job = json.loads(cli(alice, "--json", "submit", "--scratch", "64Mi", "--stage-in", str(src), "--", "sh", "-c",
                         f"while [ ! -e {gate} ]; do sleep 0.1; done").stdout)["id"]
    running = cl.wait_state(job, "RUN", "EXIT", "DONE")
    assert running["state"] == "RUN", running["exit_reason"]
    templates = {c["name"]: c["claim_id"] for c in running["claims"]
                 if c["form"] == "template" and c["name"] != "workspace"}
    assert set(templates) == {f"j{job}.1:scratch", f"j{job}.1:stage"}
    try:
        with cl.ctl.client(alice["XCE_TOKEN"]) as owner, cl.ctl.client(amy["XCE_TOKEN"]) as member:
            assert member.get(f"/v1/jobs/{job}").status_code == 404
            for name, claim_id in templates.items():
                assert owner.get(f"/v1/claims/{name}").status_code == 200
                for path in (f"/v1/claims/{name}", f"/v1/claims/by-id/{claim_id}"):
                    r = member.get(path)
                    assert r.status_code == 404 and str(src) not in r.text, (path, r.text)
            for params in ({}, {"all": "true"}, {"project": "team-a"}):
                listed = {c["name"] for c in member.get("/v1/claims", params=params).json()}
                assert not listed & set(templates), (params, listed)
                assert set(templates) <= {c["name"] for c in owner.get("/v1/claims", params=params).json()}
        r = cli(amy, "claim", "show", f"j{job}.1:stage")
        assert r.returncode == 1 and "not found" in r.stderr and str(src) not in r.stdout + r.stderr
        with cl.api() as admin:
            assert admin.get(f"/v1/claims/j{job}.1:stage").status_code == 200
    finally:
        gate.write_text("")
    assert cl.wait_state(job, "DONE", "EXIT", timeout=60)["state"] == "DONE"


def test_a_run_never_uses_or_releases_a_claim_it_was_not_allocated():
    """Folds are total: a ``JobAllocated`` whose template claim id is already taken (which the plan
    applier never decides) leaves the other claim alone, and the run is never dispatched."""
    m = Model()
    m.apply(1, ClaimCreated(time=1.0, claim_id=1, name="theirs", form="standalone", class_name="simfs",
                            scope="shared", size_bytes=1, access_mode="RWX", reclaim_policy="delete",
                            owner="bob", project="team-b"))
    m.apply(2, JobSubmitted(time=2.0, id=1, name="j", user="alice", project="team-a", queue="default",
                            command=["true"], templates=[{"kind": "stage", "class": "stage", "size_bytes": 0,
                                                          "scope": "node", "counter": None, "pools": [],
                                                          "stage_in": [], "stage_out": [["o", "/tmp/o"]]}]))
    m.apply(3, JobAllocated(time=3.0, job_id=1, run=1, hosts=["h1"], slots={"h1": 1},
                            templates=[dict(m.jobs[1].templates[0], claim_id=1, pool=None)]))
    job, theirs = m.jobs[1], m.claims[1]
    assert job_claims.run_claims(m, job) == []
    assert status.blocking(m, job) == "run 1 lacks template claims it declared: it cannot start"
    assert job_claims.publish_list(m, job, "h1") == []
    assert m.next_claim_id == 2, "the id is not handed out again"
    m.apply(4, JobFinished(time=4.0, job_id=1, run=1, state="EXIT", reason="killed"))
    assert (theirs.state.value, theirs.delete_requested) == ("PENDING", False)
