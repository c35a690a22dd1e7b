"""rclone transfers against a real S3 server (``rclone serve s3`` on loopback) and a real HTTPS server."""

from __future__ import annotations

import hashlib
import os
import pwd
import signal
import subprocess
import threading
import uuid

import pytest

from xce.transfers import Location, Remote, TransferSite, plan, run
from xce.transfers.rclone import as_user, classify, plan_size
from tests.helpers import children_of, wait_for
from tests.transfer_servers import HTTPSServer, S3Server, _Quiet

HTTPS_RELEASE = _Quiet.RELEASE

ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(str(tmp_path_factory.mktemp("s3"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def https(tmp_path_factory):
    server = HTTPSServer(str(tmp_path_factory.mktemp("https"))).start()
    yield server
    server.stop()


def lab(s3: S3Server, secret: str | None = None) -> Remote:
    return Remote(name="lab", type="s3", options={"provider": "Rclone", "endpoint": s3.endpoint,
                                                 "access_key_id": s3.access_key,
                                                 "secret_access_key": secret or s3.secret_key})


def site(s3: S3Server, https: HTTPSServer | None = None, secret: str | None = None) -> TransferSite:
    return TransferSite(remotes=(lab(s3, secret),), ca_cert=https.ca_cert if https else None, timeout=60)


def remote(path: str) -> Location:
    return Location("remote", f"lab:{path}", remote="lab", path=path)


def digest(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def test_credentials_reach_the_child_environment_only(s3):
    t = plan(remote("b/k"), Location("path", "/tmp/x"), site(s3))
    assert s3.secret_key not in " ".join(t.argv) and s3.access_key not in " ".join(t.argv)
    assert t.env["RCLONE_CONFIG_XCEREMOTE_SECRET_ACCESS_KEY"] == s3.secret_key
    assert "--config" in t.argv and t.argv[t.argv.index("--config") + 1] == "/dev/null"
    assert s3.secret_key not in repr(t)


def test_a_file_and_a_prefix_go_up_and_come_back_exactly(s3, tmp_path):
    s3.bucket("up")
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "big.bin").write_bytes(os.urandom(3 << 20))
    (src / "d" / "small.txt").write_text("small\n")
    seen = []
    out = run(plan(Location("path", str(src)), remote("up/pre"), site(s3)), progress=seen.append)
    assert out.ok, out.message
    assert out.stats["transfers"] == 2 and out.stats["bytes"] == (3 << 20) + 6
    assert digest(os.path.join(s3.data, "up", "pre", "big.bin")) == digest(src / "big.bin")
    back = tmp_path / "back"
    out = run(plan(remote("up/pre/big.bin"), Location("path", str(back / "big.bin")), site(s3)))
    assert out.ok, out.message
    assert digest(back / "big.bin") == digest(src / "big.bin")
    assert not [n for n in os.listdir(back) if n != "big.bin"]  # no temporary name left behind
    out = run(plan(remote("up/pre/"), Location("path", str(back / "all")), site(s3)))
    assert out.ok and sorted(os.listdir(back / "all")) == ["big.bin", "d"]


def test_a_wrong_key_is_a_permanent_error_that_never_shows_the_key(s3, tmp_path):
    s3.bucket("keyed")
    wrong = "wrong-" + uuid.uuid4().hex
    out = run(plan(remote("keyed/x"), Location("path", str(tmp_path / "x")), site(s3, secret=wrong)))
    assert not out.ok and (out.error_code, out.retryable) == ("ACCESS_DENIED", False), out
    assert wrong not in out.message and s3.access_key not in out.message


def test_a_missing_bucket_is_permanent_and_a_missing_object_copies_nothing(s3, tmp_path):
    out = run(plan(remote("no-such-bucket/x"), Location("path", str(tmp_path / "x")), site(s3)))
    assert (out.ok, out.error_code, out.retryable) == (False, "NOT_FOUND", False), out
    s3.bucket("there")
    out = run(plan(remote("there/missing.bin"), Location("path", str(tmp_path / "m")), site(s3)))
    # rclone says nothing of a missing object under an existing bucket: the worker checks the destination
    assert out.ok and not os.path.exists(tmp_path / "m")


def test_a_server_that_does_not_answer_is_retryable(tmp_path):
    down = S3Server(str(tmp_path / "down"))  # never started: nothing listens on its port
    out = run(plan(remote("b/x"), Location("path", str(tmp_path / "x")), site(down)))
    assert not out.ok and out.retryable, out


def test_a_prefix_is_measured_before_it_is_copied(s3, tmp_path):
    with open(os.path.join(s3.bucket("room"), "big.bin"), "wb") as fh:
        fh.write(os.urandom(2 << 20))
    # measured before a stage-in copies (rclone 1.75's --max-transfer did not stop these copies)
    out = run(plan_size(remote("room/"), site(s3)))
    assert out.ok and out.stats["bytes"] == 2 << 20 and out.stats["count"] == 1, out


def test_https_with_the_sites_certificate_and_without_it(https, s3, tmp_path):
    with open(os.path.join(https.www, "page.bin"), "wb") as fh:
        fh.write(os.urandom(100_000))
    url = Location("url", f"{https.url}/page.bin", scheme="https", base=f"{https.url}/", path="page.bin")
    out = run(plan(url, Location("path", str(tmp_path / "page.bin")), site(s3, https)))
    assert out.ok, out.message
    assert digest(tmp_path / "page.bin") == digest(os.path.join(https.www, "page.bin"))
    out = run(plan(url, Location("path", str(tmp_path / "again.bin")), site(s3)))  # no ca_cert
    assert (out.ok, out.error_code, out.retryable) == (False, "TLS", False), out
    missing = Location("url", f"{https.url}/nope.bin", scheme="https", base=f"{https.url}/", path="nope.bin")
    out = run(plan(missing, Location("path", str(tmp_path / "nope.bin")), site(s3, https)))
    assert (out.ok, out.error_code) == (False, "NOT_FOUND"), out


def test_a_transfer_killed_half_way_leaves_nothing_that_looks_complete(https, s3, tmp_path):
    with open(os.path.join(https.www, "half.stall"), "wb") as fh:
        fh.write(os.urandom(4 << 20))
    url = Location("url", f"{https.url}/half.stall", scheme="https", base=f"{https.url}/", path="half.stall")
    dest = tmp_path / "in"
    outcome = []
    t = threading.Thread(target=lambda: outcome.append(run(plan(url, Location("path", str(dest / "half.stall")),
                                                                   site(s3, https)))))
    t.start()
    try:
        # half of it has arrived, under a temporary name: kill rclone as a crash would
        partial = wait_for(lambda: [n for n in (os.listdir(dest) if dest.exists() else [])
                                    if os.path.getsize(dest / n) > 0], what="a partial download")
        assert partial != ["half.stall"], "the partial file has a temporary name"
        for pid in children_of(os.getpid()):  # this transfer's rclone, not the S3 server
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"copyto" in fh.read().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
        t.join(30)
    finally:
        HTTPS_RELEASE.set()
    (out,) = outcome
    assert not out.ok and out.retryable, out
    assert not (dest / "half.stall").exists(), "nothing under the final name"


def test_a_transfer_past_its_timeout_is_killed_and_retryable(s3, tmp_path):
    t = plan(remote("b/x"), Location("path", str(tmp_path / "x")), site(s3))
    slow = type(t)(argv=["/bin/sleep", "30"], env=t.env, secrets=t.secrets, what=t.what)
    out = run(slow, timeout=0.5)
    assert (out.ok, out.exit_code, out.error_code, out.retryable) == (False, 124, "TIMEOUT", True)


@pytest.mark.parametrize("code, text, expected", [
    (3, "", ("NOT_FOUND", False)), (4, "", ("NOT_FOUND", False)), (5, "", ("TRANSFER_FAILED", True)),
    (7, "", ("TRANSFER_FAILED", False)), (8, "", ("RESOURCE_EXHAUSTED", False)), (2, "", ("INVALID", False)),
    (1, "https response error StatusCode: 403", ("ACCESS_DENIED", False)),
    (1, "x509: certificate signed by unknown authority", ("TLS", False)),
    (1, "connection reset by peer", ("TRANSFER_FAILED", True)),
    # a URL whose host does not exist (rclone 1.6x's words, https and s3 backends): never retried forever
    (1, 'Failed to copyto: failed to stat: Head "https://nosuch-host.invalid/file": dial tcp: lookup '
        'nosuch-host.invalid on 10.255.255.53:53: no such host', ("NO_SUCH_HOST", False)),
    (1, 'operation error S3: HeadObject, https response error StatusCode: 0, RequestID: , HostID: , request send '
        'failed, Head "http://nosuch.invalid:9000/b/x": dial tcp: lookup nosuch.invalid: no such host',
     ("NO_SUCH_HOST", False)),
    # the resolver did not answer: a later attempt may pass
    (1, 'dial tcp: lookup s3.example.com on 10.0.0.53:53: server misbehaving', ("TRANSFER_FAILED", True)),
])
def test_exit_codes_are_permanent_or_retryable(code, text, expected):
    assert classify(code, text) == expected


@pytest.mark.skipif(not ROOT, reason="needs root to run as another account")
def test_run_as_a_user_the_child_is_not_dumpable_so_its_environment_is_closed_to_the_user():
    name = f"xcetr{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)
    try:
        pw = pwd.getpwnam(name)
        child = subprocess.Popen(as_user(pw.pw_uid, pw.pw_gid) + ["/bin/sleep", "30"],
                                 env={"PATH": "/usr/bin:/bin", "RCLONE_CONFIG_X_SECRET": "top-secret"})
        try:
            wait_for(lambda: _uid_of(child.pid) == pw.pw_uid, what="the child running as the user")
            peek = subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", "--",
                                   "cat", f"/proc/{child.pid}/environ"], capture_output=True)
            assert peek.returncode != 0 and b"top-secret" not in peek.stdout
            with open(f"/proc/{child.pid}/status") as fh:  # yet its files are the user's (fs ids)
                ids = dict(line.split(":", 1) for line in fh if line.startswith(("Uid", "Gid")))
            assert ids["Uid"].split()[3] == str(pw.pw_uid) and ids["Gid"].split()[3] == str(pw.pw_gid)
        finally:
            child.kill()
            child.wait()
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def _uid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def test_a_remotes_bandwidth_limit_slows_its_transfers_and_progress_comes_while_it_copies(s3, tmp_path):
    """The remote's ``bwlimit`` (else the site's) reaches rclone; its stats arrive while the copy runs,
    not only at its end: readings with 0 < bytes < size are seen."""
    blob = os.urandom(3 << 20)
    with open(os.path.join(s3.bucket("slow"), "big.bin"), "wb") as fh:
        fh.write(blob)
    slow = Remote(name="lab", type="s3", options=lab(s3).options, bwlimit="1M")
    t = plan(remote("slow/big.bin"), Location("path", str(tmp_path / "big.bin")),
             TransferSite(remotes=(slow,), bwlimit="100M", transfers=3, checkers=5, timeout=60))
    assert t.argv[t.argv.index("--bwlimit") + 1] == "1M"  # the remote's own wins over the site's
    assert t.argv[t.argv.index("--transfers") + 1] == "3" and t.argv[t.argv.index("--checkers") + 1] == "5"
    seen = []
    out = run(t, progress=seen.append)
    assert out.ok, out
    assert digest(str(tmp_path / "big.bin")) == hashlib.sha256(blob).hexdigest()
    middle = [s for s in seen if 0 < int(s.get("bytes") or 0) < len(blob)]
    assert middle, f"no reading while it copied: {seen}"
    assert all(int(s.get("totalBytes") or 0) == len(blob) for s in middle)
    site_wide = plan(remote("slow/big.bin"), Location("path", str(tmp_path / "x")),
                     TransferSite(remotes=(lab(s3),), bwlimit="100M"))
    assert site_wide.argv[site_wide.argv.index("--bwlimit") + 1] == "100M"
    assert "--bwlimit" not in plan(remote("slow/big.bin"), Location("path", str(tmp_path / "x")), site(s3)).argv
