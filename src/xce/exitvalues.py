"""LSF's requeue exit values: which exit codes send a job back to the queue (``bsub -Q``, a queue's
``requeue_exit_values``, LSF's ``REQUEUE_EXIT_VALUES``).

The grammar, as LSF's: ``[all [~CODE ...] | CODE ...] [EXCLUDE(CODE ...)]``.  A code listed requeues
the job when its run exits with it; ``all`` requeues on every non-zero code but those after ``~``;
a code in ``EXCLUDE(...)`` requeues the job too, and its next run never goes to the host that run was
on (LSF's host exclusion).  Exit code 0 never requeues: a run that succeeded is DONE.  A job's ``-Q``
replaces its queue's values, as in LSF.

Stdlib only: the job-spec parser checks ``-Q`` before anything is sent, the model judges runs by it.
"""

from __future__ import annotations

import re

_EXCLUDE = re.compile(r"EXCLUDE\s*\(([^()]*)\)", re.IGNORECASE)


class ExitValuesError(ValueError):
    """Requeue exit values that do not parse; the message says which word and why."""


class RequeueRule:
    """Parsed requeue exit values (``parse``).  ``requeues(code)``: (requeue the job?, and keep its next
    run off the host this one ran on?)."""

    __slots__ = ("codes", "every", "unless", "exclude")

    def __init__(self, codes: frozenset[int], every: bool, unless: frozenset[int], exclude: frozenset[int]) -> None:
        self.codes, self.every, self.unless, self.exclude = codes, every, unless, exclude

    def requeues(self, code: int | None) -> tuple[bool, bool]:
        if code is None or code == 0:
            return False, False
        if code in self.exclude:
            return True, True
        if self.every:
            return code not in self.unless, False
        return code in self.codes, False

    def __bool__(self) -> bool:
        return bool(self.codes or self.every or self.exclude)


def _code(word: str, text: str) -> int:
    if not word.isdigit() or int(word) > 255:
        raise ExitValuesError(f"requeue exit values {text!r}: {word!r} is not an exit code (0-255)")
    return int(word)


def parse(text: str) -> RequeueRule:
    """``text`` as LSF reads ``-Q``/``REQUEUE_EXIT_VALUES`` (ExitValuesError if it does not parse)."""
    exclude: set[int] = set()
    excludes = _EXCLUDE.findall(text)
    if len(excludes) > 1:
        raise ExitValuesError(f"requeue exit values {text!r}: EXCLUDE(...) is given once")
    for group in excludes:
        exclude.update(_code(w, text) for w in group.split())
    rest = _EXCLUDE.sub(" ", text).split()
    if any("(" in w or ")" in w for w in rest):
        raise ExitValuesError(f"requeue exit values {text!r}: expected CODE ..., all [~CODE ...] and "
                              "EXCLUDE(CODE ...)")
    every = bool(rest) and rest[0].lower() == "all"
    codes: set[int] = set()
    unless: set[int] = set()
    for word in rest[1:] if every else rest:
        if word.startswith("~"):
            if not every:
                raise ExitValuesError(f"requeue exit values {text!r}: ~{word[1:]} leaves a code out of all: "
                                      "it needs all first")
            unless.add(_code(word[1:], text))
        elif word.lower() == "all":
            raise ExitValuesError(f"requeue exit values {text!r}: all comes first")
        else:
            codes.add(_code(word, text))
    if every and codes:
        raise ExitValuesError(f"requeue exit values {text!r}: all takes ~CODE, not CODE")
    rule = RequeueRule(frozenset(codes), every, frozenset(unless), frozenset(exclude))
    if not rule:
        raise ExitValuesError(f"requeue exit values {text!r}: no exit code given")
    return rule
