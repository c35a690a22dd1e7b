"""``xce provisioner``: the claim agent for shared-scope claim classes.

Its config file is the only place provider credentials live: the controller
knows a class's provider by name only.  Format (TOML)::

    [provisioner]
    batch = 64          # ops per provider process
    concurrency = 4     # provider processes at once
    poll_wait = 20.0    # seconds a work long-poll may wait

    [providers.simfs]                       # a provider named by claim classes
    command = ["/usr/bin/python3", "-m", "xce.providers.simfs"]   # optional for simfs
    timeout = 60.0
    [providers.simfs.config]                # private: passed to the provider on stdin, never logged
    root = "/var/lib/xce/simfs"

    [providers.btrfs]                       # a class with provider = "btrfs" (command optional too)
    [providers.btrfs.config]
    root = "/srv/btrfs/xce"                 # on a btrfs filesystem with quotas enabled

A provider named ``simfs...`` or ``btrfs...`` runs the one shipped with XCE unless it names a command.
Resizes, snapshots and clones are offered for a class only when its provider says it can
(``capabilities``, asked as the provisioner takes its lease and at every scan).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import tomllib
from dataclasses import dataclass
from typing import Any

from xce.agentnames import SHARED_AGENT
from xce.agents.agent import ClaimAgent, Provider
from xce.agents.transfers import SharedTransfers
from xce.client import Client
from xce.transfers import TransferConfigError, load_daemon_site

SIMFS_COMMAND = [sys.executable, "-m", "xce.providers.simfs"]
BTRFS_COMMAND = [sys.executable, "-m", "xce.providers.btrfs"]


class ProvisionerConfigError(ValueError):
    """A provisioner config (or a worker's ``--provider-config``) cannot be read or is malformed.

    The message names the file and what is wrong; ``xce provisioner``/``xce worker`` report it as
    bad usage (exit 2) and ``xce up`` as a failure to start.
    """


@dataclass(frozen=True)
class ProvisionerConfig:
    providers: dict[str, Provider]
    batch: int = 64
    concurrency: int = 4
    poll_wait: float = 20.0


def parse_provisioner_config(text: str, source: str) -> ProvisionerConfig:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProvisionerConfigError(f"{source}: {e}") from None
    if unknown := sorted(set(raw) - {"provisioner", "providers"}):
        raise ProvisionerConfigError(f"{source}: unknown section(s) {', '.join(unknown)}")
    settings: dict[str, Any] = dict(raw.get("provisioner", {}))
    if unknown := sorted(set(settings) - {"batch", "concurrency", "poll_wait"}):
        raise ProvisionerConfigError(f"{source} [provisioner]: unknown key(s) {', '.join(unknown)}")
    providers = {}
    for name, p in raw.get("providers", {}).items():
        if not isinstance(p, dict) or (unknown := sorted(set(p) - {"command", "timeout", "config"})):
            raise ProvisionerConfigError(f"{source} [providers.{name}]: expected command, timeout and config")
        command = p.get("command") or (SIMFS_COMMAND if name.startswith("simfs") else
                                       BTRFS_COMMAND if name.startswith("btrfs") else None)
        if not command or not isinstance(command, list) or not all(isinstance(a, str) for a in command):
            raise ProvisionerConfigError(f"{source} [providers.{name}]: command must be a list of strings")
        timeout = p.get("timeout", 60.0)
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ProvisionerConfigError(f"{source} [providers.{name}]: timeout must be a positive number of seconds")
        providers[name] = Provider(name=name, command=list(command), timeout=float(timeout),
                                   config=dict(p.get("config", {})))
    cfg = ProvisionerConfig(providers=providers, **settings)
    if cfg.batch < 1 or cfg.concurrency < 1 or cfg.poll_wait <= 0:
        raise ProvisionerConfigError(f"{source} [provisioner]: batch >= 1, concurrency >= 1, poll_wait > 0")
    return cfg


def load_provisioner_config(path: str) -> ProvisionerConfig:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ProvisionerConfigError(f"cannot read provisioner config {path}: {e.strerror}") from None
    return parse_provisioner_config(text, path)


def run_provisioner(url: str, token: str, config_path: str, transfer_config: str | None = None) -> int:
    """``transfer_config``: remotes and their credentials (``[transfers]``, mode 0600, as a worker's) for
    shared staging claims and populated claims; without it, public URLs only."""
    cfg = load_provisioner_config(config_path)
    try:
        site = load_daemon_site(transfer_config) if transfer_config else None
    except TransferConfigError as e:
        raise ProvisionerConfigError(str(e)) from None
    logging.basicConfig(level=os.environ.get("XCE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s provisioner %(levelname)s %(message)s")
    # several controllers (URL1,URL2): calls follow the leader; the agent's calls are idempotent (op
    # ids, epochs), so one whose answer was lost is sent again
    agent = ClaimAgent(Client(url, token, timeout=15, retry_mutations=True), SHARED_AGENT, cfg.providers,
                       batch=cfg.batch,
                       concurrency=cfg.concurrency, poll_wait=cfg.poll_wait)
    # stage-in before allocation, stage-out, populate: the provisioner copies through rclone itself, into
    # volumes under its providers' roots
    transfers = SharedTransfers(site, [p.config["root"] for p in cfg.providers.values()
                                       if isinstance(p.config.get("root"), str)], agent.report_progress)
    agent.local_ops = {"stage_in": transfers, "stage_out": transfers, "populate": transfers}
    result: list[int] = []
    done = threading.Event()

    def main_loop() -> None:
        try:
            result.append(agent.run())
        finally:
            done.set()

    def on_signal(signum, frame) -> None:
        logging.getLogger("xce.agent").info("signal %d: stopping", signum)
        agent.stop()
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=main_loop, daemon=True, name="agent").start()
    while not done.wait(0.5):  # timed: signals delivered to other threads are handled at the next check
        pass
    agent.stop()
    return result[0] if result else 0
