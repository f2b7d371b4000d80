"""Decode costs at the papers' model shapes (issue 34): the data the leaderboard prices recorded forwards with, and
the compiled path against the papers' eager regime, measured on one device with seeded random weights (the costs
depend on shapes alone).

For each `--shapes` entry (a hand-written config of a paper model, `SHAPES`), in one process:
* `bandwidth`: a 2 GiB device copy (bytes read + written per second) and the floor of a one-row step, weight
  bytes / bandwidth;
* `speed` (the bench protocol, `run_bench`): tok/s of reference greedy (eager), `hf-greedy` (`model.generate`) and
  greedy on the compiled backend, on random prompts without stops (every row runs `--new-tokens`), with the
  compiled decoder's compile seconds and its agreement with eager greedy;
* `verify_eager`: a verification forward of R rows relative to one row (`cost.calibrate_on_prompt`, with the
  output head's own prices), the table eager decoders are priced by;
* `verify_compiled`: the same on the compiled static path at its row buckets (`cost.measure_static_costs`);
* `dmtd`: paper 4's layer costs at its E0D8 split (full step, late-only step, cycle start with refill per τ);
* `drafters`: Hydra++ with fresh heads (the published layout: 4 heads, own output heads, a prefix layer) on its
  default tree, paper 3's probing (bc 30) and paper 4's DMTD (E0D8, τ 3; eager and compiled), decoded end to end
  beside compiled greedy: tok/s, tokens per forward, and whether each lossless one emits compiled greedy's tokens
  (fresh heads draft little, so the speed here prices the drafters' overhead, not their acceptance; DMTD's speed
  does not depend on its weights). `--drafters` picks the rows. Hydra runs before DMTD: the hidden states it reads
  leave DMTD's compiled layer segments whole (`decoding.layers.logits_and_hidden`), which this order shows.

Sections after `--eager-only-after` seconds run eager only (compiling costs minutes a shape). Results are written
after every section (atomically), to `--out`/<shape>_<device>.json (a GPU by its name, a CPU by its widest vector
extension: `cpu-avx2`, `cpu-avx-512`, ...; batch sizes above 1 add `_b<n>`).

    python benchmarks/decode_costs.py --device cuda --dtype bfloat16 --shapes qwen3-4b llama-7b --out DIR
    .venv/bin/python benchmarks/decode_costs.py --shapes smollm2-135m --new-tokens 32 --rows 1 4 8   # CPU check
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mtp_core.bench.protocol import run_bench  # noqa: E402
from mtp_core.decoding.cost import (  # noqa: E402
    calibrate_on_prompt,
    measure_static_costs,
    timed_call,
)
from mtp_core.decoding.static import ROW_BUCKETS  # noqa: E402
from mtp_core.io import atomic_write_json  # noqa: E402
from mtp_core.models.cpu_linear import CPU_LINEARS, DEFAULT_CPU_LINEAR  # noqa: E402
from mtp_core.models.heads.hydra import HydraHeads  # noqa: E402
from mtp_core.models.load import load_model, tiny_tokenizer  # noqa: E402
from mtp_core.papers.p4.settings import DMTDSpec  # noqa: E402
from mtp_core.papers.p4.speed import measure_layer_costs, random_prompts  # noqa: E402
from mtp_core.results.page import cpu_flags, cpu_isa, cpu_name, git_commit  # noqa: E402
from mtp_core.results.write import versions  # noqa: E402

# the papers' models (papers 2 and 5: Vicuna-7B; paper 4: Qwen3-4B; the embedded scale: SmolLM2-135M)
SHAPES = {
    "qwen3-4b": {
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 2560,
        "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True, "rope_theta": 1000000.0,
        "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "hidden_act": "silu",
    },
    "llama-7b": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
        "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "vocab_size": 32000, "tie_word_embeddings": False, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
    },
    "smollm2-135m": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "vocab_size": 49152, "tie_word_embeddings": True, "rope_theta": 100000.0, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "hidden_act": "silu",
    },
}  # fmt: skip
SPEC = {"source": "tiny", "chat_template": False}
SECTIONS = ["speed", "verify_eager", "dmtd", "verify_compiled", "drafters"]
# rows of the drafters section beside compiled greedy, which always runs (their reference)
DRAFTERS = ["dmtd-tau3", "dmtd-tau3-compiled", "hydra-compiled", "probing-compiled"]


def arch_dir(shape: str, where: Path) -> Path:
    """A folder with the shape's `config.json` and a byte-level tokenizer (prompts are random ids of the whole
    vocabulary, so the tokenizer's size does not matter): what `load_model(random_weights=)` reads."""
    d = where / shape
    d.mkdir(parents=True, exist_ok=True)
    tok = tiny_tokenizer()
    (d / "config.json").write_text(json.dumps({**SHAPES[shape], "eos_token_id": tok.eos_token_id}))
    tok.save_pretrained(d)
    return d


def bandwidth(device: torch.device) -> float:
    """Bytes read + written per second by a 2 GiB device copy (median of 5)."""
    src = torch.empty(2**30, dtype=torch.int16, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = sorted(timed_call(lambda: dst.copy_(src), device) for _ in range(5))
    return 2 * src.numel() * src.element_size() / times[2]


def measure_shape(shape: str, args: argparse.Namespace, device: torch.device, where: dict, start: float) -> Path:
    """Every section for one shape, into `--out`/<shape>_<device>.json (module docstring)."""
    suffix = f"_b{args.batch_size}" if args.batch_size > 1 else ""
    out = Path(args.out) / f"{shape}_{where['slug']}{suffix}.json"
    with tempfile.TemporaryDirectory() as tmp:
        spec = {**SPEC, "name": shape, "cpu_linear": args.cpu_linear}
        loaded = load_model(spec, checkpoint=arch_dir(shape, Path(tmp)), device=args.device, dtype=args.dtype,
                            random_weights=0)  # fmt: skip
    loaded = dataclasses.replace(loaded, eos_ids=(), stop_strings=())  # every row decodes --new-tokens
    model = loaded.model
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    record = {
        "shape": shape,
        "config": SHAPES[shape],
        "device": where["name"],
        "dtype": args.dtype,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "cpu_linear": args.cpu_linear if device.type == "cpu" else None,
        "versions": {**versions(), "python": platform.python_version()},
        "date": datetime.date.today().isoformat(),
        "commit": args.commit,
        "command": " ".join(sys.argv),
        "bandwidth": {"bytes_per_s": where["bandwidth"], "weight_bytes": weight_bytes,
                      "floor_s_per_step": weight_bytes / where["bandwidth"]},
    }  # fmt: skip
    atomic_write_json(out, record)
    prompts = random_prompts(loaded.tokenizer, model.config.vocab_size, args.prompts, args.prompt_tokens, 0)

    def in_time() -> bool:
        return time.perf_counter() - start < args.eager_only_after

    def speed() -> dict:
        decoders: dict[str, dict] = {"greedy": {}, "hf-greedy": {}}
        if in_time():
            decoders["greedy-compiled"] = {"decoder": "greedy", "backend": "compiled"}
        summary, _ = run_bench(
            loaded, decoders, prompts, args.new_tokens, batch_size=args.batch_size, warmup=1, repeats=args.repeats
        )
        keep = ("tokens_per_s", "tokens_per_s_repeats", "identical_fraction", "compile_s")
        return {
            "prompts": args.prompts,
            "prompt_tokens": args.prompt_tokens,
            "new_tokens": args.new_tokens,
            "repeats": args.repeats,
            "batch_size": args.batch_size,
            "decoders": {k: {f: v[f] for f in keep} for k, v in summary["decoders"].items()},
        }

    def verify_eager() -> dict:
        cost = calibrate_on_prompt(model, prompts[0].ids, rows=args.rows, reps=args.reps, pad_small_chunks=False,
                                   head=True)  # fmt: skip
        table = cost.as_dict()
        return {"table": table["table"], "head": table["head"], "one_row_s": cost.one}

    def verify_compiled() -> dict:
        st = measure_static_costs(model, prompts[0].ids, args.compiled_rows, args.reps)
        one = st["seconds"][1]
        return {"table": {r: t / one for r, t in st["seconds"].items()}, "one_row_s": one, "compile_s": st["compile_s"]}

    def dmtd() -> dict:
        layer = measure_layer_costs(model, DMTDSpec(0, 8), [prompts[0].ids], args.taus, reps=args.reps)
        return {k: layer[k] for k in ("split", "cache_tokens", "seconds", "modeled_speedup")}

    def drafters() -> dict:
        torch.manual_seed(0)
        heads = HydraHeads.for_trunk(model, num_heads=4, lm_head="own").to(device).eval()
        compiled = {"backend": "compiled"}
        dmtd = {"decoder": "dmtd", "tau": 3, "encoding_layers": 0, "decoding_layers": 8, "combine": "add"}
        decoders = {"greedy-compiled": {"decoder": "greedy", **compiled},
                    "hydra-compiled": {"decoder": "hydra", "heads": heads, **compiled},
                    "probing-compiled": {"decoder": "probing", "bc": 30, **compiled},
                    "dmtd-tau3": dmtd, "dmtd-tau3-compiled": {**dmtd, **compiled}}  # fmt: skip
        decoders = {k: v for k, v in decoders.items() if k == "greedy-compiled" or k in args.drafters}
        summary, gens = run_bench(loaded, decoders, prompts, args.new_tokens, batch_size=args.batch_size, warmup=1,
                                  repeats=args.repeats)  # fmt: skip
        want = [g.tokens for g in gens["greedy-compiled"]]
        keep = ("tokens_per_s", "tokens_per_forward", "forward_passes", "compile_s")
        return {
            name: {**{f: summary["decoders"][name][f] for f in keep},
                   "identical_to_compiled_greedy": [g.tokens for g in gens[name]] == want
                   if summary["decoders"][name]["decoder"]["lossless"] else None}
            for name in decoders
        }  # fmt: skip

    sections = {"speed": speed, "verify_eager": verify_eager, "dmtd": dmtd, "verify_compiled": verify_compiled,
                "drafters": drafters}  # fmt: skip
    for key, fn in sections.items():
        if key not in args.sections or key in ("verify_compiled", "drafters") and not in_time():
            continue
        try:
            record[key] = fn()
        except Exception as e:  # one shot on a lent device: keep what the other sections measure
            record[key] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        atomic_write_json(out, record)
        print(key, json.dumps(record[key], default=str)[:2000], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["qwen3-4b"], choices=sorted(SHAPES))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1, help="of the speed section")
    ap.add_argument("--reps", type=int, default=5, help="timings per cost-table entry")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128])
    ap.add_argument("--compiled-rows", type=int, nargs="+", default=list(ROW_BUCKETS))
    ap.add_argument("--taus", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-linear", default=DEFAULT_CPU_LINEAR, choices=CPU_LINEARS, help="the model key (CPU only)")
    ap.add_argument("--sections", nargs="+", default=SECTIONS, choices=SECTIONS)
    ap.add_argument("--drafters", nargs="+", default=DRAFTERS, choices=DRAFTERS, help="rows beside compiled greedy")
    ap.add_argument("--eager-only-after", type=float, default=float("inf"), help="seconds")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results"))
    ap.add_argument("--commit", default=None, help="the code's commit (default: this checkout's HEAD)")
    args = ap.parse_args()
    args.commit = args.commit or git_commit(REPO)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    start = time.perf_counter()
    cuda = device.type == "cuda"
    if cuda:
        name = torch.cuda.get_device_name(device)
        slug = name.replace("NVIDIA ", "")
    else:  # the kernels a CPU runs differ by its vector extension: a file per extension
        name, isa = cpu_name(), cpu_isa(cpu_flags())
        slug = f"cpu-{isa}" if isa else "cpu"
    where = {"name": name, "slug": slug.lower().replace(" ", "-"), "bandwidth": bandwidth(device)}
    for shape in args.shapes:
        out = measure_shape(shape, args, device, where, start)
        if cuda:
            torch.cuda.empty_cache()
        print(f"{shape} done at {time.perf_counter() - start:.0f} s -> {out}", flush=True)


if __name__ == "__main__":
    main()
