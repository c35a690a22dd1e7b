"""GPUs as devices (issue 33) on a real cluster with fake GPUs (``xce worker --gpus``): each job gets
concrete device ids and sees only those, exclusive jobs never share a GPU, ``j_exclusive=no`` jobs do,
``mode=exclusive_process`` keeps its GPUs; ``xce hosts``, ``xce job show`` and ``xce usage`` show them.

host1: 8 slots, GPUs 0,1,2,3
"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.conftest import make_cluster

# writes what it sees of its GPUs, then holds them until its go file appears
HOLD = ('echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$XCE_GPU_UUIDS" > seen.$XCE_JOBID; '
        'while [ ! -e go.$XCE_JOBID ]; do sleep 0.05; done')


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("gpus"))
    c.add_worker("host1", slots=8, extra_args=["--gpus", "0,1,2,3"])
    yield c
    c.stop()


def hold(cl: Cluster, where, gpu: str) -> int:
    return cl.submit("--gpu", gpu, "--shell", "-o", "/dev/null", "--", HOLD, cwd=str(where))


def seen(cl: Cluster, where, job_id: int) -> tuple[str, str, str]:
    cl.wait_state(job_id, "RUN")
    path = where / f"seen.{job_id}"
    text = wait_for(lambda: path.exists() and path.read_text().strip(), what=f"job {job_id} wrote what it sees")
    cuda, nvidia, uuids = text.split("|")
    return cuda, nvidia, uuids


def release(cl: Cluster, where, *jobs: int) -> None:
    for j in jobs:
        (where / f"go.{j}").write_text("")
    for j in jobs:
        assert cl.wait_state(j, "DONE", "EXIT")["state"] == "DONE"


def reason(cl: Cluster, job_id: int, text: str) -> str:
    return wait_for(lambda: (r := cl.job(job_id)["pending_reason"] or "") and text in r and r,
                    what=f"job {job_id} pending with {text!r}")


def test_two_jobs_get_disjoint_gpus_and_a_third_waits_for_them(cl, tmp_path):
    a, b = hold(cl, tmp_path, "num=2"), hold(cl, tmp_path, "num=2")
    seen_a, seen_b = seen(cl, tmp_path, a), seen(cl, tmp_path, b)
    ids_a, ids_b = set(seen_a[0].split(",")), set(seen_b[0].split(","))
    assert len(ids_a) == len(ids_b) == 2 and ids_a.isdisjoint(ids_b) and ids_a | ids_b == {"0", "1", "2", "3"}
    assert seen_a[1] == seen_a[0] and seen_b[1] == seen_b[0]  # NVIDIA_VISIBLE_DEVICES: the same ids
    assert len(set(seen_a[2].split(",") + seen_b[2].split(","))) == 4  # four distinct UUIDs
    third = hold(cl, tmp_path, "num=2")
    assert reason(cl, third, "gpu:") == "gpu: 0 of 4 free on host1"
    assert cl.job(third)["state"] == "PEND"

    # xce hosts: each GPU's jobs; --json: each device with its UUID, model and memory
    (host,) = json.loads(cl.xce("--json", "hosts").stdout)
    assert [g["id"] for g in host["gpus"]] == [0, 1, 2, 3]
    assert all(g["uuid"].startswith("GPU-") and g["model"] and g["memory"] > 0 for g in host["gpus"])
    assert {g["id"]: g["jobs"] for g in host["gpus"]} == {int(i): [a] for i in ids_a} | {int(i): [b] for i in ids_b}
    table = cl.xce("hosts").stdout
    assert "GPUS" in table and "4/4" in table and f"{min(ids_a)}:{a}" in table

    # xce job show: its GPUs by id and UUID (text), and by host (--json)
    shown = cl.xce("job", "show", str(a)).stdout
    assert f"host1: {seen_a[0]} (" in shown and "num=2:mode=shared:j_exclusive=yes" in shown
    doc = json.loads(cl.xce("--json", "job", "show", str(a)).stdout)
    doc = doc[0] if isinstance(doc, list) else doc
    assert [g["id"] for g in doc["gpus"]["host1"]] == sorted(int(i) for i in ids_a)
    assert ",".join(g["uuid"] for g in doc["gpus"]["host1"]) == seen_a[2]
    assert doc["gpu"] == {"num": 2, "mode": "shared", "j_exclusive": True, "gmodel": None, "gmem": None}

    release(cl, tmp_path, a)  # its GPUs go to the third job
    assert set(seen(cl, tmp_path, third)[0].split(",")) == ids_a
    release(cl, tmp_path, b, third)


def test_shared_jobs_share_gpus_and_exclusive_ones_wait(cl, tmp_path):
    s1, s2 = hold(cl, tmp_path, "num=4:j_exclusive=no"), hold(cl, tmp_path, "num=2:j_exclusive=no")
    assert seen(cl, tmp_path, s1)[0] == "0,1,2,3"
    assert len(seen(cl, tmp_path, s2)[0].split(",")) == 2  # beside s1, on two of the same GPUs
    alone = hold(cl, tmp_path, "num=1")  # j_exclusive=yes (LSF's default): no GPU is free of jobs
    assert reason(cl, alone, "gpu:") == "gpu: 0 of 4 free on host1"
    table = cl.xce("hosts").stdout
    assert f"{s1},{s2}s" in table  # a shared GPU's jobs
    release(cl, tmp_path, s1, s2)
    seen(cl, tmp_path, alone)
    release(cl, tmp_path, alone)


def compute_mode(cl: Cluster, gpu: str) -> str:
    path = os.path.join(cl.workers["host1"].work_dir, "gpus", f"gpu{gpu}.compute_mode")
    return open(path).read().strip() if os.path.exists(path) else "default"


def test_exclusive_process_mode_keeps_its_gpus_from_shared_jobs(cl, tmp_path):
    excl = hold(cl, tmp_path, "num=3:mode=exclusive_process")
    mine = seen(cl, tmp_path, excl)[0].split(",")
    assert len(mine) == 3
    # the devices' compute mode is set while it runs (the fake devices record what NVML would be told)
    assert [compute_mode(cl, g) for g in mine] == ["exclusive_process"] * 3
    shared = hold(cl, tmp_path, "num=2:j_exclusive=no")
    assert reason(cl, shared, "gpu:") == "gpu: 1 of 4 shareable on host1"
    one = hold(cl, tmp_path, "num=1:j_exclusive=no")  # the one GPU no exclusive job holds
    assert seen(cl, tmp_path, one)[0] not in seen(cl, tmp_path, excl)[0].split(",")
    assert compute_mode(cl, seen(cl, tmp_path, one)[0]) == "default"  # a shared job's GPU keeps the default
    release(cl, tmp_path, excl)
    assert [compute_mode(cl, g) for g in mine] == ["default"] * 3  # given back at the run's end
    seen(cl, tmp_path, shared)
    release(cl, tmp_path, one, shared)


def test_a_job_without_gpus_sees_none_and_usage_counts_gpu_hours(cl, tmp_path):
    plain = cl.submit("--shell", "-o", "/dev/null", "--", HOLD, cwd=str(tmp_path),
                      env={"CUDA_VISIBLE_DEVICES": "0,1"})  # the submitter's GPUs are not the job's
    assert seen(cl, tmp_path, plain) == ("", "", "")
    release(cl, tmp_path, plain)
    rows = json.loads(cl.xce("--json", "usage", "--by-user").stdout)
    mine = [r for r in rows if r["project"] == "default" and r["user"] == "admin"]
    assert mine and mine[0]["gpu_hours"] > 0
    assert "GPU_HOURS" in cl.xce("usage").stdout


def test_bad_gpu_requests_are_refused_before_anything_is_sent(cl, tmp_path):
    r = cl.xce("submit", "--gpu", "num=2:mode=fast", "--", "true", ok=False)
    assert r.returncode == 2 and "mode must be shared or exclusive_process" in r.stderr
    with cl.api() as c:  # the same request straight to the API: the model reads it with the same parser
        resp = c.post("/v1/jobs", json={"command": ["true"], "gpu": "num=0"})
        assert resp.status_code == 400 and "num must be a whole number" in resp.text
        resp = c.post("/v1/jobs", json={"command": ["true"], "gpu": "num=1", "resreq": "rusage[ngpus_physical=1]"})
        assert resp.status_code == 400 and "give one" in resp.text


def test_rusage_ngpus_physical_asks_for_devices(cl, tmp_path):
    j = cl.submit("-R", "rusage[ngpus_physical=3]", "--shell", "-o", "/dev/null", "--", HOLD, cwd=str(tmp_path))
    assert len(seen(cl, tmp_path, j)[0].split(",")) == 3
    release(cl, tmp_path, j)


@pytest.mark.skipif(not os.path.exists("/dev/nvidiactl"), reason="no NVIDIA GPU on this machine: NVML discovery "
                    "is checked where one is (the fake-device path above runs everywhere)")
def test_nvml_finds_this_machines_gpus():
    from xce.worker.gpus import NvmlDevices

    gpus = NvmlDevices().devices()
    assert gpus and all(g.uuid.startswith("GPU-") and g.memory > 0 and g.minor is not None for g in gpus)
    assert [g.id for g in gpus] == list(range(len(gpus)))
