"""`mtp-repro bench` (decoders side by side on the same weights, prompts and threads: the bench protocol) and
`mtp-repro generate` (one generation, step by step, with its per-step acceptance)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..config.settings import model_spec
from ..io import InputError
from ..models.plan import model_dir
from ..validation import load_config


def _parse_value(text: str) -> Any:
    """Decoder parameter values: JSON where it parses (numbers, booleans, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def decoder_params(names: list[str], config: dict, overrides: list[str]) -> dict[str, dict[str, Any]]:
    """Parameters per decoder: the config's `decoding.decoders` entry, then `--param NAME.KEY=VALUE`; each decoder
    and its parameters are checked (`decoding.decoder_class`) before any model is loaded."""
    from ..decoding import decoder_class

    out = {n: dict(config["decoding"]["decoders"].get(n) or {}) for n in names}
    for item in overrides:
        key, sep, value = item.partition("=")
        name, dot, param = key.partition(".")
        if not sep or not dot or name not in out:
            raise InputError(f"--param {item!r}: expected DECODER.KEY=VALUE with DECODER one of {', '.join(names)}")
        out[name][param] = _parse_value(value)
    for name, params in out.items():
        decoder_class(name, params)
    return out


def load_prompt_rows(spec: str, results: Path, n: int | None) -> list[dict]:
    """A prompt set by name (`results/prompts/<name>.jsonl`, built by Snakemake) or any JSONL file with
    `prompt`, `question` or `turns` per row."""
    from ..data.prompts import jsonl_prompts
    from ..io import ReadReport

    path = Path(spec)
    if not path.is_file():
        path = results / "prompts" / f"{spec}.jsonl"
        if not path.is_file():
            raise InputError(f"no prompt file {spec!r} and no prompt set {path} (build it: snakemake {path})")
    rows = jsonl_prompts(path, "error", ReadReport(str(path)))
    return rows[:n] if n else rows


def load_named_model(config: dict, name: str, results: Path, checkpoint: str | None):
    from ..models.load import load_model

    spec = model_spec(config, name)
    if checkpoint is not None and not (Path(checkpoint) / "config.json").is_file():
        raise InputError(f"--checkpoint {checkpoint}: not an HF checkpoint directory (no config.json)")
    base_dir = None
    prepared = model_dir(config, name, str(results))
    if checkpoint is None and prepared is not None:
        base_dir = Path(prepared)
        if not (base_dir / "config.json").is_file():
            raise InputError(f"model {name!r} is not prepared yet: run `snakemake -c1 {base_dir}`")
    return load_model(spec, base_dir=base_dir, checkpoint=checkpoint)


def cmd_bench(args: argparse.Namespace) -> None:
    from ..bench.protocol import encode_prompts, markdown_table, run_bench
    from ..io import atomic_write_json

    config = load_config(args.config)
    names = [d for d in args.decoders.split(",") if d]
    params = decoder_params(names, config, args.param)
    rows = load_prompt_rows(args.prompts, Path(args.results), args.n)
    loaded = load_named_model(config, args.model, Path(args.results), args.checkpoint)
    bench = config["bench"]
    summary, gens = run_bench(
        loaded,
        params,
        encode_prompts(loaded, rows, chat=args.chat),
        args.max_new_tokens,
        batch_size=args.batch_size,
        warmup=bench["warmup"] if args.warmup is None else args.warmup,
        repeats=bench["repeats"] if args.repeats is None else args.repeats,
        threads=bench["threads"] if args.threads is None else args.threads,
    )
    summary["prompts"] = args.prompts
    print(markdown_table(summary))
    if args.json:
        atomic_write_json(args.json, summary)


def cmd_generate(args: argparse.Namespace) -> None:
    from ..decoding import build_decoder

    config = load_config(args.config)
    params = decoder_params([args.decoder], config, args.param)[args.decoder]
    loaded = load_named_model(config, args.model, Path(args.results), args.checkpoint)
    decoder = build_decoder(args.decoder, loaded.model, loaded.tokenizer, **params)
    ids = loaded.encode(args.prompt, chat=args.chat)
    g = decoder.generate([ids], args.max_new_tokens, loaded.stop_criteria())[0]
    tok = loaded.tokenizer
    pos = 0
    for step, n in enumerate(g.accepted):
        chunk = g.tokens[pos : pos + n]
        pos += n
        print(f"step {step:4d}  +{n}  {tok.decode(chunk, skip_special_tokens=False)!r}")
    print()
    print(tok.decode(g.tokens, skip_special_tokens=True))
    print()
    print(
        f"{len(g.tokens)} tokens in {g.forward_passes} forwards ({g.tokens_per_forward:.3f} tokens/forward), "
        f"prefill {g.prefill_s * 1000:.0f} ms, decode {g.decode_s:.2f} s, stop: {g.stop_reason}"
    )


def add_commands(sub: Any) -> None:
    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", default="config.yaml", help="config file (default: config.yaml)")
        sp.add_argument("--model", required=True, help="a model declared in the config")
        sp.add_argument("--checkpoint", help="load weights from this HF directory instead (a trained student)")
        sp.add_argument("--results", default="results", help="results directory (default: results)")
        sp.add_argument("--max-new-tokens", type=int, default=64)
        sp.add_argument("--param", action="append", default=[], metavar="DECODER.KEY=VALUE")
        chat = sp.add_mutually_exclusive_group()
        chat.add_argument("--chat", dest="chat", action="store_true", default=None, help="force the chat template")
        chat.add_argument("--no-chat", dest="chat", action="store_false", help="raw prompts, no chat template")

    b = sub.add_parser("bench", help="run decoders side by side on the same weights and prompts")
    common(b)
    b.add_argument("--decoders", default="greedy,hf-greedy", help="comma-separated registry names")
    b.add_argument("--prompts", required=True, help="prompt-set name or a JSONL file (prompt | question | turns)")
    b.add_argument("--n", type=int, help="first N prompts")
    b.add_argument("--batch-size", type=int, default=1)
    b.add_argument("--warmup", type=int, help="default: config bench.warmup")
    b.add_argument("--repeats", type=int, help="default: config bench.repeats")
    b.add_argument("--threads", type=int, help="default: config bench.threads")
    b.add_argument("--json", help="write the summary JSON here")
    b.set_defaults(func=cmd_bench)

    g = sub.add_parser("generate", help="print one generation with its per-step acceptance")
    common(g)
    g.add_argument("--decoder", default="greedy")
    g.add_argument("--prompt", required=True)
    g.set_defaults(func=cmd_generate)
