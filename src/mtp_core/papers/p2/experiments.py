"""Paper 2's tables, figures and speed experiments as the plan names them: what each shows (`papers.p2.tables`,
`papers.p2.figures`), the files it reads, the mains whose references it needs, the rows and trunks of a speed
experiment (Figs 4-5, Table 8: one bench, a greedy row per trunk), and the parameters the report script reads.
Runs, mains, settings and result paths: `plan`.
"""

from __future__ import annotations

from typing import Any

from ...config import model_spec
from ...model_plan import model_dir
from ...results import figure_files, table_files
from .plan import (
    REFERENCE,
    acceptance_outputs,
    acceptance_path,
    depths,
    heads_path,
    main_of,
    num_heads,
    pretrained_base,
    prompt_sets,
    reference_path,
    run_names,
    run_plan,
    run_record,
    section,
    setting_label,
    speed_label,
    topn_path,
    validation_path,
)

RESULTS = "results"
TABLES = ("table1", "table2", "table3", "table4", "table5", "table6", "table7", "table8")
FIGURES = ("fig3", "fig4", "fig5", "fig6", "fig7", "fig9", "fig10", "fig11", "fig12", "fig13", "fig14")
SPEED_EXPERIMENTS = ("fig4", "fig5", "table8")  # read a bench of their own rows
CURVE_FIGURES = ("fig7", "fig10")  # read a run's training curves
BENCH_KEYS = ("warmup", "repeats", "threads")


# ------------------------------------------------------------------------------------------ speed experiments


def speed_rows(config: dict, experiment: str) -> list[dict[str, Any]]:
    """The `mtp-spec` rows of a speed experiment: {label, run, depth, title, main}; Fig. 4: every run at its K;
    Fig. 5 / Table 8: the listed (run, depth) strategies. The baseline row is among them."""
    spec = experiment_spec(config, experiment)
    rows = spec.get("rows") or [{"run": r} for r in spec.get("runs", [])]
    out = []
    for r in rows:
        k = num_heads(config, r["run"])
        depth = int(r.get("depth") or k)
        title = r.get("title") or run_plan(config, r["run"]).title
        main = main_of(config, r["run"])
        out.append(
            {"label": speed_label(r["run"], depth), "run": r["run"], "depth": depth, "title": title, "main": main}
        )
    return out


def speed_mains(config: dict, experiment: str) -> list[str]:
    """The trunks the rows decode with, in row order (runs that trained their trunks each bring their own)."""
    return list(dict.fromkeys(r["main"] for r in speed_rows(config, experiment)))


def greedy_label(config: dict, experiment: str, main: str) -> str:
    """The greedy row of a trunk: `greedy` for the first (the bench's reference), `greedy-<main>` for others."""
    return REFERENCE if main == speed_mains(config, experiment)[0] else f"{REFERENCE}-{main}"


def speed_path(experiment: str, label: str) -> str:
    return f"{RESULTS}/decode/p2/speed/{experiment}/{label}.json"


def speed_decoders(config: dict, experiment: str) -> dict[str, dict[str, Any]]:
    """Bench label -> decoder parameters: a greedy row per trunk (the first is `greedy`), then `mtp-spec` with each
    row's heads and depth."""
    out: dict[str, dict[str, Any]] = {
        greedy_label(config, experiment, m): {"decoder": REFERENCE} for m in speed_mains(config, experiment)
    }
    for r in speed_rows(config, experiment):
        out[r["label"]] = {"decoder": "mtp-spec", "heads": heads_path(config, r["run"]), "num_drafts": r["depth"]}
    return out


def speed_trunks(config: dict, experiment: str) -> dict[str, str]:
    """Bench label -> the trunk it decodes with."""
    out = {greedy_label(config, experiment, m): m for m in speed_mains(config, experiment)}
    return out | {r["label"]: r["main"] for r in speed_rows(config, experiment)}


def speed_outputs(config: dict, experiment: str) -> list[str]:
    return [speed_path(experiment, label) for label in speed_decoders(config, experiment)]


def speed_baseline(config: dict, experiment: str) -> str:
    """The row label speedups are relative to (the paper: DeepSeek MTP with K = 1)."""
    b = experiment_spec(config, experiment)["baseline"]
    return speed_label(b, num_heads(config, b))


def speed_bench(config: dict) -> dict[str, int]:
    """The bench protocol's settings for paper 2: the foundation's `bench`, then `papers.p2.speed.bench`."""
    out = {k: (config.get("bench") or {}).get(k) for k in BENCH_KEYS}
    out.update({k: v for k, v in ((section(config).get("speed") or {}).get("bench") or {}).items() if k in BENCH_KEYS})
    return out


# ------------------------------------------------------------------------------------------ experiments


def experiment_spec(config: dict, name: str) -> dict:
    kind = "tables" if name in TABLES else "figures"
    return (section(config).get(kind) or {}).get(name) or {}


def experiment_runs(config: dict, name: str) -> list[str]:
    """The runs a table or figure shows (their trainings and acceptance jobs)."""
    spec = experiment_spec(config, name)
    runs = [r for b in spec.get("blocks", []) for r in b["runs"]] + list(spec.get("runs", []))
    runs += [r["run"] for r in spec.get("rows", [])] + ([spec["run"]] if spec.get("run") else [])
    if spec.get("baseline"):
        runs.append(spec["baseline"])
    return list(dict.fromkeys(runs))


def experiment_inputs(config: dict, name: str) -> list[str]:
    """Every file table or figure `name` reads."""
    runs = experiment_runs(config, name)
    if name in SPEED_EXPERIMENTS:
        return speed_outputs(config, name)
    if name in CURVE_FIGURES:
        return [run_record(r) for r in runs]
    if name == "fig6":
        return [topn_path(topn_main(config), "csv")]
    if name == "table3":
        return []
    if name == "table4":
        return [run_record(r) for r in runs]
    out = []
    for r in runs:
        out += acceptance_outputs(config, r) + [validation_path(r)]
        out += [reference_path(main_of(config, r), ps) for ps in prompt_sets(config)]
    if name in ("table2", "table5", "table6") and pretrained_base(config):
        model = section(config)["model"]
        out += [reference_path(model, ps) for ps in prompt_sets(config)]
    return list(dict.fromkeys(out))


def topn_main(config: dict) -> str:
    """The trunk of Figure 6 (`figures.fig6.run`'s, else the section's model)."""
    run = experiment_spec(config, "fig6").get("run")
    return main_of(config, run) if run else section(config)["model"]


def mains(config: dict, names: list[str] | None = None) -> list[str]:
    """Mains whose references some experiment reads (all experiments by default)."""
    names = list(TABLES + FIGURES) if names is None else names
    out = []
    for n in names:
        out += [main_of(config, r) for r in experiment_runs(config, n)]
        if n in ("table2", "table5", "table6") and pretrained_base(config):
            out.append(section(config)["model"])
        if n == "fig6":
            out.append(topn_main(config))
    return list(dict.fromkeys(out))


def targets_in_all(config: dict) -> list[str]:
    s = section(config)
    return list(s.get("in_all") if s.get("in_all") is not None else (*TABLES, *FIGURES))


def target_files(name: str) -> list[str]:
    return table_files("p2", name) if name in TABLES else figure_files("p2", name)


def all_targets(config: dict) -> list[str]:
    return [f for name in targets_in_all(config) for f in target_files(name)]


def configured(config: dict, name: str) -> bool:
    """Whether table or figure `name` is configured (its section names what it shows)."""
    return bool(experiment_spec(config, name)) or name in ("table3", "fig6")


# ------------------------------------------------------------------------------------------------ report


def run_files(config: dict, run: str) -> dict[str, Any]:
    """What the report reads of one run: title, K, main, its acceptance files by set and D, validation,
    its main's references, its training record."""
    k = num_heads(config, run)
    main = main_of(config, run)
    return {
        "title": run_plan(config, run).title,
        "heads": k,
        "main": main,
        "acceptance": {
            ps: {str(d): acceptance_path(run, ps, setting_label(d)) for d in depths(config)}
            for ps in prompt_sets(config)
        },
        "validation": validation_path(run),
        "reference": {ps: reference_path(main, ps) for ps in prompt_sets(config)},
        "record": run_record(run),
        "method": run_plan(config, run).method,
        "train": run_plan(config, run).train,
    }


def report_params(config: dict, name: str) -> dict[str, Any]:
    """Everything table or figure `name` shows, JSON-ready (the report script's `params.spec`)."""
    spec = experiment_spec(config, name)
    model = section(config)["model"]
    out: dict[str, Any] = {
        "name": name,
        "spec": spec,
        "prompt_sets": list(prompt_sets(config)),
        "runs": {r: run_files(config, r) for r in experiment_runs(config, name)},
        "base": {
            "model": model,
            "reference": {ps: reference_path(model, ps) for ps in prompt_sets(config)}
            if pretrained_base(config)
            else None,
        },
    }
    if name in SPEED_EXPERIMENTS:
        out["speed"] = {
            "rows": speed_rows(config, name),
            "paths": {r["label"]: speed_path(name, r["label"]) for r in speed_rows(config, name)},
            "baseline": speed_baseline(config, name),
        }
    if name == "fig6":
        out["topn"] = topn_path(topn_main(config), "csv")
        out["base"]["model"] = topn_main(config)
    if name == "table3":
        out["model_spec"] = model_spec(config, model)
        out["model_dir"] = model_dir(config, model)
        out["heads"] = sorted({num_heads(config, r) for r in run_names(config)})
    return out
