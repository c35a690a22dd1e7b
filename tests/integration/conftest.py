import pytest

from tests.helpers import Cluster

#: fast host-loss detection and fencing for tests (workers heartbeat every 0.5 s); otherwise the
#: embedded defaults.  Fill it with ``cluster_config``.
TEST_CONFIG = """
[controller]
host_timeout = {host_timeout}
fence_time = {fence_time}
fence_margin = 0.5

[[users]]
name = "admin"
role = "admin"
projects = ["default"]

[[queues]]
name = "default"
priority = 30

[[queues]]
name = "urgent"
priority = 60

[[projects]]
name = "default"

[[resources]]
name = "license"
scope = "cluster"
amount = 1
unit = "seats"
description = "a floating license"
"""


def cluster_config(host_timeout: float, fence_time: float | None = None) -> str:
    """TEST_CONFIG with a host timeout and a fence time: by default as long as the host timeout, so a
    test that restarts a daemon (not one that loses a host) keeps its runs on a busy machine too."""
    return TEST_CONFIG.format(host_timeout=host_timeout, fence_time=host_timeout if fence_time is None else fence_time)


def make_cluster(root, host_timeout: float = 2.0, hosts: dict[str, int] | None = None, extra: str = "") -> Cluster:
    """A started cluster on TEST_CONFIG (``extra`` appended), with a worker for each of ``hosts``
    (name -> slots)."""
    cfg = root / "xce.toml"
    cfg.write_text(cluster_config(host_timeout) + extra)
    c = Cluster(str(root), config=str(cfg)).start()
    for name, slots in (hosts or {}).items():
        c.add_worker(name, slots=slots)
    return c


@pytest.fixture
def cluster(tmp_path):
    c = make_cluster(tmp_path)
    yield c
    c.stop()
