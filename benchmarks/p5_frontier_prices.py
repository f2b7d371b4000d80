"""Paper 5's throughput frontier re-priced on this machine (§3.2): which tree EntMTP* would be here.

The acceptance side of the frontier is hardware-free at temperature 0: a pipeline run's calibration tables
(`results/analysis/p5/<heads>/<task>/table.npz`, the trained heads' ranks along the trunk's greedy paths) and the
trees it priced (`throughput.json`, the published default among them) say how many tokens each tree accepts per
step. The price side is this machine's: verification forwards by rows, Hydra++ drafting of every tree (its head
calls after the score's chain too), the prefix layer's update and each prompt's prefill, timed with the same
functions the pipeline uses (`papers.p5.throughput`), on the trunk's architecture with seeded random weights and
fresh heads of the run's heads config (prices depend on shapes, not on weights). Modeled tok/s per tree (as
`papers.p5.throughput.throughput_row` prices them), the fastest searched tree (EntMTP* without the root-only
candidate) and the default tree.

    .venv/bin/python benchmarks/p5_frontier_prices.py --arch-dir DIR --analysis results/analysis/p5/hydra
        --heads-json results/models/p5/heads/hydra/heads/heads.json [--device cuda --dtype bfloat16]

`--arch-dir`: a folder with the trunk's `config.json` and tokenizer (the weights are not read). `--decode`: also
bench (bench protocol, batch 1) greedy against the `hydra` decoder with the default tree and with each task's
EntMTP* tree on random prompts with these random heads: their drafts are almost never accepted, so the tok/s ratio
is the measured price of a drafted step against a greedy one (prices the model leaves out: bookkeeping, the
decoder's own step), and the identical fraction checks the tree decoder's tokens against greedy's in this dtype.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mtp_core.bench.protocol import BenchPrompt, run_bench  # noqa: E402
from mtp_core.decoding.tree import MEDUSA_TOPK  # noqa: E402
from mtp_core.models.heads.hydra import HydraHeads  # noqa: E402
from mtp_core.models.load import load_model  # noqa: E402
from mtp_core.papers.p5.bank import ROOT_ONLY, canonical  # noqa: E402
from mtp_core.papers.p5.calibration import read_table  # noqa: E402
from mtp_core.papers.p5.decoders import DEFAULT_TREE  # noqa: E402
from mtp_core.papers.p5.engines import OfflineEngine, static_policy  # noqa: E402
from mtp_core.papers.p5.scheduler import feature_depth  # noqa: E402
from mtp_core.papers.p5.throughput import (  # noqa: E402
    greedy_seconds,
    measure_drafting,
    measure_prefill,
    measure_verify,
    throughput_row,
)


def random_ids(n: int, vocab: int, rng: np.random.Generator) -> list[int]:
    return rng.integers(3, vocab, size=max(1, n)).tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch-dir", required=True, help="the trunk's config.json and tokenizer")
    ap.add_argument("--analysis", required=True, help="results/analysis/p5/<heads>: <task>/table.npz, throughput.json")
    ap.add_argument("--heads-json", required=True, help="the run's heads.json (the heads' config)")
    ap.add_argument("--tasks", nargs="+", default=["humaneval", "gsm8k", "sharegpt"])
    ap.add_argument("--score-feature", default="path_value_greedy_depth4")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", action="store_true", help="also bench greedy against hydra decoders (docstring)")
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = {"name": "trunk (random weights, seed 0)", "chat_template": False}
    loaded = load_model(spec, checkpoint=args.arch_dir, device=args.device, dtype=args.dtype, random_weights=0)
    model = loaded.model
    cfg = json.loads(Path(args.heads_json).read_text())["config"]
    keep = ("num_heads", "num_layers", "lm_head", "lm_head_bias", "draft_vocab", "prefix", "init")
    heads = HydraHeads.for_trunk(model, **{k: cfg[k] for k in keep if k in cfg}).to(args.device).eval().bind(model)
    depth = feature_depth(args.score_feature)
    chain_depth = heads.num_heads if depth < 0 else depth
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu, {args.threads} threads"
    out = {"device": device, "dtype": args.dtype, "heads": {k: cfg.get(k) for k in keep}, "tasks": {}}
    print(f"{device}, {args.dtype}; heads {out['heads']}")
    rng = np.random.default_rng(0)
    vocab = int(model.config.vocab_size)
    with torch.inference_mode():
        for task in args.tasks:
            table, _ = read_table(Path(args.analysis) / task / "table.npz")
            thr = json.loads((Path(args.analysis) / task / "throughput.json").read_text())
            trees = {r["id"]: canonical(r["tree"]) for r in thr["rows"]}
            prompts = [random_ids(t.prompt_len, vocab, rng) for t in table]
            widest = max(len(p) for p in trees.values()) + 1  # verification rows of the largest tree
            prices = measure_verify(model, prompts[0], max_rows=max(64, widest), reps=args.reps)
            measure_drafting(prices, model, heads, prompts[0], trees, chain_depth, args.reps)
            prices.prefill = measure_prefill(model, prompts)
            engine = OfflineEngine(table, MEDUSA_TOPK)
            rows = [
                throughput_row(prices, engine.run({t: p}, static_policy(t), args.score_feature), t, p)
                for t, p in trees.items()
            ]
            searched = [r for r in rows if r["id"] not in (ROOT_ONLY, DEFAULT_TREE)]
            if not searched:
                raise SystemExit(f"{task}: throughput.json prices no searched tree")
            best = max(searched, key=lambda r: (r["modeled_tokens_per_s"], -r["n_nodes"]))
            default = next((r for r in rows if r["id"] == DEFAULT_TREE), None)
            tokens = [t.n for t in table]
            greedy = sum(tokens) / greedy_seconds(prices, tokens)
            one = prices.one_row
            verify = {r: s / one for r, s in zip(prices.verify_rows, prices.verify_seconds)}
            print(f"\n{task}: {len(table)} calibration prompts, {len(rows)} trees; greedy {greedy:.1f} tok/s (modeled)")
            print("verification by rows (x one row): " + ", ".join(f"{r}: {c:.2f}" for r, c in verify.items()))
            print(f"one-row step {1e3 * one:.2f} ms; score chain {1e3 * prices.chain:.2f} ms")
            for name, r in (("EntMTP* (fastest searched tree)", best), ("default tree", default)):
                if r is not None:
                    print(
                        f"  {name}: {r['id']} ({r['n_nodes']} nodes, depth {r['tree_depth']}), accept "
                        f"{r['mean_accept']:.2f}/step, {r['modeled_tokens_per_s']:.1f} tok/s, "
                        f"{r['modeled_speedup_vs_greedy']:.2f}x greedy"
                    )
            if default is not None:
                ratio = best["modeled_tokens_per_s"] / default["modeled_tokens_per_s"]
                print(f"  EntMTP* / default tree: {ratio:.2f}")
            out["tasks"][task] = {
                "greedy_tokens_per_s": greedy,
                "verify_by_rows": verify,
                "prices": prices.as_dict(),
                "best": best,
                "default": default,
                "rows": [{k: r[k] for k in r if k != "tree"} for r in rows],
            }
    if args.decode:
        trees = {"default": DEFAULT_TREE} | {t: [list(p) for p in v["best"]["tree"]] for t, v in out["tasks"].items()}
        decoders = {"greedy": {}} | {
            f"hydra-{k}": {"decoder": "hydra", "heads": heads, "tree": tree} for k, tree in trees.items()
        }
        prompts = [BenchPrompt(f"random-{i}", "random", random_ids(128, vocab, rng)) for i in range(4)]
        quiet = dataclasses.replace(loaded, eos_ids=(), stop_strings=())
        summary, gens = run_bench(quiet, decoders, prompts, 64, warmup=1, repeats=3, threads=args.threads)
        print("\ndecoders on random weights (4 random prompts x 128 tokens, 64 new, batch 1):")
        out["decode"] = {}
        for name, r in summary["decoders"].items():
            fwd = sum(len(g.accepted) for g in gens[name]) / len(gens[name])
            print(
                f"  {name}: {r['tokens_per_s']:.1f} tok/s, {r['speedup_vs_greedy']:.3f}x greedy, "
                f"{fwd:.1f} forwards per prompt, identical {r['identical_fraction']:.2f}"
            )
            out["decode"][name] = {k: r[k] for k in ("tokens_per_s", "speedup_vs_greedy", "identical_fraction")} | {
                "forwards_per_prompt": fwd
            }
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()
