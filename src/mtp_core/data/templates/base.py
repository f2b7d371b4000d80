"""The template types of the synthetic generator (`data.templates`): a solution step and a word-problem template."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..arith import names


@dataclass(frozen=True)
class Step:
    """One solution step: `target = expr`, written in any of `texts` (each holds `{calc}` once)."""

    target: str
    expr: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Template:
    name: str
    quantities: Mapping[str, Sequence[int]]
    phrasings: tuple[tuple[str, str], ...]
    statement: str
    steps: tuple[Step, ...]
    solve: Callable[[Mapping[str, int]], int]
    describe: Mapping[str, str]

    @property
    def answer(self) -> str:
        """Name of the step whose value is the answer (the last one)."""
        return self.steps[-1].target

    def depends_on(self, step: Step) -> frozenset[str]:
        """The earlier steps that `step` uses."""
        return names(step.expr) & {s.target for s in self.steps}


def r(lo: int, hi: int, step: int = 1) -> range:
    """Inclusive integer range."""
    return range(lo, hi + 1, step)


def S(target: str, expr: str, *texts: str) -> Step:
    return Step(target, expr, texts)
