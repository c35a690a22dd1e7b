"""Sizes and times as users write them (``xce.units``): here, LSF's ``-b`` begin times."""

from __future__ import annotations

import time

import pytest

from xce.units import parse_begin_time


def at(text: str, now: str) -> str:
    base = time.mktime(time.strptime(now, "%Y-%m-%d %H:%M"))
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(parse_begin_time(text, base)))


def test_begin_times_read_as_lsf_reads_them_the_next_such_moment():
    now = "2026-12-05 11:50"
    assert at("12:30", now) == "2026-12-05 12:30"
    assert at("11:00", now) == "2026-12-06 11:00"  # passed today: tomorrow's
    assert at("5:10:00", now) == "2027-01-05 10:00"  # the 5th's 10:00 passed: next month's
    assert at("30:10:00", now) == "2026-12-30 10:00"
    assert at("2:29:10:00", now) == "2028-02-29 10:00"  # the next February with a 29th
    assert at("31:10:00", "2026-11-05 11:50") == "2026-12-31 10:00"  # November has no 31st
    assert at("2027:1:2:3:04", now) == "2027-01-02 03:04"


@pytest.mark.parametrize("bad", ["25:00", "12:60", "2020:1:1:1:1", "2:30:10:00", "1:2:3:4:5:6", "noon", "13:1:10:00"])
def test_a_begin_time_that_names_no_moment_to_come_is_refused(bad):
    with pytest.raises(ValueError, match="begin time"):
        parse_begin_time(bad, time.mktime(time.strptime("2026-12-05 11:50", "%Y-%m-%d %H:%M")))
