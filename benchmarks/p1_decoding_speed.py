"""Paper 1 decoding speed (issue item 5): Static-k and ConfAdapt against reference greedy, side by side.

Target: tok/s(decoder) >= 0.9 x eff_k x tok/s(greedy) x t(1-token forward) / t(decoder's per-step forward),
all measured in this one process (same weights, prompts, threads; warm-up; interleaved order; medians, via
`mtp_core.bench.protocol.run_bench`). So the decoder may lose at most 10% to anything but its forward passes.

* eff_k = tokens / forwards over all prompts (the prefill forward included; it emits up to k tokens).
* t(1-token forward): the greedy step, batch B, `logits_to_keep=1`, on a cache of typical length.
* Decode-only variant: tok/s and eff_k after the prefill forward (the official code's steady-state timing also
  excludes the prefill), since a long prompt's prefill weighs far more in a 3-forward Static-16 run than in a
  48-forward greedy run. In-run variant: the same, with t(1 tok) and t(step) the mean decode forward times
  measured inside the bench itself (forward hooks), which follows the load of a shared machine; `overhead` is
  the share of each decoder's wall time spent outside model forwards.
* t(decoder step): the mean, over the decoder's decode forwards in the bench (batch widths reconstructed from
  `extra["chunk_tokens"]` / `extra["refed"]`: re-fed tokens incl. holes + k-1 masks, padded to 4 rows where
  the decoder pads), of the median time of one forward of that width with `logits_to_keep=k`, at full batch B on
  the same cache length as the 1-token forward. Rows pruned mid-batch and the growing cache are not modelled.

The model gets the `<MTP>` token (`add_mask_token`) but no training: an untrained model's ConfAdapt accepts
about one token per step, so Static-k (k accepted per step regardless) is the informative speed measurement.

    .venv/bin/python benchmarks/p1_decoding_speed.py [--model-dir DIR] [--prompts FILE] [--n-prompts 8]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mtp_core.bench.protocol import BenchPrompt, encode_prompts, make_batches, run_bench  # noqa: E402
from mtp_core.decoding.base import GenerationResult, registry_name  # noqa: E402
from mtp_core.decoding.cache import crop_cache  # noqa: E402
from mtp_core.models.load import LoadedModel, load_model, prepare_base_model  # noqa: E402
from mtp_core.papers.p1.decoders import ConfAdaptDecoder, StaticKDecoder  # noqa: E402
from mtp_core.papers.p1.mask_token import add_mask_token  # noqa: E402

log = logging.getLogger("p1_speed")

FALLBACK_PROMPTS = [
    "Explain why the sky is blue in two sentences.",
    "Write a short poem about a cat who likes rain.",
    "List three tips for learning a new language.",
    "What is 17 times 23? Show your steps.",
    "Describe a sunset over the sea.",
    "Give me a recipe for a simple tomato soup.",
    "Summarise the plot of Romeo and Juliet.",
    "How do I reverse a list in Python?",
]


class ForwardClock:
    """Times every model forward inside each decoder's `generate` (forward hooks + a per-class tag).

    Gives, per decoder and robust to the machine's load drifting during the run: the share of its wall time
    spent outside model forwards (decoder overhead), and its mean decode-step forward time in the run itself.
    """

    def __init__(self, model: Any):
        self.label: str | None = None
        self.step = 0
        self.t0 = 0.0
        self.fwd: dict[str, list[tuple[int, float]]] = {}  # label -> (forward index within generate, seconds)
        self.wall: dict[str, float] = {}
        model.register_forward_pre_hook(self._pre)
        model.register_forward_hook(self._post)

    def _pre(self, *_: Any) -> None:
        self.t0 = time.perf_counter()

    def _post(self, *_: Any) -> None:
        if self.label is not None:
            self.fwd.setdefault(self.label, []).append((self.step, time.perf_counter() - self.t0))
            self.step += 1

    def tag(self, cls: type) -> None:
        """Time the decoders of class `cls` under their labels (`Decoder.label`)."""
        orig = cls.generate
        clock = self

        def generate(self: Any, *a: Any, **kw: Any) -> Any:
            label = self.label
            clock.label, clock.step = label, 0
            t0 = time.perf_counter()
            try:
                return orig(self, *a, **kw)
            finally:
                clock.wall[label] = clock.wall.get(label, 0.0) + time.perf_counter() - t0
                clock.label = None

        cls.generate = generate

    def reset(self) -> None:
        self.fwd, self.wall = {}, {}

    def summary(self, label: str) -> dict[str, float | None]:
        f = self.fwd.get(label, [])
        decode = [dt for i, dt in f if i > 0]
        return {
            "overhead_share": 1 - sum(dt for _, dt in f) / self.wall[label] if self.wall.get(label) else None,
            "inrun_step_ms": 1e3 * statistics.mean(decode) if decode else None,
        }


def load(model_dir: Path) -> tuple[LoadedModel, str]:
    """The prepared checkpoint if there is one, else a tiny random model (and a note saying so)."""
    if (model_dir / "config.json").is_file():
        spec = {
            "source": "local",
            "path": str(model_dir),
            "name": model_dir.name,
            "dtype": "float32",
            "chat_template": True,
        }
        return load_model(spec), f"{model_dir}"
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


def read_prompts(loaded: LoadedModel, path: Path, n: int) -> tuple[list[BenchPrompt], str]:
    if path.is_file():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][:n]
        rows = [{"id": r["id"], "category": "all", "prompt": r["prompt"]} for r in rows]
        where = str(path)
    else:
        rows = [{"id": str(i), "category": "all", "prompt": p} for i, p in enumerate(FALLBACK_PROMPTS[:n])]
        where = "hand-written prompts"
    return encode_prompts(loaded, rows), where


def decode_only(gens: list[GenerationResult]) -> tuple[float | None, float | None]:
    """(tok/s, tokens per forward) after the prefill forward: the official steady-state view (it also excludes
    the prefill). Times are per batch (shared by its rows), from the bench's last repeat."""
    toks = sum(len(g.tokens) - min(g.accepted[0], len(g.tokens)) for g in gens)
    fwds = sum(g.forward_passes - 1 for g in gens)
    secs = sum({(g.prefill_s, g.decode_s): g.decode_s for g in gens}.values())
    if fwds == 0 or secs <= 0:
        return None, None
    return toks / secs, toks / fwds


def step_shapes(gens: list[GenerationResult], prompts: list[BenchPrompt], batch_size: int) -> list[tuple[int, int]]:
    """(batch chunk width, logits kept) of every decode forward (prefill excluded) of every batch."""
    shapes: list[tuple[int, int]] = []
    for idx in make_batches(prompts, batch_size):
        rows = [gens[i] for i in idx]
        for step in range(1, max(g.forward_passes for g in rows)):
            live = [g for g in rows if g.forward_passes > step]
            keep = live[0].extra["chunk_tokens"][step] - live[0].extra["refed"][step] + 1
            width = max(g.extra["refed"][step] for g in live) + keep - 1
            if len(live) * width in (2, 3):  # the decoder pads 2-3 new rows to 4 (pad_small_chunks)
                width = 4
            shapes.append((width, keep))
    return shapes


@torch.inference_mode()
def forward_times(
    model: Any, prompt: list[int], batch: int, cache_len: int, shapes: set[tuple[int, int]], repeats: int, mask_id: int
) -> dict[tuple[int, int], float]:
    """Median seconds of one forward of `width` new tokens (keeping `keep` logits) on a cache of `cache_len`."""
    ctx = (prompt * (cache_len // len(prompt) + 1))[:cache_len]
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([ctx] * batch), cache=cache, logits_to_keep=1)
    times: dict[tuple[int, int], list[float]] = {s: [] for s in shapes}
    order = sorted(shapes)
    for r in range(repeats + 1):  # the first round is a warm-up
        for width, keep in order[r % len(order) :] + order[: r % len(order)]:
            ids = torch.full((batch, width), mask_id, dtype=torch.long)
            ids[:, 0] = ctx[-1]
            pos = torch.arange(cache_len, cache_len + width)[None].expand(batch, -1)
            t0 = time.perf_counter()
            model(input_ids=ids, position_ids=pos, cache=cache, logits_to_keep=keep)
            dt = time.perf_counter() - t0
            crop_cache(cache, width)
            if r:
                times[(width, keep)].append(dt)
    return {s: statistics.median(v) for s, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", type=Path, default=REPO / "results/models/base/smollm2-135m")
    ap.add_argument("--prompts", type=Path, default=REPO / "results/prompts/conversation.jsonl")
    ap.add_argument("--n-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--static-k", default="2,4,8,16")
    ap.add_argument("--k-max", default="4,8,16")
    ap.add_argument("--tau", type=float, default=0.9)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--forward-repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "results/benchmarks/p1_decoding_speed.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)

    loaded, model_note = load(args.model_dir)
    mask_id = add_mask_token(loaded.model, loaded.tokenizer, pad_to_multiple_of=64)
    prompts, prompt_note = read_prompts(loaded, args.prompts, args.n_prompts)
    decoders: dict[str, dict[str, Any]] = {"greedy": {}}
    for k in [int(x) for x in args.static_k.split(",") if x]:
        decoders[f"static-k={k}"] = {"decoder": StaticKDecoder.name, "k": k}
    for km in [int(x) for x in args.k_max.split(",") if x]:
        decoders[f"conf-adapt={km}"] = {"decoder": ConfAdaptDecoder.name, "tau": args.tau, "k_max": km}
    clock = ForwardClock(loaded.model)
    for cls in {decoders()[registry_name(label, params)] for label, params in decoders.items()}:
        clock.tag(cls)
    print(
        f"model: {model_note}; mask id {mask_id}; prompts: {len(prompts)} from {prompt_note}; "
        f"lengths {[len(p.ids) for p in prompts]}; {args.max_new_tokens} new tokens; threads {args.threads}"
    )

    report: dict[str, Any] = {"model": model_note, "prompts": prompt_note, "batches": {}}
    for bs in [int(x) for x in args.batch_sizes.split(",") if x]:
        clock.reset()
        t0 = time.perf_counter()
        summary, gens = run_bench(
            loaded,
            decoders,
            prompts,
            args.max_new_tokens,
            batch_size=bs,
            warmup=args.warmup,
            repeats=args.repeats,
            threads=args.threads,
        )
        bench_s = time.perf_counter() - t0
        b = min(bs, len(prompts))
        shapes = {name: step_shapes(gens[name], prompts, bs) for name in decoders if name != "greedy"}
        wanted = {(1, 1)} | {s for v in shapes.values() for s in v}
        cache_len = int(statistics.median(len(p.ids) for p in prompts)) + args.max_new_tokens // 2
        t0 = time.perf_counter()
        ft = forward_times(loaded.model, prompts[0].ids, b, cache_len, wanted, args.forward_repeats, mask_id)
        fwd_s = time.perf_counter() - t0
        t1 = ft[(1, 1)]
        g_tps = summary["decoders"]["greedy"]["tokens_per_s"]
        g_dec_tps, _ = decode_only(gens["greedy"])
        g_clock = clock.summary("greedy")
        rows = []
        for name in decoders:
            d = summary["decoders"][name]
            toks = sum(len(g.tokens) for g in gens[name])
            fwds = sum(g.forward_passes for g in gens[name])
            eff_k = toks / fwds
            t_step = statistics.mean(ft[s] for s in shapes[name]) if name != "greedy" and shapes[name] else t1
            bound = eff_k * g_tps * t1 / t_step
            dec_tps, dec_k = decode_only(gens[name])
            dec_bound = dec_k * g_dec_tps * t1 / t_step if dec_k and g_dec_tps else None
            c = clock.summary(name)
            inrun = None
            if c["inrun_step_ms"] and g_clock["inrun_step_ms"] and dec_k and g_dec_tps:
                inrun = dec_tps / (dec_k * g_dec_tps * g_clock["inrun_step_ms"] / c["inrun_step_ms"])
            rows.append(
                {
                    "overhead_share": c["overhead_share"],
                    "inrun_step_ms": c["inrun_step_ms"],
                    "inrun_target_ratio": inrun,
                    "decode_tokens_per_s": dec_tps,
                    "decode_eff_k": dec_k,
                    "decode_bound_tokens_per_s": dec_bound,
                    "decode_target_ratio": dec_tps / dec_bound if dec_bound else None,
                    "decoder": name,
                    "tokens_per_s": d["tokens_per_s"],
                    "vs_greedy": d["tokens_per_s"] / g_tps,
                    "eff_k": eff_k,
                    "t1_ms": 1e3 * t1,
                    "t_step_ms": 1e3 * t_step,
                    "bound_tokens_per_s": bound,
                    "target_ratio": d["tokens_per_s"] / bound,
                    "tokens_per_s_repeats": d["tokens_per_s_repeats"],
                    "step_widths": sorted({w for w, _ in shapes.get(name, [])}),
                }
            )
        report["batches"][str(bs)] = {
            "rows": rows,
            "cache_len": cache_len,
            "bench_s": bench_s,
            "forward_s": fwd_s,
            "forward_ms": {f"{w}x{k}": 1e3 * v for (w, k), v in sorted(ft.items())},
        }
        print(f"\n## batch {bs}  (bench {bench_s:.0f}s, forward timing {fwd_s:.0f}s, cache length {cache_len})")
        print(
            "| decoder | tok/s | vs greedy | eff k | t(1 tok) ms | t(step) ms | bound tok/s | ratio "
            "| decode-only: tok/s | eff k | ratio | in-run: step ms | ratio | overhead |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        fmt = lambda x, spec=".2f": "-" if x is None else format(x, spec)  # noqa: E731
        for r in rows:
            ok = "ok" if r["target_ratio"] >= 0.9 else "BELOW"
            dr = r["decode_target_ratio"]
            dok = "" if dr is None else ("ok" if dr >= 0.9 else "BELOW")
            print(
                f"| {r['decoder']} | {r['tokens_per_s']:.2f} | {r['vs_greedy']:.2f}x | {r['eff_k']:.2f} | "
                f"{r['t1_ms']:.1f} | {r['t_step_ms']:.1f} | {r['bound_tokens_per_s']:.2f} | "
                f"{r['target_ratio']:.2f} {ok} | {fmt(r['decode_tokens_per_s'])} | {fmt(r['decode_eff_k'])} | "
                f"{fmt(dr)} {dok} | {fmt(r['inrun_step_ms'], '.1f')} | {fmt(r['inrun_target_ratio'])} | "
                f"{fmt(r['overhead_share'], '.1%')} |"
            )
        print("forward ms (width x kept logits):", report["batches"][str(bs)]["forward_ms"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
