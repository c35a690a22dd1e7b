"""The job-spec parser (``xce.jobspec``): a command line's submission options into one ``Submission``."""

from __future__ import annotations

import argparse
import typing

import pytest

from xce import jobspec
from xce.jobspec import JobSpecError
from xce.wire import Submission


def parse(*argv: str, cwd: str = "/home/u/run", remotes: tuple[str, ...] = ()) -> Submission:
    p = argparse.ArgumentParser(exit_on_error=False)
    jobspec.add_options(p)
    asked = []

    def remote_names():
        asked.append(1)
        return set(remotes)

    s = jobspec.submission(p.parse_args(list(argv)), cwd=cwd, remote_names=remote_names)
    assert len(asked) <= 1  # asked once at most, whatever the number of stage options
    return s


def test_every_option_sets_a_submission_field_and_every_field_but_the_request_id_has_an_option():
    fields = set(typing.get_type_hints(Submission))
    options = [o.field for o in jobspec.OPTIONS]
    assert len(options) == len(set(options)) and set(options) == fields - {"request_id"}


def test_a_plain_submission():
    s = parse("--", "echo", "hi")
    assert s == Submission(command=("echo", "hi"))


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
    s = parse("--stage-in", "bucket:x", "--", "true")  # no such remote: a relative path and its DEST
    assert s.stage_in == ("/home/u/run/bucket:x",)
    assert parse("--stage-in", "/a", "--stage-size", "5G", "--", "true").stage_size == "5G"


# ---------------------------------------------------------------- bsub's spelling column


def bsub(*argv: str, script: str | None = None, unit: str = "MB") -> Submission:
    return jobspec.submission(jobspec.bsub_values(list(argv), script, unit=unit), cwd="/home/u/run")


def test_bsub_spells_the_same_fields_and_means_the_same_as_xce_submit():
    assert bsub("-q", "q1", "-n", "4", "-J", "a[1-3]", "-P", "p", "-r", "-H", "-cwd", "sub", "-o", "o.%J",
                "-e", "e.%J", "true") == parse("-q", "q1", "-n", "4", "-J", "a[1-3]", "-P", "p", "-r", "-H",
                                               "--cwd", "sub", "-o", "o.%J", "-e", "e.%J", "--",
                                               "/bin/sh", "-c", "true")


def test_a_command_line_runs_through_the_shell_and_a_script_through_its_interpreter():
    assert bsub("echo", "a;", "echo", "b").command == ("/bin/sh", "-c", "echo a; echo b")
    s = bsub(script="#!/usr/bin/env python3\nprint(1)\n")
    assert s.command[:2] == ("/bin/sh", "-c") and s.command[-3:] == ("#!/usr/bin/env python3\nprint(1)\n",
                                                                      "/usr/bin/env", "python3")
    assert bsub(script="echo hi\n").command[-1] == "/bin/sh"  # no #!: /bin/sh
    with pytest.raises(JobSpecError, match="no command"):
        bsub()


def test_bsub_lines_are_read_like_shell_words_and_the_command_line_wins():
    script = '#!/bin/bash\n#BSUB -J "two words"\n#BSUB -q short  # a comment\n#BSUB -n 2\necho\n#BSUB -q late\n'
    s = bsub("-q", "long", script=script)
    assert (s.name, s.queue, s.slots) == ("two words", "long", 2)  # (a #BSUB after the first command: not read)
    assert bsub(script=script).queue == "short"


def test_sizes_in_lsf_units_and_several_resource_requirements_merged():
    assert bsub("-M", "100", "true").mem_limit == "100Mi" and bsub("-M", "2GB", "true").mem_limit == "2Gi"
    assert bsub("-M", "100", "true", unit="KB").mem_limit == "100Ki"
    assert bsub("-M", "512Mi", "true").mem_limit == "512Mi"  # XCE's own spelling passes through
    s = bsub("-R", "rusage[mem=1000.0]", "-R", "span[hosts=1]", "-R", "select[x>1]", "-R", "y", "true")
    assert s.resreq == "rusage[mem=1000.0Mi] span[hosts=1] select[(x>1) && (y)]"
    assert bsub("-R", "select[a] rusage[mem=2GB]", "true").resreq == "select[a] rusage[mem=2Gi]"


def test_output_equal_to_error_is_one_file_opened_once():
    s = bsub("-o", "log.%J", "-e", "log.%J", "true")
    assert (s.stdout, s.stderr) == ("/home/u/run/log.%J", None)


@pytest.mark.parametrize("flag", ["-W", "-w", "-gpu", "-env", "-G", "-U"])
def test_options_whose_feature_is_not_there_are_refused_from_the_command_line_and_from_scripts(flag):
    with pytest.raises(JobSpecError):
        bsub(flag, "1", "true")
    with pytest.raises(JobSpecError):
        bsub(script=f"#BSUB {flag} 1\ntrue\n")


def test_nnodes_places_the_slots_on_that_many_hosts():
    assert bsub("-nnodes", "1", "-n", "4", "true").resreq == "span[hosts=1]"
    s = bsub("-nnodes", "2", "-n", "8", "true")
    assert (s.slots, s.resreq) == (8, "span[ptile=4]")
    assert bsub("-nnodes", "3", "true").slots == 3
    with pytest.raises(JobSpecError, match="multiple of 2"):
        bsub("-nnodes", "2", "-n", "3", "true")
    with pytest.raises(JobSpecError, match="give one"):
        bsub("-nnodes", "2", "-R", "span[hosts=1]", "true")
