"""PostgreSQL for tests: an external server named by ``XCE_TEST_PG_DSN``, or a private one.

    server()                 -> (admin_dsn, stop)   the env DSN (stop does nothing) or a private server
    start_private_server()   -> (admin_dsn, stop)   initdb + pg_ctl start in a temporary directory
    fresh_database(admin)    -> dsn                 a new empty database with a unique name
    drop_database(admin, dsn)                       drop it again

The private server listens on 127.0.0.1 only, on a free port, with its Unix
socket inside its own temporary directory, trust authentication, and fsync and
synchronous_commit on (it stands in for the durable store).  As root, initdb
and the server run as the ``postgres`` user via ``runuser``.

This never skips: if PostgreSQL cannot be found or started it raises
``PostgresUnavailable`` with the reason, so CI fails rather than silently
testing less.

Only the standard library is needed to start and stop a server, so ``.ci/run``
uses it with the system Python before the venv exists::

    eval "$(python3 -m tests.pg start)"     # sets XCE_TEST_PG_DSN and XCE_TEST_PG_DIR
    python3 -m tests.pg stop "$XCE_TEST_PG_DIR"
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable, Iterator
from urllib.parse import quote, urlencode

from tests.ports import free_port

ENV = "XCE_TEST_PG_DSN"
SERVER_USER = "postgres"
SUPERUSER = "postgres"
ADMIN_DB = "xce"
START_TIMEOUT = 60

SETTINGS = """
# written by tests/pg.py
listen_addresses = '127.0.0.1'
unix_socket_directories = '{socket_dir}'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 300
logging_collector = off
"""


class PostgresUnavailable(RuntimeError):
    """PostgreSQL could not be found or started; the message says why and what to do."""


# ---------------------------------------------------------------- binaries and users


def _version_key(path: str) -> tuple:
    m = re.search(r"/postgresql/(\d+)(?:\.(\d+))?/bin$", path)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)


def find_bindir() -> str:
    """Directory holding initdb, pg_ctl and postgres: ``pg_config --bindir``, then /usr/lib/postgresql/*/bin."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    # PostgreSQL 15 is the supported server; prefer it, then the newest other
    candidates += [d for d in found if _version_key(d)[0] == 15] + [d for d in found if _version_key(d)[0] != 15]
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found via `pg_config --bindir` "
        f"or /usr/lib/postgresql/*/bin (looked in: {candidates or 'nothing'}); install postgresql-15 "
        f"(apt-get install postgresql-15) or point {ENV} at a server")


def _server_user() -> pwd.struct_passwd | None:
    """The account to run the server as: ``postgres`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresUnavailable(
            f"running as root, and PostgreSQL refuses to run as root, but there is no "
            f"{SERVER_USER!r} user to run it as (installing postgresql-15 creates it)") from None


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", SERVER_USER, "--", *cmd] if _server_user() is not None else cmd


def _run(cmd: list[str], what: str, timeout: float = 120) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        raise PostgresUnavailable(f"{what} failed: {shlex.join(cmd)}: {e}") from e
    if out.returncode != 0:
        raise PostgresUnavailable(
            f"{what} failed (exit {out.returncode}): {shlex.join(cmd)}\n{out.stdout}{out.stderr}")
    return out.stdout


def _tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


# ---------------------------------------------------------------- private server


def _paths(base: str) -> tuple[str, str, str]:
    return os.path.join(base, "data"), os.path.join(base, "sock"), os.path.join(base, "server.log")


def _postmaster_pid(data: str) -> int | None:
    try:
        with open(os.path.join(data, "postmaster.pid")) as fh:
            return int(fh.readline().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_private_server(register_atexit: bool = True) -> tuple[str, Callable[[], None]]:
    """initdb and start a PostgreSQL server of our own; returns (admin DSN, stop function).

    ``stop`` is idempotent and also removes the temporary directory; with
    ``register_atexit`` it also runs when the interpreter exits.
    """
    dsn, _, stop = _start_private_server()
    if register_atexit:
        atexit.register(stop)
    return dsn, stop


def _start_private_server() -> tuple[str, str, Callable[[], None]]:
    bindir = find_bindir()
    user = _server_user()
    # as root the server user must be able to reach the directory: use /tmp, not $TMPDIR
    base = tempfile.mkdtemp(prefix="xce-pg-", dir="/tmp" if user is not None else None)
    data, sock, log = _paths(base)
    os.mkdir(sock)
    if user is not None:
        for p in (base, sock):
            os.chown(p, user.pw_uid, user.pw_gid)
    if len(os.path.join(sock, ".s.PGSQL.65535")) >= 100:
        shutil.rmtree(base, ignore_errors=True)
        raise PostgresUnavailable(f"temporary directory {base} is too long for a Unix socket path")
    stop = _stopper(bindir, base)
    try:
        _run(_as_server_user([os.path.join(bindir, "initdb"), "-D", data, "-U", SUPERUSER,
                              "-A", "trust", "-E", "UTF8", "--locale=C"]), "initdb")
        with open(os.path.join(data, "postgresql.conf"), "a") as fh:
            fh.write(SETTINGS.format(socket_dir=sock))
        port = _start(bindir, data, log)
        _run([os.path.join(bindir, "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", SUPERUSER,
              ADMIN_DB], "createdb")
    except BaseException:
        stop()
        raise
    return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{ADMIN_DB}", base, stop


def _start(bindir: str, data: str, log: str) -> int:
    """pg_ctl start on a free port (retrying if someone takes the port first); the port."""
    if _server_user() is not None and not os.path.exists(log):
        # the server (not root) writes the log
        open(log, "a").close()
        user = _server_user()
        os.chown(log, user.pw_uid, user.pw_gid)
    last = ""
    for _ in range(5):
        port = free_port()
        cmd = _as_server_user([os.path.join(bindir, "pg_ctl"), "-D", data, "-l", log, "-w",
                               "-t", str(START_TIMEOUT), "-o", f"-p {port}", "start"])
        out = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=START_TIMEOUT + 30)
        if out.returncode == 0:
            return port
        last = f"{out.stdout}{out.stderr}\n--- server log ---\n{_tail(log)}"
        pid = _postmaster_pid(data)
        if pid is not None and _alive(pid):
            break  # it is running but not answering: do not start a second one
        if "could not bind" not in last and "already in use" not in last:
            break
    raise PostgresUnavailable(f"PostgreSQL did not start (pg_ctl start, data {data}):\n{last}")


def _stopper(bindir: str, base: str) -> Callable[[], None]:
    done = []

    def stop() -> None:
        if done:
            return
        done.append(True)
        stop_server(base, bindir)

    return stop


def stop_server(base: str, bindir: str | None = None) -> None:
    """Stop the server whose temporary directory is ``base`` (by its postmaster PID) and remove it."""
    data, _, _ = _paths(base)
    pid = _postmaster_pid(data)
    if pid is not None and _alive(pid):
        try:
            bindir = bindir or find_bindir()
            subprocess.run(_as_server_user([os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "fast",
                                            "-w", "-t", "30", "stop"]),
                           capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError, PostgresUnavailable):
            pass
        if _alive(pid):
            # pg_ctl could not stop it: immediate shutdown of that one postmaster
            try:
                os.kill(pid, signal.SIGQUIT)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 30
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
    shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- DSNs and databases


def server() -> tuple[str, Callable[[], None]]:
    """``XCE_TEST_PG_DSN`` if set (stop does nothing), else a private server."""
    dsn = os.environ.get(ENV)
    if dsn:
        return dsn, lambda: None
    return start_private_server()


@contextlib.contextmanager
def database() -> Iterator[str]:
    """A fresh database's DSN on ``server()``; dropped after, and a private server stopped then (not left to
    interpreter exit: a test process killed at its end runs no atexit)."""
    admin_dsn, stop = server()
    try:
        dsn = fresh_database(admin_dsn)
        try:
            yield dsn
        finally:
            drop_database(admin_dsn, dsn)  # (WITH (FORCE): whoever is still connected goes)
    finally:
        stop()


def to_url(params: dict[str, str]) -> str:
    """A ``postgresql://`` URL for libpq connection parameters (``open_store`` needs the URL form)."""
    params = dict(params)
    user = params.pop("user", "")
    password = params.pop("password", "")
    dbname = params.pop("dbname", "")
    host = params.get("host", "")
    port = params.get("port", "")
    netloc = ""
    if host and "/" not in host and "," not in host:
        params.pop("host")
        netloc = f"[{host}]" if ":" in host else host
        if port and "," not in port:
            params.pop("port")
            netloc += f":{port}"
    if user:
        auth = quote(user, safe="")
        if password:
            auth += ":" + quote(password, safe="")
        netloc = f"{auth}@{netloc}"
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{netloc}/{quote(dbname, safe='')}{query}"


def _connect_admin(admin_dsn: str):
    import psycopg

    try:
        return psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10)
    except psycopg.Error as e:
        raise PostgresUnavailable(f"cannot connect to the test PostgreSQL server: {e}") from e


def fresh_database(admin_dsn: str) -> str:
    """Create a new empty database on ``admin_dsn``'s server; its DSN (a ``postgresql://`` URL)."""
    from psycopg import conninfo, sql

    name = f"xce_test_{uuid.uuid4().hex[:20]}"
    with _connect_admin(admin_dsn) as conn:
        # template0: nobody can be connected to it, which would make CREATE DATABASE fail
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(
            sql.Identifier(name)))
    params = conninfo.conninfo_to_dict(admin_dsn)
    params["dbname"] = name
    return to_url({k: str(v) for k, v in params.items()})


def drop_database(admin_dsn: str, dsn: str) -> None:
    """Drop a database made by ``fresh_database``, disconnecting anyone still in it."""
    from psycopg import conninfo, sql

    name = conninfo.conninfo_to_dict(dsn)["dbname"]
    with _connect_admin(admin_dsn) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


# ---------------------------------------------------------------- command line (for .ci/run)


def main(argv: list[str]) -> int:
    if argv[:1] == ["start"] and len(argv) == 1:
        try:
            dsn, base, _ = _start_private_server()
        except PostgresUnavailable as e:
            print(f"tests/pg.py: {e}", file=sys.stderr)
            return 1
        print(f"export {ENV}={shlex.quote(dsn)}")
        print(f"export XCE_TEST_PG_DIR={shlex.quote(base)}")
        return 0
    if argv[:1] == ["stop"] and len(argv) == 2:
        stop_server(argv[1])
        return 0
    print("usage: python3 -m tests.pg start | stop DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
