"""The ``-R`` resource requirement parser: each section, units, and errors that point at the problem."""

from __future__ import annotations

import pytest

from xce.resreq import MAX_LENGTH, ResReqError, parse_resreq
from xce.units import parse_amount

GI = 2**30


def matches(text: str, attrs: dict[str, str] | None = None, counters: dict[str, float] | None = None) -> bool:
    return parse_resreq(text).select.matches(attrs or {}, counters or {})


# ---------------------------------------------------------------- valid strings


def test_empty_string_asks_for_nothing():
    rr = parse_resreq("")
    assert rr.select.source == "" and rr.select.matches({}, {})
    assert dict(rr.rusage) == {} and rr.span_hosts is None and rr.ptile is None and rr.order == ()
    assert parse_resreq("   ").select.matches({}, {})


def test_all_sections_in_any_order_with_spaces():
    rr = parse_resreq(" order[-mem, cpu_speed]  span[ptile=4] rusage[ mem = 2G , gpu=1 ]select[zone==a] ")
    assert rr.select.source == "zone==a"
    assert rr.select.names == frozenset({"zone"})
    assert dict(rr.rusage) == {"mem": 2e9, "gpu": 1.0}
    assert (rr.span_hosts, rr.ptile) == (None, 4)
    assert rr.order == (("mem", True), ("cpu_speed", False))


def test_span_hosts_1():
    rr = parse_resreq("span[hosts=1]")
    assert (rr.span_hosts, rr.ptile) == (1, None)


def test_a_string_without_sections_is_a_bare_select():
    rr = parse_resreq("zone==a && mem>4G")
    assert rr.select.source == "zone==a && mem>4G"
    assert rr.select.names == frozenset({"zone", "mem"})
    assert rr.select.matches({"zone": "a"}, {"mem": 5e9})
    assert not rr.select.matches({"zone": "a"}, {"mem": 3e9})


@pytest.mark.parametrize("text, value", [
    ("2", 2.0), ("1.5", 1.5), ("500M", 500e6), ("500m", 500e6), ("2k", 2e3), ("3T", 3e12), ("1P", 1e15),
    ("4Gi", 4 * GI), ("4gi", 4 * GI), ("4GI", 4 * GI), ("512Mi", 512 * 2**20), ("8Ki", 8192.0),
    ("1.5G", 1.5e9), ("1Ti", 2.0**40), ("1Pi", 2.0**50),
])
def test_amount_units(text, value):
    assert parse_amount(text) == value
    assert dict(parse_resreq(f"rusage[mem={text}]").rusage) == {"mem": value}


@pytest.mark.parametrize("text", ["", "G", "4GB", "4 G", "-1", "1e9", "4Gib", "0x10"])
def test_not_amounts(text):
    assert parse_amount(text) is None


def test_select_attribute_equality_and_quotes():
    assert matches("select[zone==a]", {"zone": "a"})
    assert matches("select[zone=a]", {"zone": "a"})
    assert not matches("select[zone==a]", {"zone": "b"})
    assert matches("select[zone!=a]", {"zone": "b"})
    assert matches('select[model=="h100 sxm"]', {"model": "h100 sxm"})
    assert matches("select[model=='h100']", {"model": "h100"})
    assert matches("select[zone==us-east-1]", {"zone": "us-east-1"})


def test_select_undefined_name_is_false_for_any_comparison():
    assert not matches("select[zone==a]", {})
    assert not matches("select[zone!=a]", {})
    assert not matches("select[cpus>=1]", {})
    assert matches("select[!(zone==a)]", {})


def test_select_numeric_comparisons_on_attributes_and_counters():
    attrs = {"cpu_speed": "2.4", "memsize": "64G", "model": "h100"}
    assert matches("select[cpu_speed>=2.4]", attrs)
    assert not matches("select[cpu_speed>2.4]", attrs)
    assert matches("select[cpu_speed<3]", attrs)
    assert matches("select[cpu_speed<=2.4 && cpu_speed!=2]", attrs)
    assert matches("select[memsize>=64G]", attrs)       # units on both sides
    assert matches("select[memsize>59Gi]", attrs)       # 64e9 > 59 * 2**30
    assert not matches("select[memsize>=64Gi]", attrs)  # 64e9 < 64 * 2**30
    assert matches("select[cpu_speed==2.40]", attrs)    # numerically equal, textually not
    # a non-numeric attribute never matches a numeric comparison, whatever the operator
    assert not matches("select[model>1]", attrs)
    assert not matches("select[model<1]", attrs)
    assert not matches("select[model!=1]", attrs)
    # a counter of the name wins over an attribute of the same name
    assert matches("select[mem>4G]", {"mem": "1"}, {"mem": 8e9})
    assert not matches("select[mem>4G]", {"mem": "8G"}, {"mem": 1e9})


def test_select_textual_order_comparisons_never_match():
    assert not matches("select[zone>a]", {"zone": "b"})
    assert not matches("select[zone<'z']", {"zone": "b"})


def test_select_logic_precedence_and_words():
    attrs = {"zone": "a", "fs": "nfs"}
    # && binds tighter than ||
    assert matches("select[zone==b && fs==nfs || zone==a]", attrs)
    assert not matches("select[zone==b && (fs==nfs || zone==a)]", attrs)
    assert matches("select[zone==a and not fs==lustre]", attrs)
    assert matches("select[zone==b or fs==nfs]", attrs)
    assert matches("select[!!(zone==a)]", attrs)
    assert not matches("select[!zone==a]", attrs)


def test_select_defined_and_bare_names():
    assert matches("select[defined(gpu)]", {"gpu": "0"})
    assert matches("select[defined(gpu)]", {}, {"gpu": 0.0})
    assert not matches("select[defined(gpu)]", {"zone": "a"})
    # a bare name is true when defined and not "", "0" or "false"; a counter when > 0
    assert matches("select[ssd]", {"ssd": "yes"})
    for falsy in ("", "0", "false"):
        assert not matches("select[ssd]", {"ssd": falsy})
    assert not matches("select[ssd]", {})
    assert matches("select[gpu]", {}, {"gpu": 2.0})
    assert not matches("select[gpu]", {}, {"gpu": 0.0})


def test_parse_is_cached_and_results_are_immutable():
    a = parse_resreq("rusage[mem=1G]")
    assert parse_resreq("rusage[mem=1G]") is a
    with pytest.raises(TypeError):
        a.rusage["mem"] = 2.0  # type: ignore[index]


def test_user_text_is_never_evaluated():
    # Python syntax is simply not part of the grammar
    for text in ("select[__import__('os')]", "select[zone.__class__==a]; x", "select[a[0]]"):
        with pytest.raises(ResReqError):
            parse_resreq(text)


# ---------------------------------------------------------------- errors and their column


BAD = [
    # (text, 1-based column, part of the message)
    ("foo[x]", 1, "unknown section 'foo'"),
    ("select[a] bogus[x]", 11, "unknown section 'bogus'"),
    ("selct[zone==a]", 1, "unknown section 'selct'"),
    ("select[zone==a", 15, "expected ']' to close select["),
    ("select[zone==a] rusage[mem=1G", 30, "expected ']' to close rusage["),
    ("select[(zone==a]", 16, "expected ')' to close the one at column 8"),
    ("select[a] select[b]", 11, "section select[] given twice"),
    ("rusage[mem=1G] select[a] rusage[gpu=1]", 26, "section rusage[] given twice"),
    ("rusage[mem=lots]", 12, "invalid amount 'lots' for 'mem'"),
    ("rusage[mem=4GB]", 12, "invalid amount '4GB' for 'mem'"),
    ("rusage[mem=1.5.2]", 12, "invalid amount '1.5.2' for 'mem'"),
    ("rusage[mem=-1]", 12, "invalid amount '-' for 'mem'"),
    ("rusage[mem=0]", 12, "amount for 'mem' must be greater than 0"),
    ("rusage[mem]", 11, "expected '=' after 'mem'"),
    ("rusage[mem=]", 12, "expected an amount for 'mem'"),
    ("rusage[mem=1G,mem=2G]", 15, "counter 'mem' appears twice"),
    ("rusage[=1]", 8, "expected a counter name, found '='"),
    ("span[hosts=2]", 12, "only span[hosts=1] is supported"),
    ("span[ptile=0]", 12, "ptile must be a positive integer"),
    ("span[ptile=2.5]", 12, "ptile must be a positive integer"),
    ("span[ptile=x]", 12, "ptile must be a positive integer"),
    ("span[cpus=4]", 6, "span[] takes hosts=1 or ptile=K"),
    ("span[]", 6, "expected hosts=1 or ptile=K"),
    ("span[ptile=4,hosts=1]", 13, "unexpected ','"),
    ("select[]", 8, "empty select[]"),
    ("select[zone==]", 14, "expected a value after '=='"),
    ("select[mem>4GB]", 12, "invalid number '4GB'"),
    ("select[zone==a &&]", 18, "expected a term"),
    ("select[zone==a b]", 16, "unexpected 'b'"),
    ("select[zone==a;]", 15, "unexpected character ';'"),
    ("select[==a]", 8, "expected a term, found '=='"),
    ("select[a] junk", 11, "expected a section such as select[...]"),
    ("zone==a )", 9, "unexpected ')'"),
    ("order[mem,]", 11, "expected a name to order by"),
    ("order[5]", 7, "expected a name to order by, found '5'"),
]


@pytest.mark.parametrize("text, column, message", BAD, ids=[b[0] for b in BAD])
def test_bad_strings_name_the_problem_and_its_column(text, column, message):
    with pytest.raises(ResReqError) as info:
        parse_resreq(text)
    e = info.value
    assert message in str(e)
    assert str(e).endswith(f" at column {column}")
    assert e.position == column - 1
    assert e.text == text


def test_pretty_points_a_caret_at_the_column():
    with pytest.raises(ResReqError) as info:
        parse_resreq("select[a] bogus[x]")
    assert info.value.pretty() == "select[a] bogus[x]\n          ^ unknown section 'bogus' (expected select, rusage, span, order)"


def test_too_long():
    with pytest.raises(ResReqError) as info:
        parse_resreq("select[" + "a||" * MAX_LENGTH + "a]")
    assert "longer than 4096 characters" in str(info.value) and info.value.position == 0
    parse_resreq("select[" + "a" * (MAX_LENGTH - 8) + "]")  # at the limit is fine


def test_resreq_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_resreq("foo[x]")
