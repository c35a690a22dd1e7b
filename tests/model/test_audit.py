"""xce.model.audit: folds hand records to a transient outbox; the model and its snapshots hold none."""

from __future__ import annotations

import json

import pytest

from xce.model import Model
from xce.model.facts import AuditRecorded
from xce.model.audit import AuditOutbox, AuditRecord


def audited(t: float, target: str = "job/1") -> AuditRecorded:
    return AuditRecorded(time=t, user="alice", action="POST /v1/jobs", target=target, result="ok")


def test_without_an_outbox_a_fold_records_nothing_and_the_snapshot_has_no_audit():
    m = Model()
    m.apply(1, audited(1.0))
    snap = m.to_snapshot()
    assert snap["format"] == 2 and "audit" not in snap
    assert m.take_audit() == []


def test_records_carry_the_position_of_their_fact_and_are_taken_once():
    m = Model(audit_outbox=AuditOutbox())
    m.apply(1, audited(1.0))
    m.apply(2, audited(2.0, "job/2"))
    got = m.take_audit()
    assert [(r.position, r.index, r.target) for r in got] == [(1, 0, "job/1"), (2, 0, "job/2")]
    assert m.take_audit() == []
    assert m == Model(position=2)  # the outbox is not model state: not compared
    assert "audit_outbox" not in json.dumps(m.to_snapshot())


def test_details_are_bounded():
    m = Model(audit_outbox=AuditOutbox())
    m.apply(1, AuditRecorded(time=1.0, user="u", action="a", target="t", result="r", detail="x" * 5000))
    (rec,) = m.take_audit()
    assert len(rec.detail) == 512


def test_a_format_1_snapshot_loads_with_its_trail_in_the_outbox_under_position_0():
    old = Model(position=7).to_snapshot()
    old["format"] = 1
    old["audit"] = [{"seq": 1, "time": 1.0, "user": "a", "action": "x", "target": "job/1", "result": "ok",
                     "detail": ""},
                    {"seq": 2, "time": 2.0, "user": "b", "action": "y", "target": "job/2", "result": "forbidden",
                     "detail": "no"}]
    m = Model.from_snapshot(old)
    assert m == Model(position=7)
    assert m.take_audit() == [
        AuditRecord(time=1.0, user="a", action="x", target="job/1", result="ok", position=0, index=1),
        AuditRecord(time=2.0, user="b", action="y", target="job/2", result="forbidden", detail="no", position=0,
                    index=2)]
    assert "audit" not in m.to_snapshot()


def test_an_unknown_snapshot_format_is_refused():
    snap = Model().to_snapshot()
    snap["format"] = 3
    with pytest.raises(ValueError):
        Model.from_snapshot(snap)
