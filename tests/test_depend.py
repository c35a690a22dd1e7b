"""The ``-w`` grammar (``xce.depend``): what parses into which tree, what is refused and where."""

from __future__ import annotations

import pytest

from xce.depend import DependError, describe, parse


@pytest.mark.parametrize("text, tree", [
    ("12", ["cond", "done", {"id": 12}, None, None]),
    ("done(12)", ["cond", "done", {"id": 12}, None, None]),
    ('ended("prep")', ["cond", "ended", {"name": "prep"}, None, None]),
    ("started(train_*)", ["cond", "started", {"name": "train_*"}, None, None]),
    ("exit(7, 3)", ["cond", "exit", {"id": 7}, "==", 3]),
    ("exit(7,!=0)", ["cond", "exit", {"id": 7}, "!=", 0]),
    ("done(12[3])", ["cond", "done", {"id": 12, "index": 3}, None, None]),
    ("numdone(12, >= 5)", ["cond", "numdone", {"id": 12}, ">=", 5]),
    ("numended(12, *)", ["cond", "numended", {"id": 12}, None, "*"]),
    ("done(1) && done(2) || !exit(3)", ["or", [["and", [["cond", "done", {"id": 1}, None, None],
                                                        ["cond", "done", {"id": 2}, None, None]]],
                                               ["not", ["cond", "exit", {"id": 3}, None, None]]]]),
    ("done(1) && (done(2) || done(3))", ["and", [["cond", "done", {"id": 1}, None, None],
                                                 ["or", [["cond", "done", {"id": 2}, None, None],
                                                         ["cond", "done", {"id": 3}, None, None]]]]]),
])
def test_expressions_parse_into_their_trees_and_read_back_the_same(text, tree):
    assert parse(text) == tree
    assert parse(describe(tree)) == tree


@pytest.mark.parametrize("text, reason, column", [
    ("", "empty dependency expression", 1),
    ("done(", "expected a job id or a job name", 6),
    ("finished(1)", "unknown condition 'finished'", 1),
    ("numdone(3)", "numdone() needs a count", 10),
    ("numdone(3, 4)", "numdone() needs an operator", 12),
    ("done(1, 3)", "done() takes a job only", 9),
    ("exit(1, *)", "'*' is a count", 9),
    ("done(1) done(2)", "unexpected 'done'", 9),
    ("done(0)", "job ids and array indices start at 1", 6),
    ("done(1) & done(2)", "unexpected '&'", 9),
])
def test_bad_expressions_say_what_and_where(text, reason, column):
    with pytest.raises(DependError) as e:
        parse(text)
    assert reason in e.value.reason and e.value.position + 1 == column
