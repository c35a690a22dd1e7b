"""Pure CLI helpers: time parsing, tables, sizes."""

import pytest

from xce.cli.errors import UsageError
from xce.cli.output import fields, parse_since, size, table


def test_parse_since_durations_iso_and_epoch():
    now = 1_000_000.0
    assert parse_since("90s", now) == now - 90
    assert parse_since("30m", now) == now - 1800
    assert parse_since("2h", now) == now - 7200
    assert parse_since("7d", now) == now - 7 * 86400
    assert parse_since("12345.5", now) == 12345.5
    assert parse_since("2026-12-02T10:00:00+00:00", now) == 1796205600.0


@pytest.mark.parametrize("bad", ["", "yesterday", "5x", "-", "1h30"])
def test_parse_since_refuses_what_it_cannot_read(bad):
    with pytest.raises(UsageError, match="invalid time"):
        parse_since(bad, 0.0)


def test_table_aligns_columns_and_prints_missing_as_dash():
    out = table(("A", "LONGER"), [("x", None), ("wider-cell", 3)])
    assert out.splitlines() == ["A           LONGER", "x           -", "wider-cell  3"]


def test_fields_align_values():
    assert fields([("Job", 1), ("Exit code", None)]).splitlines() == ["Job:       1", "Exit code: -"]


def test_size_binary_units():
    assert size(10 * 2**30) == "10Gi"
    assert size(512 * 2**20) == "512Mi"
    assert size(1.5 * 2**40) == "1.5Ti"
    assert size(100) == "100B"  # a unit under 1Ki too: a USED of 3 bytes beside SIZE 1Gi read as "3"
    assert size(0) == "0B"
