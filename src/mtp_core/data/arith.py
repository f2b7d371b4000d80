"""Exact arithmetic for the synthetic math generator.

Step expressions are tiny arithmetic strings (`"trays * per_tray"`, `"2 * (a + b)"`) over named integer
quantities: `evaluate` computes them exactly (a division must come out whole), `show` writes the worked
computation (`"3 * 8 = 24"`). A quantity may instead be a `Linear` form `a*x + b` in one unknown: that is how
self-verification and FOBAR rows (MetaMathQA, Yu et al. 2023) carry the masked quantity through the same
steps and then solve for it (`solve_lines`).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache


class NotExact(ValueError):
    """An expression without a whole-number value, or not linear in the unknown."""


@dataclass(frozen=True)
class Linear:
    """`a * var + b` with rational coefficients: a quantity that depends linearly on one unknown."""

    a: Fraction
    b: Fraction
    var: str = "x"

    @classmethod
    def unknown(cls, var: str) -> Linear:
        return cls(Fraction(1), Fraction(0), var)

    def _new(self, a: Fraction, b: Fraction) -> Linear:
        return Linear(Fraction(a), Fraction(b), self.var)

    def __add__(self, o: Number) -> Linear:
        return self._new(self.a + o.a, self.b + o.b) if isinstance(o, Linear) else self._new(self.a, self.b + o)

    __radd__ = __add__

    def __sub__(self, o: Number) -> Linear:
        return self + (-1 * o)

    def __rsub__(self, o: int) -> Linear:
        return self._new(-self.a, o - self.b)

    def __mul__(self, o: Number) -> Linear:
        if isinstance(o, Linear):
            raise NotExact(f"product of two quantities that depend on {self.var}")
        return self._new(self.a * o, self.b * o)

    __rmul__ = __mul__

    def __truediv__(self, o: Number) -> Linear:
        if isinstance(o, Linear):
            raise NotExact(f"division by a quantity that depends on {self.var}")
        return self._new(self.a / o, self.b / o)

    def __rtruediv__(self, o: int) -> Linear:
        raise NotExact(f"division by a quantity that depends on {self.var}")

    def parts(self) -> tuple[int, int, int]:
        """Integers (p, q, d) with self == (p * var + q) / d and d >= 1."""
        d = math.lcm(self.a.denominator, self.b.denominator)
        return int(self.a * d), int(self.b * d), d

    def solve(self, target: int) -> Fraction:
        if self.a == 0:
            raise NotExact(f"the value does not depend on {self.var}")
        return (target - self.b) / self.a

    def __str__(self) -> str:
        p, q, d = self.parts()
        body = _terms(p, q, self.var)
        if d == 1:
            return body
        return f"({body}) / {d}" if " " in body else f"{body} / {d}"


Number = int | Linear
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def _terms(p: int, q: int, var: str) -> str:
    """`p*var + q` written the way a grade-school solution would (`3x + 4`, `100 - 5x`, `x / 4`)."""
    if p == 0:
        return str(q)
    xs = var if p == 1 else f"-{var}" if p == -1 else f"{p}{var}"
    if q == 0:
        return xs
    if p > 0:
        return f"{xs} + {q}" if q > 0 else f"{xs} - {-q}"
    return f"{q} - {xs[1:]}" if q > 0 else f"{xs} - {-q}"


@cache
def parse(expr: str) -> ast.expr:
    """Parse a step expression; only + - * /, integer constants and names are allowed."""
    tree = ast.parse(expr, mode="eval").body
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.BinOp, ast.Name, ast.Load, *_OPS)) or (
            isinstance(node, ast.Constant) and type(node.value) is int
        )
        if not ok:
            raise ValueError(f"unsupported element {type(node).__name__} in expression {expr!r}")
    return tree


def names(expr: str) -> frozenset[str]:
    """The quantity names an expression uses."""
    return frozenset(n.id for n in ast.walk(parse(expr)) if isinstance(n, ast.Name))


def evaluate(expr: str, env: Mapping[str, Number]) -> Number:
    """Exact value of `expr`; an integer division must be whole (NotExact otherwise)."""

    def ev(node: ast.expr) -> Number:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env[node.id]
        left, right, op = ev(node.left), ev(node.right), _OPS[type(node.op)]
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if isinstance(left, int) and isinstance(right, int):
            if right == 0 or left % right:
                raise NotExact(f"{left} / {right} is not a whole number")
            return left // right
        return left / right

    return ev(parse(expr))


def show(expr: str, env: Mapping[str, Number]) -> str:
    """The worked computation of `expr`: operands substituted, then ` = value` (`"3 * 8 = 24"`)."""

    def atom(value: Number, parent: str, right: bool) -> str:
        text = str(value)
        composite = " " in text or text.startswith("-")
        return f"({text})" if composite and (_PRECEDENCE[parent] == 2 or right and parent == "-") else text

    def sh(node: ast.expr, parent: str | None = None, right: bool = False) -> str:
        if isinstance(node, ast.Constant):
            return str(node.value)
        if isinstance(node, ast.Name):
            return str(env[node.id]) if parent is None else atom(env[node.id], parent, right)
        op = _OPS[type(node.op)]
        text = f"{sh(node.left, op)} {op} {sh(node.right, op, True)}"
        if parent is not None and (
            _PRECEDENCE[op] < _PRECEDENCE[parent] or right and parent in "-/" and _PRECEDENCE[op] == _PRECEDENCE[parent]
        ):
            return f"({text})"
        return text

    lhs, rhs = sh(parse(expr)), str(evaluate(expr, env))
    return lhs if lhs == rhs else f"{lhs} = {rhs}"


def solve_lines(form: Linear, target: int) -> tuple[list[str], int]:
    """The sentences that solve `form = target` for its unknown, and the (whole) solution."""
    p, q, d = form.parts()
    var, rhs, lines = form.var, target, []
    if d != 1:
        rhs *= d
        lines.append(f"Multiplying both sides by {d}, we get: {_terms(p, q, var)} = {rhs}.")
    if q != 0:
        rhs -= q
        verb = f"Subtracting {q} from" if q > 0 else f"Adding {-q} to"
        lines.append(f"{verb} both sides, we get: {_terms(p, 0, var)} = {rhs}.")
    if p == 0 or rhs % p:
        raise NotExact(f"{form} = {target} has no whole-number solution")
    if p != 1:
        rhs //= p
        lines.append(f"Dividing both sides by {p}, we get: {var} = {rhs}.")
    return lines, rhs
