"""Claim faults with real processes: a failing, hanging, crashing or lying simfs; a provisioner
killed with SIGKILL mid-op; stale epochs; objects nobody owns."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import wait_for
from tests.integration.test_claims import make_claims_cluster, volumes
from xce.providers import simfs


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_claims_cluster(tmp_path_factory.mktemp("faults"))
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def no_faults_left(cl):
    yield
    inject(cl, "--clear")


def inject(cl, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "xce.providers.simfs", "inject", "--root", cl.provisioner.simfs_root,
                    *args], check=True, capture_output=True)


def create(cl, name: str, *extra: str) -> None:
    cl.xce("claim", "create", name, "--class", "simfs", "--size", "1Gi", "--access", "RWO", *extra)


def objects_of(cl, claim_id: int) -> list[str]:
    return [v for v in volumes(cl.provisioner.simfs_root) if v.startswith(f"v{claim_id}-")]


def test_retryable_failures_then_success_leave_every_attempt_visible(cl):
    inject(cl, "--fail-next", "3", "--code", "RESOURCE_EXHAUSTED", "--message", "pool busy", "--ops", "create")
    create(cl, "flaky")
    c = cl.wait_claim("flaky", "READY")
    assert c["attempts"] == 4 and c["last_error"] is None
    results = [o["result"] for o in c["ops"] if o["result"] != "started"]
    assert results == ["RESOURCE_EXHAUSTED"] * 3 + ["ok"]
    assert all(o["op_id"] == c["op_ids"][0] for o in c["ops"]), "every retry keeps the op id"
    assert len(objects_of(cl, c["id"])) == 1


def test_permanent_failure_ends_failed_with_its_message(cl):
    inject(cl, "--fail-next", "1", "--permanent", "--code", "INVALID_ARGUMENT", "--message", "no such tier",
           "--ops", "create")
    r = cl.xce("claim", "create", "doomed", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait",
               ok=False)
    assert r.returncode == 1 and r.stdout.splitlines()[-1] == (
        "claim doomed: FAILED; last error: INVALID_ARGUMENT: no such tier")
    c = cl.claim("doomed")
    assert (c["attempts"], c["data_exists"]) == (1, False)
    assert c["history"][-1]["reason"] == "create failed after 1 attempt: INVALID_ARGUMENT: no such tier"
    cl.xce("claim", "delete", "doomed", "--wait")  # nothing to release: straight to RELEASED
    assert cl.claim("doomed")["state"] == "RELEASED"


def test_garbage_and_crashes_are_retried_with_the_stderr_tail_kept(cl):
    inject(cl, "--garbage-next", "1", "--ops", "create")  # not the orphan scan's list
    create(cl, "garbled")
    c = cl.wait_claim("garbled", "READY")
    failed = [o for o in c["ops"] if o["result"] not in ("started", "ok")]
    assert [o["result"] for o in failed] == ["PROVIDER_GARBAGE"]
    inject(cl, "--crash-after-act-next", "1", "--ops", "create")
    create(cl, "crashy")
    c = cl.wait_claim("crashy", "READY")
    assert [o["result"] for o in c["ops"] if o["result"] not in ("started", "ok")] == ["PROVIDER_FAILED"]
    assert len(objects_of(cl, c["id"])) == 1, "the retry found the object the crashed attempt made"


def test_provisioner_sigkill_between_intent_and_reply_converges_to_one_object(cl):
    inject(cl, "--hang-next", "1", "--hang-seconds", "60", "--ops", "create")
    create(cl, "interrupted")
    # the provider must have taken the injected hang before the kill: a provider killed while still starting
    # leaves the hang for the retry, which then hangs and times out (a third attempt)
    wait_for(lambda: (c := cl.claim("interrupted"))["op"] and c["op"]["epoch"] and cl.provisioner.children()
             and not simfs.inject(cl.provisioner.simfs_root).get("hang_next"),
             what="intent committed and the provider hanging")
    first_epoch = cl.claim("interrupted")["op"]["epoch"]
    cl.provisioner.kill()  # with its hung provider, as a machine crash would
    assert cl.claim("interrupted")["state"] == "PREPARING"
    cl.provisioner.start()
    c = cl.wait_claim("interrupted", "READY")
    assert c["attempts"] == 2 and len(c["op_ids"]) == 1
    assert [o["epoch"] for o in c["ops"] if o["result"] == "started"] == [first_epoch, first_epoch + 1]
    assert len(objects_of(cl, c["id"])) == 1


def test_stale_epoch_reports_are_refused_and_change_nothing(cl):
    cl.provisioner.stop()
    create(cl, "fenced")
    c = wait_for(lambda: (c := cl.claim("fenced"))["op"] and c, what="claim placed")
    with cl.api() as api:
        old = api.post("/v1/agents/provisioner/lease", json={"holder": "test-old"}).json()["epoch"]
        r = api.post("/v1/agents/provisioner/intents",
                     json={"epoch": old, "ops": [{"op_id": c["op"]["op_id"], "claim_id": c["id"]}]})
        assert r.json()["accepted"] == [c["op"]["op_id"]]
        new = api.post("/v1/agents/provisioner/lease", json={"holder": "test-new"}).json()["epoch"]
        assert new == old + 1
        r = api.post("/v1/agents/provisioner/reports", json={"epoch": old, "results": [
            {"op_id": c["op"]["op_id"], "claim_id": c["id"], "ok": True, "handle": "forged"}]})
        assert r.status_code == 409 and r.json()["error"]["code"] == "stale_epoch"
        assert "stale epoch" in r.json()["error"]["message"]
    c = cl.claim("fenced")
    assert c["state"] == "PREPARING" and c["handle"] is None
    cl.provisioner.start()  # a new epoch re-drives the intent the old one never reported
    c = cl.wait_claim("fenced", "READY")
    assert c["handle"] != "forged" and len(objects_of(cl, c["id"])) == 1


def test_a_provisioner_replaced_by_a_newer_epoch_stops(cl):
    with cl.api() as api:
        api.post("/v1/agents/provisioner/lease", json={"holder": "usurper"})
    create(cl, "after-usurp")  # wakes the old provisioner's poll, which learns it is fenced
    assert cl.provisioner.proc.wait(30) == 3
    cl.provisioner.start()
    cl.wait_claim("after-usurp", "READY")


def test_an_object_no_claim_owns_is_reported_then_released_after_the_grace_period(cl):
    cluster_id = json.loads(cl.xce("--json", "ping").stdout)["cluster_id"]
    from xce.providers.contract import ProviderRequest
    from xce.providers.runner import run_provider

    # what a create looks like when the provisioner died before the controller heard of its claim
    req = ProviderRequest(op_id="c999.create.1", op="create", claim_id=999, class_name="simfs", size_bytes=2**20,
                          access_mode="RWO", tags={"xce.cluster": cluster_id, "xce.claim": "999",
                                                   "xce.op": "c999.create.1", "xce.reclaim": "delete"})
    [reply] = run_provider([sys.executable, "-m", "xce.providers.simfs"], {"root": cl.provisioner.simfs_root},
                           cluster_id, [req], 30)
    assert reply.ok
    foreign = ProviderRequest(op_id="other.1", op="create", claim_id=5, class_name="simfs", size_bytes=1,
                              tags={"xce.cluster": "another-cluster", "xce.claim": "5", "xce.op": "other.1"})
    [other] = run_provider([sys.executable, "-m", "xce.providers.simfs"], {"root": cl.provisioner.simfs_root},
                           cluster_id, [foreign], 30)
    seen = wait_for(lambda: [o for o in json.loads(cl.xce("--json", "orphans").stdout)
                             if o.get("handle") == reply.handle], what="orphan reported")
    assert seen[0]["claim_id"] == 999 and seen[0]["kind"] == "provider_object" and seen[0]["age"] >= 0
    shown = cl.xce("orphans").stdout  # what comes next: its release, counting down or under way, or done
    assert "released in" in shown or "being released" in shown or reply.handle not in volumes(cl.provisioner.simfs_root)
    wait_for(lambda: reply.handle not in volumes(cl.provisioner.simfs_root), what="orphan released after grace")
    assert other.handle in volumes(cl.provisioner.simfs_root), "another cluster's object is never touched"
    trail = json.loads(cl.xce("--json", "audit", "--limit", "100000").stdout)
    assert [a["result"] for a in trail if a["target"] == f"object/{reply.handle}"] == ["seen", "released"]
    assert not [o for o in json.loads(cl.xce("--json", "orphans").stdout) if o.get("handle") == reply.handle]


def test_provisioner_sigkill_between_the_provider_acting_and_the_report_converges(cl):
    inject(cl, "--hang-after-act-next", "1", "--hang-seconds", "60", "--ops", "create")
    create(cl, "acted")
    claim_id = wait_for(lambda: (c := cl.claim("acted"))["op"] and c["op"]["epoch"] and c["id"], what="intent")
    wait_for(lambda: objects_of(cl, claim_id), what="the provider made the object")
    assert cl.claim("acted")["state"] == "PREPARING", "made, but not yet reported"
    cl.provisioner.kill()
    cl.provisioner.start()
    c = cl.wait_claim("acted", "READY")
    assert c["attempts"] == 2 and len(c["op_ids"]) == 1
    assert objects_of(cl, claim_id) == [c["handle"]], "exactly one object: the retry found the first one"


def test_claims_of_a_project_removed_from_the_config_are_reported_as_orphans(tmp_path):
    from tests.integration.test_claims import CONFIG

    cl = make_claims_cluster(tmp_path)
    try:
        with cl.api() as api:
            r = api.post("/v1/claims", json={"name": "stranded", "class": "tiny", "size": "1Mi",
                                             "access_mode": "RWO", "project": "team-b"})
            assert r.status_code == 201, r.text
        cl.wait_claim("stranded", "READY")
        cl.ctl.stop()
        (tmp_path / "xce.toml").write_text(CONFIG.replace('[[projects]]\nname = "team-b"\n', "")
                                           .replace('projects = ["team-b"]', 'projects = ["team-a"]'))
        cl.ctl.start()
        orphans = json.loads(cl.xce("--json", "orphans").stdout)
        assert [(o["kind"], o["name"], o["reason"]) for o in orphans] == [
            ("claim", "stranded", "project team-b no longer exists")]
        assert cl.claim("stranded")["state"] == "READY", "reported, never deleted behind anyone's back"
    finally:
        cl.stop()
