"""Finding 9 (staging): staged bytes take room on the host, so a large stage-in cannot fill a
worker's disk.  The staging claim is sized (``--stage-size``, or what ``xce submit`` measures of the
sources) and reserved on the host's ``scratch`` counter; the node agent refuses, before copying
anything, a stage-in larger than that room.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.test_job_claims import CONFIG

MIB = 1 << 20


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("stage-size")
    (root / "xce.toml").write_text(CONFIG)
    c = Cluster(str(root), config=str(root / "xce.toml")).start()
    c.add_worker("host1", slots=2, counters={"scratch": "64Mi"})
    yield c
    c.stop()


def sparse(path, size: int) -> str:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return str(path)


def stage_claim(job: dict) -> dict:
    return next(c for c in job["claims"] if c.get("kind") == "stage")


def test_the_measured_stage_in_is_reserved_on_the_hosts_scratch(cl, tmp_path):
    src = sparse(tmp_path / "data.bin", 3 * MIB)
    job = cl.submit("--stage-in", src, "--", "sh", "-c", 'test "$(stat -c %s "$XCE_STAGE/data.bin")" = 3145728')
    done = cl.wait_state(job, "DONE", "EXIT")
    assert done["state"] == "DONE", done["exit_reason"]
    with cl.api() as c:
        claim = c.get(f"/v1/claims/{stage_claim(done)['name']}").json()
    assert claim["size_bytes"] == 3 * MIB


def test_a_stage_in_larger_than_its_room_is_refused_before_a_byte_is_copied(cl, tmp_path):
    src = sparse(tmp_path / "big.bin", 40 * MIB)
    job = cl.submit("--stage-in", src, "--stage-size", "1Mi", "--", "true")
    ended = cl.wait_state(job, "EXIT")
    assert ended["exit_reason"] == (f"stage-in failed: RESOURCE_EXHAUSTED: stage-in of {40 * MIB} bytes does not fit "
                                    f"the staging area's {MIB} bytes (submit with a larger --stage-size)")
    assert ended["start_time"] is None
    with cl.api() as c:
        claim = c.get(f"/v1/claims/{stage_claim(ended)['name']}").json()
    assert not any(o["op"] == "stage_in" and o["result"] == "ok" for o in claim["ops"])


def test_a_stage_in_larger_than_any_hosts_scratch_never_takes_a_host(cl, tmp_path):
    src = sparse(tmp_path / "huge.bin", 100 * MIB)
    job = cl.submit("--stage-in", src, "--", "true")
    reason = wait_for(lambda: (r := cl.job(job)["pending_reason"]) and "scratch" in r and r, what="scratch reason")
    assert reason == "no matching host has 100Mi scratch free for its template claims; 1 host(s) match"
    assert cl.job(job)["hosts"] == []
    cl.xce("kill", str(job))


def test_the_stage_size_must_make_sense(cl, tmp_path):
    src = sparse(tmp_path / "d", 10)
    for args, message, code in (  # a malformed size is bad usage (2), found by the CLI; the rest refused (1)
            (["--stage-in", src, "--stage-size", "0"], "xce: invalid --stage-size '0': must be more than 0 bytes", 2),
            (["--stage-size", "1Mi"], "xce: --stage-size needs --stage-in or --stage-out", 1),
            (["--stage-in", src, "--stage-size", "lots"], "xce: invalid --stage-size", 2)):
        r = cl.xce("submit", *args, "--", "true", ok=False)
        assert r.returncode == code and r.stderr.strip().startswith(message), r.stderr
    assert json.loads(cl.xce("--json", "jobs", "--state", "PEND").stdout) == []
    assert os.path.getsize(src) == 10
