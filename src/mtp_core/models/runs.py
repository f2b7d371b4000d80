"""A paper's training runs, the one rule every paper's plan follows: `papers.<paper>.runs.<name>` overrides the
paper's `model`, `dataset` and `title` and is deep-merged into its `method` and `train` sections (a run's `train`
takes the config's `threads` unless it sets its own)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..config.settings import ConfigError, deep_merge

FILE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")  # run, row and method names that become file names


def paper_section(config: dict, paper: str) -> dict:
    """`papers.<paper>` (an `enabled: false` stub when absent)."""
    return (config.get("papers") or {}).get(paper) or {"enabled": False}


def run_entry(config: dict, paper: str, run: str) -> dict:
    """`papers.<paper>.runs.<run>` as written; ConfigError naming the runs when it is not declared."""
    runs = paper_section(config, paper).get("runs") or {}
    if run not in runs:
        raise ConfigError(f"papers.{paper}.runs: no run {run!r} (runs: {', '.join(runs) or 'none'})")
    return runs[run] or {}


@dataclass(frozen=True)
class RunPlan:
    """One training run: start model and data (config names), title, and the merged method / train settings."""

    name: str
    model: str
    dataset: str
    title: str
    method: dict = field(default_factory=dict)  # the paper's method config keys
    train: dict = field(default_factory=dict)  # TrainConfig keys

    @property
    def max_steps(self) -> int:
        return int(self.train["max_steps"])


P = TypeVar("P", bound=RunPlan)


def merged_run(config: dict, paper: str, run: str, cls: type[P] = RunPlan, **fields: Any) -> P:
    """Run `run` of paper `paper` with its overrides merged (module docstring); `cls` a paper's RunPlan subclass,
    `fields` its extra fields."""
    s, r = paper_section(config, paper), run_entry(config, paper, run)
    train = deep_merge(s.get("train") or {}, r.get("train"))
    train.setdefault("threads", config.get("threads"))
    return cls(
        name=run,
        model=r.get("model", s.get("model")),
        dataset=r.get("dataset", s.get("dataset")),
        title=r.get("title") or run,
        method=deep_merge(s.get("method") or {}, r.get("method")),
        train=train,
        **fields,
    )


def launcher_settings(config: dict, paper: str, run: str, table: str = "runs") -> dict:
    """Launcher settings (`LauncherConfig` keys) of a paper's training `run` declared in `papers.<paper>.<table>`:
    the top-level `launcher`, then `papers.<paper>.launcher`, then the run's own `launcher`, merged key by key."""
    s = paper_section(config, paper)
    merged = deep_merge(config.get("launcher") or {}, s.get("launcher"))
    return deep_merge(merged, ((s.get(table) or {}).get(run) or {}).get("launcher"))
