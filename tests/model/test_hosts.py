"""Hosts in the model: ``xce host remove`` of a host that is gone, and what keeps one."""

from __future__ import annotations

import pytest

from tests.model.test_job_claims import World
from xce.errors import Conflict, NotFound
from xce.model import hosts
from xce.model.entities.claims import Attachment, Mode
from xce.model.facts import HostStateChanged


def gone(w: World, name: str) -> None:
    w.commit([HostStateChanged(time=w.tick(), name=name, state="UNAVAIL", reason="no heartbeat")])


def test_a_host_that_is_gone_with_nothing_on_it_is_removed():
    w = World()
    with pytest.raises(Conflict, match="host h2 is up"):
        hosts.remove(w.model, "h2", "admin", w.tick())
    gone(w, "h2")
    w.commit(hosts.remove(w.model, "h2", "admin", w.tick()))
    assert sorted(w.model.hosts) == ["h1"]
    with pytest.raises(NotFound, match="host 'h2' does not exist"):
        hosts.remove(w.model, "h2", "admin", w.tick())


def test_a_host_holding_jobs_or_keeping_claims_is_not_removed():
    w = World()
    job = w.running(hosts=("h1",))
    gone(w, "h1")
    with pytest.raises(Conflict, match=f"host h1 still holds jobs {job.id}"):
        hosts.remove(w.model, "h1", "admin", w.tick())
    gone(w, "h2")
    claim = w.standalone("ckpt")
    claim.attachments.append(Attachment(id=1, host="h2", mode=Mode("rw"), created=0.0, by="admin"))
    with pytest.raises(Conflict, match="host h2 keeps claims ckpt"):
        hosts.remove(w.model, "h2", "admin", w.tick())
