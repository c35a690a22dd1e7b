"""A torchrun-style launcher, stdlib only, for the multi-host tests: run once in a job (on its first
host), it starts one agent on each of the job's hosts with ``blaunch -z``; the agents meet at the job's
rendezvous (``XCE_RDZV_HOST``:``XCE_RDZV_PORT``), where node 0 listens, and exchange their ranks and
hosts, as torchrun's agents do before they start their workers.

    python rdzv_launcher.py          the launcher (exits as blaunch does)
    python rdzv_launcher.py agent    one host's agent (what the launcher starts)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

MEET_TIMEOUT = 60.0  # seconds the agents have to meet


def job_hosts() -> list[str]:
    """The job's hosts in order, from LSF's ``LSB_MCPU_HOSTS`` ("host1 2 host2 2")."""
    return os.environ["LSB_MCPU_HOSTS"].split()[0::2]


def launch() -> int:
    return subprocess.call(["blaunch", "-z", " ".join(job_hosts()), sys.executable, os.path.abspath(__file__), "agent"])


def agent() -> int:
    hosts, host = job_hosts(), os.environ["XCE_HOST"]
    rank, world = hosts.index(host), len(hosts)
    address = (os.environ["XCE_RDZV_HOST"], int(os.environ["XCE_RDZV_PORT"]))
    if rank == 0:
        members = {0: host}
        with socket.create_server(address) as server:
            server.settimeout(MEET_TIMEOUT)
            peers = []
            while len(members) < world:
                conn, _ = server.accept()
                hello = json.loads(conn.makefile().readline())
                members[hello["rank"]] = hello["host"]
                peers.append(conn)
            answer = (json.dumps({str(r): h for r, h in sorted(members.items())}) + "\n").encode()
            for conn in peers:
                conn.sendall(answer)
                conn.close()
        seen = {str(r): h for r, h in sorted(members.items())}
    else:
        deadline = time.monotonic() + MEET_TIMEOUT
        while True:  # node 0 may not listen yet: a launcher's agents retry, as torchrun's do
            try:
                conn = socket.create_connection(address, timeout=MEET_TIMEOUT)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with conn:
            conn.sendall((json.dumps({"rank": rank, "host": host}) + "\n").encode())
            seen = json.loads(conn.makefile().readline())
    print(f"agent {rank} of {world} on {host} met at {address[0]}:{address[1]}: {json.dumps(seen, sort_keys=True)}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(agent() if sys.argv[1:] == ["agent"] else launch())
