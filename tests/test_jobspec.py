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
    s = parse("--stage-in", "bucket:x", "--", "true")  # no such remote: a relative path and its DEST
    assert s.stage_in == ("/home/u/run/bucket:x",)
    assert parse("--stage-in", "/a", "--stage-size", "5G", "--", "true").stage_size == "5G"
