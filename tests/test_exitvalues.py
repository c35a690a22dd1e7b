"""LSF's requeue exit values (``xce.exitvalues``): ``-Q`` and a queue's ``requeue_exit_values``."""

from __future__ import annotations

import pytest

from xce.exitvalues import ExitValuesError, parse


def test_requeue_exit_values_read_as_lsf_reads_them():
    rule = parse("3 4 EXCLUDE(9)")
    assert [rule.requeues(c) for c in (0, 3, 4, 5, 9)] == [(False, False), (True, False), (True, False),
                                                          (False, False), (True, True)]
    every = parse("all ~1 ~2")
    assert [every.requeues(c)[0] for c in (0, 1, 2, 3, 255)] == [False, False, False, True, True]
    for bad, why in (("", "no exit code"), ("~3", "needs all first"), ("3 all", "all comes first"),
                     ("256", "not an exit code"), ("all 3", "takes ~CODE"), ("EXCLUDE(1) EXCLUDE(2)", "once"),
                     ("three", "not an exit code")):
        with pytest.raises(ExitValuesError, match=why):
            parse(bad)
