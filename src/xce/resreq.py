"""LSF-style resource requirement strings (``xce submit -R``), parsed once and compiled.

Grammar (sections in any order, each at most once; a string with no section
keyword is a bare ``select`` expression, as in LSF)::

    resreq  := section*  |  expr
    section := "select[" expr "]" | "rusage[" NAME "=" AMOUNT ("," NAME "=" AMOUNT)* "]"
             | "span[" ("hosts=1" | "ptile=" INT) "]" | "order[" ["-"] NAME ("," ["-"] NAME)* "]"
    expr    := and (("||" | "or") and)*
    and     := not (("&&" | "and") not)*
    not     := ("!" | "not") not | "(" expr ")" | "defined(" NAME ")" | NAME [CMP value]
    CMP     := "==" | "=" | "!=" | "<" | "<=" | ">" | ">="
    value   := AMOUNT | WORD | "quoted string"
    AMOUNT  := number with an optional unit: K M G T P (x1000) or Ki Mi Gi Ti Pi (x1024), any case

Semantics against a host (``attrs``: L1 labels, ``counters``: L2 amounts):
a name is a counter if the host has one by that name, else an attribute;
numbers compare numerically (an attribute that is not a number never
matches a numeric comparison); an undefined name makes its comparison
false; a bare name is true when defined and not "", "0" or "false".
``order[name]`` sorts candidate hosts ascending by that value,
``order[-name]`` descending.  The predicate is compiled to closures: user
text is never evaluated as Python.
"""

from __future__ import annotations

import functools
import operator
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

from xce.units import parse_amount

MAX_LENGTH = 4096
# parentheses and negations nest at most this deep: the parser recurses once per level, and a
# string of a few hundred "(" must be a clean refusal, not a RecursionError in the controller
MAX_DEPTH = 32
SECTIONS = ("select", "rusage", "span", "order")
_TOKEN = re.compile(r"""\s*(?:(?P<num>\d+(?:\.\d+)?(?:[kmgtpKMGTP][iI]?)?(?![\w.-]))
                        |(?P<badnum>\d[\w.\-]*)  # 4GB, 1.5.2: a malformed number, reported where it is used
                        |(?P<op>&&|\|\||==|!=|<=|>=|[()<>=!,-])
                        |(?P<str>"[^"]*"|'[^']*')
                        |(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*))""", re.X)

Attrs = Mapping[str, str]
Counters = Mapping[str, float]
Pred = Callable[[Attrs, Counters], bool]


class ResReqError(ValueError):
    """A resource requirement string is malformed; ``position`` is the 0-based offset of the problem."""

    def __init__(self, text: str, position: int, message: str) -> None:
        self.text, self.position, self.reason = text, position, message
        super().__init__(f"{message} at column {position + 1}")

    def pretty(self) -> str:
        return f"{self.text}\n{' ' * self.position}^ {self.reason}"


@dataclass(frozen=True)
class Select:
    source: str
    names: frozenset[str]
    _pred: Pred | None = None

    def matches(self, attrs: Attrs, counters: Counters) -> bool:
        return True if self._pred is None else self._pred(attrs, counters)


@dataclass(frozen=True)
class ResReq:
    text: str = ""
    select: Select = field(default_factory=lambda: Select("", frozenset()))
    rusage: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    span_hosts: int | None = None
    ptile: int | None = None
    order: tuple[tuple[str, bool], ...] = ()


class _Tokens:
    def __init__(self, text: str, start: int, end: int) -> None:
        self.text, pos = text, start
        self.items: list[tuple[str, str, int]] = []  # (kind: _TOKEN's group, text, position)
        while pos < end:
            if text[pos].isspace():
                pos += 1
                continue
            m = _TOKEN.match(text, pos, end)
            if m is None or m.end() == pos:
                raise ResReqError(text, pos, f"unexpected character {text[pos]!r}")
            kind = m.lastgroup
            assert kind is not None  # every alternative of _TOKEN is a named group
            self.items.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i, self.end = 0, end

    def peek(self) -> tuple[str, str, int] | None:
        return self.items[self.i] if self.i < len(self.items) else None

    def next(self, expected: str) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise ResReqError(self.text, self.end, f"expected {expected}")
        self.i += 1
        return tok

    def accept(self, *values: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] in ("op", "name") and tok[1] in values:
            self.i += 1
            return True
        return False

    def done(self) -> None:
        tok = self.peek()
        if tok is not None:
            raise ResReqError(self.text, tok[2], f"unexpected {tok[1]!r}")


def _truthy(name: str) -> Pred:
    def pred(attrs: Attrs, counters: Counters) -> bool:
        if name in counters:
            return counters[name] > 0
        return attrs.get(name, "") not in ("", "0", "false")
    return pred


# (the operator module's functions: a select[] runs once per host and term, 10,000s of times a cycle)
_CMP = {"==": operator.eq, "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}


def _compare(name: str, op: str, value: str, number: float | None) -> Pred:
    cmp = _CMP[op]
    if number is not None:
        def numeric(attrs: Attrs, counters: Counters) -> bool:
            v = counters.get(name)
            if v is None:
                raw = attrs.get(name)
                if raw is None:
                    return False
                v = parse_amount(raw)
                if v is None:
                    try:
                        v = float(raw)
                    except ValueError:
                        return False
            return cmp(v, number)
        return numeric

    if op not in ("==", "=", "!="):
        return lambda attrs, counters: False  # text is only ever equal or not

    def textual(attrs: Attrs, counters: Counters) -> bool:
        raw = attrs.get(name)
        return raw is not None and cmp(raw, value)
    return textual


def _any(preds: list[Pred]) -> Pred:
    """One closure over a whole ``a || b || c`` chain: evaluation depth does not grow with its length."""
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:  # (the common case, without a generator per call)
        a, b = preds
        return lambda x, y: a(x, y) or b(x, y)
    items = tuple(preds)
    return lambda x, y: any(p(x, y) for p in items)


def _all(preds: list[Pred]) -> Pred:
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds
        return lambda x, y: a(x, y) and b(x, y)
    items = tuple(preds)
    return lambda x, y: all(p(x, y) for p in items)


class _ExprParser:
    def __init__(self, toks: _Tokens) -> None:
        self.t = toks
        self.names: set[str] = set()
        self.depth = 0

    def expr(self) -> Pred:
        terms = [self.conj()]
        while self.t.accept("||", "or"):
            terms.append(self.conj())
        return _any(terms)

    def conj(self) -> Pred:
        terms = [self.neg()]
        while self.t.accept("&&", "and"):
            terms.append(self.neg())
        return _all(terms)

    def _deeper(self, pos: int) -> None:
        """One more level of "(" or "!": refused past ``MAX_DEPTH`` (the parser recurses per level)."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ResReqError(self.t.text, pos, f"expression nested deeper than {MAX_DEPTH} levels")

    def neg(self) -> Pred:
        tok = self.t.peek()
        if tok is not None and self.t.accept("!", "not"):
            self._deeper(tok[2])
            inner = self.neg()
            self.depth -= 1
            return lambda x, y: not inner(x, y)
        kind, value, pos = self.t.next("a term")
        if kind == "op" and value == "(":
            self._deeper(pos)
            inner = self.expr()
            self._close(")", pos)
            self.depth -= 1
            return inner
        if kind == "name" and value == "defined" and self.t.accept("("):
            _, name, _ = self.t.next("a name inside defined(")
            self._close(")", pos)
            self.names.add(name)
            return lambda attrs, counters: name in counters or name in attrs
        if kind != "name":
            raise ResReqError(self.t.text, pos, f"expected a term, found {value!r}")
        self.names.add(value)
        tok = self.t.peek()
        if tok is not None and tok[0] == "op" and tok[1] in _CMP:
            self.t.i += 1
            vkind, vtext, vpos = self.t.next(f"a value after {tok[1]!r}")
            if vkind == "str":
                return _compare(value, tok[1], vtext[1:-1], None)
            if vkind == "num":
                return _compare(value, tok[1], vtext, parse_amount(vtext))
            if vkind == "name":
                return _compare(value, tok[1], vtext, None)
            if vkind == "badnum":
                raise ResReqError(self.t.text, vpos, f"invalid number {vtext!r} (e.g. 8, 2.5, 500M, 4Gi)")
            raise ResReqError(self.t.text, vpos, f"expected a value after {tok[1]!r}")
        return _truthy(value)

    def _close(self, what: str, opened: int) -> None:
        tok = self.t.peek()
        if tok is None or tok[1] != what:
            pos = tok[2] if tok else self.t.end
            raise ResReqError(self.t.text, pos, f"expected {what!r} to close the one at column {opened + 1}")
        self.t.i += 1


def _parse_select(text: str, start: int, end: int) -> Select:
    toks = _Tokens(text, start, end)
    if not toks.items:
        raise ResReqError(text, start, "empty select[]")
    p = _ExprParser(toks)
    pred = p.expr()
    toks.done()
    return Select(text[start:end].strip(), frozenset(p.names), pred)


def _parse_rusage(text: str, start: int, end: int) -> dict[str, float]:
    toks = _Tokens(text, start, end)
    out: dict[str, float] = {}
    while True:
        kind, name, pos = toks.next("a counter name")
        if kind != "name":
            raise ResReqError(text, pos, f"expected a counter name, found {name!r}")
        if name in out:
            raise ResReqError(text, pos, f"counter {name!r} appears twice in rusage[]")
        if not toks.accept("="):
            found = toks.peek()
            raise ResReqError(text, found[2] if found else end, f"expected '=' after {name!r}")
        vkind, vtext, vpos = toks.next(f"an amount for {name!r}")
        amount = parse_amount(vtext) if vkind == "num" else None
        if amount is None:
            raise ResReqError(text, vpos, f"invalid amount {vtext!r} for {name!r} (e.g. 2, 500M, 4Gi)")
        if amount <= 0:
            raise ResReqError(text, vpos, f"amount for {name!r} must be greater than 0")
        out[name] = amount
        if not toks.accept(","):
            toks.done()
            return out


def _parse_span(text: str, start: int, end: int) -> tuple[int | None, int | None]:
    toks = _Tokens(text, start, end)
    kind, key, pos = toks.next("hosts=1 or ptile=K")
    if key not in ("hosts", "ptile") or not toks.accept("="):
        raise ResReqError(text, pos, "span[] takes hosts=1 or ptile=K")
    vkind, vtext, vpos = toks.next("a number")
    toks.done()
    if vkind != "num" or not vtext.isdigit() or int(vtext) < 1:
        raise ResReqError(text, vpos, f"{key} must be a positive integer")
    if key == "hosts":
        if int(vtext) != 1:
            raise ResReqError(text, vpos, "only span[hosts=1] is supported")
        return 1, None
    return None, int(vtext)


def _parse_order(text: str, start: int, end: int) -> tuple[tuple[str, bool], ...]:
    toks = _Tokens(text, start, end)
    out = []
    while True:
        descending = toks.accept("-")
        kind, name, pos = toks.next("a name to order by")
        if kind != "name":
            raise ResReqError(text, pos, f"expected a name to order by, found {name!r}")
        out.append((name, descending))
        if not toks.accept(","):
            toks.done()
            return tuple(out)


_SECTION = re.compile(r"\s*([A-Za-z_]+)\s*\[")


@functools.lru_cache(maxsize=4096)
def parse_resreq(text: str) -> ResReq:
    if len(text) > MAX_LENGTH:
        raise ResReqError(text[:80], 0, f"resource requirement longer than {MAX_LENGTH} characters")
    if not text.strip():
        return ResReq(text=text)
    found = _sections(text)
    if found is None:
        return ResReq(text=text, select=_parse_select(text, 0, len(text)))
    kwargs: dict = {}
    if "select" in found:
        kwargs["select"] = _parse_select(text, *found["select"])
    if "rusage" in found:
        kwargs["rusage"] = MappingProxyType(_parse_rusage(text, *found["rusage"]))
    if "span" in found:
        kwargs["span_hosts"], kwargs["ptile"] = _parse_span(text, *found["span"])
    if "order" in found:
        kwargs["order"] = _parse_order(text, *found["order"])
    return ResReq(text=text, **kwargs)


def _sections(text: str) -> dict[str, tuple[int, int]] | None:
    """Where each section's inside begins and ends in ``text``; None: ``text`` is a bare select
    expression (no section keyword)."""
    m = _SECTION.match(text)
    if m is None or m.group(1) not in SECTIONS and not text[m.end():].count("]"):
        return None
    found: dict[str, tuple[int, int]] = {}
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _SECTION.match(text, pos)
        if m is None:
            first = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise ResReqError(text, first, "expected a section such as select[...]")
        name = m.group(1)
        if name not in SECTIONS:
            raise ResReqError(text, m.start(1), f"unknown section {name!r} (expected select, rusage, span, order)")
        if name in found:
            raise ResReqError(text, m.start(1), f"section {name}[] given twice")
        close = text.find("]", m.end())
        if close < 0:
            raise ResReqError(text, len(text), f"expected ']' to close {name}[")
        found[name] = (m.end(), close)
        pos = close + 1
    return found


def section_texts(text: str) -> dict[str, str]:
    """The inside of each section of a well-formed ``text`` (a bare expression is its select)."""
    found = _sections(text) if text.strip() else {}
    if found is None:
        return {"select": text.strip()}
    return {name: text[start:end].strip() for name, (start, end) in found.items()}


def merge_resreqs(texts: list[str]) -> str:
    """Several ``-R`` strings as one, as LSF merges a repeated ``-R``: the select[] sections and'ed, the
    rusage[] sections joined (a counter in two of them is an error: which one was meant?), span[] and
    order[] at most once each (the same one twice is once).  One string is returned as it is.  Each is
    checked on its own first (``ResReqError``, its columns its own)."""
    given = [t for t in texts if t.strip()]
    for t in given:
        parse_resreq(t)
    if len(given) <= 1:
        return given[0] if given else ""
    selects: list[str] = []
    usage: dict[str, str] = {}
    once: dict[str, str] = {}
    for t in given:
        for name, inside in section_texts(t).items():
            if name == "select":
                selects.append(inside)
            elif name == "rusage":
                for item in inside.split(","):
                    counter = item.partition("=")[0].strip()
                    if counter in usage:
                        raise ResReqError(t, t.find(counter), f"counter {counter!r} is in the rusage[] of two -R")
                    usage[counter] = item.strip()
            elif once.setdefault(name, inside) != inside:
                raise ResReqError(t, t.find(name), f"{name}[] differs between two -R: give it once")
    parts = []
    if selects:
        parts.append("select[" + " && ".join(f"({s})" if len(selects) > 1 else s for s in selects) + "]")
    if usage:
        parts.append("rusage[" + ", ".join(usage.values()) + "]")
    parts += [f"{name}[{inside}]" for name, inside in once.items()]
    return " ".join(parts)


def convert_rusage(text: str, counters: frozenset[str], convert: Callable[[str], str]) -> str:
    """``text`` with the amounts of ``counters`` in its rusage[] section rewritten by ``convert`` (LSF's
    ``rusage[mem=4000]`` in ``LSF_UNIT_FOR_LIMITS``, as bytes); ``text`` unchanged if it has none."""
    found = _sections(text) if text.strip() else None
    if not found or "rusage" not in found:
        return text
    start, end = found["rusage"]
    items = []
    for item in text[start:end].split(","):
        name, eq, amount = item.partition("=")
        items.append(f"{name.strip()}={convert(amount.strip())}" if eq and name.strip() in counters else item.strip())
    return text[:start] + ", ".join(items) + text[end:]
