"""A real local cluster to attack: a controller, worker processes host1 and host2, and the provisioner.

Shared by a module's tests (starting daemons is the slow part); each test leaves the cluster as
it found it, or works on identities of its own.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.helpers import Cluster, cli
from tests.integration.conftest import make_cluster

#: what an XCE token looks like (``identity.new_token_secret``): to find one wherever it must not be
SECRET = re.compile(rb"xce_[0-9a-f]{12}_[A-Za-z0-9_-]{20,}")


@pytest.fixture(scope="module")
def cl(tmp_path_factory) -> Cluster:
    c = make_cluster(tmp_path_factory.mktemp("security"), host_timeout=30.0)
    c.add_worker("host1", slots=2, attrs={"node": "host1"})
    c.add_worker("host2", slots=2, attrs={"node": "host2"})
    c.add_provisioner()
    yield c
    c.stop()


def as_user(cl: Cluster, token: str) -> httpx.Client:
    """The REST API with someone else's token."""
    return cl.ctl.client(token)


def xce_as(cl: Cluster, token: str, *args: str):
    """The real ``xce`` command with ``token`` in XCE_TOKEN."""
    return cli({"XCE_URL": cl.ctl.url, "XCE_TOKEN": token, "XCE_CONFIG": ""}, *args)


def new_user(cl: Cluster, name: str, role: str = "user", **kw) -> str:
    """Create ``name`` (through the admin's CLI) and return a fresh token for it."""
    args = ["user", "create", name, "--role", role] + [a for k, v in kw.items() for a in (f"--{k}", v)]
    cl.xce(*args)
    return json.loads(cl.xce("--json", "token", "create", "--user", name).stdout)["token"]
