"""The paper registry: what each paper package contributes to the pipeline, declared once in a `Paper` spec.

The core (config checks, the launcher, the decoder registry, `rule all`, the leaderboard) asks this registry and
imports no paper; each paper package (`mtp_core.papers.<name>`) builds one `Paper` and names it as an entry
point of the group `mtp_core.papers` in `pyproject.toml`:

```toml
[project.entry-points."mtp_core.papers"]
p1 = "mtp_core.papers.p1:PAPER"
```

so a new paper, in this repository or in a package of its own, is added without editing the core (the pattern
of torchtitan's `TrainSpec` registry and of pytest's plugins). Papers are loaded once, on the first question,
in the order of their names; `register_paper` adds one by hand (tests, notebooks).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_GROUP = "mtp_core.papers"
_NAME = re.compile(r"^p[0-9]+$")


@dataclass(frozen=True)
class Method:
    """A training method the launcher runs by name (`mtp_core.train.launch`): three `module:function` paths,
    resolved where they run. `entry(settings, run_dir, *, dist, device, callbacks)` runs in the job (every rank)
    and returns a `TrainResult` or a dict; `check(settings) -> settings` validates and normalises the settings in
    the launcher before anything is submitted; `from_config(config, run) -> (settings, launcher overrides)`
    resolves a run named in a config file."""

    name: str
    entry: str
    check: str | None = None
    from_config: str | None = None


@dataclass(frozen=True)
class LeaderboardEntry:
    """One row of the leaderboard (README "The leaderboard"): a decoder with its parameters on the
    leaderboard model, or on a checkpoint trained from it (`checkpoint`: a directory some rule of the paper
    writes, `model`: the declared model it was trained from, whose tokenizer and template it keeps).

    `label` is the row's file name (unique across papers), `title` what tables and figures show, `params`
    the decoder's parameters with `decoder` (the registry name). `needs`: other files or directories some rule
    writes that the decoder reads through its parameters (e.g. trained draft heads); the leaderboard's jobs wait
    for them. `params_from`: a JSON file (`{"params": {...}}`) some rule writes, merged into `params` when the
    row's job runs (a setting chosen on validation data, e.g. paper 4's τ); the jobs wait for it too."""

    paper: str
    label: str
    title: str
    params: Mapping[str, Any]
    checkpoint: str | None = None
    model: str | None = None
    needs: tuple[str, ...] = ()
    params_from: str | None = None


@dataclass(frozen=True)
class Paper:
    """What one paper registers (its name runs through config `papers.<name>`, `workflow/rules/<name>.smk`,
    `workflow/scripts/<name>_*.py`, `mtp_core/papers/<name>/` and `results/*/<name>/`).

    * `plan`: its `config.plan.PaperPlan` subclass, built over a validated config in which the paper is enabled;
      its rule file reads it (`paper_plan` in common.smk), and so do the three questions the core asks:
      `check(config)` (the cross-references and settings of `papers.<name>` the JSON schema cannot express, before
      any job; raises `config.settings.ConfigError` naming the key), `targets(config)` (the files `rule all`
      builds for it) and `leaderboard(config)` (its rows of the leaderboard).
    * `methods`: its training methods for the launcher (`train.launch`), by name.
    * `decoders`: the modules that register its `Decoder` classes (`register_decoder`), imported when the decoder
      registry is first asked (`decoding.decoders()`), so that loading a paper (the Snakefile, a table or figure
      job) imports no torch model code.
    * `commands`: the modules that add its `mtp-repro` subcommands (each an `add_commands(subparsers)`), imported
      when the command line is built, so that the core's command line imports no paper.
    """

    name: str
    title: str
    plan: Callable[[dict], Any]
    methods: tuple[Method, ...] = ()
    decoders: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"paper name {self.name!r}: p<number>, as in config `papers.p1`")

    def enabled(self, config: dict) -> bool:
        return bool(((config.get("papers") or {}).get(self.name) or {}).get("enabled"))

    def check(self, config: dict) -> None:
        self.plan(config).check()

    def targets(self, config: dict) -> list[str]:
        return self.plan(config).targets()

    def leaderboard(self, config: dict) -> list[LeaderboardEntry]:
        return self.plan(config).leaderboard()


_PAPERS: dict[str, Paper] = {}
_loaded = False


def register_paper(paper: Paper) -> Paper:
    """Add a paper (the entry points do this for the packaged ones); a second paper of the same name is an error."""
    old = _PAPERS.get(paper.name)
    if old is not None and old is not paper:
        raise ValueError(f"paper {paper.name!r} registered twice")
    _PAPERS[paper.name] = paper
    return paper


def papers() -> dict[str, Paper]:
    """Every registered paper by name (sorted), loading the entry points of `mtp_core.papers` on the first call."""
    global _loaded
    if not _loaded:
        found = entry_points(group=ENTRY_POINT_GROUP)
        if not found:
            raise RuntimeError(
                f"no entry points in group {ENTRY_POINT_GROUP!r}: is mtp-repro installed "
                "(`make venv`, or `pip install -e .`)?"
            )
        for ep in found:
            paper = ep.load()
            if not isinstance(paper, Paper) or paper.name != ep.name:
                raise RuntimeError(f"entry point {ep.name} = {ep.value} is not the Paper named {ep.name!r}")
            register_paper(paper)
        _loaded = True
    return dict(sorted(_PAPERS.items()))


def enabled_papers(config: dict) -> list[Paper]:
    return [p for p in papers().values() if p.enabled(config)]
