"""GPUs in the model (issue 33): what a submission asks of them (``jobs.submit`` reads ``-gpu`` and
``rusage[ngpus_physical=]`` with the job-spec parser's ``xce.jobspec_gpu``), hosts' GPUs as registered, and
what ``xce hosts`` is told of their use (``model/gpus.py``)."""

from __future__ import annotations

import pytest

from tests.model.test_job_claims import ALICE, World
from tests.model.test_jobs import GRACEFUL
from xce.errors import InvalidRequest
from xce.model import dispatch, gpus, jobs
from xce.model.facts import JobAllocated
from xce.model.jobs import JobSpec


def submitted(w: World, **spec) -> dict | None:
    facts, job_id = jobs.submit(w.model, ALICE, JobSpec(command=["x"], **spec), w.tick(), GRACEFUL)
    w.commit(facts)
    return w.model.jobs[job_id].gpu


def test_a_gpu_request_from_gpu_or_from_rusage_and_never_both():
    w = World()
    assert submitted(w, gpu="num=2:gmem=16Gi") == {"num": 2, "mode": "shared", "j_exclusive": True, "gmodel": None,
                                                   "gmem": 16 << 30}
    assert submitted(w, resreq="rusage[ngpus_physical=4, mem=1G]") == {
        "num": 4, "mode": "shared", "j_exclusive": True, "gmodel": None, "gmem": None}  # no unknown counter
    assert submitted(w) is None
    for spec, why in (({"gpu": "num=1", "resreq": "rusage[ngpus_physical=1]"}, "give one"),
                      ({"gpu": "num=1:mode=exclusive_process:j_exclusive=no"}, "keeps its GPUs"),
                      ({"resreq": "rusage[ngpus_physical=1.5]"}, "whole number of GPUs")):
        with pytest.raises(InvalidRequest, match=why):
            submitted(w, **spec)


def test_hosts_report_their_gpus_each_id_once_and_say_who_uses_each():
    w = World()
    devices = [{"id": i, "uuid": f"GPU-{i}", "model": "T4", "memory": 16 << 30} for i in (1, 0)]
    facts, _ = dispatch.register(w.model, "g1", 4, {}, {}, "boot", set(), w.tick(), devices)
    w.commit(facts)
    host = w.model.hosts["g1"]
    assert [g["id"] for g in host.gpus] == [0, 1]
    with pytest.raises(InvalidRequest, match="each GPU's id once"):
        dispatch.register(w.model, "g1", 4, {}, {}, "boot", set(), w.tick(), devices + devices[:1])
    a = submitted(w, gpu="num=1:j_exclusive=no")
    job_id = max(w.model.jobs)
    assert a is not None
    w.commit([JobAllocated(time=w.tick(), job_id=job_id, run=1, hosts=["g1"], slots={"g1": 1}, gpus={"g1": [1]})])
    assert gpus.use_json(host) == [
        {"id": 0, "uuid": "GPU-0", "model": "T4", "memory": 16 << 30, "jobs": [], "use": "free"},
        {"id": 1, "uuid": "GPU-1", "model": "T4", "memory": 16 << 30, "jobs": [job_id], "use": "shared"}]
    # the worker registers again (a restart): what runs hold stays theirs
    facts, _ = dispatch.register(w.model, "g1", 4, {}, {}, "boot2", {(job_id, 1)}, w.tick(), devices)
    w.commit(facts)
    assert w.model.hosts["g1"].held_gpus[str(job_id)]["ids"] == [1]
