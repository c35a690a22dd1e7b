"""What a job is, as LSF's users expect it (issue 31), on a real cluster: a command line run by a shell, a
script sent with the submission, the submission directory, the submitter's environment (never a token),
LSF's job variables.

host1: 2 slots     host2: 2 slots
"""

from __future__ import annotations

import glob
import os
import stat

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.conftest import cluster_config

PRIVATE = 'private_env = ["SECRET_*"]\n'


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("semantics")
    cfg = root / "xce.toml"
    cfg.write_text(cluster_config(2.0).replace("[controller]\n", "[controller]\n" + PRIVATE, 1))
    c = Cluster(str(root), config=str(cfg)).start()
    c.add_worker("host1", slots=2)
    c.add_worker("host2", slots=2)
    yield c
    c.stop()


def done(cl, job_id: int) -> dict:
    job = cl.wait_state(job_id, "DONE", "EXIT")
    assert job["state"] == "DONE", job
    return job


def test_a_command_line_runs_through_the_shell_and_an_argument_vector_as_it_is(cl, tmp_path):
    line = cl.submit("--shell", "-o", "line", "--", "echo a; echo b | tr b c", cwd=str(tmp_path))
    argv = cl.submit("-o", "argv", "--", "echo", "a;", "$HOME", cwd=str(tmp_path))  # no shell reads it
    done(cl, line), done(cl, argv)
    assert (tmp_path / "line").read_text() == "a\nc\n"
    assert (tmp_path / "argv").read_text() == "a; $HOME\n"


def test_a_script_from_standard_input_runs_with_its_interpreter_or_sh_executable_or_not(cl, tmp_path):
    bang = "#!/usr/bin/env python3\nimport sys\nprint('py', sys.argv[1:])\n"
    plain = "echo sh $0 | grep -q script && echo ran by sh with \"$@\"\n"
    a = cl.submit("--script", "-", "-o", "a", "--", "x", "y", cwd=str(tmp_path), input=bang)
    b = cl.submit("--script", "-", "-o", "b", "--", "z", cwd=str(tmp_path), input=plain)
    (tmp_path / "job.sh").write_text("echo from a file that is not executable\n")
    assert not os.stat(tmp_path / "job.sh").st_mode & stat.S_IXUSR
    c = cl.submit("--script", "job.sh", "-o", "c", cwd=str(tmp_path))
    for j in (a, b, c):
        done(cl, j)
    assert (tmp_path / "a").read_text() == "py ['x', 'y']\n"
    assert (tmp_path / "b").read_text() == "ran by sh with z\n"
    assert (tmp_path / "c").read_text() == "from a file that is not executable\n"
    shown = cl.xce("job", "show", str(a)).stdout
    assert "script (#!/usr/bin/env python3) x y" in shown


def test_a_relative_command_is_found_in_the_submission_directory(cl, tmp_path):
    (tmp_path / "train.sh").write_text("#!/bin/sh\necho trained in $(pwd)\n")
    os.chmod(tmp_path / "train.sh", 0o755)
    j = cl.submit("-o", "out", "--", "./train.sh", cwd=str(tmp_path))
    done(cl, j)
    assert (tmp_path / "out").read_text() == f"trained in {tmp_path}\n"
    missing = cl.submit("--", "./not-there.sh", cwd=str(tmp_path))
    job = cl.wait_state(missing, "EXIT")
    assert (job["exit_code"], job["exit_reason"]) == (127, "failed to start: command not found: ./not-there.sh")


def test_a_submission_directory_missing_on_the_host_falls_back_to_the_workspace_with_a_note(cl, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    j = cl.submit("-H", "-o", str(tmp_path / "out"), "--", "sh", "-c", 'pwd; echo "$XCE_WORKSPACE"',
                  cwd=str(gone))
    gone.rmdir()  # held while the directory goes: on the job's host it does not exist
    cl.xce("release", str(j))
    job = done(cl, j)
    pwd, workspace = (tmp_path / "out").read_text().split()
    assert pwd == workspace and job["submit_dir"] == str(gone)
    note = (f"the submission directory {gone} cannot be entered on this host (No such file or directory): the job "
            f"started in its workspace {pwd}")
    assert job["note"] == note
    assert "Note:" in (shown := cl.xce("job", "show", str(j)).stdout) and str(gone) in shown


def test_the_submitters_environment_goes_with_the_job_but_never_a_token_nor_a_private_variable(cl, tmp_path):
    env = {"MY_VAR": "mine", "PATH": f"/opt/my/bin:{os.environ['PATH']}", "SECRET_KEY": "s3cr3t",
           "XCE_TOKEN_FILE": "/home/u/.xce-token", "XCE_ARRAY_INDEX": "7", "LSB_JOBINDEX": "7"}
    j = cl.submit("-o", "env", "--", "env", cwd=str(tmp_path), env=env)  # XCE_TOKEN: the cluster's admin token
    done(cl, j)
    seen = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    assert seen["MY_VAR"] == "mine" and seen["PATH"].startswith("/opt/my/bin:")
    assert not {"XCE_TOKEN", "XCE_TOKEN_FILE", "SECRET_KEY", "XCE_ARRAY_INDEX"} & set(seen)
    assert seen["LSB_JOBINDEX"] == "0"  # the job's own, not the submitter's
    assert cl.ctl.token not in (tmp_path / "env").read_text()
    clean = cl.submit("--env", "none", "-o", "clean", "--", "env", cwd=str(tmp_path), env=env)
    done(cl, clean)
    assert "MY_VAR" not in (tmp_path / "clean").read_text()
    named = cl.submit("--env", "MY_VAR, OTHER=2", "-o", "named", "--", "env", cwd=str(tmp_path), env=env)
    done(cl, named)
    seen = dict(line.split("=", 1) for line in (tmp_path / "named").read_text().splitlines() if "=" in line)
    assert (seen["MY_VAR"], seen["OTHER"], seen["PATH"]) == ("mine", "2", "/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                                                          "/usr/bin:/sbin:/bin")


def test_the_attack_a_token_sent_in_the_environment_through_the_api_is_dropped_and_never_logged(cl, tmp_path):
    """A client that is not xce (or an old one) puts the caller's token in a job's environment: the
    controller drops it before anything is written, so neither the job, nor its host, nor a reader of the
    log or of the job's document sees it."""
    token = cl.ctl.token
    with cl.api() as c:
        r = c.post("/v1/jobs", json={"command": ["env"], "stdout": str(tmp_path / "env"), "submit_dir": str(tmp_path),
                                     "env": {"XCE_TOKEN": token, "xce_token": token, "SECRET_X": token, "OK": "1"}})
        assert r.status_code == 201, r.text
        j = r.json()["id"]
        done(cl, j)
        assert token not in c.get(f"/v1/jobs/{j}").text
    text = (tmp_path / "env").read_text()
    assert "OK=1" in text and token not in text
    for db in glob.glob(os.path.join(cl.ctl.state_dir, "*.db*")):  # the log and snapshots (tokens: hashes only)
        with open(db, "rb") as fh:
            assert token.encode() not in fh.read(), db


def test_the_launcher_running_as_root_never_gets_the_submitters_environment(cl, tmp_path):
    """The shepherd runs as root: a submitter's LD_PRELOAD (and the like) in its environment would be
    code of the user's run as root.  Only the job, after it became its user, gets that environment."""
    j = cl.submit("--", "sleep", "60", cwd=str(tmp_path), env={"LD_PRELOAD": "/tmp/evil.so", "MARK": "x"})
    job = cl.wait_state(j, "RUN")
    run_dir = os.path.join(cl.root, job["hosts"][0], "runs", f"{j}.1")
    pid = int(wait_for(lambda: open(os.path.join(run_dir, "shepherd.pid")).read().strip(), what="shepherd"))
    with open(f"/proc/{pid}/environ", "rb") as fh:
        shepherd_env = fh.read()
    with open(os.path.join(run_dir, "pgid")) as fh:
        with open(f"/proc/{int(fh.read())}/environ", "rb") as jf:
            job_env = jf.read()
    cl.xce("kill", str(j))
    assert b"LD_PRELOAD" not in shepherd_env and b"MARK" not in shepherd_env
    assert b"MARK=x" in job_env and b"LD_PRELOAD=/tmp/evil.so" in job_env


def test_lsf_job_variables(cl, tmp_path):
    script = ('echo "$LSB_JOBID|$LSB_JOBINDEX|$LSB_JOBNAME|$LSB_QUEUE|$LSB_HOSTS|$LSB_MCPU_HOSTS"; '
              'cat "$LSB_DJOB_HOSTFILE"')
    j = cl.submit("-n", "3", "-J", "Snake", "-o", "par", "--", "sh", "-c", script, cwd=str(tmp_path))
    job = done(cl, j)
    first, *hostfile = (tmp_path / "par").read_text().splitlines()
    jobid, index, name, queue, hosts, mcpu = first.split("|")
    assert (jobid, index, name, queue) == (str(j), "0", "Snake", "default")
    assert sorted(hosts.split()) == sorted(hostfile) and len(hostfile) == 3
    pairs = mcpu.split()
    assert [pairs[i] for i in range(0, len(pairs), 2)] == job["hosts"]
    assert sum(int(pairs[i]) for i in range(1, len(pairs), 2)) == 3
    arr = cl.submit("-J", "arr[2-3]", "-o", "arr.%I", "--", "sh", "-c", 'echo "$LSB_JOBID $LSB_JOBINDEX $LSB_JOBNAME"',
                    cwd=str(tmp_path))
    for i in (2, 3):
        assert wait_for(lambda: (tmp_path / f"arr.{i}").exists() and (tmp_path / f"arr.{i}").read_text(),
                        what="array output") == f"{arr} {i} arr[{i}]\n"


def test_a_memory_reservation_runs_on_a_worker_that_was_told_nothing_of_its_memory(cl, tmp_path):
    """``rusage[mem=]`` draws on the ``mem`` each worker offers unless told: its machine's memory."""
    with cl.api() as c:
        hosts = c.get("/v1/hosts").json()
    assert all(h["counters"].get("mem", 0) > 0 for h in hosts)
    j = cl.submit("-R", "rusage[mem=64Mi]", "-R", "span[hosts=1]", "--", "true", cwd=str(tmp_path))
    job = done(cl, j)
    assert job["resreq"] == "rusage[mem=64Mi] span[hosts=1]" and job["mem_limit"] is None


def test_the_python_client_submits_command_lines_and_scripts_and_finds_jobs_by_id(cl, tmp_path):
    from xce.client import Client

    with Client(cl.ctl.url, cl.ctl.token) as c:
        line = c.submit("echo a; echo b", shell=True, stdout=str(tmp_path / "line"))
        script = c.submit(["x"], script="#!/bin/sh\necho script $1\n", stdout=str(tmp_path / "script"),
                          submit_dir=str(tmp_path))
        for j in (line, script):
            done(cl, j["id"])
        assert [j["id"] for j in c.jobs(ids=[script["id"], line["id"], 10**9])] == [line["id"], script["id"]]
    assert (tmp_path / "line").read_text() == "a\nb\n"
    assert (tmp_path / "script").read_text() == "script x\n"
