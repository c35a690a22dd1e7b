"""One object read by many jobs: stage-in per job against a node-local cache claim, in one run.

    python bench/cache.py [--size 512Mi] [--jobs 32] [--hosts 4] [--slots 8] [--short 16] [--max-seconds 1200]

The object store and its data: ``rclone serve s3`` on 127.0.0.1 (``bench/staging.py``'s, started and stopped
here by its pid) serving one object, ``data/weights.bin`` of --size bytes.  The cluster: ``xce up --hosts
--slots`` with a node-scope class ``local`` on the hosts' scratch counter and the remote ``bench``.

Modes, one after the other on the same cluster:

  stage-in  --jobs jobs, each ``--stage-in bench:data/weights.bin`` (the node-scope staging class: each
            job's host copies the object into its own staging area while the job holds the host);
  cache     a cache claim (``--cache --access ROX --source bench:data/weights.bin``, no replica to begin
            with) and --jobs jobs using it: the scheduler starts a replica where jobs go (at most one per
            host), each filled once from the store, and the jobs wait for it, holding no host.

Each job reads the whole object (``cat > /dev/null``) and checks its size.  Per mode: the makespan (the
first submission, or the claim's creation, to the last job's end) and the bytes the object store read
for it (the S3 server's ``rchar`` in ``/proc/PID/io``: what it read from its files to serve them).  The goal
(issue 30): the cache moves >= 6x fewer bytes and finishes >= 4x sooner.

Warm placement: a second cache claim with replicas on host1 and host2 (READY first), then --short
``true`` jobs using it (no more than those two hosts' slots): the share that starts on host1 or host2
(goal >= 90%).  Everything is bounded by --max-seconds and stopped by pid on exit, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from staging import BUCKET, REMOTE, Bench, run  # noqa: E402  (its object store, deadline and stopping)
from throughput import Api, XceCluster, filesystem_note, log  # noqa: E402

from xce.config import DEFAULT_CONFIG  # noqa: E402
from xce.demo import LOCAL  # noqa: E402  (a node-scope class on the hosts' scratch counter, ROX)
from xce.units import format_size, parse_size  # noqa: E402

OBJECT = "weights.bin"


class CacheBench(Bench):
    def make_data(self) -> None:
        root = os.path.join(self.tmp, "s3", BUCKET)
        os.makedirs(root)
        left, chunk = self.args.size, os.urandom(16 << 20)
        with open(os.path.join(root, OBJECT), "wb") as fh:
            while left > 0:
                part = chunk[:left]
                fh.write(part)
                left -= len(part)
        log(f"data: {BUCKET}/{OBJECT}, {format_size(self.args.size)}")

    def start_cluster(self) -> None:
        ctl = os.path.join(self.tmp, "xce.toml")
        with open(ctl, "w") as fh:
            fh.write(DEFAULT_CONFIG + LOCAL + f'\n[[transfers.remotes]]\nname = "{REMOTE}"\ntype = "s3"\n'
                                              'projects = ["default"]\n')
        transfers = os.path.join(self.tmp, "transfers.toml")
        with open(os.open(transfers, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            fh.write(f'[transfers]\n[[transfers.remotes]]\nname = "{REMOTE}"\ntype = "s3"\n'
                     "[transfers.remotes.options]\n" + "".join(f'{k} = "{v}"\n' for k, v in self.options().items()))
        state = os.path.join(self.tmp, "cluster")
        os.makedirs(state)
        self.cluster = XceCluster(state, hosts=self.args.hosts, slots=self.args.slots,
                                  extra=("--config", ctl, "--transfer-config", transfers))
        self.cluster.start(timeout=min(120.0, self.left()))
        self.api = Api(self.cluster.url, self.cluster.token)
        log(f"xce up: {self.cluster.url}, {self.args.hosts} hosts x {self.args.slots} slots")

    # ------------------------------------------------------------ measuring

    def store_read(self) -> int:
        """Bytes the S3 server has read from its files (``rchar``): what serving objects cost it."""
        assert self.s3 is not None
        with open(f"/proc/{self.s3.pid}/io") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("rchar:"))

    def post(self, path: str, body: dict) -> dict:
        r = self.api.client.post(path, json=body)
        if r.status_code not in (200, 201, 202):
            raise RuntimeError(f"POST {path}: {r.status_code} {r.text[:300]}")
        return r.json()

    def get(self, path: str) -> dict:
        """``path``'s document, asked again while the controller cannot answer (a box loaded by 32 copies
        of the object may keep it from answering for a while: a 503 or a timeout is not the bench's end)."""
        said = ""
        while True:
            try:
                r = self.api.client.get(path)
                if r.status_code == 200:
                    return r.json()
                why = f"{r.status_code} {r.text[:200]}"
            except Exception as e:  # (httpx's timeouts and connection errors)
                why = f"{type(e).__name__}: {e}"
            if why != said:
                log(f"GET {path}: {why}; asking again")
                said = why
            self.left()
            time.sleep(1.0)

    def wait_done(self, ids: list[int]) -> list[dict]:
        jobs: dict[int, dict] = {}
        while len(jobs) < len(ids):
            for j in ids:
                if j not in jobs and (doc := self.get(f"/v1/jobs/{j}"))["state"] in ("DONE", "EXIT"):
                    jobs[j] = doc
            self.left()
            time.sleep(0.2)
        failed = [d for d in jobs.values() if d["state"] != "DONE"]
        for d in failed[:3]:
            log(f"job {d['id']} {d['state']} on {d.get('hosts')}: {d.get('exit_reason')}; history "
                f"{[(h['state'], h.get('reason')) for h in d.get('history') or []]}")
        if failed:
            raise RuntimeError(f"{len(failed)} job(s) ended EXIT, e.g. {failed[0]['id']}: "
                               f"{failed[0].get('exit_reason')}")
        return [jobs[j] for j in ids]

    def reads(self, where: str) -> list[str]:
        """A job's command: read the whole object at ``$where/OBJECT`` and check its size."""
        f = f'"${where}/{OBJECT}"'
        return ["sh", "-c", f'cat {f} > /dev/null && test "$(stat -c %s {f})" -eq {self.args.size}']

    def wait_claim(self, name: str, ready: int) -> dict:
        while True:
            claim = self.get(f"/v1/claims/{name}")
            if claim["replicas_ready"] >= ready:
                return claim
            if claim["state"] == "FAILED" or any(r["state"] == "FAILED" for r in claim["replicas"]):
                raise RuntimeError(f"claim {name}: {claim['replicas']}")
            self.left()
            time.sleep(0.2)

    def delete_claim(self, name: str) -> None:
        self.api.client.delete(f"/v1/claims/{name}")
        while self.get(f"/v1/claims/{name}")["state"] != "RELEASED":
            self.left()
            time.sleep(0.2)

    # ------------------------------------------------------------ the modes

    def stage_in(self) -> tuple[float, int]:
        before, started = self.store_read(), time.monotonic()
        ids = [self.post("/v1/jobs", {"command": self.reads("XCE_STAGE"),
                                      "stage_in": [f"{REMOTE}:{BUCKET}/{OBJECT}"],
                                      "stage_size": str(max(2 * self.args.size, 64 << 20)),
                                      "name": "stage"})["id"] for _ in range(self.args.jobs)]
        self.wait_done(ids)
        return time.monotonic() - started, self.store_read() - before

    def cache(self) -> tuple[float, int, int]:
        before, started = self.store_read(), time.monotonic()
        self.post("/v1/claims", {"name": "weights", "class": "local", "size": str(max(2 * self.args.size, 64 << 20)),
                                 "access_mode": "ROX", "cache": True,
                                 "populate_from": f"{REMOTE}:{BUCKET}/{OBJECT}"})
        ids = [self.post("/v1/jobs", {"command": self.reads("XCE_CLAIM_WEIGHTS"),
                                      "claims": ["weights"], "name": "cached"})["id"] for _ in range(self.args.jobs)]
        self.wait_done(ids)
        took, moved = time.monotonic() - started, self.store_read() - before
        replicas = len([r for r in self.get("/v1/claims/weights")["replicas"] if r["state"] == "READY"])
        self.delete_claim("weights")
        return took, moved, replicas

    def warm(self) -> float:
        self.post("/v1/claims", {"name": "warm", "class": "local", "size": str(max(2 * self.args.size, 64 << 20)),
                                 "access_mode": "ROX", "cache": True, "hosts": ["host1", "host2"],
                                 "populate_from": f"{REMOTE}:{BUCKET}/{OBJECT}"})
        self.wait_claim("warm", 2)
        ids = [self.post("/v1/jobs", {"command": ["true"], "claims": ["warm"], "name": "short"})["id"]
               for _ in range(self.args.short)]
        jobs = self.wait_done(ids)
        on_warm = sum(j["hosts"][0] in ("host1", "host2") for j in jobs)
        self.delete_claim("warm")
        return on_warm / len(jobs)

    def run(self) -> int:
        self.make_data()
        self.start_s3()
        self.start_cluster()
        staged_s, staged_b = self.stage_in()
        log(f"stage-in: {staged_s:.1f}s, {format_size(staged_b)} read by the store")
        cached_s, cached_b, replicas = self.cache()
        log(f"cache: {cached_s:.1f}s, {format_size(cached_b)} read by the store, {replicas} replicas")
        share = self.warm()
        print(f"\n{self.args.jobs} jobs on {self.args.hosts} hosts x {self.args.slots} slots read one "
              f"{format_size(self.args.size)} object from rclone serve s3 on loopback; load average at the end "
              f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(filesystem_note(self.tmp))
        print("mode | makespan s | bytes read by the store | replicas")
        print(f"stage-in per job | {staged_s:.1f} | {format_size(staged_b)} | -")
        print(f"cache claim | {cached_s:.1f} | {format_size(cached_b)} | {replicas}")
        print(f"cache vs stage-in: {staged_b / max(cached_b, 1):.1f}x fewer bytes (goal >= 6x), "
              f"{staged_s / cached_s:.2f}x sooner (goal >= 4x)")
        print(f"warm placement: {share:.0%} of {self.args.short} short jobs started on the 2 warm hosts of "
              f"{self.args.hosts} (goal >= 90%)")
        return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=parse_size, default=parse_size("512Mi"), help="bytes of the one object")
    p.add_argument("--jobs", type=int, default=32, help="jobs reading it, per mode")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--short", type=int, default=16, help="short jobs for the warm-placement part")
    p.add_argument("--max-seconds", type=float, default=1200.0)
    return run(CacheBench(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
