"""A queue's and an application profile's default staging class, through a real controller: shown by
``GET /v1/queues`` and ``GET /v1/apps`` (``xce queues``, ``xce apps``), and used by a submission that
stages without ``--stage-class``."""

from __future__ import annotations

import pytest

from tests.api.test_transfer_progress import CONFIG as BASE
from tests.helpers import ControllerProcess, cli

CONFIG = BASE.replace('[[queues]]\nname = "default"\n', '[[queues]]\nname = "default"\n\n[[queues]]\nname = "gpu"\n'
                      'stage_class = "vol"\ndescription = "stages before hosts are held"\n') + """
[[claim_classes]]
name = "stage"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]

[[apps]]
name = "train"
description = "a training run"
stage_class = "stage"
claims = [{ name = "ckpt-cache", claim_class = "vol", size = "1Gi" }]
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("defaults")
    (root / "xce.toml").write_text(CONFIG)
    ctl = ControllerProcess(state_dir=str(root / "ctl"), config=str(root / "xce.toml")).start()
    api = ctl.client()
    token = api.post("/v1/tokens", json={"user": "alice"}).json()["token"]
    yield ctl, api, ctl.client(token), {"XCE_URL": ctl.url, "XCE_TOKEN": token}
    api.close()
    ctl.stop()


def test_queues_and_apps_show_their_staging_class(env):
    _, _, alice, shell = env
    queues = {q["name"]: q for q in alice.get("/v1/queues").json()}
    assert queues["gpu"]["stage_class"] == "vol" and queues["default"]["stage_class"] is None
    (train,) = alice.get("/v1/apps").json()
    assert train == {"name": "train", "description": "a training run", "stage_class": "stage",
                     "claims": [{"name": "ckpt-cache", "claim_class": "vol", "size": "1Gi"}]}
    table = cli(shell, "queues").stdout
    assert "STAGE CLASS" in table and any(line.split()[:1] == ["gpu"] and "vol" in line.split()
                                          for line in table.splitlines())
    assert "ckpt-cache:vol:1Gi" in cli(shell, "apps").stdout


def test_a_submission_to_a_queue_with_a_shared_staging_class_stages_before_allocation(env):
    _, _, alice, _ = env
    body = {"command": ["true"], "queue": "gpu", "stage_in": ["https://data.example/x.bin"], "stage_size": "1Mi"}
    job = alice.post("/v1/jobs", json=body).json()
    (stage,) = [c for c in job["claims"] if c.get("kind") == "stage"]
    assert stage["class"] == "vol", "the queue's default: made at submission, staged while the job waits"
    job = alice.post("/v1/jobs", json={**body, "app": "train"}).json()
    assert [c for c in job["claims"] if c.get("kind") == "stage"] == [], "the profile's node-scope class: at allocation"
    assert job["pending_reason"] and not job["pending_reason"].startswith("staging in")
    job = alice.post("/v1/jobs", json={**body, "stage_class": "stage"}).json()
    assert [c for c in job["claims"] if c.get("kind") == "stage"] == []
