"""``--json`` with ``--wait``: stdout is the one JSON document, progress goes to stderr.

Every ``--wait`` command is here (``claim create``, ``claim delete``), against a real controller
and provisioner.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import Cluster


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = Cluster(str(tmp_path_factory.mktemp("waitjson"))).start()
    c.add_provisioner()
    yield c
    c.stop()


def test_claim_create_and_delete_wait_print_only_json_on_stdout(cl):
    r = cl.xce("--json", "claim", "create", "piped", "--class", "simfs", "--size", "1Mi", "--access", "RWO", "--wait")
    doc = json.loads(r.stdout)  # the whole of stdout: nothing else is printed there
    assert doc["name"] == "piped" and doc["state"] == "READY"
    assert r.stderr.splitlines()[-1] == "claim piped: READY"  # the progress, for people watching
    r = cl.xce("claim", "delete", "piped", "--json", "--wait")
    doc = json.loads(r.stdout)
    assert doc["name"] == "piped" and doc["state"] == "RELEASED"
    assert r.stderr.splitlines()[-1] == "claim piped: RELEASED"


def test_without_json_the_progress_stays_on_stdout(cl):
    r = cl.xce("claim", "create", "watched", "--class", "simfs", "--size", "1Mi", "--access", "RWO", "--wait")
    assert r.stdout.splitlines()[-1] == "claim watched: READY" and r.stderr == ""
    cl.xce("claim", "delete", "watched", "--wait")
