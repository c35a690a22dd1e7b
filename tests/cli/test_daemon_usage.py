"""Daemon commands with a malformed setting: one ``xce: ...`` line, exit 2, before anything starts.

The worker and the provisioner raise their own config errors; ``xce`` reports them as bad usage.
No controller is needed: nothing is contacted before the settings are checked.
"""

from __future__ import annotations

from tests.helpers import cli


def daemon(tmp_path, *args: str):
    return cli({"XCE_TOKEN": "t" * 20, "XCE_CONFIG": "", "HOME": str(tmp_path)}, *args)


def test_worker_refuses_a_malformed_counter_attr_storage_root_or_host(tmp_path):
    base = ["worker", "--controller", "http://127.0.0.1:9", "--work-dir", str(tmp_path / "w")]
    for extra, fragment in ((["--host", "h1", "--counter", "scratch=lots"], "invalid amount 'lots'"),
                            (["--host", "h1", "--attr", "Zone=a"], "expected NAME=VALUE"),
                            (["--host", "h1", "--storage-root", "relative/dir"], "--storage-root relative/dir"),
                            (["--host", "h1", "--address", "a b"], "--address 'a b': expected a host name or an IP"),
                            (["--host", "H 1"], "invalid host name")):
        r = daemon(tmp_path, *base, *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert r.stderr.startswith("xce: ") and fragment in r.stderr and len(r.stderr.splitlines()) == 1


def test_provisioner_refuses_a_malformed_config(tmp_path):
    cfg = tmp_path / "p.toml"
    cfg.write_text("[nonsense]\n")
    r = daemon(tmp_path, "provisioner", "--controller", "http://127.0.0.1:9", "--config", str(cfg))
    assert r.returncode == 2 and r.stderr == f"xce: {cfg}: unknown section(s) nonsense\n"
    r = daemon(tmp_path, "provisioner", "--controller", "http://127.0.0.1:9", "--config", str(tmp_path / "none"))
    assert r.returncode == 2 and "cannot read provisioner config" in r.stderr


def test_worker_with_a_malformed_controller_url_is_bad_usage(tmp_path):
    r = daemon(tmp_path, "worker", "--host", "h1", "--controller", "ftp://x", "--work-dir", str(tmp_path / "w"))
    assert r.returncode == 2 and r.stderr.startswith("xce: invalid controller URL 'ftp://x'")
