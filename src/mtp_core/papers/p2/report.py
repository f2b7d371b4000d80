"""Paper 2's tables (Tables 1-8) from the result files named by `plan.P2Plan.report_params`; figures in `figures.py`.

* Table 1 / Table 7: CAR / AR (%) per head H and benchmark (K = 1: AR), pooled over each prompt set's prompts
  (Eqs. 6-7), and "Mean": pooled over the prompts of every benchmark (`pooled_sets`; the paper's own averages, e.g.
  Table 1's +3.09 points, are unweighted means of its seven benchmarks' rates, which a handful of prompts per set
  would make noisy); per block, each further run minus the first, per head: the paired bootstrap difference over
  prompts with its 95 % interval (per benchmark, and over all prompts as "Mean"), the same differences pooled and
  bootstrapped alike. Runs trained with several seeds add "Seeds": the mean ± sd over seeds of the pooled CAR / AR,
  and for the difference rows the pooled difference of every seed pair (seed i of one run with seed i of the
  other: the same initialisation).
* Table 2 / Table 6: ablations, with main-head columns that a frozen or partly trained trunk can show at this
  scale: validation CE of the main head, KL(base ‖ main) per token, the fraction of prompts whose greedy output
  equals the base model's; Table 2 also head-1 AR per benchmark and pooled (the paper's "acc | AR").
* Table 5: main-head accuracy (prompt sets with answers) and validation CE per run (a frozen trunk gives the same
  values for every run by construction).
* Table 8: the speed experiments' rows under each decoding protocol (with a KV cache; without one, App. D's, the
  paper's): speedup vs the baseline of the same protocol, measured (the mean of the benchmarks' speedups, as Fig.
  5(b) averages "across all benchmarks", and pooled: all tokens over all time) and modeled for KV-cached rows
  (pooled), vs greedy, τ.
* Tables 3-4: the configuration as run (the trunk's sizes and the heads; each run's optimiser, schedule, loss).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ...io import atomic_write_text, read_json, read_jsonl
from ...results.write import samples_path
from .counters import HeadCounters, bootstrap_diff, pooled

MISSING = "-"


def prompt_counters(path: str) -> list[HeadCounters]:
    """Per-prompt counters of an acceptance result (its samples)."""
    return [
        HeadCounters(np.asarray(s["A"]), np.asarray(s["C_cmp"]), int(s["C_step"]))
        for s in read_jsonl(samples_path(path))
    ]


def pct(x: float | None, digits: int = 2) -> str:
    return MISSING if x is None or not np.isfinite(x) else f"{100 * x:.{digits}f}"


def write(numeric: pd.DataFrame, shown: pd.DataFrame, csv: str | os.PathLike, md: str | os.PathLike) -> None:
    """The CSV holds raw numbers, the markdown the formatted cells."""
    atomic_write_text(csv, numeric.to_csv(index=False, lineterminator="\n"))
    atomic_write_text(md, shown.to_markdown(index=False, disable_numparse=True) + "\n")


# ------------------------------------------------------------------------------------------ CAR / AR tables


def run_counters(f: dict, ps: str, depth: int | None = None) -> list[HeadCounters]:
    """Per-prompt counters of the run whose files are `f` (`P2Plan.run_files`) on prompt set `ps` at `depth`
    drafts (default: its K)."""
    return prompt_counters(f["acceptance"][ps][str(depth or f["heads"])])


def pooled_sets(f: dict, sets: Sequence[str], depth: int | None = None) -> HeadCounters:
    """The counters of every prompt of `sets` pooled (Eqs. 6-7 sum A_j, C_j^cmp and C_step over samples): the
    "mean over benchmarks" of every table and figure, so that CAR_j = Π AR_i holds in it as in each benchmark."""
    return pooled([c for ps in sets for c in run_counters(f, ps, depth)])


def seed_runs(params: dict, run: str) -> list[dict]:
    """The files of `run` and of its seed replicates, the run first (`plan` module docstring)."""
    return [params["runs"][r] for r in (run, *params["runs"][run].get("replicates", ()))]


def _spread(xs: Sequence[float]) -> dict[str, float]:
    return {"mean": float(np.mean(xs)), "sd": float(np.std(xs, ddof=1)), "min": min(xs), "max": max(xs)}


def _car_ar_rows(params: dict, runs: Sequence[str]) -> tuple[list[dict], list[dict]]:
    sets = params["prompt_sets"]
    numeric, shown = [], []
    for run in runs:
        f = params["runs"][run]
        k = f["heads"]
        per_set = {ps: pooled(run_counters(f, ps)) for ps in sets}
        mean = pooled_sets(f, sets)
        seeds = [pooled_sets(g, sets) for g in seed_runs(params, run)]
        for h in range(k):
            num: dict[str, Any] = {"run": run, "method": f["title"], "K": k, "H": h + 1}
            txt: dict[str, Any] = {"K": k, "Method": f["title"] if h == 0 else "", "H": h + 1}
            for ps in sets:
                car, ar = float(per_set[ps].car[h]), float(per_set[ps].ar[h])
                num[f"{ps} CAR"], num[f"{ps} AR"] = car, ar
                txt[ps] = pct(ar) if k == 1 else f"{pct(car)} / {pct(ar)}"
            num["mean CAR"], num["mean AR"] = float(mean.car[h]), float(mean.ar[h])
            txt["Mean"] = pct(mean.ar[h]) if k == 1 else f"{pct(mean.car[h])} / {pct(mean.ar[h])}"
            if len(seeds) > 1:
                car_s, ar_s = _spread([float(c.car[h]) for c in seeds]), _spread([float(c.ar[h]) for c in seeds])
                num["seeds"] = len(seeds)
                num |= {f"seeds CAR {k_}": v for k_, v in car_s.items()} | {
                    f"seeds AR {k_}": v for k_, v in ar_s.items()
                }
                ar_txt = f"{pct(ar_s['mean'])} ± {pct(ar_s['sd'])}"
                txt["Seeds"] = (
                    f"{ar_txt} ({len(seeds)})"
                    if k == 1
                    else f"{pct(car_s['mean'])} ± {pct(car_s['sd'])} / {ar_txt} ({len(seeds)})"
                )
            numeric.append(num)
            shown.append(txt)
    return numeric, shown


def _cut(cs: Sequence[HeadCounters], k: int) -> list[HeadCounters]:
    return [HeadCounters(c.accepted[:k], c.compared[:k], c.steps) for c in cs]


def _diff_rows(params: dict, base: str, other: str) -> tuple[list[dict], list[dict]]:
    """Rows `other - base` per head (both at their K; heads up to the smaller K): the paired bootstrap over prompts
    per benchmark and over all of them, and the same difference for every pair of seeds (seed i with seed i)."""
    sets = params["prompt_sets"]
    fa, fb = params["runs"][base], params["runs"][other]
    k = min(fa["heads"], fb["heads"])
    a = {ps: _cut(run_counters(fa, ps), k) for ps in sets}
    b = {ps: _cut(run_counters(fb, ps), k) for ps in sets}
    pairs = list(zip(seed_runs(params, base), seed_runs(params, other)))
    numeric, shown = [], []
    for stat in ("ar", "car"):
        s_ = stat.upper()
        by_set = {ps: bootstrap_diff(a[ps], b[ps], stat) for ps in sets}
        overall = bootstrap_diff([c for ps in sets for c in a[ps]], [c for ps in sets for c in b[ps]], stat)
        by_seed = [
            getattr(pooled_sets(gb, sets), stat)[:k] - getattr(pooled_sets(ga, sets), stat)[:k] for ga, gb in pairs
        ]
        for h in range(k):
            label = f"{fb['title']} − {fa['title']} ({s_}, paired 95% CI)"
            num: dict[str, Any] = {"run": f"{other}-{base}", "method": label, "K": k, "H": h + 1}
            txt: dict[str, Any] = {"K": "", "Method": label if h == 0 else "", "H": h + 1}
            for ps, d in (*by_set.items(), ("all", overall)):
                num[f"{ps} {s_}"], num[f"{ps} {s_} lo"], num[f"{ps} {s_} hi"] = d["diff"][h], d["lo"][h], d["hi"][h]
                cell = f"{100 * d['diff'][h]:+.2f} [{100 * d['lo'][h]:+.2f}, {100 * d['hi'][h]:+.2f}]"
                txt["Mean" if ps == "all" else ps] = f"{cell} (pooled)" if ps == "all" else cell
            if len(pairs) > 1:
                diffs = [float(d[h]) for d in by_seed]
                num["seeds"] = len(pairs)
                num[f"all {s_} seeds"] = ";".join(f"{d:.6f}" for d in diffs)
                num |= {f"all {s_} seeds {k_}": v for k_, v in _spread(diffs).items()}
                txt["Seeds"] = ", ".join(f"{100 * d:+.2f}" for d in diffs) + f" (mean {100 * np.mean(diffs):+.2f})"
            numeric.append(num)
            shown.append(txt)
    return numeric, shown


def car_ar_table(params: dict, csv: str, md: str) -> None:
    """Tables 1 and 7 (module docstring)."""
    spec = params["spec"]
    blocks = spec.get("blocks") or [{"runs": spec["runs"]}]
    numeric, shown = [], []
    for b in blocks:
        n, s = _car_ar_rows(params, b["runs"])
        numeric += n
        shown += s
        for other in b["runs"][1:]:
            n, s = _diff_rows(params, b["runs"][0], other)
            numeric += n
            shown += s
    write(pd.DataFrame(numeric), pd.DataFrame(shown).fillna(""), csv, md)


# ------------------------------------------------------------------------------------- main-head tables


def _identical_to_base(params: dict, run: str) -> float | None:
    f = params["runs"][run]
    if params["base"]["reference"] is None:
        return None
    same = []
    for ps in params["prompt_sets"]:
        mine = {s["id"]: s["tokens"] for s in read_jsonl(samples_path(f["reference"][ps]))}
        base = {s["id"]: s["tokens"] for s in read_jsonl(samples_path(params["base"]["reference"][ps]))}
        same += [mine[i] == base[i] for i in base]
    return float(np.mean(same)) if same else None


def _accuracy(params: dict, run: str) -> tuple[float | None, float | None, int]:
    """Main-head accuracy on the prompt sets with answers (pooled), its standard error and n."""
    hits = []
    for ps in params["prompt_sets"]:
        r = read_json(params["runs"][run]["reference"][ps])
        acc = (r.get("metrics") or {}).get("accuracy")
        if acc is not None:
            hits += [acc["value"]] * int(r["n"])
    if not hits:
        return None, None, 0
    p, n = float(np.mean(hits)), len(hits)
    return p, float(np.sqrt(p * (1 - p) / max(n - 1, 1))), n


def main_head_table(params: dict, csv: str, md: str, with_ar: bool) -> None:
    """Tables 2, 5 and 6 (module docstring)."""
    sets = params["prompt_sets"]
    numeric, shown = [], []
    for run in params["spec"]["runs"]:
        f = params["runs"][run]
        val = read_json(f["validation"])["metrics"]
        acc, err, n = _accuracy(params, run)
        ident = _identical_to_base(params, run)
        num = {
            "run": run,
            "method": f["title"],
            "K": f["heads"],
            "main_accuracy": acc,
            "main_accuracy_stderr": err,
            "n_answers": n,
            "main_val_ce": val.get("loss_main"),
            "kl_base_main": 0.0 if f["main"] == params["base"]["model"] else val.get("kl_base_main"),
            "identical_to_base": ident,
            "head1_val_ce": val.get("ce@1"),
            "head1_val_agree": val.get("agree@1"),
        }
        txt = {
            "Method": f["title"],
            "K": f["heads"],
            f"main acc. (n={n})": MISSING if acc is None else f"{100 * acc:.1f} ± {100 * err:.1f}",
            "main val CE": f"{num['main_val_ce']:.4f}",
            "KL(base‖main)": MISSING if num["kl_base_main"] is None else f"{num['kl_base_main']:.4f}",
            "identical to base": pct(ident, 1),
        }
        if with_ar:
            for ps in sets:
                num[f"{ps} AR"] = float(pooled(run_counters(f, ps)).ar[0])
                txt[ps] = pct(num[f"{ps} AR"])
            num["mean AR"] = float(pooled_sets(f, sets).ar[0])
            txt["Mean AR"] = pct(num["mean AR"])
        numeric.append(num)
        shown.append(txt)
    write(pd.DataFrame(numeric), pd.DataFrame(shown), csv, md)


# ------------------------------------------------------------------------------------------- speed table


def speed_frame(params: dict) -> pd.DataFrame:
    """One row per bench row and protocol (and per prompt set): speedups vs the baseline and greedy of its
    protocol, measured and modeled (KV-cached rows), τ, identity with greedy. The overall row (set "all") has the
    speedup vs the baseline as the mean of the prompt sets' ("average ... across all benchmarks", Fig. 5(b)), so
    that a benchmark of many prompts or long answers weighs no more than another, and pooled over every prompt
    (`speedup_vs_baseline_pooled`: all tokens over all time); its other columns are pooled."""
    sp = params["speed"]
    rows = []
    for r in sp["rows"]:
        res = read_json(sp["paths"][r["label"]])
        st = res["decode_stats"]
        base = {k: r[k] for k in ("label", "title", "run", "depth", "protocol")}
        per_set = {cat: c["speedup_vs_baseline"] for cat, c in res["per_category"].items()}
        rows.append(
            {
                **base,
                "set": "all",
                "tokens_per_s": st["tokens_per_s"],
                "speedup_vs_baseline": statistics.fmean(per_set.values()),
                "speedup_vs_baseline_pooled": st["speedup_vs_baseline"],
                "modeled_speedup_vs_baseline": st.get("modeled_speedup_vs_baseline"),
                "speedup_vs_greedy": st["speedup_vs_greedy"],
                "modeled_speedup_vs_greedy": st.get("modeled_speedup_vs_greedy"),
                "tau": st["heads"]["tau"],
                "identical_fraction": st["identical_fraction"],
            }
        )
        for cat, c in res["per_category"].items():
            rows.append({**base, "set": cat, "tokens_per_s": c["tokens_per_s"], "speedup_vs_baseline": per_set[cat]})
    return pd.DataFrame(rows)


def speed_table(params: dict, csv: str, md: str) -> None:
    """Table 8 (module docstring)."""
    frame = speed_frame(params)
    overall = frame[frame["set"] == "all"]
    shown = pd.DataFrame(
        {
            "Strategy": overall["title"],
            "D": overall["depth"],
            "Protocol": overall["protocol"],
            "speedup vs baseline (measured, mean of benchmarks)": [f"{x:.3f}" for x in overall["speedup_vs_baseline"]],
            "speedup vs baseline (measured, pooled)": [f"{x:.3f}" for x in overall["speedup_vs_baseline_pooled"]],
            "speedup vs baseline (modeled, pooled)": [_num(x) for x in overall["modeled_speedup_vs_baseline"]],
            "vs greedy (measured)": [f"{x:.3f}" for x in overall["speedup_vs_greedy"]],
            "τ": [f"{x:.3f}" for x in overall["tau"]],
            "identical": [pct(x, 0) for x in overall["identical_fraction"]],
        }
    )
    write(frame, shown, csv, md)


def _num(x: float | None) -> str:
    return MISSING if x is None or not np.isfinite(x) else f"{x:.3f}"


# ------------------------------------------------------------------------------------------ config tables


def config_column(c: dict, heads: Sequence[int]) -> dict[str, Any]:
    """One trunk's column of Table 3 from its config (`MISSING` where a row does not apply: the experts of a dense
    trunk). The heads are one dense layer each on either trunk (App. B)."""
    moe = "n_routed_experts" in c
    return {
        "dim": c.get("hidden_size"),
        "n_heads": c.get("num_attention_heads"),
        "n_kv_heads": c.get("num_key_value_heads"),
        "head_dim": c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
        "embedding_tie": c.get("tie_word_embeddings"),
        "qk_norm": c.get("use_qk_norm", c.get("model_type") == "qwen3"),
        "ffn_hidden_dim": c.get("intermediate_size"),
        "max_seq_len": c.get("max_position_embeddings"),
        "rope_theta": (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta")),
        "norm_eps": c.get("rms_norm_eps"),
        "decoder_layers": c.get("num_hidden_layers"),
        "dense_layers": c.get("first_k_dense_replace") if moe else c.get("num_hidden_layers"),
        "expert_hidden_dim": c.get("moe_intermediate_size") if moe else MISSING,
        "num_experts": c.get("n_routed_experts") if moe else MISSING,
        "num_shared_experts": c.get("n_shared_experts") if moe else MISSING,
        "top_k": c.get("num_experts_per_tok") if moe else MISSING,
        "vocab_size": c.get("vocab_size"),
        "num_mtp_heads": ", ".join(str(k) for k in heads),
        "mtp_head_layers": 1,
        "mtp_dense_or_moe": "dense",
    }


def config_table(params: dict, csv: str, md: str, model_configs: Sequence[dict]) -> None:
    """Table 3: a column per trunk the runs train on (the section's model first; the paper: 2B dense and A1B MoE),
    `params["models"]` in order with `model_configs`."""
    columns = {m["name"]: config_column(c, m["heads"]) for m, c in zip(params["models"], model_configs, strict=True)}
    frame = pd.DataFrame(columns).rename_axis("Hyperparameter").reset_index().astype(str)
    write(frame, frame, csv, md)


def hyper_table(params: dict, csv: str, md: str) -> None:
    """Table 4: each run's training as configured and run (optimiser, schedule, data, loss)."""
    rows = []
    for run in params["spec"]["runs"]:
        f = params["runs"][run]
        t, m = f["train"], f["method"]
        loss = m.get("loss") or {}
        rec = read_json(f["record"])
        rows.append(
            {
                "run": run,
                "method": f["title"],
                "K": f["heads"],
                "trunk": m.get("trunk", "frozen"),
                "optimizer": f"AdamW {tuple(t.get('betas', (0.9, 0.95)))} eps {t.get('eps', 1e-8)} wd {t.get('weight_decay', 0.1)}",
                "clip": t.get("grad_clip", 1.0),
                "max_lr": t.get("lr"),
                "schedule": f"{t.get('schedule', 'constant')} (decay {t.get('decay_fraction', 0.1)}), min ratio {t.get('min_lr_ratio', 0.0)}",
                "warmup_steps": t.get("warmup_steps"),
                "steps": rec.get("steps", t.get("max_steps")),
                "seq_len": m.get("seq_len"),
                "batch_tokens": int(t.get("global_batch_size", 0)) * int(m.get("seq_len", 0)),
                "alpha": loss.get("alpha", 0.3),
                "beta": loss.get("beta", 1.0),
                "topn": loss.get("topn", 10000),
                "kl": loss.get("direction", "forward"),
                "detach": loss.get("detach", True),
                "teacher": loss.get("teacher", "main"),
            }
        )
    frame = pd.DataFrame(rows)
    write(frame, frame.astype(str), csv, md)


def make_table(params: dict, csv: str, md: str) -> None:
    """Table `params["name"]` (`P2Plan.report_params`) into `csv` and `md`."""
    name = params["name"]
    if name in ("table1", "table7"):
        car_ar_table(params, csv, md)
    elif name in ("table2", "table5", "table6"):
        main_head_table(params, csv, md, with_ar=name == "table2")
    elif name == "table8":
        speed_table(params, csv, md)
    elif name == "table3":
        config_table(params, csv, md, [trunk_config(m) for m in params["models"]])
    elif name == "table4":
        hyper_table(params, csv, md)
    else:
        raise ValueError(f"paper 2 has no table {name!r}")


def trunk_config(params: dict) -> dict:
    """A trunk's config.json (`model_spec` and `model_dir`: a prepared checkpoint), or its hub/local config."""
    from transformers import AutoConfig

    from ...config.settings import checkpoint_location

    where, kwargs = checkpoint_location(params["model_spec"], params["model_dir"])
    return AutoConfig.from_pretrained(where, **kwargs).to_dict()
