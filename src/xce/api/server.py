"""``xce controller``: open the store, serve the API on uvicorn, lead or stand by.

The controller process's composition root: it wires the store, the config and the
``Controller`` to the REST app.  It lives with the API, not in ``xce.controller``, because it
needs the app: the controller package stays below the API and never imports it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import os
import socket
import sys

import uvicorn

from xce.api.app import create_app
from xce.api.oneshot import OneSendHttpProtocol
from xce.config import load_config
from xce.controller.core import Controller
from xce.controller.memory import pace_collector, tune_allocator
from xce.store import open_store


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen must be HOST:PORT, got {listen!r}")
    return host, int(port)


def bind(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM/SIGINT after a graceful shutdown; a daemon should exit 0 instead.

    It also waits for every open request before shutting down, so long-polls are told first.
    """

    controller: Controller | None = None

    async def shutdown(self, sockets=None) -> None:
        if self.controller is not None:
            self.controller.begin_shutdown()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self):
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def advertised_url(configured: str, flag: str | None, host: str, port: int) -> str:
    """The URL standbys name while this controller leads: ``--advertise``, else the config's
    ``[controller] advertise``, else the listen address (a wildcard one: this machine's name)."""
    if flag:
        return flag.strip().rstrip("/")
    if configured:
        return configured.rstrip("/")
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_controller(state_dir: str, listen: str, config_path: str | None, store_url: str | None,
                   advertise: str | None = None) -> int:
    tune_allocator()  # before the snapshot is loaded: the first big block freed would raise the threshold
    logging.basicConfig(level=os.environ.get("XCE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    config = load_config(config_path)
    store = open_store(store_url, state_dir)
    sock = bind(listen)
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    controller = Controller(store, config, state_dir, url=advertised_url(config.controller.advertise, advertise,
                                                                          host, port))

    def on_leader() -> None:
        with open(os.path.join(state_dir, "controller.url"), "w") as fh:
            fh.write(url + "\n")
        print(f"xce controller listening on {url} (store: {store.backend}, epoch {controller.epoch})",
              flush=True)
        # never the secret itself: a log is read by more people, kept longer and copied further than the file
        print(f"admin token: in {os.path.join(os.path.abspath(state_dir), 'admin.token')} (mode 0600)", flush=True)

    print(f"xce controller {url}: waiting for the leader lease ({controller.holder})", file=sys.stderr,
          flush=True)
    app = create_app(controller, on_leader=on_leader)
    pace_collector()
    # proxy headers only from the proxies the config names (uvicorn's default believes 127.0.0.1's, and any
    # local process could then choose the address its refusals are counted against)
    proxies = list(config.controller.trusted_proxies)
    server = _Server(uvicorn.Config(
        app, loop="uvloop", http=OneSendHttpProtocol, access_log=False, log_level="warning",
        lifespan="on", timeout_graceful_shutdown=10, proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None))
    server.controller = controller
    try:
        server.run(sockets=[sock])
    finally:
        store.close()
    return 0
