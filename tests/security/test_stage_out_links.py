"""Issue 27, finding 1: a shared-class stage-out follows no link the job planted in its staging claim.

The provisioner copies a shared staging claim out as root.  A job, run as its own unix account
(``--run-as-users``, simfs ``set_owner``), plants links to a directory only root may read, and asks
for them to be staged out to its bucket on a real S3 server (``rclone serve s3``):

- ``d``: a link to the directory;
- ``f``: a link to the file;
- ``e/secret.txt``: a link in the middle of the path;
- ``r``: a real directory while the job runs, swapped for a link after the job ended, at the very
  moment the copy starts: the provisioner's rclone is a wrapper (``[transfers] rclone``) that runs
  the test's hook before it execs the real rclone, so the race is won every time, not by timing.

Nothing of the root-only directory may reach the S3 server, whatever the job's fate.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets

import pytest

from tests.helpers import Cluster, cli, wait_for
from tests.integration.test_job_claims import ROOT
from tests.integration.test_transfers import CONFIG
from tests.security.test_run_as_users import shared  # noqa: F401 (a fixture: a directory anyone may write in)
from tests.transfer_servers import RCLONE, S3Server
from tests.worker.test_sandbox import account  # noqa: F401 (a fixture: a throwaway unix account)

pytestmark = pytest.mark.skipif(not ROOT, reason="jobs run as their users only under a root worker (CI is root)")


def test_stage_out_follows_no_planted_link_not_even_one_swapped_in_as_the_copy_starts(shared, account):
    top = shared  # (the job, as its user, and the hook leave marks in it; the rest is made root's)
    secret_dir = os.path.join(top, "rootonly")
    os.mkdir(secret_dir, 0o700)
    secret = secrets.token_hex(32).encode()
    with open(os.path.join(secret_dir, "secret.txt"), "wb") as fh:
        fh.write(secret)
    hooks = os.path.join(top, "hooks")
    os.mkdir(hooks, 0o755)
    plant = os.path.join(hooks, "plant.sh")  # written once the racing job's claim is known
    wrapper = os.path.join(hooks, "rclone")
    with open(wrapper, "w") as fh:
        fh.write(f'#!/bin/sh\nif [ "$1" = copyto ] && [ -e {plant} ]; then /bin/sh {plant}; fi\nexec {RCLONE} "$@"\n')
    os.chmod(wrapper, 0o755)

    s3 = S3Server(os.path.join(top, "s3")).start()
    cl = None
    try:
        loot = s3.bucket("loot")
        with open(os.path.join(top, "xce.toml"), "w") as fh:
            fh.write(CONFIG)
        transfers = os.path.join(top, "transfers.toml")
        with open(transfers, "w") as fh:
            fh.write(f'[transfers]\ntimeout = 60\nrclone = "{wrapper}"\n\n[[transfers.remotes]]\nname = "lab"\n'
                     f'type = "s3"\n[transfers.remotes.options]\n{s3.options()}')
        os.chmod(transfers, 0o600)
        cl = Cluster(os.path.join(top, "cluster"), config=os.path.join(top, "xce.toml")).start()
        cl.add_provisioner(extra_args=("--transfer-config", transfers), simfs_settings="set_owner = true\n")
        cl.add_worker("host1", slots=4, extra_args=["--run-as-users"])
        with cl.api() as c:
            assert c.post("/v1/users", json={"name": account, "projects": ["physics"]}).status_code == 201
            env = {**cl.env, "XCE_TOKEN": c.post("/v1/tokens", json={"user": account}).json()["token"]}

        def submit(out: str, script: str) -> int:
            r = cli(env, "--json", "submit", "--project", "physics", "--stage-class", "simfs", "--stage-size", "16Mi",
                    "--stage-out", out, "--", "sh", "-c", script)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)["id"]

        ready, gate = os.path.join(top, "ready"), os.path.join(top, "gate")
        planted = {
            "dir link": submit("d:s3://loot/dir", f'ln -s {secret_dir} "$XCE_STAGE/d"'),
            "file link": submit("f:s3://loot/file", f'ln -s {secret_dir}/secret.txt "$XCE_STAGE/f"'),
            "link mid-path": submit("e/secret.txt:s3://loot/mid", f'ln -s {secret_dir} "$XCE_STAGE/e"'),
        }
        racing = submit("r:s3://loot/race", 'mkdir "$XCE_STAGE/r" && echo harmless > "$XCE_STAGE/r/note.txt" && '
                                             f'touch {ready} && while [ ! -e {gate} ]; do sleep 0.05; done')
        wait_for(lambda: os.path.exists(ready) or cl.job(racing)["state"] in ("DONE", "EXIT"), timeout=60,
                 what="the racing job's directory")
        assert cl.job(racing)["state"] == "RUN", cl.job(racing)["exit_reason"]
        data = cl.claim(f"j{racing}.1:stage")["path"]
        with open(plant, "w") as fh:  # as the copy starts: r becomes a link to the root-only directory
            fh.write(f'if [ -d {data}/r ] && [ ! -L {data}/r ]; then mv {data}/r {data}/r.was && '
                     f'ln -s {secret_dir} {data}/r && touch {top}/planted; fi\n')
        with open(gate, "w"):
            pass

        ended = {what: cl.wait_state(job, "DONE", "EXIT", timeout=60) for what, job in planted.items()}
        raced = cl.wait_state(racing, "DONE", "EXIT", timeout=60)
        assert os.path.exists(os.path.join(top, "planted")), "the hook swapped the link in as the copy started"

        leaked = []
        for top_dir, _, files in os.walk(s3.data):
            for name in files:
                with open(os.path.join(top_dir, name), "rb") as fh:
                    if secret in fh.read():
                        leaked.append(os.path.relpath(os.path.join(top_dir, name), s3.data))
        assert leaked == [], f"root-only data reached the job's bucket: {leaked}"
        for what, job in ended.items():
            assert job["state"] == "EXIT" and "symbolic link" in job["exit_reason"], (what, job["exit_reason"])
        # the racing job's stage-out copied what the directory held when its copy began: its own file
        assert raced["state"] == "DONE", raced["exit_reason"]
        with open(os.path.join(loot, "race", "note.txt")) as fh:
            assert fh.read() == "harmless\n"
        assert os.listdir(loot) == ["race"], "nothing at all was staged out through a planted link"
        assert os.stat(os.path.join(top, "planted")).st_uid == pwd.getpwnam(account).pw_uid, \
            "the stage-out's rclone ran as the job's user"
    finally:
        if cl is not None:
            cl.stop()
        s3.stop()
