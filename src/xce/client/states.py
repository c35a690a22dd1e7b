"""The states the REST API reports, as its clients name them.

A client compares a job's, a claim's or a snapshot's ``state`` with these, never with a string of its own; a
test (tests/client/test_states.py) keeps them equal to the model's enums, the one definition.
They are ``StrEnum``s, so ``job["state"] == JobState.RUN`` reads a JSON document as it comes.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PEND = "PEND"
    PSUSP = "PSUSP"  # held
    RUN = "RUN"
    USUSP = "USUSP"  # stopped: its processes frozen until resumed
    STAGE_OUT = "STAGE_OUT"  # the process ended; its stage-out runs, then DONE or EXIT
    DONE = "DONE"
    EXIT = "EXIT"


class ClaimState(StrEnum):
    PENDING = "PENDING"
    PREPARING = "PREPARING"
    READY = "READY"
    RELEASING = "RELEASING"
    RELEASED = "RELEASED"
    FAILED = "FAILED"


class ResizeState(StrEnum):
    """A claim's resize (``claim["resize"]["state"]``); the claim stays usable throughout."""

    REQUESTED = "REQUESTED"
    EXPANDING = "EXPANDING"
    DONE = "DONE"
    FAILED = "FAILED"  # the claim keeps its old size


class SnapshotState(StrEnum):
    PENDING = "PENDING"  # being taken
    READY = "READY"
    RELEASING = "RELEASING"
    RELEASED = "RELEASED"
    FAILED = "FAILED"


JOB_PENDING = (JobState.PEND, JobState.PSUSP)
JOB_FINISHED = (JobState.DONE, JobState.EXIT)  # a job in these states changes only if someone requeues it
RESIZE_ENDED = (ResizeState.DONE, ResizeState.FAILED)
