"""Class capabilities: reported by the agent that runs the class's ops, a fact only when they change."""

from __future__ import annotations

import pytest

from xce.config import parse_config
from xce.errors import Conflict, InvalidRequest
from xce.model import Model
from xce.model import capabilities

CONFIG = """
[[users]]
name = "admin"
role = "admin"
projects = ["default"]

[[projects]]
name = "default"

[[pools]]
name = "p"
capacity = "10Gi"

[[claim_classes]]
name = "fast"
provider = "btrfs"
pools = ["p"]

[[claim_classes]]
name = "local"
provider = "simfs"
scope = "node"
"""

EXPAND = {"create_snapshot": True, "clone": True, "expand": True, "online_expand": True,
          "access_modes": ["RWO", "RWX"]}


@pytest.fixture
def config():
    return parse_config(CONFIG)


def fold(model: Model, facts) -> Model:
    for f in facts:
        model.apply(model.position + 1, f)
    return model


def test_a_report_is_a_fact_once_and_again_only_when_it_changes(config):
    m = Model()
    assert capabilities.can(m, "fast", "expand") is None
    fold(m, capabilities.report(m, config, "provisioner", "provisioner", "fast", "btrfs", EXPAND, 1.0))
    assert capabilities.can(m, "fast", "expand") is True and capabilities.can(m, "fast", "online_expand") is True
    assert m.class_capabilities["fast"].access_modes == ["RWO", "RWX"]
    assert capabilities.report(m, config, "provisioner", "provisioner", "fast", "btrfs", dict(EXPAND), 2.0) == []
    changed = capabilities.report(m, config, "provisioner", "provisioner", "fast", "btrfs", {**EXPAND, "expand": False},
                                  3.0)
    assert len(changed) == 1
    fold(m, changed)
    assert capabilities.can(m, "fast", "expand") is False


def test_a_provider_without_the_op_can_do_nothing_and_unknown_flags_are_ignored(config):
    m = fold(Model(), capabilities.report(Model(), config, "provisioner", "provisioner", "fast", "btrfs", None, 1.0))
    assert m.class_capabilities["fast"].flags == dict.fromkeys(capabilities.FLAGS, False)
    m = fold(Model(), capabilities.report(Model(), config, "provisioner", "provisioner", "fast", "btrfs",
                                          {"expand": "yes", "teleport": True}, 1.0))
    assert m.class_capabilities["fast"].flags["expand"] is False and "teleport" not in m.class_capabilities["fast"].flags


def test_only_the_agent_of_the_class_may_report_it_for_its_own_provider(config):
    m = Model()
    with pytest.raises(InvalidRequest):
        capabilities.report(m, config, "provisioner", "provisioner", "nope", "btrfs", EXPAND, 1.0)
    with pytest.raises(Conflict, match="provided by btrfs, not simfs"):
        capabilities.report(m, config, "provisioner", "provisioner", "fast", "simfs", EXPAND, 1.0)
    with pytest.raises(Conflict, match="not node:h1's"):
        capabilities.report(m, config, "node:h1", "provisioner", "fast", "btrfs", EXPAND, 1.0)
    with pytest.raises(Conflict, match="not provisioner's"):
        capabilities.report(m, config, "provisioner", "provisioner", "local", "simfs", EXPAND, 1.0)


def test_capabilities_survive_a_snapshot(config):
    m = fold(Model(), capabilities.report(Model(), config, "provisioner", "provisioner", "fast", "btrfs", EXPAND, 1.0))
    restored = Model.from_snapshot(m.to_snapshot())
    assert restored.class_capabilities == m.class_capabilities
    old = m.to_snapshot()
    del old["class_capabilities"]  # written before the collection existed
    assert Model.from_snapshot(old).class_capabilities == {}
