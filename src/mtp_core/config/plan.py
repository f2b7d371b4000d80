"""A paper's plan: its validated config section read into typed settings, and what every paper's plan supplies
the same way (its tables and figures and the files of each, the ones `rule all` builds, run folders, result
paths, the bench protocol's settings) from the one `results/` layout (`config.layout`).

**Training runs**, the one rule every paper follows: `papers.<paper>.runs.<name>` overrides the paper's `model`,
`dataset` and `title` and is deep-merged into its `method` and `train` sections (a run's `train` takes the
config's `threads` unless it sets its own); its launcher settings merge the top-level `launcher`, the paper's and
the run's own (`merged_run`, `launcher_settings`).

A paper subclasses `PaperPlan` with its settings dataclass (`Settings`), its `paper` name and its `TABLES` and
`FIGURES`, and declares its jobs as methods, which its rule file reads (`workflow/rules/<paper>.smk`). The rules
every paper shares (`workflow/rules/papers.smk`) build its tables and figures from `report_inputs` and
`report_params` (but those of `OWN_RULES`), run each of its `trainings` through the launcher (`TRAIN_METHOD`,
`train_inputs`, `run_settings`), and give each of `run_names` a named target (`run_results`). The schema fills every default before the settings are read
(`config.settings.validate_schema`), so the settings dataclasses declare none: a default lives in the schema only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import dacite

from . import layout
from .registry import LeaderboardEntry
from .settings import ConfigError, deep_merge

BENCH_KEYS = ("warmup", "repeats", "threads")
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


def typed(cls: type, data: Mapping[str, Any], where: str) -> Any:
    """`data` (a schema-validated section, defaults filled) as dataclass `cls`; a key the dataclass does not
    declare, a missing one or a value of another type is a ConfigError naming `where` (an integer is a float
    where a float is declared, as in the schema's `number`)."""
    try:
        return dacite.from_dict(cls, dict(data), config=dacite.Config(strict=True, type_hooks={float: float}))
    except dacite.DaciteError as e:
        raise ConfigError(f"{where}: {e}") from None


class PaperPlan:
    """The plan of one enabled paper over a validated config (module docstring)."""

    paper: ClassVar[str]
    Settings: ClassVar[type]
    TABLES: ClassVar[tuple[str, ...]] = ()
    FIGURES: ClassVar[tuple[str, ...]] = ()
    OWN_RULES: ClassVar[tuple[str, ...]] = ()  # tables and figures built by a rule of the paper's own rule file
    TRAIN_METHOD: ClassVar[str | None] = None  # the launcher's method of its trainings (`mtp-repro train --method`)
    TRAINING_TABLE: ClassVar[str] = "runs"  # the section's table that declares them (their launcher settings)

    def __init__(self, config: dict):
        self.config = config
        self.key = f"papers.{self.paper}"
        section = (config.get("papers") or {}).get(self.paper) or {}
        if not section.get("enabled"):
            raise ConfigError(f"{self.key}: paper {self.paper} is not enabled in this config (`{self.key}.enabled`)")
        self.section = section  # as validated (defaults filled): what a job that takes a section as written reads
        self.s = typed(self.Settings, section, self.key)

    # ------------------------------------------------------------------------------ tables and figures

    def in_all(self) -> list[str]:
        """The tables and figures `rule all` builds (`in_all`; null: all of them)."""
        chosen = self.s.in_all
        return list(chosen if chosen is not None else (*self.TABLES, *self.FIGURES))

    @classmethod
    def target_files(cls, name: str) -> list[str]:
        """The files of table or figure `name` (CSV + markdown; PNG + PDF)."""
        if name in cls.TABLES:
            return layout.table_files(cls.paper, name)
        return layout.figure_files(cls.paper, name)

    def targets(self) -> list[str]:
        """The paper's share of `rule all`."""
        return [f for name in self.in_all() for f in self.target_files(name)]

    def shared_rule_names(self, kind: str) -> list[str]:
        """The tables (`kind` "table") or figures ("figure") that the rules every paper shares build
        (`workflow/rules/papers.smk`): all but those of `OWN_RULES`, which the paper's rule file builds."""
        return [n for n in (self.TABLES if kind == "table" else self.FIGURES) if n not in self.OWN_RULES]

    def report_inputs(self, name: str) -> dict[str, str | list[str]]:
        """The named input files of table or figure `name` (its job's `snakemake.input`)."""
        raise NotImplementedError

    def report_params(self, name: str) -> dict[str, Any]:
        """What the job of table or figure `name` reads (its `snakemake.params.spec`), JSON-ready."""
        raise NotImplementedError

    def run_names(self) -> list[str]:
        """The training runs with a named target `<paper>_<run>` (`run_results`); none by default."""
        return []

    def run_results(self, run: str) -> list[str]:
        """What the named target of run `run` builds: its training and every result of it a table or figure
        reads."""
        raise NotImplementedError

    # --------------------------------------------------------------------------------------- results

    def run_dir(self, run: str) -> str:
        return layout.run_dir(self.paper, run)

    def run(self, name: str, cls: type[P] = RunPlan, **fields: Any) -> P:  # type: ignore[assignment]
        """Training run `name` with its overrides merged (`merged_run`)."""
        return merged_run(self.config, self.paper, name, cls, **fields)

    def launcher_settings(self, run: str, table: str | None = None) -> dict:
        """The launcher settings of training `run` declared in `papers.<paper>.<table>` (default
        `TRAINING_TABLE`; `launcher_settings`)."""
        return launcher_settings(self.config, self.paper, run, table or self.TRAINING_TABLE)

    # ------------------------------------------------------------------------------------ trainings

    def trainings(self) -> list[str]:
        """The trainings the shared training rule runs through the launcher (`TRAIN_METHOD`); by default
        `run_names`."""
        return self.run_names()

    def training_dir(self, run: str) -> str:
        """Where training `run` keeps its states, curves and record."""
        return self.run_dir(run)

    def train_record(self, run: str) -> str:
        """The launcher's record of training `run` (written when it has finished)."""
        return f"{self.training_dir(run)}/train.json"

    def final_model(self, run: str) -> str:
        """What training `run` exports (its trained model)."""
        return f"{self.training_dir(run)}/model"

    def train_inputs(self, run: str) -> dict[str, Any]:
        """The named input files of training `run` (its start model, its data)."""
        raise NotImplementedError

    def run_settings(self, run: str) -> dict[str, Any]:
        """The settings training `run` gets (`mtp-repro train --settings`: what the method's `launch_check`
        takes)."""
        raise NotImplementedError

    @classmethod
    def resolve_training(cls, config: dict, run: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The launcher's resolver of the paper's training method (`mtp-repro train --config C --run R`,
        `registry.Method.from_config`): the settings and launcher settings of training `run`; a ConfigError
        naming the trainings for another name."""
        plan = cls(config)
        if run not in plan.trainings():
            where, known = f"{plan.key}.{plan.TRAINING_TABLE}", ", ".join(plan.trainings()) or "none"
            raise ConfigError(f"{where}: no training {run!r} (trainings: {known})")
        return plan.run_settings(run), plan.launcher_settings(run)

    def result_path(self, run: str, task: str, setting: str) -> str:
        return layout.decode_result(self.paper, run, task, setting)

    def analysis_dir(self, name: str) -> str:
        return layout.analysis_dir(self.paper, name)

    def bench_settings(self) -> dict[str, Any]:
        """The bench protocol's settings (`bench`: warmup, repeats, threads), with the paper's `bench` overrides."""
        out = {k: self.config["bench"].get(k) for k in BENCH_KEYS}
        out.update(self.s.bench)
        return out

    # ----------------------------------------------------------------------------- checks and rows

    def check(self) -> None:
        """Cross-references the JSON schema cannot express; raises ConfigError naming the key."""

    def leaderboard(self) -> list[LeaderboardEntry]:
        """The paper's rows of the leaderboard."""
        return []

    def check_names(self, key: str, value: str | Sequence[str], known: Sequence[str], noun: str, declared_in: str):
        """The name at `<paper>.<key>` (or each of a list's, `key[i]`) is one of `known`, else a ConfigError
        naming the key, the name (a `noun`), where names are declared and the declared ones."""
        names = [(key, value)] if isinstance(value, str) else [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        for where, name in names:
            if name not in known:
                raise ConfigError(
                    f"{self.key}.{where}: {noun} {name!r} is not declared in {declared_in} ({', '.join(known)})"
                )
