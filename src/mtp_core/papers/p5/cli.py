"""`mtp-repro tree-search`: paper 5's tree search for YOUR heads, model, machine and prompts (what Hydra's users asked
for, issue #3, and never got): the greedy acceptance frontier (Algorithm 1) per depth cap, its debiasing, the
throughput frontier priced on this machine, EntMTP* and the scheduler's bank with τ and the ladder's thresholds,
on any prompt file; and `mtp-repro import-heads`, published Medusa / Hydra heads in the format it reads.

```
mtp-repro import-heads --config config/paper.yaml --model vicuna-7b-v1.3 --id ankner/hydra-vicuna-7b-v1.3 \\
    --out results/heads/hydra-vicuna-7b
mtp-repro tree-search --config config/paper.yaml --model vicuna-7b-v1.3 --heads results/heads/hydra-vicuna-7b \\
    --prompts my_prompts.jsonl --out results/tree-search/mine
```
Every setting defaults to the config's `papers.p5` section (its schema defaults where the file sets none), so
`--config config/paper.yaml` searches with the paper's budgets, depths, tolerance, τ grid and decoding regime (T 0.7
typical acceptance), and `config.yaml` with the embedded scale's. The engine follows the decoding regime
(`P5Plan.search_engine`): at temperature 0 the exact offline simulation (one greedy pass over the prompts,
no forward per candidate tree), above 0 the paper's rollout engine (one decode of every prompt per added node;
meant for a GPU); `--engine offline` with a temperature above 0 is refused. Both write the frontier job's files
(`search.json`, `self.json`, `throughput.json`, `bank.json` for the `entmtp` decoder, `regimes.{json,csv}`,
`table.{npz,json}`) and print EntMTP*, the bank, S/B, τ and the modeled speeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from ...cli.decode import load_named_model, load_prompt_rows
from ...io import InputError
from ...validation import load_config


def search_settings(config: dict, args: argparse.Namespace) -> tuple[Any, dict]:
    """`FrontierSettings` and the frontier job's settings: the config's `papers.p5`, then the flags given (every
    flag is honoured; contradictions are refused with the flag's name)."""
    from ...decoding.tree import published_trees
    from .plan import P5Plan
    from .settings import rows_needed

    if "p5" not in (config.get("papers") or {}):
        raise InputError(f"--config {args.config}: no papers.p5 section to take tree-search's defaults from")
    plan = P5Plan(config)  # a ConfigError (an InputError) names a key it lacks
    over = {
        "depths": None if args.depths is None else tuple(args.depths),
        "budgets": None if args.budgets is None else tuple(args.budgets),
        "tolerance": args.tolerance,
        "max_children_per_parent": args.max_children,
        "frontier_mode": args.frontier_mode,
        "candidate_mode": args.candidate_mode,
        "score_feature": args.score_feature,
        "taus": None if args.taus is None else tuple(args.taus),
        "hysteresis": None if args.hysteresis is None else tuple(args.hysteresis),
        "price_reps": args.reps,
        "include_greedy": args.include_greedy,
    }
    try:
        settings = dataclasses.replace(plan.frontier_settings(), **{k: v for k, v in over.items() if v is not None})
    except ValueError as e:
        raise InputError(str(e)) from None
    job, d = plan.frontier_job_settings(), plan.s.decoding
    temperature = (
        args.temperature if args.temperature is not None else float(plan.decode_regime().get("temperature", 0.0))
    )
    if temperature < 0:
        raise InputError(f"--temperature {temperature}: must be >= 0")
    if temperature > 0:
        regime = {
            "acceptance": "typical",
            "temperature": temperature,
            "posterior_threshold": d.posterior_threshold
            if args.posterior_threshold is None
            else args.posterior_threshold,
            "posterior_alpha": d.posterior_alpha if args.posterior_alpha is None else args.posterior_alpha,
        }
    elif args.posterior_threshold is not None or args.posterior_alpha is not None:
        raise InputError("--posterior-threshold / --posterior-alpha: typical acceptance only (a --temperature > 0)")
    else:
        regime = {"acceptance": "greedy"}
    engine = args.engine or ("rollout" if temperature > 0 else "offline")
    if engine == "offline" and temperature > 0:
        raise InputError(
            f"--engine offline with --temperature {temperature}: the offline simulation is exact at temperature 0 only "
            "(under typical acceptance the text depends on the tree); use --engine rollout, the paper's"
        )
    cal = dict(job["calibration"])
    if args.max_new_tokens is not None:
        cal["max_new_tokens"] = args.max_new_tokens
    if args.batch_size is not None:
        cal["batch_size"] = args.batch_size
    need = rows_needed(settings.budgets, settings.tolerance, [len(published_trees()[settings.default_tree])])
    if args.max_rows is not None and args.max_rows < need:
        raise InputError(
            f"--max-rows {args.max_rows}: the search grows trees whose verification needs {need} rows (budgets "
            f"{list(settings.budgets)}, tolerance {settings.tolerance}, the default tree): give at least {need}"
        )
    job.update(
        calibration=cal,
        max_rows=args.max_rows or need,
        engine=engine,
        decode={} if engine == "offline" else regime,
        threads=args.threads or job["threads"],
    )
    if args.max_prompt_tokens is not None:
        job["max_prompt_tokens"] = args.max_prompt_tokens
    return settings, job


def cmd_tree_search(args: argparse.Namespace) -> None:
    from .jobs import frontier_job

    config = load_config(args.config)
    settings, job = search_settings(config, args)
    rows = load_prompt_rows(args.prompts, Path(args.results), args.n)
    if not Path(args.heads, "heads.json").is_file():
        raise InputError(
            f"--heads {args.heads}: not a heads directory (no heads.json; published heads: mtp-repro import-heads)"
        )
    loaded = load_named_model(config, args.model, Path(args.results), args.checkpoint)
    out = Path(args.out)
    meta = {"model": args.model, "heads_dir": args.heads, "prompts": args.prompts, "engine": job["engine"]}
    frontier_job(loaded, args.heads, _prompt_file(rows, out), str(out), settings, job, meta)
    b = json.loads((out / "bank.json").read_text())
    print(f"{job['engine']} engine, regime {json.dumps(b['regime'])}")
    print(f"EntMTP* (throughput-optimal tree): {b['best']}  {b['trees'][b['best']]['paths']}")
    print(
        f"bank: {', '.join(b['order'])};  S {b['conservative']}, B {b['aggressive']}, "
        f"tau_on {b['tau_on']}, tau_off {b['tau_off']}, ladder thresholds {b['thresholds']}"
    )
    print(f"modeled tok/s: {json.dumps(b['modeled'])};  files in {out}")


def cmd_import_heads(args: argparse.Namespace) -> None:
    from .import_heads import import_heads

    if (args.id is None) == (args.path is None):
        raise InputError("import-heads: give exactly one of --id (a hub repository) and --path (a local directory)")
    config = load_config(args.config)
    loaded = load_named_model(config, args.model, Path(args.results), args.checkpoint)
    spec = {"source": "hub", "id": args.id} if args.id else {"source": "local", "path": args.path}
    out = import_heads(spec, loaded.model, args.out, args.model)
    print(f"heads of {args.id or args.path} for {args.model} in {out}")


def _prompt_file(rows: list[dict], out: Path) -> str:
    """The prompts as the frontier job reads them (a JSONL beside the outputs)."""
    from ...io import atomic_write_jsonl

    path = out / "prompts.jsonl"
    atomic_write_jsonl(path, rows)
    return str(path)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default="config.yaml",
        help="config file: the model's declaration and, for tree-search, every default (papers.p5); default config.yaml",
    )
    p.add_argument("--model", required=True, help="a model declared in the config (the heads' trunk)")
    p.add_argument("--checkpoint", help="load the trunk's weights from this HF directory instead of the prepared model")
    p.add_argument("--results", default="results", help="results directory, where prepared models and prompt sets are")


def add_commands(sub: Any) -> None:
    t = sub.add_parser(
        "tree-search",
        help="paper 5's tree search (frontier, debiasing, throughput, bank, τ) on any prompts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(t)
    t.add_argument("--heads", required=True, help="a heads directory (heads.json + heads.safetensors)")
    t.add_argument("--prompts", required=True, help="prompt-set name or a JSONL file (prompt | question | turns)")
    t.add_argument("--n", type=int, help="the first N prompts only")
    t.add_argument("--out", required=True, help="output directory (the frontier job's files)")
    t.add_argument(
        "--engine",
        choices=("offline", "rollout"),
        help="offline: exact simulation, temperature 0 only; rollout: the paper's union-tree rollouts (any "
        "temperature); default: follows the temperature",
    )
    t.add_argument(
        "--temperature",
        type=float,
        help="decoding regime the bank is chosen for: 0 = greedy acceptance, > 0 = typical acceptance at this "
        "temperature (the rollout engine); default: the config's papers.p5.decoding",
    )
    t.add_argument("--posterior-threshold", type=float, help="typical acceptance's ε (default: the config's)")
    t.add_argument("--posterior-alpha", type=float, help="typical acceptance's α (default: the config's)")
    t.add_argument("--depths", type=int, nargs="+", help="depth caps searched (default: papers.p5.search.depths)")
    t.add_argument("--budgets", type=int, nargs="+", help="budgets in drafted nodes (default: papers.p5.search)")
    t.add_argument("--tolerance", type=float, help="budget window ±tolerance; trees grow to int(max budget (1 + it))")
    t.add_argument("--max-children", type=int, help="children per parent, at most 10 (default: the config's)")
    t.add_argument(
        "--frontier-mode",
        choices=("per-depth", "global", "all"),
        help="trees the debiasing re-scores (default: the config's; the paper's App. B: per-depth)",
    )
    t.add_argument(
        "--candidate-mode",
        choices=("per-depth-frontier", "global-frontier", "all"),
        help="trees the throughput stage prices (default: the config's)",
    )
    t.add_argument("--max-new-tokens", type=int, help="tokens per calibration decode (default: papers.p5.calibration)")
    t.add_argument("--batch-size", type=int, help="calibration batch, and the rollout search's (default: the config's)")
    t.add_argument("--max-prompt-tokens", type=int, help="skip longer prompts (default: the config's)")
    t.add_argument(
        "--max-rows",
        type=int,
        help="widest verification chunk priced (default and minimum: the largest searched or default tree's rows)",
    )
    t.add_argument("--reps", type=int, help="timed repetitions of each price (default: papers.p5.throughput.reps)")
    t.add_argument("--threads", type=int, help="torch threads for calibration and prices (default: the config's bench)")
    t.add_argument(
        "--score-feature", help="the scheduler's score, e.g. path_value_greedy_depth4 (default: the config's)"
    )
    t.add_argument("--taus", type=float, nargs="+", help="τ grid of the sweep (default: papers.p5.scheduler.taus)")
    t.add_argument("--hysteresis", type=float, nargs="+", help="τ_off = τ_on x each factor (default: the config's)")
    t.add_argument(
        "--include-greedy",
        action=argparse.BooleanOptionalAction,
        help="the root-only tree (plain greedy steps) is a candidate: EntMTP* where every tree is slower (default: "
        "papers.p5.throughput.include_greedy)",
    )
    t.set_defaults(func=cmd_tree_search)
    i = sub.add_parser(
        "import-heads",
        help="published Medusa / Hydra heads (hub id or local checkpoint) in the format tree-search and the decoders read",
    )
    _common(i)
    i.add_argument(
        "--id", help="hub repository, e.g. ankner/hydra-vicuna-7b-v1.3 or FasterDecoding/medusa-vicuna-7b-v1.3"
    )
    i.add_argument("--path", help="local directory with the checkpoint's config.json and *_lm_head.pt/.safetensors")
    i.add_argument("--out", required=True, help="output heads directory")
    i.set_defaults(func=cmd_import_heads)
