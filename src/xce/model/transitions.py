"""What every state machine of the model shares: the check against its transition table.

Each state machine (claim, attachment, job) has one enum, one table and one
function that changes its state; that function calls ``check`` first.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

State = TypeVar("State", bound=enum.Enum)


class ImpossibleTransition(Exception):
    """A fact asked for a transition its table forbids.  The decide functions never produce one, so
    the log and the model disagree: raised, as Nomad's FSM does, rather than folded into nonsense."""


def check(table: Mapping[State, frozenset[State]], old: State, new: State, what: str, reason: str) -> None:
    if new not in table[old]:
        raise ImpossibleTransition(f"{what}: {old.value} -> {new.value}: {reason}")
