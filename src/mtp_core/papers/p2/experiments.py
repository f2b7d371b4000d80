"""Paper 2's tables, figures and speed experiments as the plan names them: what each shows (`papers.p2.tables`,
`papers.p2.figures`), the files it reads, the mains whose references it needs, the rows and trunks of a speed
experiment (Figs 4-5, Table 8: one bench, a greedy row per trunk), and the parameters the report script reads.
Runs, mains, settings and result paths: `plan`.
"""

from __future__ import annotations

from typing import Any

from ...config.layout import figure_files, table_files
from ...config.settings import model_spec
from ...models.plan import model_dir
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
    replicates,
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
ACCEPTANCE_SPEED = ("fig5",)  # ... and the acceptance of their runs (CAR per head)
SEEDED = ("table1", "table7")  # also read the runs' seed replicates (the spread over seeds)
CURVE_FIGURES = ("fig7", "fig10")  # read a run's training curves
BENCH_KEYS = ("warmup", "repeats", "threads")
NOKV = "-nokv"  # the label suffix of rows timed without a KV cache
GREEDY_UNCACHED = "greedy-uncached"  # the greedy reference without a KV cache (`uncached`)
PROTOCOLS = {True: "KV cache", False: "no KV cache (App. D)"}


# ------------------------------------------------------------------------------------------ speed experiments


def speed_protocols(config: dict, experiment: str) -> list[bool]:
    """Whether each decoding protocol a speed experiment times keeps a KV cache (`kv_cache`): true = the decoders'
    own cached decoding; false = App. D's protocol, the paper's ("KV cache is not used during inference": every
    forward runs over the whole sequence, `uncached`)."""
    return [bool(kv) for kv in experiment_spec(config, experiment)["kv_cache"]]


def _suffix(kv: bool) -> str:
    return "" if kv else NOKV


def speed_rows(config: dict, experiment: str) -> list[dict[str, Any]]:
    """The `mtp-spec` rows of a speed experiment under each of its protocols: {label, run, depth, title, main,
    kv_cache}; Fig. 4: every run at its K; Fig. 5 / Table 8: the listed (run, depth) strategies. The baseline row
    is among them. Labels `<run>-h<D>`, with `-nokv` for the uncached protocol."""
    spec = experiment_spec(config, experiment)
    rows = spec.get("rows") or [{"run": r} for r in spec.get("runs", [])]
    out = []
    for kv in speed_protocols(config, experiment):
        for r in rows:
            depth = int(r.get("depth") or num_heads(config, r["run"]))
            out.append(
                {
                    "label": speed_label(r["run"], depth) + _suffix(kv),
                    "run": r["run"],
                    "depth": depth,
                    "title": r.get("title") or run_plan(config, r["run"]).title,
                    "main": main_of(config, r["run"]),
                    "kv_cache": kv,
                }
            )
    return out


def speed_mains(config: dict, experiment: str) -> list[str]:
    """The trunks the rows decode with, in row order (runs that trained their trunks each bring their own)."""
    return list(dict.fromkeys(r["main"] for r in speed_rows(config, experiment)))


def greedy_label(config: dict, experiment: str, main: str, kv: bool = True) -> str:
    """The greedy row of a trunk under a protocol: `greedy` (`greedy-nokv`) for the first trunk, the bench's
    reference, `greedy-<main>` (`greedy-nokv-<main>`) for others."""
    own = "" if main == speed_mains(config, experiment)[0] else f"-{main}"
    return f"{REFERENCE}{_suffix(kv)}{own}"


def speed_path(experiment: str, label: str) -> str:
    return f"{RESULTS}/decode/p2/speed/{experiment}/{label}.json"


def speed_decoders(config: dict, experiment: str) -> dict[str, dict[str, Any]]:
    """Bench label -> decoder parameters, per protocol: a greedy row per trunk (the first is `greedy`; uncached:
    `greedy-uncached`), then `mtp-spec` with each row's heads and depth (uncached: `kv_cache: false`)."""
    out: dict[str, dict[str, Any]] = {}
    rows = speed_rows(config, experiment)
    for kv in speed_protocols(config, experiment):
        for m in speed_mains(config, experiment):
            out[greedy_label(config, experiment, m, kv)] = {"decoder": REFERENCE if kv else GREEDY_UNCACHED}
        for r in (r for r in rows if r["kv_cache"] == kv):
            params = {"decoder": "mtp-spec", "heads": heads_path(config, r["run"]), "num_drafts": r["depth"]}
            out[r["label"]] = params if kv else {**params, "kv_cache": False}
    return out


def speed_trunks(config: dict, experiment: str) -> dict[str, str]:
    """Bench label -> the trunk it decodes with."""
    out = {
        greedy_label(config, experiment, m, kv): m
        for kv in speed_protocols(config, experiment)
        for m in speed_mains(config, experiment)
    }
    return out | {r["label"]: r["main"] for r in speed_rows(config, experiment)}


def speed_refs(config: dict, experiment: str) -> dict[str, dict[str, Any]]:
    """Bench label (`speed_decoders`' order) -> {greedy: the greedy row of its trunk and protocol, baseline: the
    baseline row of its protocol, kv_cache}: what its speedups are relative to (a protocol is only compared with
    itself)."""
    out = {}
    for kv in speed_protocols(config, experiment):
        base = speed_baseline(config, experiment, kv)
        greedy = [(greedy_label(config, experiment, m, kv), m) for m in speed_mains(config, experiment)]
        rows = [(r["label"], r["main"]) for r in speed_rows(config, experiment) if r["kv_cache"] == kv]
        for label, main in greedy + rows:
            out[label] = {"greedy": greedy_label(config, experiment, main, kv), "baseline": base, "kv_cache": kv}
    return out


def speed_outputs(config: dict, experiment: str) -> list[str]:
    return [speed_path(experiment, label) for label in speed_decoders(config, experiment)]


def speed_baseline(config: dict, experiment: str, kv: bool = True) -> str:
    """The row label speedups are relative to under a protocol (the paper: DeepSeek MTP with K = 1)."""
    b = experiment_spec(config, experiment)["baseline"]
    return speed_label(b, num_heads(config, b)) + _suffix(kv)


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


def experiment_replicates(config: dict, name: str) -> list[str]:
    """The seed replicates of the runs a table shows (`plan` module docstring; Tables 1 and 7)."""
    return [rep for r in experiment_runs(config, name) for rep in replicates(config, r)] if name in SEEDED else []


def experiment_inputs(config: dict, name: str) -> list[str]:
    """Every file table or figure `name` reads."""
    runs = experiment_runs(config, name)
    if name in SPEED_EXPERIMENTS:  # Figure 5's CAR panel reads its rows' acceptance beside their speed
        extra = [p for r in runs for p in acceptance_outputs(config, r)] if name in ACCEPTANCE_SPEED else []
        return speed_outputs(config, name) + extra
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
    for r in experiment_replicates(config, name):
        out += [acceptance_path(r, ps, setting_label(num_heads(config, r))) for ps in prompt_sets(config)]
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
        out += [main_of(config, r) for r in experiment_runs(config, n) + experiment_replicates(config, n)]
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
    its main's references, its training record, its seed replicates (their names)."""
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
        "replicates": replicates(config, run),
    }


def report_params(config: dict, name: str) -> dict[str, Any]:
    """Everything table or figure `name` shows, JSON-ready (the report script's `params.spec`)."""
    spec = experiment_spec(config, name)
    model = section(config)["model"]
    out: dict[str, Any] = {
        "name": name,
        "spec": spec,
        "prompt_sets": list(prompt_sets(config)),
        "runs": {r: run_files(config, r) for r in experiment_runs(config, name) + experiment_replicates(config, name)},
        "base": {
            "model": model,
            "reference": {ps: reference_path(model, ps) for ps in prompt_sets(config)}
            if pretrained_base(config)
            else None,
        },
    }
    if name in SPEED_EXPERIMENTS:
        rows = speed_rows(config, name)
        out["speed"] = {
            "rows": [{**r, "protocol": PROTOCOLS[r["kv_cache"]]} for r in rows],
            "paths": {r["label"]: speed_path(name, r["label"]) for r in rows},
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
