"""Node-local standalone claims: refused where a class cannot hold one, never left PENDING."""

from __future__ import annotations

import pytest

from xce.config import parse_config
from xce.errors import InvalidRequest
from xce.model import Model
from xce.model import facts as F
from xce.model.claims import ClaimSpec, create
from xce.model.identity import Role, User

CONFIG = parse_config("""
[[users]]
name = "admin"
role = "admin"
projects = ["a"]
[[queues]]
name = "default"
[[projects]]
name = "a"
[[pools]]
name = "p"
capacity = "1Ti"
[[claim_classes]]
name = "vol"
provider = "simfs"
pools = ["p"]
[[claim_classes]]
name = "scratch"
provider = "simfs"
scope = "node"
counter = "scratch"
[[claim_classes]]
name = "bare"
provider = "simfs"
scope = "node"
""")
ALICE = User(name="alice", role=Role.USER, projects=["a"])


@pytest.fixture
def model() -> Model:
    m = Model(cluster_id="k")
    m.apply(1, F.ProjectDefined(time=0, name="a"))
    return m


def test_a_node_scope_class_without_a_host_counter_refuses_standalone_claims(model):
    with pytest.raises(InvalidRequest, match="'bare' is node-scope and draws on no host counter"):
        create(model, CONFIG, ALICE, ClaimSpec("cache", "bare", "1Gi", "RWO"), 1.0)
    assert not model.claims


def test_a_shared_class_is_not_refused(model):
    facts, claim_id = create(model, CONFIG, ALICE, ClaimSpec("cache", "vol", "1Gi", "RWO"), 1.0)
    assert [f.claim_id for f in facts] == [claim_id]


def test_a_node_scope_standalone_claim_is_refused_at_creation_not_left_pending(model):
    with pytest.raises(InvalidRequest, match="'scratch' is node-scope: its claims live on hosts"):
        create(model, CONFIG, ALICE, ClaimSpec("cache", "scratch", "1Gi", "RWO"), 1.0)
    assert not model.claims
