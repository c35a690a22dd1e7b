"""The provisioner's transfers (``xce.agents.transfers``): real rclone against a loopback HTTPS server,
no controller: what an op item asks, what the reply says, what progress is reported."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

import pytest

from xce.agents.transfers import SharedTransfers
from xce.transfers import TransferSite
from tests.transfer_servers import HTTPSServer


@pytest.fixture(scope="module")
def https():
    # (in a directory anyone may pass through: rclone runs as the claim's owner and reads the certificate)
    top = tempfile.mkdtemp(prefix="xce-https-")
    os.chmod(top, 0o755)
    s = HTTPSServer(os.path.join(top, "https")).start()
    os.makedirs(os.path.join(s.www, "set"), exist_ok=True)
    for name, size in (("big.bin", 3_000_000), ("set/a.bin", 1000)):
        with open(os.path.join(s.www, name), "wb") as fh:
            fh.write(os.urandom(size))
    yield s
    s.stop()
    shutil.rmtree(top, ignore_errors=True)


def item(op: str, path: str, **extra) -> dict:
    return {"op_id": f"c1.{op}.1", "op": op, "claim_id": 1, "path": path, "size_bytes": 10_000_000,
            "tags": {"xce.project": "physics"}, **extra}


def volume(tmp_path) -> tuple[str, str]:
    root = tmp_path / "simfs"
    path = root / "volumes" / "v1"
    path.mkdir(parents=True)
    return str(root), str(path)


def test_populate_copies_the_source_and_reports_its_progress_against_the_total(https, tmp_path):
    root, path = volume(tmp_path)
    readings = []
    t = SharedTransfers(TransferSite(ca_cert=https.ca_cert), [root], lambda i, b, tot, r: readings.append((b, tot)))
    reply = t(item("populate", path, source=f"{https.url}/big.bin"))
    assert reply.ok, reply.message
    with open(os.path.join(https.www, "big.bin"), "rb") as a, open(os.path.join(path, "big.bin"), "rb") as b:
        assert hashlib.sha256(a.read()).digest() == hashlib.sha256(b.read()).digest()
    assert readings and readings[-1] == (3_000_000, 3_000_000), readings
    assert all(tot == 3_000_000 for _, tot in readings), "the total is measured before the copy"


def test_stage_in_puts_each_item_under_the_claim(https, tmp_path):
    root, path = volume(tmp_path)
    reply = SharedTransfers(TransferSite(ca_cert=https.ca_cert), [root])(
        item("stage_in", path, items=[[f"{https.url}/set/a.bin", "in/a.bin"]]))
    assert reply.ok, reply.message
    assert os.path.getsize(os.path.join(path, "in", "a.bin")) == 1000


def test_a_source_larger_than_the_claim_is_refused_before_it_copies(https, tmp_path):
    root, path = volume(tmp_path)
    reply = SharedTransfers(TransferSite(ca_cert=https.ca_cert), [root])(
        dict(item("populate", path, source=f"{https.url}/big.bin"), size_bytes=1_000_000))
    assert not reply.ok and reply.error_code == "RESOURCE_EXHAUSTED" and not reply.retryable
    assert os.listdir(path) == []


@pytest.mark.parametrize("case, code, says", [
    ("outside", "PERMISSION_DENIED", "outside the provisioner's provider roots"),
    ("path", "INVALID", "is a path"),
    ("remote", "NO_REMOTE", "remote lab is not configured on the provisioner"),
    ("escape", "INVALID", "outside the claim"),
])
def test_what_the_provisioner_refuses(https, tmp_path, case, code, says):
    root, path = volume(tmp_path)
    t = SharedTransfers(TransferSite(), [root])
    req = {
        "outside": item("populate", "/etc", source=f"{https.url}/big.bin"),
        "path": item("stage_in", path, items=[["/etc/shadow", "x"]]),
        "remote": item("populate", path, source="lab:models/x"),
        "escape": item("stage_in", path, items=[[f"{https.url}/set/a.bin", "../../x"]]),
    }[case]
    reply = t(req)
    assert not reply.ok and reply.error_code == code and not reply.retryable and says in reply.message, reply


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files away needs root")
def test_files_copied_in_as_root_belong_to_the_owner_of_the_claims_data(https, tmp_path):
    """They are copied as that owner (rclone under setpriv), not given away afterwards."""
    root, path = volume(tmp_path)
    os.chown(path, 4321, 4321)
    reply = SharedTransfers(TransferSite(ca_cert=https.ca_cert), [root])(
        item("stage_in", path, items=[[f"{https.url}/set/", "in/set"]]))
    assert reply.ok, reply.message
    for p in ("in", "in/set", "in/set/a.bin"):
        assert os.lstat(os.path.join(path, p)).st_uid == 4321, p
