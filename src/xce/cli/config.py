"""Where the CLI finds its controller URL and token.

Each setting is resolved on its own, first match wins:

1. the ``--url`` / ``--token`` flags,
2. the ``XCE_URL`` / ``XCE_TOKEN`` environment variables,
3. the config file named by ``--config`` or ``XCE_CONFIG`` (it must exist),
4. ``~/.config/xce/config.toml`` (``$XDG_CONFIG_HOME/xce/config.toml``), if it exists.

The config file is TOML with top-level string keys ``url`` and ``token``, or ``urls``, a list of
controller URLs, instead of ``url``.  A URL setting may name several controllers, comma-separated
(``--url URL1,URL2``, ``XCE_URL``): calls go to whichever leads (``xce.client.Transport``).
"""

from __future__ import annotations

import os
import time
from typing import Mapping, NamedTuple

from xce.cli.errors import UsageError

KEYS = ("url", "token")


class Settings(NamedTuple):
    url: str
    token: str
    url_source: str
    token_source: str


def default_config_path(environ: Mapping[str, str]) -> str:
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "xce", "config.toml")


def load_config(path: str, required: bool) -> dict[str, str]:
    """The file's ``url``/``token``; a missing optional file is empty, anything malformed is a UsageError.

    A process that runs many commands (a warm CLI server's worker, ``xce.cli.server``) parses a file
    once for as long as it stays as it was: known by its stat (device, inode, size, modification and
    change times), unless it changed within ``SETTLE_NS`` of being read (two writes that close may
    leave the same times: such a file is read again every time, until it has settled)."""
    try:
        st = os.stat(path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = _PARSED.get(path)
        if known is not None and known[0] == key:
            return dict(known[1])
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        if required:
            raise UsageError(f"config file {path} does not exist") from None
        return {}
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror or e}") from None
    out = _parse_config(path, raw)
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLE_NS:
        _PARSED[path] = (key, dict(out))
    return out


SETTLE_NS = 2_000_000_000
_PARSED: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {}  # path -> (its stat when read, what it said)


def _parse_config(path: str, raw: bytes) -> dict[str, str]:
    import tomllib

    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"config file {path} is not valid TOML: {e}") from None
    out = {}
    for key in KEYS:
        if key in doc:
            if not isinstance(doc[key], str):
                raise UsageError(f"config file {path}: {key} must be a string")
            out[key] = doc[key].strip()
    if "urls" in doc:
        urls = doc["urls"]
        if "url" in doc:
            raise UsageError(f"config file {path}: give url or urls, not both")
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            raise UsageError(f"config file {path}: urls must be a list of controller URLs")
        out["url"] = ",".join(u.strip() for u in urls)
    return out


def resolve(url: str | None, token: str | None, config: str | None,
            environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    found: dict[str, tuple[str, str]] = {}
    for key, flag in (("url", url), ("token", token)):
        if flag:
            found[key] = (flag.strip(), f"--{key}")
        elif env.get(f"XCE_{key.upper()}", "").strip():
            found[key] = (env[f"XCE_{key.upper()}"].strip(), f"XCE_{key.upper()}")
    explicit = config or env.get("XCE_CONFIG") or None
    if explicit or len(found) < len(KEYS):
        path = os.path.expanduser(explicit) if explicit else default_config_path(env)
        for key, value in load_config(path, required=bool(explicit)).items():
            if key not in found and value:
                found.setdefault(key, (value, path))
    missing = [k for k in KEYS if k not in found]
    if missing:
        what = " and ".join(f"controller {k}" for k in missing)
        how = " / ".join(f"--{k}" for k in missing)
        envs = " / ".join(f"XCE_{k.upper()}" for k in missing)
        raise UsageError(f"no {what}: use {how}, {envs}, or a config file "
                         f"(--config, XCE_CONFIG, {default_config_path(env)})")
    return Settings(url=found["url"][0], token=found["token"][0],
                    url_source=found["url"][1], token_source=found["token"][1])
