"""Paper 3 probing on the embedded model (issue 5 items 2-3): mask-token hit rates and decoding side by side.

Part `hits` (one forward per prompt and mask variant, no decoding): the reference greedy continuation of each
prompt is laid out as a chain on top of the prompt's KV cache and a chain of two mask tokens hangs on every
continuation token (exactly where the decoder hangs them: `draft_trees.mask_chain_parents`). Mask 1 on token
t predicts t+2, mask 2 predicts t+3. Reported: top-1 / top-10 hit rates of t+2 (raw, no pruning: the issue's
measurement) and of t+3, per variant, open-ended categories vs the others, masks on generated tokens 1-32 vs 33+
(where the guard's probes fall). The node logits are checked to
reproduce the greedy continuation (argmax at token t = token t+1).

Part `bench` (`mtp_core.bench.protocol.run_bench`: same weights, prompts and threads, warm-up, interleaved order): greedy,
prompt lookup (chain of 3, the issue's baseline) and probing presets; tokens per forward (bonus included), tok/s,
speed vs greedy and identical_to_greedy, overall and per category; for probing also the decoder's own hit rates.
Two checks of the timings: `greedy-<label>` presets (a second greedy instance: its speed vs `greedy` is the run's
timing noise floor) and the modeled speed, free of timing noise: greedy's forwards over the decoder's forwards
each priced by its chunk rows (`cost.calibrate_on_prompt` on the first prompt, 5 interleaved repeats); it leaves
out prefill and the decoders' own bookkeeping.

    .venv/bin/python benchmarks/p3_probing.py --part hits
    .venv/bin/python benchmarks/p3_probing.py --part bench --decoders greedy,prompt-lookup,vocab_mean-bc30,...
    .venv/bin/python benchmarks/p3_probing.py --part bench --specbench-n 12 --categories roleplay,writing,qa \
        --n-per-category 6 --warmup 0 --decoders greedy,prompt-lookup-bc30,lookahead-bc30,stand-bc30,vocab_mean-bc30

Preset names: `greedy` (`greedy-<label>`: another greedy instance, whose speed vs `greedy` is the timing noise
floor of the run), `prompt-lookup[-adaptive]` (a chain of 3, the issue's baseline), `prompt-lookup-bc<BC>`
(a chain of BC - 1, as the workflow's Table 1), `<strategy>-bc<BC>[-m2][-adaptive]` with strategy in
prompt_mean, last_n, gaussian, vocab_mean, `lookahead-bc<BC>[-adaptive]` (N = 3/4/5 for BC 10/30/60, W = G =
(BC - 1) // (2 (N - 1))) and `stand-bc<BC>[-adaptive]`; `-adaptive` turns on the shared wall-clock guard. Runs
are kept under ~10 minutes each on the 2-core sandbox by choosing the presets and `--n-per-category`; every run
includes greedy, so speeds compare within one process.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mtp_core.bench.protocol import BenchPrompt, encode_prompts, run_bench  # noqa: E402
from mtp_core.decoding import build_decoder  # noqa: E402
from mtp_core.decoding.cache import crop_cache  # noqa: E402
from mtp_core.decoding.cost import calibrate_on_prompt  # noqa: E402
from mtp_core.decoding.pricing import modeled_speedup  # noqa: E402
from mtp_core.decoding.tree import (  # noqa: E402
    TreeContext,
    chain_buffers,
    tree_forward,
)
from mtp_core.models.load import LoadedModel, load_model, prepare_base_model  # noqa: E402
from mtp_core.papers.p3.alignment import mask_embeddings  # noqa: E402
from mtp_core.papers.p3.draft_trees import mask_chain_parents  # noqa: E402
from mtp_core.papers.p3.probing import ProbingDecoder  # noqa: E402

log = logging.getLogger("p3_probing")
OPEN_ENDED = {"writing", "roleplay", "conversation", "qa"}

EARLY = 32  # hit rates are also split by position: the guard's probes come after `probe_every` (32) greedy steps
POSITIONS = (f"tokens 1-{EARLY}", f"tokens {EARLY + 1}+")  # masks on generated tokens up to EARLY, and after
HIT_VARIANTS: dict[str, dict[str, Any]] = {
    "last_n (last prompt token)": {"strategy": "last_n", "n_last": 1},
    "last_n context (last prefix token)": {"strategy": "last_n", "last_n_context": True},
    "gaussian (vocab mean/std)": {"strategy": "gaussian", "seed": 0},
    "prompt_mean alpha=0": {"strategy": "prompt_mean", "alpha": 0.0},
    "prompt_mean alpha=0.1": {"strategy": "prompt_mean", "alpha": 0.1},
    "prompt_mean alpha=0.5": {"strategy": "prompt_mean", "alpha": 0.5},
    "vocab_mean": {"strategy": "vocab_mean"},
    "vocab_mean x0.5": {"strategy": "vocab_mean", "scale": 0.5},
    "vocab_mean x2": {"strategy": "vocab_mean", "scale": 2.0},
}


LOOKAHEAD_NGRAM = {10: 3, 30: 4, 60: 5}  # N per block complexity: W = G = (BC - 1) // (2 (N - 1)) -> 9/25/57 rows


def preset(name: str) -> tuple[str, dict[str, Any]]:
    """(registered decoder, params) of a preset name (see the module docstring)."""
    if name.startswith("greedy"):  # `greedy-<anything>`: a second greedy instance, the timing noise floor
        return "greedy", {}
    guarded = name.endswith("-adaptive")
    base = name.removesuffix("-adaptive")
    guard: dict[str, Any] = {"adaptive": True} if guarded else {}
    if base == "prompt-lookup":
        return "prompt-lookup", {"num_draft": 3, **guard}
    if base.startswith("prompt-lookup-bc"):
        return "prompt-lookup", {"num_draft": int(base.removeprefix("prompt-lookup-bc")) - 1, **guard}
    parts = base.split("-")
    if parts[0] in ("lookahead", "stand"):
        if len(parts) != 2 or not parts[1].startswith("bc"):
            raise ValueError(f"preset {name!r}: expected {parts[0]}-bc<BC>[-adaptive]")
        bc = int(parts[1][2:])
        if parts[0] == "lookahead":
            return "lookahead", {"bc": bc, "ngram": LOOKAHEAD_NGRAM.get(bc, 4), **guard}
        return "stand", {"bc": bc, **guard}
    params: dict[str, Any] = {"strategy": parts[0], **guard}
    for p in parts[1:]:
        if p.startswith("bc"):
            params["bc"] = int(p[2:])
        elif p == "m2":
            params["masks_per_step"] = 2
        elif p == "noprune":
            params["prune"] = False
        else:
            raise ValueError(f"unknown preset part {p!r} in {name!r}")
    return "probing", params


def load(model_dir: Path) -> tuple[LoadedModel, str]:
    if (model_dir / "config.json").is_file():
        spec = {
            "source": "local",
            "path": str(model_dir),
            "name": model_dir.name,
            "dtype": "float32",
            "chat_template": True,
        }
        return load_model(spec), str(model_dir)
    spec = {
        "source": "tiny",
        "arch": "llama",
        "name": "tiny-llama",
        "hidden_size": 256,
        "num_layers": 4,
        "num_heads": 4,
        "num_kv_heads": 2,
        "intermediate_size": 768,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "init_seed": 0,
        "chat_template": True,
        "dtype": "float32",
    }
    d = prepare_base_model(spec, Path(tempfile.mkdtemp()) / "tiny")
    return load_model(spec, base_dir=d), f"TINY random model ({model_dir} absent)"


def read_prompts(
    loaded: LoadedModel, path: Path, per_cat: int, offset: int, categories: set[str] | None = None
) -> tuple[list[BenchPrompt], str]:
    if not path.is_file():
        rows = [
            {"id": str(i), "category": c, "prompt": p}
            for i, (c, p) in enumerate(
                [
                    ("writing", "Write a short poem about a cat who likes rain."),
                    ("math_reasoning", "What is 17 times 23? Show your steps."),
                    ("coding", "How do I reverse a list in Python?"),
                    ("summarization", "Summarise the plot of Romeo and Juliet."),
                ]
            )
        ]
        return encode_prompts(loaded, rows), f"hand-written prompts ({path} absent)"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_cat: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if categories is None or r.get("category") in categories:
            by_cat[r.get("category") or "all"].append(r)
    chosen = [r for rs in by_cat.values() for r in rs[offset : offset + per_cat]]
    return encode_prompts(loaded, chosen), str(path)


# ---------------------------------------------------------------- part 1: hit rates


@torch.inference_mode()
def hit_rates(loaded: LoadedModel, prompts: list[BenchPrompt], conts: list[list[int]]) -> dict[str, Any]:
    model, tok = loaded.model, loaded.tokenizer
    counts: dict[str, dict[str, list[float]]] = {v: defaultdict(lambda: [0.0] * 5) for v in HIT_VARIANTS}
    consistent = total = 0
    for p, cont in zip(prompts, conts):
        t = len(cont)
        if t < 4:
            continue
        group = "open-ended" if p.category in OPEN_ENDED else "other"
        cache = DynamicCache(config=model.config)
        ids = torch.tensor([p.ids])
        model(input_ids=ids, cache=cache, logits_to_keep=1)
        ctx = TreeContext(
            cache, torch.ones(1, len(p.ids), dtype=torch.bool), torch.tensor([cont[0]]), torch.tensor([len(p.ids)])
        )
        buffers, cand = chain_buffers(t - 1), torch.tensor([cont[1:]])
        parents = mask_chain_parents(t, 2)
        for name, params in HIT_VARIANTS.items():
            dec = ProbingDecoder(model, tok, **params)
            e = mask_embeddings(dec, p.ids, cont).repeat_interleave(2, dim=0)[None]
            logits, _ = tree_forward(model, ctx, buffers, cand, extra_parents=parents, extra_embeds=e)
            crop_cache(cache, logits.shape[1])
            if name == next(iter(HIT_VARIANTS)):
                consistent += int((logits[0, : t - 1].argmax(-1) == cand[0]).sum())
                total += t - 1
            top = logits[0, t:].topk(10, dim=-1).indices.view(t, 2, 10)
            for i in range(t - 2):  # mask 1 on token i predicts token i + 2
                for g in (group, "all", POSITIONS[i >= EARLY]):
                    c = counts[name][g]
                    c[0] += 1
                    c[1] += float(top[i, 0, 0] == cont[i + 2])
                    c[2] += float((top[i, 0] == cont[i + 2]).any())
                    if i + 3 < t:  # mask 2 predicts token i + 3
                        c[3] += float(top[i, 1, 0] == cont[i + 3])
                        c[4] += 1
    out: dict[str, Any] = {"node_argmax_reproduces_greedy": consistent / max(1, total)}
    for name, by_group in counts.items():
        out[name] = {
            g: {"n": int(c[0]), "t+2 top1": c[1] / c[0], "t+2 top10": c[2] / c[0], "t+3 top1": c[3] / max(1, c[4])}
            for g, c in by_group.items()
            if c[0]
        }
    return out


def print_hits(h: dict[str, Any]) -> None:
    print(f"\n## mask hit rates (node argmax reproduces greedy: {h['node_argmax_reproduces_greedy']:.4f})")
    print(
        "| mask embedding | open-ended t+2 top1 / top10 | other t+2 top1 / top10 | all t+2 top1 / top10 | "
        f"all t+3 top1 | {POSITIONS[0]} t+2 top1 / top10 | {POSITIONS[1]} t+2 top1 / top10 |"
    )
    print("|---|---|---|---|---|---|---|")

    def cell(r: dict, g: str) -> str:
        return f"{100 * r[g]['t+2 top1']:.1f} / {100 * r[g]['t+2 top10']:.1f} %" if g in r else "-"

    for name in HIT_VARIANTS:
        r = h[name]
        print(
            f"| {name} | {cell(r, 'open-ended')} | {cell(r, 'other')} | {cell(r, 'all')} | "
            f"{100 * r['all']['t+3 top1']:.1f} % | {cell(r, POSITIONS[0])} | {cell(r, POSITIONS[1])} |"
        )


# ---------------------------------------------------------------- part 2: decoding side by side


def bench(loaded: LoadedModel, prompts: list[BenchPrompt], names: list[str], args: argparse.Namespace):
    decoders: dict[str, dict[str, Any]] = {}
    for name in names:
        base, params = preset(name)
        decoders[name] = params if name == base else {"decoder": base, **params}
    if "greedy" not in decoders:
        decoders = {"greedy": {}, **decoders}
    t0 = time.perf_counter()
    summary, gens = run_bench(
        loaded,
        decoders,
        prompts,
        args.max_new_tokens,
        batch_size=1,
        warmup=args.warmup,
        repeats=args.repeats,
        threads=args.threads,
    )
    summary["bench_s"] = time.perf_counter() - t0
    ref = gens["greedy"]
    cats = list(dict.fromkeys(p.category for p in prompts))
    g_cat = summary["decoders"]["greedy"]["per_category"]
    cost = calibrate_on_prompt(loaded.model, prompts[0].ids, max_rows=64, reps=5)
    summary["step_cost"] = cost.as_dict()["table"]
    for name, row in summary["decoders"].items():
        row["modeled_vs_greedy"] = modeled_speedup(gens[name], ref, cost)
        row["per_category_modeled_vs_greedy"] = {
            c: modeled_speedup(
                [g for g, p in zip(gens[name], prompts) if p.category == c],
                [g for g, p in zip(ref, prompts) if p.category == c],
                cost,
            )
            for c in cats
        }
        row["per_category_identical"] = {
            c: all(gens[name][i].tokens == ref[i].tokens for i, p in enumerate(prompts) if p.category == c)
            for c in cats
        }
        row["per_category_vs_greedy"] = {
            c: row["per_category"][c]["tokens_per_s"] / g_cat[c]["tokens_per_s"] for c in cats
        }
    return summary, gens, cats


def print_bench(summary: dict[str, Any], cats: list[str]) -> None:
    ds = summary["decoders"]
    print(
        f"\n## decoding ({summary['n_prompts']} prompts, {summary['max_new_tokens']} new tokens, batch 1, "
        f"threads {summary['threads']}, repeats {summary['repeats']}, bench {summary['bench_s']:.0f}s)"
    )
    print("| decoder | tokens/forward | tok/s | vs greedy | worst category vs greedy | identical |")
    print("|---|---|---|---|---|---|")
    for name, r in ds.items():
        worst = min(r["per_category_vs_greedy"].items(), key=lambda kv: kv[1])
        print(
            f"| {name} | {r['tokens_per_forward']['mean']:.3f} | {r['tokens_per_s']:.2f} | "
            f"{r['speedup_vs_greedy']:.3f}x | {worst[1]:.3f}x ({worst[0]}) | "
            f"{ {True: 'yes', False: 'NO', None: 'lossy'}[r['identical_to_greedy']] } |"
        )
    print("\ntokens per forward by category (identical to greedy: * = no)")
    print("| decoder | " + " | ".join(cats) + " |")
    print("|---|" + "---|" * len(cats))
    for name, r in ds.items():
        cells = [
            f"{r['per_category'][c]['tokens_per_forward']['mean']:.2f}{'' if r['per_category_identical'][c] else '*'}"
            for c in cats
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\ntok/s vs greedy by category")
    print("| decoder | " + " | ".join(cats) + " |")
    print("|---|" + "---|" * len(cats))
    for name, r in ds.items():
        print(f"| {name} | " + " | ".join(f"{r['per_category_vs_greedy'][c]:.2f}" for c in cats) + " |")
    table = ", ".join(f"{k}: {v:.2f}" for k, v in summary["step_cost"].items())
    print(f"\nmodeled speed vs greedy (greedy's steps / the decoder's steps priced by rows: {table})")
    print("| decoder | all | " + " | ".join(cats) + " |")
    print("|---|---|" + "---|" * len(cats))
    for name, r in ds.items():
        print(
            f"| {name} | {r['modeled_vs_greedy']:.3f} | "
            + " | ".join(f"{r['per_category_modeled_vs_greedy'][c]:.3f}" for c in cats)
            + " |"
        )
    for name, r in ds.items():
        extra = {k: r["decoder"][k] for k in ("hit_rates", "guard") if k in r["decoder"]}
        if extra:
            print(f"{name}: {json.dumps(extra)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", type=Path, default=REPO / "results/models/base/smollm2-135m")
    ap.add_argument("--prompts", type=Path, default=REPO / "results/prompts/specbench.jsonl")
    ap.add_argument(
        "--specbench-n",
        type=int,
        help="build the Spec-Bench-style set with N prompts per category "
        "(seeded as the workflow's; the first 4 are the embedded set's) instead of reading --prompts",
    )
    ap.add_argument("--categories", help="comma-separated categories to keep (default: all)")
    ap.add_argument("--n-per-category", type=int, default=2)
    ap.add_argument("--offset", type=int, default=0, help="first prompt of each category to use")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--part", choices=["hits", "bench", "all"], default="all")
    ap.add_argument(
        "--decoders", default="greedy,prompt-lookup,vocab_mean-bc30,prompt_mean-bc30,vocab_mean-bc30-adaptive"
    )
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "results/benchmarks/p3_probing.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)

    loaded, model_note = load(args.model_dir)
    if args.specbench_n:
        from mtp_core.data import prepare_prompt_set

        args.prompts = Path(tempfile.mkdtemp()) / f"specbench{args.specbench_n}.jsonl"
        prepare_prompt_set(
            "specbench",
            {"source": "specbench", "dataset": "math", "n": args.specbench_n},  # its math: results/data/math
            args.prompts,
            args.prompts.with_suffix(".report.json"),
            seed=0,
            on_bad_row="error",
            math_test=REPO / "results/data/math/test.jsonl",
        )
    categories = set(args.categories.split(",")) if args.categories else None
    prompts, prompt_note = read_prompts(loaded, args.prompts, args.n_per_category, args.offset, categories)
    print(
        f"model: {model_note}; {len(prompts)} prompts from {prompt_note} "
        f"({', '.join(sorted({p.category for p in prompts}))}); {args.max_new_tokens} new tokens; "
        f"threads {torch.get_num_threads()}"
    )
    report: dict[str, Any] = {"model": model_note, "prompts": prompt_note, "n_prompts": len(prompts)}
    conts = None
    if args.part in ("bench", "all"):
        summary, gens, cats = bench(loaded, prompts, args.decoders.split(","), args)
        print_bench(summary, cats)
        report["bench"] = summary
        conts = [g.tokens for g in gens["greedy"]]
    if args.part in ("hits", "all"):
        t0 = time.perf_counter()
        if conts is None:
            greedy = build_decoder("greedy", loaded.model, loaded.tokenizer)
            conts = [
                g.tokens
                for g in greedy.generate_all([p.ids for p in prompts], args.max_new_tokens, loaded.stop_criteria())
            ]
        h = hit_rates(loaded, prompts, conts)
        h["seconds"] = time.perf_counter() - t0
        print_hits(h)
        report["hits"] = h
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = args.out
    if out.exists():  # several partial runs accumulate in one file, keyed by part and decoders
        old = json.loads(out.read_text())
        runs = old.get("runs", []) if isinstance(old, dict) else []
    else:
        runs = []
    runs.append({"args": {k: str(v) for k, v in vars(args).items()}, **report})
    out.write_text(json.dumps({"runs": runs}, indent=1, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
