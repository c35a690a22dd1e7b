"""Job dependency expressions, LSF's ``bsub -w``: their grammar, parsed into a plain tree.

    expr     := term ('||' term)*
    term     := factor ('&&' factor)*
    factor   := '!' factor | '(' expr ')' | cond
    cond     := FUNC '(' target [',' arg] ')' | target          (a bare target means done(target))
    target   := ID | ID '[' INDEX ']' | "NAME" | 'NAME' | NAME    (NAME may hold * wildcards)
    arg      := [OP] INTEGER | '*'                                (OP: == != > < >= <=; none means ==)

``FUNC`` is one of ``FUNCS``: ``done ended exit started post_done post_err`` on a job, an array (every
element) or an element, and ``numdone numended numexit numrun numpend numstart`` on an array with a
count (``*``: every element).  ``exit(ID, [OP] CODE)`` asks for an exit code; ``exit(ID)`` for any.

The tree is JSON (it travels in a submission's fact): ``["or", [..]]``, ``["and", [..]]``, ``["not",
x]``, ``["cond", FUNC, TARGET, OP, VALUE]`` where TARGET is ``{"id": N}``, ``{"id": N, "index": I}``
or ``{"name": PATTERN}``, and OP/VALUE are ``None`` when not given (VALUE ``"*"`` for every element).
What a target names, and whether a condition holds, is the model's (``xce.model.dependencies``).

Stdlib only, beside ``resreq``: the job-spec parser checks an expression before anything is sent.
"""

from __future__ import annotations

import re
from typing import Any

FUNCS = frozenset({"done", "ended", "exit", "started", "post_done", "post_err",
                   "numdone", "numended", "numexit", "numrun", "numpend", "numstart"})
COUNTS = frozenset(f for f in FUNCS if f.startswith("num"))
OPS = ("==", "!=", ">=", "<=", ">", "<")
MAX_LENGTH = 4096
MAX_CONDITIONS = 256

Tree = list[Any]

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<op>&&|\|\||==|!=|>=|<=|[!()\[\],<>*])
  | (?P<quoted>"[^"]*"|'[^']*')
  | (?P<number>\d+(?![\w.*-]))
  | (?P<word>[A-Za-z0-9_.\-*]+)
""", re.VERBOSE)


class DependError(ValueError):
    """An expression that does not parse: ``reason`` at ``position`` (0-based) of ``text``."""

    def __init__(self, reason: str, text: str, position: int) -> None:
        super().__init__(f"{reason} at column {position + 1}")
        self.reason, self.text, self.position = reason, text, position


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise DependError(f"unexpected {text[pos]!r}", text, pos)
        kind = m.lastgroup or ""
        if kind != "space":
            out.append((kind, m.group(), pos))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.conditions = 0

    def peek(self) -> tuple[str, str, int]:
        return self.toks[self.i] if self.i < len(self.toks) else ("end", "", len(self.text))

    def take(self, value: str | None = None, kind: str | None = None) -> tuple[str, str, int]:
        tok = self.peek()
        if (value is not None and tok[1] != value) or (kind is not None and tok[0] != kind) or tok[0] == "end":
            wanted = repr(value) if value is not None else (kind or "more")
            raise DependError(f"expected {wanted}, found {tok[1]!r}" if tok[0] != "end" else f"expected {wanted}",
                              self.text, tok[2])
        self.i += 1
        return tok

    def expr(self) -> Tree:
        items = [self.term()]
        while self.peek()[1] == "||":
            self.take()
            items.append(self.term())
        return items[0] if len(items) == 1 else ["or", items]

    def term(self) -> Tree:
        items = [self.factor()]
        while self.peek()[1] == "&&":
            self.take()
            items.append(self.factor())
        return items[0] if len(items) == 1 else ["and", items]

    def factor(self) -> Tree:
        kind, value, pos = self.peek()
        if value == "!":
            self.take()
            return ["not", self.factor()]
        if value == "(":
            self.take()
            inner = self.expr()
            self.take(")")
            return inner
        return self.cond()

    def cond(self) -> Tree:
        kind, value, pos = self.peek()
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise DependError(f"more than {MAX_CONDITIONS} conditions", self.text, pos)
        nxt = self.toks[self.i + 1][1] if self.i + 1 < len(self.toks) else ""
        if kind == "word" and nxt == "(":
            if value not in FUNCS:
                raise DependError(f"unknown condition {value!r} (known: {', '.join(sorted(FUNCS))})", self.text, pos)
            self.take()
            self.take("(")
            target = self.target()
            op, arg = None, None
            if self.peek()[1] == ",":
                self.take()
                op, arg = self.arg(value)
            elif value in COUNTS:
                raise DependError(f"{value}() needs a count: {value}(ARRAY, >= N) or {value}(ARRAY, *)",
                                  self.text, self.peek()[2])
            self.take(")")
            return ["cond", value, target, op, arg]
        return ["cond", "done", self.target(), None, None]

    def target(self) -> dict[str, Any]:
        kind, value, pos = self.peek()
        if kind == "number":
            self.take()
            target: dict[str, Any] = {"id": int(value)}
            if self.peek()[1] == "[":
                self.take()
                target["index"] = int(self.take(kind="number")[1])
                self.take("]")
            if target["id"] < 1 or target.get("index", 1) < 1:
                raise DependError("job ids and array indices start at 1", self.text, pos)
            return target
        if kind == "quoted" and len(value) > 2:
            self.take()
            return {"name": value[1:-1]}
        if kind == "word" or value == "*":
            self.take()
            return {"name": value}
        raise DependError("expected a job id or a job name", self.text, pos)

    def arg(self, func: str) -> tuple[str | None, Any]:
        kind, value, pos = self.peek()
        if value == "*":
            if func not in COUNTS:
                raise DependError("'*' is a count: only num...() conditions take it", self.text, pos)
            self.take()
            return None, "*"
        if func not in COUNTS and func != "exit":
            raise DependError(f"{func}() takes a job only", self.text, pos)
        op = None
        if value in OPS:
            op = self.take()[1]
        elif func in COUNTS:
            raise DependError(f"{func}() needs an operator: {func}(ARRAY, >= N)", self.text, pos)
        return op or "==", int(self.take(kind="number")[1])


def parse(text: str) -> Tree:
    """The tree of ``text``; raises ``DependError`` with the column at fault."""
    if not text.strip():
        raise DependError("empty dependency expression", text, 0)
    if len(text) > MAX_LENGTH:
        raise DependError(f"longer than {MAX_LENGTH} characters", text, MAX_LENGTH)
    p = _Parser(text)
    tree = p.expr()
    if p.peek()[0] != "end":
        raise DependError(f"unexpected {p.peek()[1]!r}", text, p.peek()[2])
    return tree


def describe(tree: Tree) -> str:
    """The expression as LSF writes it (for ``xce job why``), from a parsed or a resolved tree."""
    tag = tree[0]
    if tag in ("and", "or"):
        sep = " && " if tag == "and" else " || "
        return sep.join(f"({describe(t)})" if t[0] in ("and", "or") else describe(t) for t in tree[1])
    if tag == "not":
        inner = describe(tree[1])
        return f"!({inner})" if tree[1][0] in ("and", "or") else f"!{inner}"
    _, func, target, op, value = tree
    args = target_label(target)
    if value == "*":
        args += ", *"
    elif value is not None:
        args += f", {op or '=='}{value}"
    return f"{func}({args})"


def target_label(target: dict[str, Any]) -> str:
    if "label" in target:
        return str(target["label"])
    if "name" in target:
        return f'"{target["name"]}"'
    return f"{target['id']}[{target['index']}]" if "index" in target else str(target["id"])
