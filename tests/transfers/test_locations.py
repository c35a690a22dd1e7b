"""Stage locations: paths, public URLs, URLs a remote serves and named remotes, resolved per project."""

from __future__ import annotations

import tomllib

import pytest

from xce.transfers import TransferRefused, kind_of, parse_canonical, parse_site, resolve, split_stage_in, \
    split_stage_out
from tests.transfers.test_site import SITE

S = parse_site(tomllib.loads(SITE)["transfers"], "t", daemon=False)


@pytest.mark.parametrize("text, kind", [
    ("/data/x", "path"), ("./lab:x", "path"), ("relative/x", "path"),
    ("https://h/x", "url"), ("S3://b/k", "url"), ("lab:bucket/k", "remote"), ("data.csv:in.csv", "remote"),
])
def test_kind_by_syntax(text, kind):
    assert kind_of(text) == kind


@pytest.mark.parametrize("text, parts", [
    ("/a/b", ("/a/b", None)), ("/a/b:c/d", ("/a/b", "c/d")),
    ("https://h:8443/x/y", ("https://h:8443/x/y", None)), ("https://h:8443/x/y:in/y", ("https://h:8443/x/y", "in/y")),
    ("s3://bkt/pre/", ("s3://bkt/pre/", None)), ("s3://bkt/pre/:data", ("s3://bkt/pre/", "data")),
    ("lab:bkt/k", ("lab:bkt/k", None)), ("lab:bkt/k:in", ("lab:bkt/k", "in")),
])
def test_stage_in_dest_is_after_the_first_colon_past_the_source_prefix(text, parts):
    assert split_stage_in(text) == parts


def test_stage_out_src_is_before_the_first_colon():
    assert split_stage_out("out.txt:s3://b/k") == ("out.txt", "s3://b/k")
    assert split_stage_out("out.txt:lab:b/k") == ("out.txt", "lab:b/k")
    assert split_stage_out("out.txt") == ("out.txt", None)


def test_resolved_for_a_project():
    assert resolve("/a/../b", S, "physics", "src").text == "/b"
    url = resolve("HTTPS://Host:8443/dir/f%20x.bin", S, "chem", "src")
    assert (url.kind, url.base, url.path, url.basename) == ("url", "https://host:8443/", "dir/f x.bin", "f x.bin")
    s3 = resolve("s3://bkt/pre/", S, "physics", "src")  # s3:// for physics goes through lab
    assert (s3.kind, s3.text, s3.remote, s3.basename) == ("remote", "lab:bkt/pre/", "lab", "pre")
    assert resolve("everyone:b/k", S, "chem", "src").text == "everyone:b/k"
    assert parse_canonical("lab:bkt/pre/").remote == "lab"
    assert parse_canonical("https://h/x").base == "https://h/"


@pytest.mark.parametrize("text, project, says, forbidden", [
    ("s3://bkt/x", "chem", "project chem may use no remote for s3:// URLs", True),
    ("lab:bkt/x", "chem", "project chem may not use remote lab", True),
    ("ftp://h/x", "physics", "unknown scheme ftp://", False),
    ("nope:bkt/x", "physics", "unknown remote nope", False),
    ("lab:", "physics", "give a path inside remote lab", False),
    ("relative/x", "physics", "must be an absolute path", False),
    ("https://h/x?X-Amz-Signature=abc", "physics", "query string", False),
    ("https://h/x#frag", "physics", "query string or fragment", False),
    ("https:///x", "physics", "no host", False),
    ("https://h/x\nINJECT", "physics", "multi-line", False),
])
def test_refusals_say_why_and_name_the_project(text, project, says, forbidden):
    with pytest.raises(TransferRefused) as e:
        resolve(text, S, project, "--stage-in source")
    assert says in e.value.message and e.value.forbidden is forbidden


@pytest.mark.parametrize("text", ["https://alice:hunter2@h/x", "s3://AKIAXX:s3cr3t@bkt/x", "http://tok3n@h/x"])
def test_a_url_with_credentials_is_refused_without_repeating_them(text):
    with pytest.raises(TransferRefused) as e:
        resolve(text, S, "physics", "--stage-in source")
    assert "credentials" in e.value.message
    for secret in ("hunter2", "s3cr3t", "tok3n", "alice", "AKIAXX"):
        assert secret not in e.value.message
