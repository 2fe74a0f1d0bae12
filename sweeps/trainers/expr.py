"""The small, safe expression language of derived parameters (docs/search-space.md) and of
a command trainer's step and value transforms (``trainer.metrics.step``/``values``,
docs/trainers.md), where a NAME may be dotted (``optim.lr``: a key of a trial's config).

Grammar (no Python evaluation: the text is tokenised and parsed here, and only the nodes
below exist)::

    expr    := term (("+" | "-") term)*
    term    := unary (("*" | "/") unary)*
    unary   := ("-" | "+") unary | power
    power   := atom ("**" unary)?            (right-associative, binds tighter than unary minus)
    atom    := NUMBER | NAME | FUNC "(" expr ("," expr)* ")" | "(" expr ")"
    FUNC    := min | max | log | exp | sqrt

Anything else — another function, attribute access, strings, indexing, ``^`` — is a
syntax error naming where it stands. Evaluation is in floats; a division by zero, the log
of a number ≤ 0, a negative square root, an overflow or a non-finite result is an
`ExprError` naming what failed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

FUNCTIONS: dict[str, tuple[int, int | None]] = {  # name -> (least, most) arguments
    "min": (2, None),
    "max": (2, None),
    "log": (1, 1),
    "exp": (1, 1),
    "sqrt": (1, 1),
}
_NUM = r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_OP = r"|(?P<op>\*\*|[-+*/(),]))"
_TOKEN = re.compile(_NUM + r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)" + _OP)
_DOTTED = re.compile(_NUM + r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)" + _OP)


class ExprError(ValueError):
    """An expression that cannot be parsed or evaluated; the message says why."""


@dataclass(frozen=True)
class Num:
    """A number."""

    value: float


@dataclass(frozen=True)
class Name:
    """A parameter's name."""

    name: str


@dataclass(frozen=True)
class Unary:
    """``-x`` (or ``+x``)."""

    op: str
    arg: Node


@dataclass(frozen=True)
class Binary:
    """``a op b`` for op in + - * / **."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Call:
    """One of `FUNCTIONS` applied to its arguments."""

    func: str
    args: tuple[Node, ...]


Node = Num | Name | Unary | Binary | Call


def _tokens(text: str, dotted: bool = False) -> list[tuple[str, str, int]]:
    """(kind, text, column) of every token up to the first character that starts none
    (kind ``bad``), then ``end``."""
    out: list[tuple[str, str, int]] = []
    pos = 0
    stripped = text.rstrip()
    while pos < len(stripped):
        m = (_DOTTED if dotted else _TOKEN).match(stripped, pos)
        if m is None or m.end() == pos:
            # not a token: the parser says so when it gets there (a call of an unknown
            # function before it is named as such)
            col = pos + len(stripped[pos:]) - len(stripped[pos:].lstrip())
            out.append(("bad", stripped[col], col))
            break
        kind = m.lastgroup or "op"
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    out.append(("end", "", len(stripped)))
    return out


class _Parser:
    def __init__(self, text: str, dotted: bool = False) -> None:
        self.toks = _tokens(text, dotted)
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.toks[self.i]

    def take(self) -> tuple[str, str, int]:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def fail(self, what: str) -> ExprError:
        kind, text, col = self.peek()
        if kind == "bad":
            hint = " (powers are written **)" if text == "^" else ""
            return ExprError(f"syntax error at column {col + 1}: unexpected {text!r}{hint}")
        got = "the end" if kind == "end" else repr(text)
        return ExprError(f"syntax error at column {col + 1}: expected {what}, got {got}")

    def expect(self, op: str) -> None:
        if self.peek()[1] != op or self.peek()[0] != "op":
            raise self.fail(repr(op))
        self.take()

    def expr(self) -> Node:
        node = self.term()
        while self.peek()[0] == "op" and self.peek()[1] in "+-":
            node = Binary(self.take()[1], node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek()[0] == "op" and self.peek()[1] in ("*", "/"):
            node = Binary(self.take()[1], node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek()[0] == "op" and self.peek()[1] in "+-":
            return Unary(self.take()[1], self.unary())
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.peek()[0] == "op" and self.peek()[1] == "**":
            self.take()
            return Binary("**", base, self.unary())
        return base

    def atom(self) -> Node:
        kind, text, col = self.peek()
        if kind == "num":
            self.take()
            return Num(float(text))
        if kind == "name":
            self.take()
            if self.peek()[1] != "(" or self.peek()[0] != "op":
                return Name(text)
            if text not in FUNCTIONS:
                raise ExprError(
                    f"column {col + 1}: calling {text!r} is not in the grammar; the functions "
                    f"are {', '.join(FUNCTIONS)}"
                )
            self.take()
            args = [self.expr()]
            while self.peek()[0] == "op" and self.peek()[1] == ",":
                self.take()
                args.append(self.expr())
            self.expect(")")
            least, most = FUNCTIONS[text]
            if len(args) < least or (most is not None and len(args) > most):
                n = f"{least}" if least == most else f"at least {least}"
                raise ExprError(f"column {col + 1}: {text} takes {n} argument(s), got {len(args)}")
            return Call(text, tuple(args))
        if kind == "op" and text == "(":
            self.take()
            node = self.expr()
            self.expect(")")
            if self.peek()[0] == "op" and self.peek()[1] == "(":
                raise ExprError(
                    f"column {self.peek()[2] + 1}: calling the value of a parenthesis is not "
                    "in the grammar"
                )
            return node
        raise self.fail("a number, a name, a function or '('")


def parse(text: str, dotted: bool = False) -> Node:
    """The syntax tree of ``text``; `ExprError` if it is not in the grammar. ``dotted``:
    names may hold dots (a trial config's keys, in a command trainer's expressions)."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError("empty expression")
    p = _Parser(text, dotted)
    node = p.expr()
    if p.peek()[0] != "end":
        raise p.fail("an operator or the end")
    return node


def names(node: Node) -> set[str]:
    """The parameter names an expression reads."""
    if isinstance(node, Name):
        return {node.name}
    if isinstance(node, Unary):
        return names(node.arg)
    if isinstance(node, Binary):
        return names(node.left) | names(node.right)
    if isinstance(node, Call):
        return set().union(*(names(a) for a in node.args))
    return set()


def _log(x: float) -> float:
    if x <= 0:
        raise ExprError(f"log of {x:g} (needs a number > 0)")
    return math.log(x)


def _sqrt(x: float) -> float:
    if x < 0:
        raise ExprError(f"sqrt of {x:g} (needs a number ≥ 0)")
    return math.sqrt(x)


_CALLS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "log": _log,
    "exp": math.exp,
    "sqrt": _sqrt,
}


def _binary(op: str, a: float, b: float) -> float:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            raise ExprError(f"division by zero ({a:g} / 0)")
        return a / b
    if a == 0 and b < 0:
        raise ExprError(f"division by zero (0 ** {b:g})")
    if a < 0 and not float(b).is_integer():
        raise ExprError(f"{a:g} ** {b:g} is not a real number")
    return math.pow(a, b)


def evaluate(node: Node, env: Mapping[str, float]) -> float:
    """The value of ``node`` with the names' values in ``env`` (all present: see `names`);
    `ExprError` for a value that does not exist (division by zero, log ≤ 0, overflow…)."""
    try:
        value = _eval(node, env)
    except OverflowError:
        raise ExprError("the value overflows a float") from None
    if not math.isfinite(value):
        raise ExprError(f"the value is {value}")
    return value


def _eval(node: Node, env: Mapping[str, float]) -> float:
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        return float(env[node.name])
    if isinstance(node, Unary):
        v = _eval(node.arg, env)
        return -v if node.op == "-" else v
    if isinstance(node, Binary):
        return _binary(node.op, _eval(node.left, env), _eval(node.right, env))
    return float(_CALLS[node.func](*(_eval(a, env) for a in node.args)))
