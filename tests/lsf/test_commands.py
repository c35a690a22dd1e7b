"""The LSF commands against a real cluster: what bsub prints and refuses, bjobs' formats, the
control commands' words, bhist/bacct, and the site commands the client packages read."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import wait_for

pytestmark = pytest.mark.long

SUBMITTED = re.compile(r"^Job <(\d+)> is submitted to queue <default>\.\n$")


def bsub(site, *argv, input=None, cwd=None) -> int:
    r = site.run("bsub", *argv, input=input, cwd=cwd, check=True)
    m = SUBMITTED.match(r.stdout)
    assert m, r.stdout  # exactly LSF's line: no other digit before the id
    return int(m.group(1))


def state(site, job_id) -> str:
    r = site.run("bjobs", "-noheader", "-o", "stat", str(job_id), check=True)
    return r.stdout.strip()


def wait_stat(site, job_id, *states, timeout=60.0) -> str:
    return wait_for(lambda: state(site, job_id) in states and state(site, job_id), timeout=timeout,
                    what=f"job {job_id} in {states}")


def test_a_script_from_stdin_with_bsub_lines_runs_and_the_command_line_wins(site, tmp_path):
    script = "#!/bin/sh\n#BSUB -J fromscript\n#BSUB -q nosuchqueue\n#BSUB -o out.%J\necho \"ran $0\"\n"
    job = bsub(site, "-q", "default", input=script, cwd=str(tmp_path))
    assert wait_stat(site, job, "DONE", "EXIT") == "DONE"
    out = (tmp_path / f"out.{job}").read_text()
    assert "ran " in out
    rec = json.loads(site.run("bjobs", "-json", "-o", "jobid job_name queue", str(job), check=True).stdout)
    assert rec["RECORDS"] == [{"JOBID": str(job), "JOB_NAME": "fromscript", "QUEUE": "default"}]


def test_a_script_file_need_not_be_executable_and_a_command_line_runs_through_a_shell(site, tmp_path):
    (tmp_path / "job.sh").write_text("#BSUB -o file.out\necho from-file\n")
    job = bsub(site, "job.sh", cwd=str(tmp_path))
    line = bsub(site, "-o", "line.out", "echo a; echo b", cwd=str(tmp_path))
    assert wait_stat(site, job, "DONE", "EXIT") == "DONE" and wait_stat(site, line, "DONE", "EXIT") == "DONE"
    assert (tmp_path / "file.out").read_text().strip().endswith("from-file")
    assert (tmp_path / "line.out").read_text().split()[-2:] == ["a", "b"]


def test_output_and_error_to_one_file_keeps_both(site, tmp_path):
    job = bsub(site, "-o", "both.%J", "-e", "both.%J", "echo to-out; echo to-err >&2", cwd=str(tmp_path))
    assert wait_stat(site, job, "DONE", "EXIT") == "DONE"
    text = (tmp_path / f"both.{job}").read_text()
    assert "to-out" in text and "to-err" in text


@pytest.mark.parametrize("argv, words", [
    (["-Is", "bash"], "interactive jobs"),
    (["-I", "true"], "interactive jobs"),
    (["-G", "grp", "true"], "user groups (-G)"),
    (["-U", "resv", "true"], "reservations (-U)"),
])
def test_options_whose_feature_is_not_there_are_refused_not_ignored(site, argv, words):
    r = site.run("bsub", *argv)
    assert r.returncode != 0 and r.stdout == "" and words in r.stderr, (r.stdout, r.stderr)


def test_gpu_requests_are_taken_and_a_bad_one_refused(site):
    """-gpu is LSF's (issue 33): taken, the job asks for devices (no host of this site has GPUs, so it waits
    saying so); a request that means nothing is refused as bsub refuses it."""
    job = bsub(site, "-gpu", "num=1:j_exclusive=yes", "true")
    reason = wait_for(lambda: (r := site.run("bjobs", "-noheader", "-o", "pend_reason", str(job), check=True)
                               .stdout.strip()) and "gpu:" in r and r, what="a pending reason about GPUs")
    assert "no matching host has GPUs" in reason
    site.run("bkill", str(job), check=True)
    r = site.run("bsub", "-gpu", "num=1:mode=fast", "true")
    assert r.returncode == 255 and r.stdout == "" and "mode must be shared or exclusive_process" in r.stderr


def test_run_limits_and_dependencies_reach_the_job(site):
    first = bsub(site, "-H", "-J", "first", "true")
    second = bsub(site, "-W", "1:30", "-wa", "USR1", "-wt", "5", "-w", 'done("first")', "-ti", "true")
    job = site.cluster.job(second)
    assert (job["dependency"], job["terminate_orphan"], job["run_limit"]) == ('done("first")', True, 5400.0)
    r = site.run("bjobs", "-l", str(second), check=True)
    assert 'Dependency Condition: done("first")' in r.stdout and " 90.0 min" in r.stdout
    site.run("bkill", str(first), check=True)  # done("first") can never hold now: -ti ends the second
    assert wait_stat(site, second, "EXIT") == "EXIT"


def test_a_bad_resource_requirement_and_an_unknown_option_are_refused(site):
    r = site.run("bsub", "-R", "select[", "true")
    assert r.returncode == 255 and "bad resource requirement" in r.stderr
    r = site.run("bsub", "-nosuchoption", "true")
    assert r.returncode == 255 and r.stdout == ""


def test_bjobs_formats_json_and_unknown_ids(site, tmp_path):
    held = bsub(site, "-H", "-J", "Snakemake_rule_a___(1234)" if False else "held-one", "sleep 60")
    rows = site.run("bjobs", "-noheader", "-o", "jobid stat user queue job_name delimiter=','", str(held),
                    check=True).stdout.splitlines()
    assert rows == [f"{held},PSUSP,admin,default,held-one"]
    table = site.run("bjobs", check=True).stdout.splitlines()
    assert table[0].split() == ["JOBID", "USER", "STAT", "QUEUE", "FROM_HOST", "EXEC_HOST", "JOB_NAME", "SUBMIT_TIME"]
    assert any(line.split()[:3] == [str(held), "admin", "PSUSP"] for line in table[1:])
    doc = json.loads(site.run("bjobs", "-json", "-o", "jobid stat exit_code exit_reason kill_reason suspend_reason "
                              "pend_reason start_time finish_time submit_time exec_host", str(held), "99999").stdout)
    assert doc["COMMAND"] == "bjobs" and doc["JOBS"] == 2
    first, missing = doc["RECORDS"]
    assert first["JOBID"] == str(held) and first["STAT"] == "PSUSP" and first["START_TIME"] == ""
    assert all(isinstance(v, str) for v in first.values()) and first["SUBMIT_TIME"]
    assert missing == {"JOBID": "99999", "ERROR": "Job <99999> is not found"}
    r = site.run("bjobs", "99999")
    assert r.returncode == 255 and "Job <99999> is not found" in r.stderr
    long = site.run("bjobs", "-l", str(held), check=True).stdout
    assert f"Job <{held}>, Job Name <held-one>" in long and "Status <PSUSP>" in long
    assert site.run("bkill", str(held), check=True).stdout.strip() == f"Job <{held}> is being terminated"


def test_finished_jobs_stay_listed_by_id_and_with_a_and_wildcards(site):
    ok = bsub(site, "-J", "wild-ok-1", "true")
    bad = bsub(site, "-J", "wild-bad-1", "exit 3")
    assert wait_stat(site, ok, "DONE", "EXIT") == "DONE" and wait_stat(site, bad, "DONE", "EXIT") == "EXIT"
    rows = site.run("bjobs", "-noheader", "-o", "jobid stat exit_code", "-aJ", "wild-*-1", check=True).stdout
    assert sorted(line.split() for line in rows.splitlines()) == sorted([[str(ok), "DONE", "0"],
                                                                         [str(bad), "EXIT", "3"]])
    assert site.run("bjobs", "-noheader", "-J", "wild-*-1").stdout == ""  # without -a: unfinished only
    assert "EXIT" in site.run("bjobs", "-o", "stat", str(bad), check=True).stdout
    hist = site.run("bhist", "-l", str(bad), check=True).stdout
    assert f"Job <{bad}>" in hist and "Project <default>" in hist and "Exited with exit code 3" in hist
    acct = site.run("bacct", "-l", str(ok), check=True).stdout
    assert "Accounting information about this job" in acct and "done" in acct
    r = site.run("bkill", str(ok))
    assert r.returncode == 255 and "already finished" in r.stderr


def test_bstop_bresume_bpeek_on_a_running_job(site, tmp_path):
    """bpeek reads the output on the job's host, through the job: here its output file is gone from every
    path (the job removed it, as if it were on a disk this host cannot see), and where it was, the job
    put a link to a file only root may read: bpeek shows what the job wrote, and nothing of that file."""
    secret = tmp_path / "secret"
    secret.write_text("root-only-words\n")
    secret.chmod(0o600)
    job = bsub(site, "-o", "peek.out", f"echo peek-me; rm peek.out; ln -s {secret} peek.out; echo more; sleep 60",
               cwd=str(tmp_path))
    wait_stat(site, job, "RUN")
    seen = wait_for(lambda: "more" in (out := site.run("bpeek", str(job)).stdout) and out, what="bpeek shows it")
    assert seen.splitlines() == ["<< output from stdout >>", "peek-me", "more"]
    assert not (tmp_path / "peek.out").resolve() == tmp_path / "peek.out"  # (a link: the file is gone)
    assert site.run("bstop", str(job), check=True).stdout.strip() == f"Job <{job}> is being stopped"
    wait_stat(site, job, "USUSP")
    assert site.run("bresume", str(job), check=True).stdout.strip() == f"Job <{job}> is being resumed"
    wait_stat(site, job, "RUN")
    site.run("bkill", str(job), check=True)
    assert wait_stat(site, job, "EXIT", "DONE") == "EXIT"


def test_site_commands_report_the_envdir_as_clients_read_it(site):
    conf = site.run("badmin", "showconf", "mbd", check=True).stdout.strip().split("\n")
    settings = dict(tuple(line.strip().split(" = ")) for line in conf[1:])
    assert settings["LSF_UNIT_FOR_LIMITS"] == "MB" and settings["LSF_CONFDIR"] == site.envdir
    assert settings["LSB_SHAREDIR"] and settings["CLEAN_PERIOD"] == "3600"
    cluster = site.run("lsclusters", check=True).stdout.split("\n")[1].split()[0]
    with open(f"{settings['LSF_CONFDIR']}/lsbatch/{cluster}/configdir/lsb.params") as fh:
        assert "DEFAULT_QUEUE = default" in fh.read()
    assert "CLEAN_PERIOD = 3600" in site.run("bparams", "-a", check=True).stdout
    assert "My cluster name is xce" in site.run("lsid", check=True).stdout
    assert site.run("bqueues", check=True).stdout.split()[:2] == ["QUEUE_NAME", "PRIO"]
    hosts = site.run("bhosts", check=True).stdout.splitlines()
    assert [h.split()[0] for h in hosts[1:]] == ["host1", "host2"]
    held = [bsub(site, "-H", "true") for _ in range(2)]
    r = site.run("bmod", "-J", "renamed", "-sp", "7", "-W", "5", str(held[0]), check=True)
    assert r.stdout.strip() == f"Parameters of job <{held[0]}> are being changed"
    assert "renamed" in site.run("bjobs", str(held[0]), check=True).stdout
    r = site.run("bmod", "-q", "nosuch", str(held[0]))
    assert r.returncode == 255 and "queue 'nosuch' does not exist" in r.stderr
    killed = site.run("bkill", "0", check=True).stdout.splitlines()  # 0: every unfinished job of yours
    assert all(f"Job <{j}> is being terminated" in killed for j in held)


def test_bpeek_reads_an_output_larger_than_a_request_body_whole(site, tmp_path):
    """The worker posts what it read (base64 in JSON) to the controller, whose request bodies are at most
    1 MiB: a peek's page is cut to fit, and bpeek reads page after page until it has all."""
    job = bsub(site, "-o", "big.out", "yes abcdefghij | head -n 300000; echo end-of-it; sleep 60", cwd=str(tmp_path))
    wait_stat(site, job, "RUN")
    out = wait_for(lambda: "end-of-it" in (o := site.run("bpeek", str(job)).stdout) and o, what="bpeek has it all")
    lines = out.splitlines()  # 3.3 MB of output
    assert lines[0] == "<< output from stdout >>" and lines[-1] == "end-of-it"
    assert lines[1:-1] == ["abcdefghij"] * 300_000
    site.run("bkill", str(job), check=True)
    wait_stat(site, job, "EXIT", "DONE")
