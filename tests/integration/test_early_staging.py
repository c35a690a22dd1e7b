"""Staging before hosts are held, and claims populated from a URL, on a real cluster: an S3 server
(``rclone serve s3``) and an HTTPS server on loopback, the provisioner and a worker with a
``--transfer-config`` holding the remotes' keys.

Remotes (as in ``test_transfers``): ``lab`` serves ``s3://`` for project physics with the right key,
``lab-badkey`` the same server with a wrong secret.  ann is in physics, ben in chem.  Class ``simfs`` is
shared (the provisioner's), reachable from every host.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os

import pytest

from tests.helpers import Cluster, audit_trail, cli, wait_for
from tests.integration.test_transfers import CONFIG, transfer_config
from tests.transfer_servers import HTTPSServer, S3Server


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Site:
    def __init__(self, root: str) -> None:
        self.root = root
        self.s3 = self.https = self.cl = None
        try:
            self._start()
        except BaseException:
            self.stop()  # nothing started here outlives a failed set-up
            raise

    def _start(self) -> None:
        root = self.root
        self.s3 = S3Server(os.path.join(root, "s3")).start()
        self.https = HTTPSServer(os.path.join(root, "https")).start()
        cfg = os.path.join(root, "xce.toml")
        with open(cfg, "w") as fh:
            fh.write(CONFIG)
        transfers = transfer_config(os.path.join(root, "transfers.toml"), self.s3, self.https)
        self.cl = Cluster(os.path.join(root, "cluster"), config=cfg)
        self.cl.start()
        self.cl.add_provisioner(extra_args=("--transfer-config", transfers))
        for h in ("host1", "host2"):
            self.cl.add_worker(h, slots=4, counters={"scratch": "4Gi"}, extra_args=["--transfer-config", transfers])
        self.env = {}
        with self.cl.api() as c:
            for name, project in (("ann", "physics"), ("ben", "chem")):
                assert c.post("/v1/users", json={"name": name, "projects": [project]}).status_code == 201
                self.env[name] = {**self.cl.env, "XCE_TOKEN": c.post("/v1/tokens", json={"user": name}).json()["token"]}
        self.data = {"in.bin": os.urandom(1_500_000), "llama/config.json": b'{"layers": 2}\n',
                     "llama/shards/0.bin": os.urandom(300_000), "llama/shards/1.bin": os.urandom(200_000)}
        for name, blob in self.data.items():
            path = os.path.join(self.s3.bucket("data"), name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(blob)
        self.big = os.urandom(8 << 20)  # 4 s through lab-slow (2 MiB/s): seen half-way
        with open(os.path.join(self.s3.bucket("data"), "big.bin"), "wb") as fh:
            fh.write(self.big)
        self.page = os.urandom(100_000)
        with open(os.path.join(self.https.www, "vocab.bin"), "wb") as fh:
            fh.write(self.page)
        self.s3.bucket("results")

    def xce(self, user: str, *args: str, ok: bool = True):
        r = cli(self.env[user], *args)
        if ok:
            assert r.returncode == 0, f"xce {' '.join(args)}: {r.stderr}"
        return r

    def submit(self, user: str, *args: str) -> int:
        return json.loads(self.xce(user, "--json", "submit", *args).stdout)["id"]

    def claim(self, user: str, name: str) -> dict:
        return json.loads(self.xce(user, "--json", "claim", "show", name).stdout)

    def stop(self) -> None:
        for part in (self.cl, self.https, self.s3):
            if part is not None:
                part.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(str(tmp_path_factory.mktemp("early")))
    yield s
    s.stop()


def ready_time(claim: dict) -> float:
    return next(h["time"] for h in claim["history"] if h["state"] == "READY")


def test_a_claim_populated_from_s3_is_ready_with_the_data_and_rox_readers_read_exactly_it(site, tmp_path):
    made = json.loads(site.xce("ann", "--json", "claim", "create", "weights", "--class", "simfs", "--size", "64Mi",
                               "--access", "ROX", "--source", "s3://data/llama/").stdout)
    assert made["populate_from"] == "lab:data/llama/", "resolved for the project at creation"
    claim = wait_for(lambda: (c := site.claim("ann", "weights"))["state"] in ("READY", "FAILED") and c,
                     timeout=60, what="weights populated")
    assert claim["state"] == "READY", claim["last_error"]
    assert [o["op"] for o in claim["ops"] if o["result"] == "ok"] == ["create", "populate"]
    assert any(h["reason"].startswith("populated from lab:data/llama/") for h in claim["history"])
    for name in ("config.json", "shards/0.bin", "shards/1.bin"):  # the prefix fills the claim's root
        with open(os.path.join(claim["path"], name), "rb") as fh:
            assert fh.read() == site.data["llama/" + name]
    shown = site.xce("ann", "claim", "show", "weights").stdout
    assert "Populated from" in shown and "lab:data/llama/" in shown
    outs = []
    for i in range(2):  # ROX: readers on any host, read-only
        out = tmp_path / f"read{i}.out"
        job = site.submit("ann", "--claim", "weights", "-o", str(out), "--", "sh", "-c",
                          'cd "$XCE_CLAIM_WEIGHTS" && sha256sum config.json shards/0.bin shards/1.bin && '
                          '(touch x 2>/dev/null && echo WROTE || echo READONLY)')
        outs.append((job, out))
    for job, out in outs:
        done = site.cl.wait_state(job, "DONE", "EXIT", timeout=60)
        assert done["state"] == "DONE", done["exit_reason"]
        lines = out.read_text().split("\n")
        sums = {line.split()[1]: line.split()[0] for line in lines if len(line.split()) == 2}
        assert sums == {n: sha(site.data["llama/" + n]) for n in ("config.json", "shards/0.bin", "shards/1.bin")}
        assert "READONLY" in lines or os.geteuid() != 0  # (without root claims are linked, not bind-mounted ro)


def test_a_populate_with_a_wrong_key_fails_naming_the_remote_and_is_not_retried(site):
    site.xce("ann", "claim", "create", "badw", "--class", "simfs", "--size", "64Mi", "--access", "ROX",
             "--source", "lab-badkey:data/llama/")
    claim = wait_for(lambda: (c := site.claim("ann", "badw"))["state"] in ("READY", "FAILED") and c,
                     timeout=60, what="badw failed")
    assert claim["state"] == "FAILED" and claim["last_error"].startswith("ACCESS_DENIED: "), claim["last_error"]
    assert "via remote lab-badkey" in claim["last_error"] and claim["attempts"] == 1
    site.xce("ann", "claim", "delete", "badw")  # the volume was made: deletion releases it
    wait_for(lambda: site.claim("ann", "badw")["state"] == "RELEASED", timeout=60, what="badw released")


def test_populate_from_a_remote_of_another_project_is_refused_naming_the_project(site):
    r = site.xce("ben", "claim", "create", "theirs", "--class", "simfs", "--size", "1Gi", "--access", "ROX",
                 "--source", "s3://data/llama/", ok=False)
    assert r.returncode == 1 and "project chem" in r.stderr, r.stderr
    r = site.xce("ben", "claim", "create", "theirs", "--class", "simfs", "--size", "1Gi", "--access", "ROX",
                 "--source", "lab:data/llama/", ok=False)
    assert r.returncode == 1 and "project chem may not use remote lab" in r.stderr, r.stderr


def test_a_job_staged_before_allocation_holds_no_host_while_staging(site, tmp_path):
    out = tmp_path / "staged.out"
    job = site.submit("ann", "--stage-class", "simfs", "--stage-in", "s3://data/in.bin",
                      "--stage-in", f"{site.https.url}/vocab.bin:vocab/vocab.bin",
                      "--stage-out", "result.txt:s3://results/early/result.txt", "--stage-size", "64Mi",
                      "-o", str(out), "--", "sh", "-c",
                      'cd "$XCE_STAGE" && sha256sum in.bin vocab/vocab.bin && echo made > result.txt')
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=90)
    assert done["state"] == "DONE", done["exit_reason"]
    stage = next(c for c in done["claims"] if c.get("kind") == "stage")
    claim = json.loads(site.cl.xce("--json", "claim", "show", stage["name"]).stdout)
    assert claim["scope"] == "shared" and claim["form"] == "template"
    staged = [o for o in claim["ops"] if o["op"] == "stage_in" and o["result"] == "ok"]
    assert staged and staged[-1].get("host") is None, "staged by the provisioner"
    # the hosts were allocated only after the data was in: nothing was held while it moved
    assert done["alloc_time"] >= ready_time(claim), (done["alloc_time"], ready_time(claim))
    assert done["held_s"] is not None and done["start_time"] >= done["alloc_time"]
    sums = dict(reversed(line.split()) for line in out.read_text().splitlines() if len(line.split()) == 2)
    assert sums == {"in.bin": sha(site.data["in.bin"]), "vocab/vocab.bin": sha(site.page)}
    with open(os.path.join(site.s3.data, "results", "early", "result.txt")) as fh:
        assert fh.read() == "made\n", "staged out by the provisioner"
    shown = site.cl.xce("job", "show", str(job)).stdout
    assert "Hosts held" in shown and "before it started" in shown


def half_way(read) -> dict:
    """A transfer reading with 0 < copied < total, from ``read()`` (the claim's ``transfer``)."""
    def middle():
        t = read()
        return t if t and t.get("total_bytes") and 0 < t["bytes"] < t["total_bytes"] else None
    return wait_for(middle, timeout=60, interval=0.1, what="a transfer half-way")


def test_a_populate_reports_its_progress_while_it_copies(site):
    site.xce("ann", "claim", "create", "slow-weights", "--class", "simfs", "--size", "64Mi", "--access", "ROX",
             "--source", "lab-slow:data/big.bin")
    reading = half_way(lambda: site.claim("ann", "slow-weights").get("transfer"))
    assert reading["total_bytes"] == len(site.big)
    shown = site.xce("ann", "claim", "show", "slow-weights").stdout
    assert "populating: " in shown and "of 8Mi copied" in shown, shown
    claim = wait_for(lambda: (c := site.claim("ann", "slow-weights"))["state"] in ("READY", "FAILED") and c,
                     timeout=60, what="populated")
    assert claim["state"] == "READY", claim["last_error"]
    assert claim.get("transfer") is None
    with open(os.path.join(claim["path"], "big.bin"), "rb") as fh:
        assert sha(fh.read()) == sha(site.big)


def test_a_shared_stage_in_reports_its_progress_while_the_job_waits_holding_no_host(site, tmp_path):
    out = tmp_path / "out"
    job = site.submit("ann", "--stage-class", "simfs", "--stage-in", "lab-slow:data/big.bin", "--stage-size", "64Mi",
                      "-o", str(out), "--", "sh", "-c", 'sha256sum "$XCE_STAGE/big.bin"')
    stage = next(c for c in site.cl.job(job)["claims"] if c.get("kind") == "stage")
    half_way(lambda: site.claim("ann", stage["name"]).get("transfer"))
    shown = site.cl.job(job)
    assert shown["state"] == "PEND" and not shown["hosts"], "no host is held while the data moves"
    assert "staging in:" in shown["pending_reason"] and "of 8.0 MiB" in shown["pending_reason"], shown
    done = site.cl.wait_state(job, "DONE", "EXIT", timeout=90)
    assert done["state"] == "DONE", done["exit_reason"]
    assert sha(site.big) in out.read_text()


def test_a_wrong_key_gives_a_permanent_error_naming_the_remote_and_the_job_exits_holding_nothing(site):
    job = site.submit("ann", "--stage-class", "simfs", "--stage-in", "lab-badkey:data/in.bin", "--stage-size", "64Mi",
                      "--", "true")
    done = site.cl.wait_state(job, "EXIT", timeout=60)
    assert done["exit_reason"].startswith("stage-in failed: ACCESS_DENIED: "), done["exit_reason"]
    assert "via remote lab-badkey" in done["exit_reason"]
    assert done["alloc_time"] is None and done["start_time"] is None and done["hosts"] == []


def test_shared_staging_of_a_local_path_is_refused_at_submission(site):
    r = site.xce("ann", "submit", "--stage-class", "simfs", "--stage-in", "/etc/hostname", "--", "true", ok=False)
    assert r.returncode == 1 and "URLs and remotes only" in r.stderr, r.stderr


def test_credentials_appear_nowhere_users_or_logs_can_see(site):
    secrets = [site.s3.access_key, site.s3.secret_key, site.s3.secret_key[:6]]
    seen = []
    for j in json.loads(site.cl.xce("--json", "jobs", "-a").stdout):
        shown = site.cl.xce("--json", "job", "show", str(j["id"])).stdout
        seen.append(shown)
        doc = json.loads(shown)
        for c in (doc[0] if isinstance(doc, list) else doc)["claims"]:
            if c.get("kind") == "stage":
                seen.append(site.cl.xce("--json", "claim", "show", c["name"]).stdout)
    for name in ("weights", "badw"):
        seen.append(json.dumps(site.claim("ann", name)))
    with site.cl.api() as c:
        seen.append(json.dumps(audit_trail(c)))
    for log in glob.glob(os.path.join(site.cl.root, "**", "*.log"), recursive=True):
        with open(log, errors="replace") as fh:
            seen.append(fh.read())
    text = "\n".join(seen)
    assert "lab:data/in.bin" in text and "lab-badkey" in text  # (what was searched is what the tests made)
    assert any("provisioner" in p for p in glob.glob(os.path.join(site.cl.root, "**", "*.log"), recursive=True))
    for s in secrets:
        assert s not in text, f"a credential leaked: {s[:3]}..."
