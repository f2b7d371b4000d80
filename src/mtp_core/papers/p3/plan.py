"""Paper 3's experiment plan: the validated `papers.p3` config section turned into decoding jobs, result files,
tables and figures (paper 3, Section 4). One place, used by the workflow (`workflow/rules/common.smk`, paper-3
block), the scripts and the tests, so that the rules stay declarative.

Names (all derived here, nowhere else):

* **Methods.** `papers.p3.methods.<label>` = a registered decoder (`decoder`) with fixed `params`, the decoder
  parameter that receives the block complexity (`bc_param`, plus `bc_offset`: prompt lookup's chain of
  `num_draft = BC - 1` drafts fills BC rows with its root) and per-BC overrides (`by_bc`, e.g. the paper's two
  masks at BC 60, Section 4). Baselines (prompt lookup, lookahead, STAND) and probing variants alike.
* **Settings.** A method at block complexity BC is the setting `<method>-bc<BC>`; every decoding job also runs
  greedy, `<method>-greedy`, the reference of its speed ratio and of its lossless check (bench protocol).
* **Jobs.** One decoding job per (model, method) some table or figure shows, running greedy and the method at
  every BC any table or figure shows (the same files for every method: one rule), interleaved on the same
  loaded weights (`mtp_core.bench.protocol.run_bench`).
* **Result files**: `results/decode/p3/<model>/prompts-<prompt set>/<setting>.json` (+ `.samples.jsonl`).
* **Tables** (`tables.<name>`: `methods`, `bcs`, optional `models`): `table1` (methods x BC x model, Table 1),
  `table2` (dynamic vs fixed branching, one vs two masks, Table 2), `pruning` (the tree-pruning ablation,
  Section 3.5 / App. G.5), `strategies` (mask-embedding initialisations, Section 3.1). **Figures**: `fig4`, `fig5` (per-category accepted length by BC for one model,
  Figs. 4-5), `fig2` (mask vs next-token hidden-state alignment per layer, Section 3.2; analysis per model).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from ...config.registry import LeaderboardEntry
from ...config.settings import ConfigError
from ...decoding.catalog import check_decoder, decoder_names
from ...io import InputError
from ...results.write import figure_files, table_files
from .settings import STRATEGIES

RESULTS = "results"
REFERENCE = "greedy"
TABLES = ("table1", "table2", "pruning", "strategies")
CATEGORY_FIGURES = ("fig4", "fig5")
ALIGNMENT_FIGURE = "fig2"
FIGURES = (ALIGNMENT_FIGURE, *CATEGORY_FIGURES)
EXPERIMENTS = (*TABLES, *CATEGORY_FIGURES)  # the tables and figures that read decoding results
_METHOD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")  # no "-": `<method>-bc<BC>` stays unambiguous


def section(config: dict) -> dict:
    """`papers.p3` (an `enabled: false` stub when absent)."""
    return (config.get("papers") or {}).get("p3") or {"enabled": False}


# --------------------------------------------------------------------------------------------- methods


def methods(config: dict) -> dict[str, dict]:
    return dict(section(config).get("methods") or {})


def method_title(config: dict, method: str) -> str:
    return methods(config)[method].get("title") or method


def setting_label(method: str, bc: int | None) -> str:
    """`<method>-bc<BC>`, or `<method>-greedy` for the job's greedy reference (bc None)."""
    return f"{method}-{REFERENCE}" if bc is None else f"{method}-bc{int(bc)}"


ACCOUNTINGS = ("rows", "nodes")


def bc_accounting(config: dict) -> str:
    """How a block complexity is counted (`papers.p3.bc_accounting`): `rows` (§3.3: every input row of a
    verification forward, the last accepted token, the draft nodes and their mask tokens) or `nodes` (§4: draft
    nodes only; a method then runs (BC + 1) rows, times 1 + masks per node for probing)."""
    return section(config).get("bc_accounting", "rows")


def setting_params(config: dict, method: str, bc: int) -> dict[str, Any]:
    """Decoder parameters (with `decoder`, the registry name) of `method` at block complexity `bc`: the
    parameter `bc_param` receives the rows BC allows under `bc_accounting`, plus `bc_offset`."""
    m = methods(config)[method]
    params: dict[str, Any] = {"decoder": m["decoder"], **copy.deepcopy(m.get("params") or {})}
    by_bc = {str(k): v for k, v in (m.get("by_bc") or {}).items()}
    params.update(copy.deepcopy(by_bc.get(str(int(bc))) or {}))
    if m.get("bc_param"):
        rows = int(bc)
        if bc_accounting(config) == "nodes":
            masks = int(params.get("masks_per_step", 1)) if m["decoder"] == "probing" else 0
            rows = (int(bc) + 1) * (1 + masks)
        params[m["bc_param"]] = rows + int(m.get("bc_offset", 0))
    return params


# ----------------------------------------------------------------------------------------- experiments


def table_spec(config: dict, name: str) -> dict:
    return (section(config).get("tables") or {})[name]


def figure_spec(config: dict, name: str) -> dict:
    return (section(config).get("figures") or {})[name]


def models(config: dict) -> list[str]:
    return list(section(config).get("models") or [])


def experiment_models(config: dict, name: str) -> list[str]:
    """Models an experiment shows: a figure's `model`, a table's `models` (default: all of `papers.p3.models`)."""
    if name in TABLES:
        return list(table_spec(config, name).get("models") or models(config))
    return [figure_spec(config, name)["model"]]


def experiment_spec(config: dict, name: str) -> dict:
    return table_spec(config, name) if name in TABLES else figure_spec(config, name)


def block_complexities(config: dict) -> list[int]:
    """Every BC some table or figure shows, ascending: each decoding job runs its method at all of them, so that
    one rule (`p3_decode`, one Slurm resource entry) has the same outputs for every method."""
    out: set[int] = set()
    for name in EXPERIMENTS:
        out.update(int(b) for b in experiment_spec(config, name)["bcs"])
    return sorted(out)


def shows(config: dict, model: str, method: str) -> bool:
    """Whether some experiment shows `method` on `model`."""
    return any(
        method in experiment_spec(config, n)["methods"] and model in experiment_models(config, n) for n in EXPERIMENTS
    )


@dataclass(frozen=True)
class DecodeJob:
    """One decoding job: greedy and one method at its BCs on one model, side by side."""

    model: str
    method: str
    bcs: tuple[int, ...]


def decode_jobs(config: dict) -> list[DecodeJob]:
    """Every (model, method) job any table or figure reads, in the declared order of models and methods."""
    jobs = []
    for model in models(config):
        for method in methods(config):
            if shows(config, model, method):
                jobs.append(DecodeJob(model, method, tuple(block_complexities(config))))
    return jobs


def job(config: dict, model: str, method: str) -> DecodeJob:
    for j in decode_jobs(config):
        if (j.model, j.method) == (model, method):
            return j
    raise ConfigError(f"papers.p3: no table or figure shows method {method!r} on model {model!r}")


def job_decoders(config: dict, model: str, method: str) -> dict[str, dict]:
    """Bench label -> decoder parameters of one job: the greedy reference first (label `greedy`, which the bench
    protocol compares speed and tokens with), then the method at its BCs ascending (labels = setting labels)."""
    j = job(config, model, method)
    out: dict[str, dict] = {REFERENCE: {}}
    out.update({setting_label(method, bc): setting_params(config, method, bc) for bc in j.bcs})
    return out


def job_settings(config: dict, method: str) -> list[str]:
    """Setting labels (result file names) of a job of `method`, in `job_decoders` order."""
    return [setting_label(method, None)] + [setting_label(method, bc) for bc in block_complexities(config)]


def prompt_set(config: dict) -> str:
    return section(config)["prompt_set"]


def result_path(model: str, prompt_set_name: str, setting: str) -> str:
    return f"{RESULTS}/decode/p3/{model}/prompts-{prompt_set_name}/{setting}.json"


def job_results(config: dict, model: str, method: str) -> list[str]:
    return [result_path(model, prompt_set(config), s) for s in job_settings(config, method)]


def experiment_settings(config: dict, name: str) -> list[dict[str, Any]]:
    """The rows an experiment reads: per (model, method, BC) its result file, the job's greedy reference file,
    the method's title and the decoder parameters (JSON-ready; also the table script's `params.settings`)."""
    spec, ps = experiment_spec(config, name), prompt_set(config)
    rows = []
    for model in experiment_models(config, name):
        for method in spec["methods"]:
            ref = result_path(model, ps, setting_label(method, None))
            for bc in spec["bcs"]:
                rows.append(
                    {
                        "model": model,
                        "method": method,
                        "title": method_title(config, method),
                        "bc": int(bc),
                        "path": result_path(model, ps, setting_label(method, bc)),
                        "reference": ref,
                        "params": setting_params(config, method, bc),
                    }
                )
    return rows


def experiment_results(config: dict, name: str) -> list[str]:
    """Result files an experiment reads (settings and their greedy references), without duplicates."""
    if name == ALIGNMENT_FIGURE:
        return []
    out: list[str] = []
    for r in experiment_settings(config, name):
        out += [r["path"], r["reference"]]
    return list(dict.fromkeys(out))


def alignment_models(config: dict) -> list[str]:
    return [figure_spec(config, ALIGNMENT_FIGURE)["model"]]


def alignment_dir(model: str) -> str:
    return f"{RESULTS}/analysis/p3/{model}"


def targets_in_all(config: dict) -> list[str]:
    s = section(config)
    return list(s.get("in_all") if s.get("in_all") is not None else (*TABLES, *FIGURES))


def target_files(name: str) -> list[str]:
    """The files of table or figure `name` (CSV + markdown; PNG + PDF)."""
    return table_files("p3", name) if name in TABLES else figure_files("p3", name)


def leaderboard_entries(config: dict) -> list[LeaderboardEntry]:
    """Paper 3's leaderboard rows (`papers.p3.leaderboard`): each of `methods` at block complexity `bc` as the
    paper runs it, and guarded by the wall-clock guard (`adaptive`: drafts only where they pay on this machine)."""
    spec = section(config).get("leaderboard") or {}
    rows = []
    for method in spec.get("methods", []):
        params, bc, title = setting_params(config, method, spec["bc"]), int(spec["bc"]), method_title(config, method)
        rows.append(LeaderboardEntry("p3", f"p3-{method}-bc{bc}", f"P3 {title}, BC {bc}", params))
        rows.append(
            LeaderboardEntry(
                "p3", f"p3-{method}-bc{bc}-guarded", f"P3 {title}, BC {bc}, guarded", {**params, "adaptive": True}
            )
        )
    return rows


def all_targets(config: dict) -> list[str]:
    """Paper 3's share of `rule all`: the files of the tables and figures of `papers.p3.in_all`."""
    return [f for name in targets_in_all(config) for f in target_files(name)]


# ------------------------------------------------------------------------------------ run settings


BENCH_KEYS = ("warmup", "repeats", "threads")


def bench_settings(config: dict) -> dict[str, int]:
    """The bench protocol's settings for paper 3: the foundation's `bench`, then `papers.p3.bench`."""
    out = {k: (config.get("bench") or {}).get(k) for k in BENCH_KEYS}
    out.update({k: v for k, v in (section(config).get("bench") or {}).items() if k in BENCH_KEYS})
    return out


# -------------------------------------------------------------------------------------------------- checks


def check(config: dict) -> None:
    """Cross-references JSON schema cannot express; raises ConfigError naming the key.

    Models and the prompt set are declared; method labels are identifiers and name registered decoders whose
    parameters they accept at every block complexity (an unknown one is named with the accepted ones); `by_bc`
    keys are block complexities; tables and figures name declared methods and models; the figure-2 probing
    settings build a decoder's mask embedding (strategy known)."""
    s = section(config)
    declared = config["models"]
    for i, m in enumerate(models(config)):
        if m not in declared:
            raise ConfigError(
                f"papers.p3.models[{i}]: model {m!r} is not declared (declared: {', '.join(sorted(declared))})"
            )
    if s["prompt_set"] not in config["prompt_sets"]:
        raise ConfigError(
            f"papers.p3.prompt_set: prompt set {s['prompt_set']!r} is not declared (declared: "
            f"{', '.join(sorted(config['prompt_sets']))})"
        )
    meths = methods(config)
    for label, m in meths.items():
        where = f"papers.p3.methods.{label}"
        if not _METHOD_NAME.match(label):
            raise ConfigError(f"{where}: method labels are identifiers (letters, digits, '_'; a letter first)")
        for k in m.get("by_bc") or {}:
            if not str(k).isdigit():
                raise ConfigError(f"{where}.by_bc: key {k!r} is not a block complexity")
        for bc in block_complexities(config):
            try:
                check_decoder(label, setting_params(config, label, bc))
            except InputError as e:
                key = "decoder" if m["decoder"] not in decoder_names() else f"params (at BC {bc})"
                raise ConfigError(f"{where}.{key}: {e}") from None
    for name in EXPERIMENTS:
        kind = "tables" if name in TABLES else "figures"
        spec = experiment_spec(config, name)
        for i, method in enumerate(spec["methods"]):
            if method not in meths:
                raise ConfigError(
                    f"papers.p3.{kind}.{name}.methods[{i}]: method {method!r} is not declared in "
                    f"papers.p3.methods ({', '.join(meths)})"
                )
        for i, model in enumerate(experiment_models(config, name)):
            if model not in models(config):
                key = f"papers.p3.{kind}.{name}." + ("model" if kind == "figures" else f"models[{i}]")
                raise ConfigError(f"{key}: model {model!r} is not in papers.p3.models ({', '.join(models(config))})")
    fig2 = figure_spec(config, ALIGNMENT_FIGURE)
    if fig2["model"] not in declared:
        raise ConfigError(f"papers.p3.figures.fig2.model: model {fig2['model']!r} is not declared")
    strategy = (fig2.get("probing") or {}).get("strategy", "prompt_mean")
    if strategy not in STRATEGIES:
        raise ConfigError(f"papers.p3.figures.fig2.probing.strategy: {strategy!r} is not one of {STRATEGIES}")
    for i, method in enumerate((s.get("leaderboard") or {}).get("methods", [])):
        if method not in meths:
            raise ConfigError(
                f"papers.p3.leaderboard.methods[{i}]: method {method!r} is not declared in "
                f"papers.p3.methods ({', '.join(meths)})"
            )
