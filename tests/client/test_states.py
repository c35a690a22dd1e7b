"""The client's state names are the model's: the API reports the model's enums' values."""

from xce.client import states
from xce.model.entities.claims import ClaimState, ResizeState
from xce.model.jobs import JobState


def test_job_states_are_the_models():
    assert {s.name: s.value for s in states.JobState} == {s.name: s.value for s in JobState}


def test_claim_states_are_the_models():
    assert {s.name: s.value for s in states.ClaimState} == {s.name: s.value for s in ClaimState}


def test_resize_states_are_the_models():
    assert {s.name: s.value for s in states.ResizeState} == {s.name: s.value for s in ResizeState}


def test_snapshot_states_are_the_models():
    from xce.model.snapshots import SnapshotState

    assert {s.name: s.value for s in states.SnapshotState} == {s.name: s.value for s in SnapshotState}
