"""The job-spec parser (``xce.jobspec``): a command line's submission options into one ``Submission``."""

from __future__ import annotations

import argparse
import typing

import pytest

from xce import jobspec
from xce.jobspec import JobSpecError
from xce.wire import Submission


def parse(*argv: str, cwd: str = "/home/u/run", remotes: tuple[str, ...] = (), environ: dict | None = None,
          stdin: str | None = None, lsf_unit: str | None = None) -> Submission:
    p = argparse.ArgumentParser(exit_on_error=False)
    jobspec.add_options(p)
    asked = []

    def remote_names():
        asked.append(1)
        return set(remotes)

    s = jobspec.submission(p.parse_args(list(argv)), cwd=cwd, remote_names=remote_names, environ=environ,
                           stdin=None if stdin is None else lambda: stdin, lsf_unit=lsf_unit)
    assert len(asked) <= 1  # asked once at most, whatever the number of stage options
    return s


def test_every_option_sets_a_submission_field_and_every_field_but_the_request_id_has_an_option():
    fields = set(typing.get_type_hints(Submission))
    options = [o.field for o in jobspec.OPTIONS]
    # the request id is the client's; where the user stands and whether the environment is all of it are the
    # front door's to say (submit_dir, env_all)
    assert len(options) == len(set(options)) and set(options) == fields - {"request_id", "submit_dir", "env_all"}


def test_a_plain_submission():
    s = parse("--", "echo", "hi")
    assert s == Submission(command=("echo", "hi"), submit_dir="/home/u/run")  # it starts where it was submitted


def test_a_command_line_a_script_and_an_argument_vector():
    s = parse("--shell", "--", "echo a; echo b")
    assert (s.command, s.shell, s.script) == (("echo a; echo b",), True, None)
    with pytest.raises(JobSpecError, match="--shell takes the command line as one argument"):
        parse("--shell", "--", "echo", "a")
    s = parse("--script", "-", "--", "x", stdin="#!/bin/bash\necho $1\n")
    assert (s.command, s.shell, s.script) == (("x",), False, "#!/bin/bash\necho $1\n")
    with pytest.raises(JobSpecError, match="no standard input"):
        parse("--script", "-")
    with pytest.raises(JobSpecError, match="is empty"):
        parse("--script", "-", stdin="  \n")
    with pytest.raises(JobSpecError, match="cannot read the script nope.sh: No such file"):
        parse("--script", "nope.sh", cwd="/")
    with pytest.raises(JobSpecError, match="give one of them"):
        parse("--shell", "--script", "-", stdin="true\n")
    with pytest.raises(JobSpecError, match="the following arguments are required: CMD"):
        parse()


def test_a_script_file_is_read_here(tmp_path):
    (tmp_path / "job.sh").write_text("echo hi\n")  # not executable: it need not be
    s = parse("--script", "job.sh", cwd=str(tmp_path))
    assert (s.script, s.command) == ("echo hi\n", ())


def test_env_as_lsf_takes_it_and_never_a_token():
    environ = {"PATH": "/venv/bin:/usr/bin", "A": "1", "B": "2", "XCE_TOKEN": "secret", "XCE_TOKEN_FILE": "/t"}
    s = parse("--", "true", environ=environ)  # all, by default
    assert (s.env, s.env_all) == ({"PATH": "/venv/bin:/usr/bin", "A": "1", "B": "2"}, True)
    s = parse("--env", "all, ~A, B=3, C='x,y'", "--", "true", environ=environ)
    assert s.env == {"PATH": "/venv/bin:/usr/bin", "B": "3", "C": "x,y"} and s.env_all
    s = parse("--env", "A, C=4, XCE_TOKEN=x", "--", "true", environ=environ)
    assert (s.env, s.env_all) == ({"A": "1", "C": "4"}, False)
    s = parse("--env", "none", "--", "true", environ=environ)
    assert (s.env, s.env_all) == (None, False)
    for bad, says in (("A, all", "all or none comes first"), ("~A", "needs all first"), ("'A", "not closed"),
                      ("", "needs all, none")):
        with pytest.raises(JobSpecError, match=says):
            parse("--env", bad, "--", "true", environ=environ)


def test_paths_are_made_absolute_as_bsub_takes_them():
    s = parse("--cwd", "sub", "-o", "out.%J", "-e", "/tmp/err", "--", "true")
    assert (s.cwd, s.stdout, s.stderr) == ("/home/u/run/sub", "/home/u/run/sub/out.%J", "/tmp/err")
    s = parse("-o", "out", "--", "true")
    assert s.stdout == "/home/u/run/out" and s.cwd is None
    with pytest.raises(JobSpecError, match="--stdout needs a path"):
        parse("-o", "", "--", "true")


def test_every_option_reaches_its_field():
    s = parse("-q", "q1", "-n", "4", "-J", "a[1-3]", "-P", "p", "-r", "-H", "-M", "1G", "--claim", "c1",
              "--claim", "c2:ro", "--scratch", "1G:local", "--stage-class", "shared", "--app", "serve",
              "-R", "select[gpu] rusage[mem=1]", "--", "true")
    assert (s.queue, s.slots, s.name, s.project, s.rerunnable, s.hold, s.mem_limit) == ("q1", 4, "a[1-3]", "p",
                                                                                        True, True, "1G")
    assert (s.claims, s.scratch, s.stage_class, s.app, s.resreq) == (("c1", "c2:ro"), "1G:local", "shared", "serve",
                                                                     "select[gpu] rusage[mem=1]")
    s = parse("--scratch", "", "--app", "", "--", "true")  # empty: not given
    assert s.resreq == "" and parse("-R", "select[a]", "-R", "span[hosts=1]", "--", "true").resreq == (
        "select[a] span[hosts=1]")  # a second -R is merged, not put in the first one's place
    assert (s.scratch, s.app) == (None, None)


def test_a_bad_resource_requirement_points_at_its_column():
    with pytest.raises(JobSpecError) as e:
        parse("-R", "select[", "--", "true")
    assert e.value.message.splitlines() == ["bad resource requirement (-R): expected ']' to close select[ at column 8",
                                            "  select[", "         ^"]


def test_a_dependency_and_ti_reach_their_fields_and_a_bad_one_points_at_its_column():
    s = parse("-w", 'done(12) && exit("train", ==3)', "-ti", "--", "true")
    assert (s.dependency, s.terminate_orphan) == ('done(12) && exit("train", ==3)', True)
    assert parse("--", "true").dependency is None
    with pytest.raises(JobSpecError) as e:
        parse("-w", "done(12) &&", "--", "true")
    assert e.value.message.splitlines() == ["bad dependency expression (-w): expected a job id or a job name at "
                                            "column 12", "  done(12) &&", "             ^"]


def test_stage_paths_urls_and_remotes(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "f").write_bytes(b"x" * 100)
    s = parse("--stage-in", "in:data", "--stage-out", "res.csv", "--", "true", cwd=str(tmp_path))
    assert s.stage_in == (f"{tmp_path}/in:data",) and s.stage_out == (f"res.csv:{tmp_path}/res.csv",)
    assert s.stage_size == str(1 << 20)  # what the sources hold, in whole MiB, measured here
    s = parse("--stage-in", "https://h/x", "--stage-in", "bucket:path/x", "--stage-out", "o:bucket:out/",
              "--", "true", remotes=("bucket",))
    assert s.stage_in == ("https://h/x", "bucket:path/x") and s.stage_out == ("o:bucket:out/",)
    assert s.stage_size is None  # what a URL or a remote holds is not measured here
    (tmp_path / "bucket").write_bytes(b"y")
    s = parse("--stage-in", "bucket:x", "--", "true", cwd=str(tmp_path))  # no such remote: a path and its DEST
    assert s.stage_in == (f"{tmp_path}/bucket:x",)
    assert parse("--stage-in", "/etc/hostname", "--stage-size", "5G", "--", "true").stage_size == "5G"


def test_a_stage_in_source_that_is_not_here_nor_a_remote_is_refused_at_submission(tmp_path):
    with pytest.raises(JobSpecError, match=f"--stage-in in.csv: no such file or directory: {tmp_path}/in.csv"):
        parse("--stage-in", "in.csv", "--", "true", cwd=str(tmp_path))
    with pytest.raises(JobSpecError, match="--stage-in /etc/hostname/x: no such file"):
        parse("--stage-in", "/etc/hostname/x", "--", "true", cwd=str(tmp_path))
    with pytest.raises(JobSpecError, match=r"--stage-in lab-s4:data/x: lab-s4 is not a remote \(xce transfers list\) "
                                           rf"nor a file here \({tmp_path}/lab-s4\)"):
        parse("--stage-in", "lab-s4:data/x", "--", "true", cwd=str(tmp_path), remotes=("lab-s3",))


def test_a_second_r_merges_with_the_first_as_lsf_does():
    s = parse("-R", "select[zone==a] rusage[mem=1G]", "-R", "rusage[gpu=1] span[hosts=1]", "-R", "ssd", "--", "true")
    assert s.resreq == "select[(zone==a) && (ssd)] rusage[mem=1G, gpu=1] span[hosts=1]"
    assert parse("-R", "select[ zone==a ]", "--", "true").resreq == "select[ zone==a ]"  # one: as given
    assert parse("-R", "span[hosts=1]", "-R", "span[hosts=1]", "--", "true").resreq == "span[hosts=1]"
    with pytest.raises(JobSpecError, match="counter 'mem' is in the rusage\\[\\] of two -R"):
        parse("-R", "rusage[mem=1G]", "-R", "rusage[mem=2G]", "--", "true")
    with pytest.raises(JobSpecError, match="span\\[\\] differs between two -R"):
        parse("-R", "span[hosts=1]", "-R", "span[ptile=2]", "--", "true")


def test_sizes_on_the_bsub_path_are_lsfs_and_xce_submit_keeps_its_own():
    mib = 1 << 20
    s = parse("-M", "100", "-R", "rusage[mem=4000, gpu=1]", "--", "true", lsf_unit="MB")
    assert (s.mem_limit, s.resreq) == (str(100 * mib), f"rusage[mem={4000 * mib}, gpu=1]")
    s = parse("-M", "100MB", "-R", "rusage[mem=2GB]", "--", "true", lsf_unit="MB")
    assert (s.mem_limit, s.resreq) == (str(100 * mib), f"rusage[mem={2 << 30}]")
    assert parse("-M", "2", "--", "true", lsf_unit="GB").mem_limit == str(2 << 30)
    assert parse("-M", "512k", "--", "true", lsf_unit="MB").mem_limit == str(512 << 10)
    with pytest.raises(JobSpecError, match="invalid memory limit \\(-M\\) '1 parsec'"):
        parse("-M", "1 parsec", "--", "true", lsf_unit="MB")
    # xce submit: XCE's sizes, read by the controller (a bare number is bytes; M is 1000 x 1000)
    s = parse("-M", "100", "-R", "rusage[mem=4000]", "--", "true")
    assert (s.mem_limit, s.resreq) == ("100", "rusage[mem=4000]")


def test_a_submission_with_an_environment_is_hashable_and_equal_by_value():
    a = parse("--", "true", environ={"A": "1"})
    b = parse("--", "true", environ={"A": "1"})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != parse("--", "true", environ={"A": "2"})


# ---------------------------------------------------------------- bsub's spelling column


def bsub(*argv: str, script: str | None = None, unit: str = "MB") -> Submission:
    return jobspec.submission(jobspec.bsub_values(list(argv), script), cwd="/home/u/run", stdin=lambda: script or "",
                              lsf_unit=unit)


def test_bsub_spells_the_same_fields_and_means_the_same_as_xce_submit():
    assert bsub("-q", "q1", "-n", "4", "-J", "a[1-3]", "-P", "p", "-r", "-H", "-cwd", "sub", "-o", "o.%J",
                "-e", "e.%J", "-M", "100", "-env", "none", "true") == parse(
        "-q", "q1", "-n", "4", "-J", "a[1-3]", "-P", "p", "-r", "-H", "--cwd", "sub", "-o", "o.%J", "-e", "e.%J",
        "-M", "100", "--env", "none", "--shell", "--", "true", lsf_unit="MB")


def test_a_command_line_runs_through_the_shell_and_a_script_as_a_script():
    s = bsub("echo", "a;", "echo", "b")
    assert (s.command, s.shell, s.script) == (("echo a; echo b",), True, None)
    s = bsub(script="#!/usr/bin/env python3\nprint(1)\n")
    assert (s.command, s.shell, s.script) == ((), False, "#!/usr/bin/env python3\nprint(1)\n")
    with pytest.raises(JobSpecError, match="no command"):
        bsub()


def test_bsub_lines_are_read_like_shell_words_and_the_command_line_wins():
    script = '#!/bin/bash\n#BSUB -J "two words"\n#BSUB -q short  # a comment\n#BSUB -n 2\necho\n#BSUB -q late\n'
    s = bsub("-q", "long", script=script)
    assert (s.name, s.queue, s.slots) == ("two words", "long", 2)  # (a #BSUB after the first command: not read)
    assert bsub(script=script).queue == "short"


def test_bsub_sizes_are_lsfs_and_several_r_merge():
    mib = 1 << 20
    assert bsub("-M", "100", "true").mem_limit == str(100 * mib)
    assert bsub("-M", "100", "true", unit="KB").mem_limit == str(100 << 10)
    s = bsub("-R", "rusage[mem=1000]", "-R", "span[hosts=1]", "true")
    assert s.resreq == f"rusage[mem={1000 * mib}] span[hosts=1]"


def test_output_equal_to_error_is_one_file_opened_once():
    s = bsub("-o", "log.%J", "-e", "log.%J", "true")
    assert (s.stdout, s.stderr) == ("/home/u/run/log.%J", None)


@pytest.mark.parametrize("flag", ["-G", "-U"])
def test_options_whose_feature_is_not_there_are_refused_from_the_command_line_and_from_scripts(flag):
    with pytest.raises(JobSpecError):
        bsub(flag, "1", "true")
    with pytest.raises(JobSpecError):
        bsub(script=f"#BSUB {flag} 1\ntrue\n")


def test_run_limits_and_dependencies_from_the_command_line_and_from_scripts():
    s = bsub("-W", "1:30", "-w", "done(12)", "-ti", "true")
    assert (s.run_limit, s.dependency, s.terminate_orphan) == ("1:30", "done(12)", True)
    s = bsub(script="#BSUB -W 45\n#BSUB -w 'ended(\"prep\")'\n#BSUB -wa USR1 -wt 5\ntrue\n")
    assert (s.run_limit, s.dependency, s.warning_action, s.warning_time) == ("45", 'ended("prep")', "USR1", "5")


def test_nnodes_places_the_slots_on_that_many_hosts():
    assert bsub("-nnodes", "1", "-n", "4", "true").resreq == "span[hosts=1]"
    s = bsub("-nnodes", "2", "-n", "8", "true")
    assert (s.slots, s.resreq) == (8, "span[ptile=4]")
    assert bsub("-nnodes", "3", "true").slots == 3
    with pytest.raises(JobSpecError, match="multiple of 2"):
        bsub("-nnodes", "2", "-n", "3", "true")
    with pytest.raises(JobSpecError, match="give one"):
        bsub("-nnodes", "2", "-R", "span[hosts=1]", "true")


def test_priority_begin_time_exclusive_and_requeue_values_from_either_front_door():
    import time

    s = bsub("-sp", "7", "-b", "23:59", "-x", "-Q", "3 EXCLUDE(9)", "true")
    assert (s.user_priority, s.exclusive, s.requeue_exit) == (7, True, "3 EXCLUDE(9)")
    assert time.time() < s.begin_time <= time.time() + 86400
    assert time.localtime(s.begin_time)[3:5] == (23, 59)
    s = parse("--priority", "7", "--begin", "23:59", "--exclusive", "--requeue-exit", "3 EXCLUDE(9)", "--", "true")
    assert (s.user_priority, s.exclusive, s.requeue_exit) == (7, True, "3 EXCLUDE(9)")
    assert bsub(script="#BSUB -Q 'all ~1'\n#BSUB -x\ntrue\n").requeue_exit == "all ~1"
    for argv, why in ((("-Q", "~3"), "-Q: requeue exit values '~3'"), (("-b", "25:00"), "invalid begin time"),
                      (("-b", "2020:1:1:0:0"), "it has passed")):
        with pytest.raises(JobSpecError, match=why):
            bsub(*argv, "true")


def mod(*argv: str, lsf: bool = False) -> dict:
    p = argparse.ArgumentParser(exit_on_error=False)
    jobspec.add_mod_options(p, lsf=lsf)
    return jobspec.mod_changes(p.parse_args(list(argv)), lsf_unit="MB" if lsf else None)


def test_mod_takes_the_rows_of_what_a_pending_job_may_change_checked_as_at_submission():
    assert mod("-q", "short", "-n", "2", "-R", "select[a]", "-R", "span[hosts=1]", "-W", "30", "-w", "done(3)",
               "--priority", "9", "-J", "renamed") == {
        "queue": "short", "slots": 2, "resreq": "select[a] span[hosts=1]", "run_limit": "30",
        "dependency": "done(3)", "user_priority": 9, "name": "renamed"}
    assert mod("-J", "%50", "-Wn", "-wn", "-sp", "3", lsf=True) == {"array_limit": 50, "run_limit": "",
                                                                   "dependency": "", "user_priority": 3}
    assert mod("-R", "rusage[mem=100]", lsf=True) == {"resreq": f"rusage[mem={100 << 20}]"}  # LSF's units
    for argv, why in (((), "nothing to change"), (("-w", "done("), "bad dependency expression"),
                      (("-J", "%0"), "an array's limit is %N"), (("-W", "5", "-Wn"), "-Wn takes the run limit away")):
        with pytest.raises(JobSpecError, match=why):
            mod(*argv)


def test_gpu_requests_as_lsf_spells_them():
    gib = 1 << 30
    assert parse("--gpu", "num=2", "--", "true").gpu == "num=2:mode=shared:j_exclusive=yes"
    assert parse("--gpu", "-", "--", "true").gpu == "num=1:mode=shared:j_exclusive=yes"  # LSF's default
    s = parse("--gpu", "num=4:mode=exclusive_process:gmodel=A100:gmem=16Gi", "--", "true")
    assert s.gpu == f"num=4:mode=exclusive_process:j_exclusive=yes:gmodel=A100:gmem={16 * gib}"
    assert bsub("-gpu", "num=1:j_exclusive=no:gmem=1024", "true").gpu == \
        f"num=1:mode=shared:j_exclusive=no:gmem={gib}"  # bsub: LSF's sizes, a bare number in MB
    assert bsub(script="#BSUB -gpu \"num=2:mode=shared\"\ntrue\n").gpu == "num=2:mode=shared:j_exclusive=yes"
    for bad, why in (("num=0", "num must be a whole number"), ("num=2:mode=fast", "mode must be shared"),
                     ("num=1:mode=exclusive_process:j_exclusive=no", "keeps its GPUs"),
                     ("num=1:colour=red", "unknown field 'colour'"), ("num", "is not NAME=VALUE"),
                     ("num=1:num=2", "given twice"), ("gmem=lots", "gmem")):
        with pytest.raises(JobSpecError, match=why):
            parse("--gpu", bad, "--", "true")
    with pytest.raises(JobSpecError, match="give one"):
        parse("--gpu", "num=1", "-R", "rusage[ngpus_physical=2]", "--", "true")
    assert parse("-R", "rusage[ngpus_physical=2]", "--", "true").resreq == "rusage[ngpus_physical=2]"
