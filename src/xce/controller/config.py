"""Controller configuration: one TOML file, with an embedded default so none is needed.

Unknown keys are errors (a typo must not silently change behaviour).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from typing import Any

from xce.errors import InvalidRequest
from xce.model.names import check_name

DEFAULT_CONFIG = """
[controller]
snapshot_every = 10000     # facts between snapshots
lease_ttl = 10.0           # seconds a leader lease lasts without renewal
max_body_bytes = 1048576   # larger request bodies are refused with 413
host_timeout = 10.0        # seconds without a heartbeat before a host is UNAVAIL

[[users]]
name = "admin"
role = "admin"
projects = ["default"]

[[queues]]
name = "default"
priority = 30
description = "default queue"

[[projects]]
name = "default"
description = "default project"
"""


class ConfigError(InvalidRequest):
    """Raised when the configuration file is unreadable or names unknown keys or bad values."""

    code = "bad_config"


@dataclass(frozen=True)
class UserConfig:
    name: str
    role: str = "user"
    projects: list[str] = field(default_factory=lambda: ["default"])
    host: str | None = None


@dataclass(frozen=True)
class QueueConfig:
    name: str
    priority: int = 30
    description: str = ""


@dataclass(frozen=True)
class ProjectConfig:
    name: str
    description: str = ""


@dataclass(frozen=True)
class ControllerConfig:
    snapshot_every: int = 10_000
    lease_ttl: float = 10.0
    max_body_bytes: int = 1 << 20
    host_timeout: float = 10.0


@dataclass(frozen=True)
class Config:
    controller: ControllerConfig
    users: list[UserConfig]
    queues: list[QueueConfig]
    projects: list[ProjectConfig]
    source: str = "<embedded default>"


def _build(cls: type, raw: Any, where: str):
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    try:
        return cls(**raw)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def parse_config(text: str, source: str = "<string>") -> Config:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: {e}") from None
    unknown = sorted(set(raw) - {"controller", "users", "queues", "projects"})
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}")
    ctl = _build(ControllerConfig, raw.get("controller", {}), f"{source} [controller]")
    users = [_build(UserConfig, u, f"{source} [[users]] #{i + 1}") for i, u in enumerate(raw.get("users", []))]
    queues = [_build(QueueConfig, q, f"{source} [[queues]] #{i + 1}") for i, q in enumerate(raw.get("queues", []))]
    projects = [_build(ProjectConfig, p, f"{source} [[projects]] #{i + 1}")
                for i, p in enumerate(raw.get("projects", []))]
    for kind, items in (("user", users), ("queue", queues), ("project", projects)):
        names = [it.name for it in items]
        for n in names:
            try:
                check_name(kind, n)
            except InvalidRequest as e:
                raise ConfigError(f"{source}: {e.message}") from None
        if len(set(names)) != len(names):
            raise ConfigError(f"{source}: duplicate {kind} names")
    if not any(u.role == "admin" for u in users):
        raise ConfigError(f"{source}: at least one user with role = \"admin\" is required")
    project_names = {p.name for p in projects}
    for u in users:
        missing = [p for p in u.projects if p not in project_names]
        if missing:
            raise ConfigError(f"{source}: user {u.name!r} names unknown project(s) {', '.join(missing)}")
    if ctl.snapshot_every < 1 or ctl.lease_ttl <= 0 or ctl.max_body_bytes < 1024:
        raise ConfigError(f"{source} [controller]: snapshot_every >= 1, lease_ttl > 0, max_body_bytes >= 1024")
    return Config(controller=ctl, users=users, queues=queues, projects=projects, source=source)


def load_config(path: str | None) -> Config:
    if path is None:
        return parse_config(DEFAULT_CONFIG, "<embedded default>")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    return parse_config(text, path)
