"""Finding 2: a daemon token must not report another agent's op, and no worker publishes a path
outside its storage roots.

The attacker holds host1's worker token.  Every agent's epochs start at 1, so host1's node agent
and the provisioner both have epoch 1 on a fresh cluster: a report checked by epoch alone was
accepted.  While the provisioner's provider is busy with an op (a hang injected into simfs), the
attacker reports that op as done, with a path of their choice as the claim's: a decoy standing in
for ``/etc`` (a regression must not damage the machine that runs the test).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile

import pytest

from tests.helpers import Cluster, cli, wait_for
from tests.integration.test_job_claims import CONFIG, ROOT
from xce.providers import simfs


@pytest.fixture
def cl(tmp_path):
    (tmp_path / "xce.toml").write_text(CONFIG)
    c = Cluster(str(tmp_path), config=str(tmp_path / "xce.toml")).start()
    c.add_provisioner()
    c.add_worker("host1", slots=2, counters={"scratch": "1Gi"})
    c.add_worker("host2", slots=2, counters={"scratch": "1Gi"}, attrs={"node": "two"})
    yield c
    c.stop()


def worker_token(cl, host: str) -> str:
    return cl.workers[host].token


def op_started(cl, name: str, op: str) -> dict:
    """Wait until the provisioner has committed its intent for the claim's ``op``; that op."""
    return wait_for(lambda: next((o for o in cl.claim(name)["ops"] if o["op"] == op and o["result"] == "started"),
                                 None), what=f"{op} intent of {name}")


def forge(cl, token: str, agent: str, results: list[dict]) -> dict:
    """Report ``results`` as ``agent`` with every epoch it might have; the answers."""
    answers = {}
    with cl.ctl.client(token) as c:
        for epoch in (1, 2, 3):
            r = c.post(f"/v1/agents/{agent}/reports", json={"epoch": epoch, "results": results})
            answers[epoch] = (r.status_code, r.json())
    return answers


def decoy(parent) -> str:
    """A root-owned directory outside every storage root, standing in for /etc."""
    path = os.path.join(parent, "etc-decoy")
    os.makedirs(path, mode=0o755)
    with open(os.path.join(path, "passwd"), "w") as fh:
        fh.write("root:x:0:0::/root:/bin/sh\n")
    return path


def test_a_worker_token_cannot_report_the_provisioners_create_or_attach(cl, tmp_path):
    evil = worker_token(cl, "host1")
    etc = decoy(tmp_path)
    # a create in flight with the provisioner (its provider hangs), and the attacker reports it done
    simfs.inject(cl.provisioner.simfs_root, hang_next=1, hang_seconds=6, fail_ops=["create"])
    cl.xce("claim", "create", "ckpt", "--class", "simfs", "--size", "1Gi", "--access", "RWO")
    op = op_started(cl, "ckpt", "create")
    claim_id = cl.claim("ckpt")["id"]
    answers = forge(cl, evil, "node:host1", [{"op_id": op["op_id"], "claim_id": claim_id, "ok": True,
                                              "handle": "evil", "path": etc}])
    accepted = [e for e, (status, body) in answers.items() if status == 200 and not body["refused"]]
    assert accepted == [], f"a forged create report was accepted: {answers}"
    assert any(status == 200 and "not node:host1's" in body["refused"].get(op["op_id"], "")
               for status, body in answers.values()), answers
    ready = cl.wait_claim("ckpt", "READY")  # the provisioner's own report, once its provider answers
    assert ready["handle"] != "evil" and ready["path"].startswith(cl.provisioner.simfs_root)

    # an attach on host2 in flight with the provisioner; host1's token reports it with path /etc
    simfs.inject(cl.provisioner.simfs_root, hang_next=1, hang_seconds=6, fail_ops=["attach"])
    out = tmp_path / "out"
    job = cl.submit("--claim", "ckpt:rw", "-R", "select[node==two]", "-o", str(out), "--",
                    "sh", "-c", 'ls "$XCE_CLAIM_CKPT" > /dev/null; echo mine > "$XCE_CLAIM_CKPT/f"; '
                                'test -e "$XCE_CLAIM_CKPT/passwd" && echo SAW-ETC; true')
    attach = op_started(cl, "ckpt", "attach")
    answers = forge(cl, evil, "node:host1", [{"op_id": attach["op_id"], "claim_id": claim_id, "ok": True,
                                              "path": etc}])
    assert all(status != 200 or body["refused"] for status, body in answers.values()), answers
    done = cl.wait_state(job, "DONE", "EXIT", timeout=60)
    assert done["state"] == "DONE", done["exit_reason"]
    assert "SAW-ETC" not in out.read_text()
    assert os.listdir(etc) == ["passwd"]
    with open(os.path.join(ready["path"], "f")) as fh:
        assert fh.read().strip() == "mine", "the job wrote into its claim, not elsewhere"


@pytest.fixture
def open_cluster():
    """A cluster users can reach (jobs run as ``nobody``): outside pytest's root-only tmp tree."""
    root = tempfile.mkdtemp(prefix="xce-sec-")
    os.chmod(root, 0o755)
    with open(os.path.join(root, "xce.toml"), "w") as fh:
        fh.write(CONFIG)
    c = Cluster(root, config=os.path.join(root, "xce.toml")).start()
    c.add_provisioner()
    yield c
    c.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(not ROOT, reason="bind mounts and ownership need a root worker (CI runs as root)")
def test_a_worker_publishes_nothing_outside_its_storage_roots_and_chowns_nothing(open_cluster):
    """Even a report the controller accepted (here: an admin speaking for the provisioner) cannot make
    a worker mount /etc (a decoy) into a job, follow a symlink out of its roots, or chown what it did
    not make."""
    cl = open_cluster
    etc = decoy(cl.root)
    cl.xce("claim", "create", "ckpt", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    claim_id = cl.claim("ckpt")["id"]
    cl.provisioner.stop()  # attach ops stay open: the test plays the provisioner
    foreign = os.path.join(cl.provisioner.simfs_root, "volumes", "root-owned")
    os.makedirs(foreign, mode=0o755)
    link = os.path.join(cl.provisioner.simfs_root, "volumes", "to-etc")
    os.symlink(etc, link)
    cl.add_worker("host3", slots=1, extra_args=["--run-as-users"])
    with cl.api() as c:
        assert c.post("/v1/users", json={"name": "nobody", "projects": ["default"]}).status_code == 201
        nobody = {**cl.env, "XCE_TOKEN": c.post("/v1/tokens", json={"user": "nobody"}).json()["token"]}
        epoch = c.post("/v1/agents/provisioner/lease", json={"holder": "test"}).json()["epoch"]
    for path, refused in ((etc, True), (link, True), (foreign, False)):
        job = json.loads(cli(nobody, "--json", "submit", "--claim", "ckpt:rw", "--", "sh", "-c",
                             'ls "$XCE_CLAIM_CKPT"').stdout)["id"]
        attach = wait_for(lambda: next((a for a in cl.claim("ckpt")["attachments"]
                                        if a["job_id"] == job and a["state"] == "ATTACHING"), None),
                          what="attach op open")
        op_id = f"a{attach['id']}.attach"
        with cl.api() as c:
            r = c.post("/v1/agents/provisioner/intents", json={"epoch": epoch, "ops": [
                {"op_id": op_id, "claim_id": claim_id}]})
            assert r.json()["accepted"] == [op_id], r.text
            r = c.post("/v1/agents/provisioner/reports", json={"epoch": epoch, "results": [
                {"op_id": op_id, "claim_id": claim_id, "ok": True, "path": path}]})
            assert r.status_code == 200 and not r.json()["refused"], r.text
        ended = cl.wait_state(job, "DONE", "EXIT")
        if refused:
            assert ended["state"] == "EXIT"
            assert "outside this worker's storage roots" in ended["exit_reason"], ended["exit_reason"]
            assert ended["start_time"] is None
        else:
            assert ended["state"] == "DONE", ended["exit_reason"]
        wait_for(lambda: not any(a["job_id"] == job for a in cl.claim("ckpt")["attachments"]
                                 if a["state"] != "DETACHING"), what="the job's attachment detaching")
        with cl.api() as c:  # let the detach go, as the provisioner would
            for a in cl.claim("ckpt")["attachments"]:
                op = f"a{a['id']}.detach"
                c.post("/v1/agents/provisioner/intents", json={"epoch": epoch, "ops": [
                    {"op_id": op, "claim_id": claim_id}]})
                c.post("/v1/agents/provisioner/reports", json={"epoch": epoch, "results": [
                    {"op_id": op, "claim_id": claim_id, "ok": True}]})
    for path in (etc, foreign):
        st = os.stat(path)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755), f"the worker changed {path}"
