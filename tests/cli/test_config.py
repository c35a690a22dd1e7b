"""Where the CLI finds its controller: flags, then environment, then config files."""

import os
import time
import types

import pytest

from xce.cli import config
from xce.cli.config import resolve
from xce.cli.errors import UsageError


def write(path, text):
    with open(path, "w") as fh:
        fh.write(text)
    return str(path)


def test_flags_beat_environment_beats_config(tmp_path):
    cfg = write(tmp_path / "c.toml", 'url = "http://cfg:1"\ntoken = "cfg-token"\n')
    env = {"XCE_URL": "http://env:2", "XCE_TOKEN": "env-token"}
    s = resolve("http://flag:3", None, cfg, env)
    assert (s.url, s.url_source) == ("http://flag:3", "--url")
    assert (s.token, s.token_source) == ("env-token", "XCE_TOKEN")
    s = resolve(None, None, cfg, {})
    assert (s.url, s.token, s.token_source) == ("http://cfg:1", "cfg-token", cfg)


def test_xce_config_env_and_default_file(tmp_path):
    cfg = write(tmp_path / "c.toml", 'url = "http://a:1"\ntoken = "t"\n')
    assert resolve(None, None, None, {"XCE_CONFIG": cfg}).url == "http://a:1"
    home = tmp_path / "home"
    os.makedirs(home / "xce")
    write(home / "xce" / "config.toml", 'url = "http://default:1"\ntoken = "d"\n')
    assert resolve(None, None, None, {"XDG_CONFIG_HOME": str(home)}).url == "http://default:1"


def test_missing_settings_say_how_to_give_them(tmp_path):
    with pytest.raises(UsageError, match="no controller url and controller token: use --url / --token"):
        resolve(None, None, None, {"XDG_CONFIG_HOME": str(tmp_path)})


def test_a_named_config_must_exist_and_be_valid(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        resolve(None, None, str(tmp_path / "nope.toml"), {})
    bad = write(tmp_path / "bad.toml", "url = [\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        resolve(None, None, bad, {})
    wrong = write(tmp_path / "wrong.toml", "url = 5\n")
    with pytest.raises(UsageError, match="url must be a string"):
        resolve(None, None, wrong, {})


def test_several_controllers_from_a_list_in_the_config_file(tmp_path):
    cfg = write(tmp_path / "ha.toml", 'urls = ["http://a:1", " http://b:2 "]\ntoken = "t"\n')
    assert resolve(None, None, cfg, {}).url == "http://a:1,http://b:2"
    assert resolve("http://x:1,http://y:2", None, cfg, {}).url == "http://x:1,http://y:2"  # the flag wins
    for text, match in (('urls = "http://a:1"\n', "urls must be a list"), ("urls = []\n", "urls must be a list"),
                        ('url = "http://a:1"\nurls = ["http://b:1"]\n', "url or urls, not both")):
        with pytest.raises(UsageError, match=match):
            resolve(None, None, write(tmp_path / "bad.toml", text + 'token = "t"\n'), {})


def test_a_config_file_is_parsed_again_only_when_it_changed(tmp_path, monkeypatch):
    """A warm CLI server's worker runs many commands: it parses a settled file once, and again whenever
    its stat says it changed; a file changed just now is parsed every time (a second write in the same
    tick of the file system's clock may leave the same stat)."""
    parsed = []
    real = config._parse_config
    monkeypatch.setattr(config, "_parse_config", lambda path, raw: parsed.append(raw) or real(path, raw))
    cfg = write(tmp_path / "c.toml", 'url = "http://a:1"\ntoken = "aaaa"\n')
    for _ in range(2):
        assert resolve(None, None, cfg, {}).token == "aaaa"
    assert len(parsed) == 2  # just written: not known yet
    later = time.time_ns() + 2 * config.SETTLE_NS
    monkeypatch.setattr(config, "time", types.SimpleNamespace(time_ns=lambda: later))
    for _ in range(3):
        assert resolve(None, None, cfg, {}).token == "aaaa"
    assert len(parsed) == 3  # settled: parsed once more, then known
    write(cfg, 'url = "http://a:1"\ntoken = "bb"\n')
    assert resolve(None, None, cfg, {}).token == "bb"
    os.remove(cfg)
    with pytest.raises(UsageError, match="does not exist"):
        resolve(None, None, cfg, {})
