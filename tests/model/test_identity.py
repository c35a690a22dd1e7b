"""``model/identity.py``: which hosts have lost every daemon credential (no new allocations for them)."""

from __future__ import annotations

from xce.model import Model
from xce.model.facts import TokenIssued, TokenRevoked, UserDefined, UserDisabled
from xce.model.identity import hosts_locked_out


def test_a_host_is_locked_out_once_no_identity_bound_to_it_can_authenticate():
    m = Model()
    m.apply(1, UserDefined(time=1.0, name="worker-h1", role="daemon", projects=[], host="h1"))
    m.apply(2, UserDefined(time=1.0, name="worker-h2", role="daemon", projects=[], host="h2"))
    m.apply(3, UserDefined(time=1.0, name="provisioner", role="daemon", projects=[], host=None))
    assert hosts_locked_out(m, 10.0) == {"h1", "h2"}, "bound, but no token issued yet"
    m.apply(4, TokenIssued(time=2.0, token_id="a", user="worker-h1", token_hash="ha", expires=None))
    m.apply(5, TokenIssued(time=2.0, token_id="b", user="worker-h2", token_hash="hb", expires=20.0))
    assert hosts_locked_out(m, 10.0) == set()
    assert hosts_locked_out(m, 20.0) == {"h2"}, "its only token expired"
    m.apply(6, TokenIssued(time=3.0, token_id="c", user="worker-h1", token_hash="hc", expires=None))
    m.apply(7, TokenRevoked(time=4.0, token_id="a"))
    assert hosts_locked_out(m, 10.0) == set(), "a stolen copy revoked, the worker's own token still good"
    m.apply(8, TokenRevoked(time=5.0, token_id="c"))
    assert hosts_locked_out(m, 10.0) == {"h1"}
    m.apply(9, UserDisabled(time=6.0, name="worker-h2", disabled=True))
    assert hosts_locked_out(m, 10.0) == {"h1", "h2"}
    assert "h3" not in hosts_locked_out(m, 10.0), "no identity bound to it (a worker run with an admin token)"
