"""The leaderboard (README "The leaderboard"): every paper's method on one base model and the same prompt sets,
side by side in one bench protocol. The plan: config section `leaderboard` -> rows, decoding jobs, result files.

* **Rows** (`entries`): greedy (the reference; and greedy on the compiled backend, the strong baseline every row's
  speed-up is also given against), the training-free baselines of `leaderboard.baselines` (prompt
  lookup, lookahead, STAND: decoders of the core), then every enabled paper's rows (`Paper.leaderboard`, e.g.
  paper 1's student with Static k and ConfAdapt, paper 3's probing). A row is a decoder with its parameters on
  `leaderboard.model`, or on a checkpoint a paper's rule trains from it (`LeaderboardEntry.checkpoint`).
* **Jobs**: one per prompt set (`leaderboard.prompt_sets.<set>`: `n` prompts of each category, `max_new_tokens`):
  every row interleaved on the same prompts and threads (`bench.protocol.run_bench`, settings `leaderboard.bench`), one
  result file per row: `results/decode/leaderboard/<model>/prompts-<set>/<row>.json`.
* **Table and figure**: `results/tables/leaderboard.{csv,md}`, `results/figures/leaderboard.{png,pdf}`
  (`leaderboard.table`).
"""

from __future__ import annotations

import re
from typing import Any

from ...config import registry
from ...config.plan import BENCH_KEYS
from ...config.registry import LeaderboardEntry
from ...config.settings import ConfigError
from ...decoding.catalog import check_decoder
from ...io import InputError
from ...models.plan import model_dir

RESULTS = "results"
REFERENCE = "greedy"
COMPILED_REFERENCE = "greedy-compiled"  # greedy on the compiled backend (`decoding.static`): the strong baseline
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def section(config: dict) -> dict:
    return config.get("leaderboard") or {"enabled": False}


def enabled(config: dict) -> bool:
    return bool(section(config).get("enabled"))


def model(config: dict) -> str:
    return section(config)["model"]


def prompt_sets(config: dict) -> dict[str, dict[str, Any]]:
    """Prompt set -> {`n`: prompts per category (None: all), `max_new_tokens`}."""
    return dict(section(config).get("prompt_sets") or {})


def entries(config: dict) -> list[LeaderboardEntry]:
    """Every row: greedy (eager, the papers' regime, and compiled, a strong baseline), the configured baselines, then
    each enabled paper's rows, in that order."""
    rows = [
        LeaderboardEntry("base", REFERENCE, "Greedy", {"decoder": REFERENCE}),
        LeaderboardEntry(
            "base", COMPILED_REFERENCE, "Greedy (compiled)", {"decoder": REFERENCE, "backend": "compiled"}
        ),
    ]
    for label, spec in (section(config).get("baselines") or {}).items():
        params = {k: v for k, v in spec.items() if k != "title"}
        rows.append(LeaderboardEntry("base", label, spec.get("title") or label, params))
    for paper in registry.enabled_papers(config):
        rows += paper.leaderboard(config)
    return rows


def result_path(config: dict, prompt_set: str, label: str) -> str:
    return f"{RESULTS}/decode/leaderboard/{model(config)}/prompts-{prompt_set}/{label}.json"


def job_results(config: dict, prompt_set: str) -> list[str]:
    return [result_path(config, prompt_set, e.label) for e in entries(config)]


def all_results(config: dict) -> list[str]:
    return [p for ps in prompt_sets(config) for p in job_results(config, ps)]


def row_inputs(config: dict) -> list[str]:
    """What the rows run on besides the leaderboard model: trained checkpoints, the files their decoders read and
    their parameter files (inputs of every job: the rules of the papers that make them)."""
    out = [
        p
        for e in entries(config)
        for p in ((e.checkpoint,) if e.checkpoint else ())
        + tuple(e.needs)
        + ((e.params_from,) if e.params_from else ())
    ]
    return list(dict.fromkeys(out))


def bench_settings(config: dict) -> dict[str, int]:
    """The bench protocol's settings: the foundation's `bench`, then `leaderboard.bench`."""
    out = {k: (config.get("bench") or {}).get(k) for k in BENCH_KEYS}
    out.update({k: v for k, v in (section(config).get("bench") or {}).items() if k in BENCH_KEYS})
    return out


def job_rows(config: dict) -> list[dict[str, Any]]:
    """The rows as the decoding job takes them (JSON-ready): label, title, paper, decoder params (and the file of
    further ones, `params_from`), and where its weights are (`checkpoint`: a trained model directory, with the
    declared `model` it was trained from)."""
    return [
        {
            "label": e.label,
            "title": e.title,
            "paper": e.paper,
            "params": dict(e.params),
            "params_from": e.params_from,
            "checkpoint": e.checkpoint,
            "model": e.model,
        }
        for e in entries(config)
    ]


def targets(config: dict) -> list[str]:
    """The leaderboard's share of `rule all` (when enabled): its table and figure."""
    if not enabled(config):
        return []
    return [
        f"{RESULTS}/tables/leaderboard.csv",
        f"{RESULTS}/tables/leaderboard.md",
        f"{RESULTS}/figures/leaderboard.png",
        f"{RESULTS}/figures/leaderboard.pdf",
    ]


def model_dir_of(config: dict) -> str | None:
    return model_dir(config, model(config), RESULTS)


def check(config: dict) -> None:
    """The leaderboard's model and prompt sets are declared, its row labels are unique file names, every row's
    decoder is registered and takes its parameters, a row's checkpoint or draft heads (`needs`, with its `model`) are
    trained from the leaderboard's model.
    Raises ConfigError naming the key (the papers' rows: the paper's own `leaderboard` section)."""
    if not enabled(config):
        return
    s = section(config)
    if s.get("model") not in config["models"]:
        raise ConfigError(
            f"leaderboard.model: model {s.get('model')!r} is not declared "
            f"(declared: {', '.join(sorted(config['models']))})"
        )
    if not prompt_sets(config):
        raise ConfigError("leaderboard.prompt_sets: at least one prompt set")
    for name in prompt_sets(config):
        if name not in config["prompt_sets"]:
            raise ConfigError(
                f"leaderboard.prompt_sets.{name}: prompt set {name!r} is not declared "
                f"(declared: {', '.join(sorted(config['prompt_sets']))})"
            )
    seen: dict[str, str] = {}
    for e in entries(config):
        where = "leaderboard.baselines" if e.paper == "base" else f"papers.{e.paper}.leaderboard"
        if not _LABEL.match(e.label):
            raise ConfigError(f"{where}: row label {e.label!r} is not a file name (letters, digits, '_', '.', '-')")
        if e.label in seen:
            raise ConfigError(f"{where}: row label {e.label!r} is used twice (also by {seen[e.label]})")
        seen[e.label] = where
        try:
            check_decoder(e.label, dict(e.params))
        except InputError as err:
            raise ConfigError(f"{where}.{e.label}: {err}") from None
        if (e.checkpoint or e.needs) and e.model is not None and e.model != s["model"]:
            what = "checkpoint is" if e.checkpoint else "heads are"
            raise ConfigError(
                f"{where}.{e.label}: its {what} trained from {e.model!r}, not from the "
                f"leaderboard's model {s['model']!r}: its row would not compare"
            )
