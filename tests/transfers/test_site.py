"""The [transfers] configuration: what the controller and the workers accept, and refuse."""

from __future__ import annotations

import os
import tomllib

import pytest

from xce.config import ConfigError, DEFAULT_CONFIG, parse_config
from xce.transfers import TransferConfigError, TransferSite, load_daemon_site, parse_site

SITE = """
[transfers]
public_schemes = ["https", "http"]
[[transfers.remotes]]
name = "lab"
type = "s3"
schemes = ["s3"]
projects = ["physics"]
[[transfers.remotes]]
name = "everyone"
type = "s3"
"""


def site(text: str, daemon: bool = False, projects=None):
    return parse_site(tomllib.loads(text).get("transfers"), "test.toml", daemon=daemon, projects=projects)


def test_a_site_names_schemes_remotes_and_their_projects():
    s = site(SITE)
    assert s.public_schemes == ("https", "http")
    assert [r.name for r in s.remotes] == ["lab", "everyone"]
    assert s.for_scheme("s3", "physics").name == "lab"
    assert s.for_scheme("s3", "chem") is None  # lab serves s3:// for physics only
    assert s.remote("everyone").allows("chem") and not s.remote("lab").allows("chem")
    assert s.schemes() == ["https", "http", "s3"]


def test_no_transfers_table_means_public_https_and_no_remotes():
    s = site("")
    assert s.public_schemes == ("https",) and s.remotes == ()
    assert parse_config(DEFAULT_CONFIG).transfers.public_schemes == ("https",)


@pytest.mark.parametrize("text, says", [
    ('[transfers]\npublic_schemes = ["ftp"]', "public_schemes"),
    ('[transfers]\ntimeout = 5', "unknown key(s) timeout"),  # the controller's: no rclone settings
    ('[[transfers.remotes]]\nname = "lab"\ntype = "s3"\n[transfers.remotes.options]\nsecret_access_key = "x"',
     "never in the controller's config"),
    ('[[transfers.remotes]]\nname = "Lab!"\ntype = "s3"', "name must match"),
    ('[[transfers.remotes]]\nname = "lab"\ntype = "local"', "remote storage"),
    ('[[transfers.remotes]]\nname = "lab"\ntype = "s3"\nschemes = ["https"]', "cannot be served"),
    ('[[transfers.remotes]]\nname = "lab"\ntype = "s3"\nprojects = []', "projects lists"),
    ('[[transfers.remotes]]\nname = "a"\ntype = "s3"\nschemes = ["s3"]\n'
     '[[transfers.remotes]]\nname = "b"\ntype = "s3"\nschemes = ["s3"]', "both serve s3://"),
    ('[[transfers.remotes]]\nname = "a"\ntype = "s3"\n[[transfers.remotes]]\nname = "a"\ntype = "s3"', "duplicate"),
    ('[[transfers.remotes]]\nname = "a"\ntype = "s3"\ncolour = "red"', "unknown key(s) colour"),
    ('[transfers]\nbwlimit = "1M"', "unknown key(s) bwlimit"),  # how daemons run rclone: theirs alone
    ('[[transfers.remotes]]\nname = "a"\ntype = "s3"\nbwlimit = "1M"', "belongs in their --transfer-config"),
])
def test_the_controller_refuses_a_malformed_site_or_credentials(text, says):
    with pytest.raises(TransferConfigError) as e:
        site(text)
    assert says in str(e.value)


def test_the_controller_config_refuses_a_remote_for_an_unknown_project():
    text = DEFAULT_CONFIG.replace('[transfers]\npublic_schemes = ["https"]',
                                  '[transfers]\n[[transfers.remotes]]\nname = "lab"\ntype = "s3"\nprojects = ["nope"]')
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    assert "unknown project(s) nope" in e.value.message


def test_a_worker_site_holds_options_and_rclone_settings(tmp_path):
    path = tmp_path / "transfers.toml"
    path.write_text('[transfers]\ntimeout = 30\nca_cert = "/etc/ca.pem"\n[[transfers.remotes]]\nname = "lab"\n'
                    'type = "s3"\n[transfers.remotes.options]\nendpoint = "http://127.0.0.1:9"\n'
                    'access_key_id = "AKIDEXAMPLE"\nsecret_access_key = "s3cr3t-value"\n')
    os.chmod(path, 0o600)
    s = load_daemon_site(str(path))
    lab = s.remote("lab")
    assert s.timeout == 30.0 and s.ca_cert == "/etc/ca.pem"
    assert lab.options["secret_access_key"] == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(lab) and "s3cr3t-value" not in str(lab.public())
    assert set(lab.secrets()) == {"AKIDEXAMPLE", "s3cr3t-value"}  # the endpoint is no secret


def test_a_worker_site_readable_by_others_is_refused(tmp_path):
    path = tmp_path / "transfers.toml"
    path.write_text("[transfers]\n")
    os.chmod(path, 0o644)
    with pytest.raises(TransferConfigError) as e:
        load_daemon_site(str(path))
    assert "chmod 600" in str(e.value)
    with pytest.raises(TransferConfigError):
        load_daemon_site(str(tmp_path / "missing.toml"))


def test_a_worker_site_sets_bandwidth_limits_and_parallel_transfers(tmp_path):
    path = tmp_path / "transfers.toml"
    path.write_text('[transfers]\nbwlimit = "100M"\ntransfers = 16\ncheckers = 32\n'
                    '[[transfers.remotes]]\nname = "slow"\ntype = "s3"\nbwlimit = "512K"\n'
                    '[[transfers.remotes]]\nname = "fast"\ntype = "s3"\n')
    os.chmod(path, 0o600)
    s = load_daemon_site(str(path))
    assert (s.bwlimit, s.transfers, s.checkers) == ("100M", 16, 32)
    assert s.remote("slow").bwlimit == "512K" and s.remote("fast").bwlimit is None
    assert "bwlimit" not in s.remote("slow").public()  # how a daemon runs rclone is not shown to users
    assert (TransferSite().transfers, TransferSite().checkers, TransferSite().bwlimit) == (8, 16, None)


@pytest.mark.parametrize("text, says", [
    ('bwlimit = "fast"', "bwlimit is a rate"),
    ('bwlimit = "1M --config /etc/x"', "bwlimit is a rate"),  # never a way to add rclone flags
    ('bwlimit = 5', "bwlimit is a rate"),
    ('transfers = 0', "transfers is a whole number"),
    ('checkers = 1000', "checkers is a whole number"),
    ('transfers = true', "transfers is a whole number"),
])
def test_a_worker_site_refuses_bad_rclone_settings(tmp_path, text, says):
    path = tmp_path / "transfers.toml"
    path.write_text(f"[transfers]\n{text}\n")
    os.chmod(path, 0o600)
    with pytest.raises(TransferConfigError) as e:
        load_daemon_site(str(path))
    assert says in str(e.value)
