import pytest

from tests.helpers import Cluster

#: fast host-loss detection and fencing for tests (workers heartbeat every 0.5 s); otherwise the
#: embedded defaults
TEST_CONFIG = """
[controller]
host_timeout = {host_timeout}
fence_time = 2.0
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


def make_cluster(root, host_timeout: float = 2.0) -> Cluster:
    cfg = root / "xce.toml"
    cfg.write_text(TEST_CONFIG.format(host_timeout=host_timeout))
    return Cluster(str(root), config=str(cfg)).start()


@pytest.fixture
def cluster(tmp_path):
    c = make_cluster(tmp_path)
    yield c
    c.stop()
