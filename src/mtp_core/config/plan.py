"""A paper's plan: its validated config section read into typed settings, and what every paper's plan supplies
the same way (its tables and figures and the files of each, the ones `rule all` builds, run folders, result
paths, the bench protocol's settings) from the one `results/` layout (`config.layout`).

A paper subclasses `PaperPlan` with its settings dataclass (`Settings`), its `paper` name and its `TABLES` and
`FIGURES`, and declares its jobs, tables and figures as methods; its rule file reads them
(`workflow/rules/<paper>.smk`). The schema fills every default before the settings are read
(`config.settings.validate_schema`), so the settings dataclasses declare none: a default lives in the schema only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import dacite

from . import layout
from .registry import LeaderboardEntry
from .settings import ConfigError

BENCH_KEYS = ("warmup", "repeats", "threads")


def typed(cls: type, data: Mapping[str, Any], where: str) -> Any:
    """`data` (a schema-validated section, defaults filled) as dataclass `cls`; a key the dataclass does not
    declare, a missing one or a value of another type is a ConfigError naming `where`."""
    try:
        return dacite.from_dict(cls, dict(data), config=dacite.Config(strict=True))
    except dacite.DaciteError as e:
        raise ConfigError(f"{where}: {e}") from None


class PaperPlan:
    """The plan of one enabled paper over a validated config (module docstring)."""

    paper: ClassVar[str]
    Settings: ClassVar[type]
    TABLES: ClassVar[tuple[str, ...]] = ()
    FIGURES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: dict):
        self.config = config
        self.key = f"papers.{self.paper}"
        self.s = typed(self.Settings, config["papers"][self.paper], self.key)

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

    # --------------------------------------------------------------------------------------- results

    def run_dir(self, run: str) -> str:
        return layout.run_dir(self.paper, run)

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
