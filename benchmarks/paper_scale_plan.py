"""Memory and throughput plan of every paper-scale training: an analytic estimate, not a measurement.

    .venv/bin/python benchmarks/paper_scale_plan.py [--config config/paper.yaml] [--out docs/paper_scale_plan.md]

The trainings of papers 1, 2 and 4 come from the papers' plan code (`papers.pN.plan.run_plan`, `launcher_settings`,
the plan check's `check_training`: world = nodes x tasks_per_node, the batch split over it); runs whose rows come
out identical share one row. Models are built on the meta device: hub models from `paper_scale_terms.HUB`, paper 2's
scratch models through `mtp_core.models.load.scratch_model` (a tokenizer stand-in of the tokenizer model's length) with
`DeepSeekMTPHeads` inside `P2Model`, so that the FSDP2 units are those `train.dist.shard_units` finds in the modules
the training wraps. Every formula is in `paper_scale_terms.py`'s docstring; the output names the commit and date.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from paper_scale_terms import (
    COMPARE_GPU,
    GIB,
    GPUS,
    HEADROOM,
    PAPER_GPU,
    Cost,
    Training,
    build_model,
    fit,
    head_activation_bytes,
    layer_activation_bytes,
    layer_shapes,
    logits_bytes,
    memory_terms,
    param_counts,
    sharded,
    throughput,
    unique_params,
)

from mtp_core.config.settings import ConfigError
from mtp_core.train.config import TrainConfig
from mtp_core.train.launch.settings import check_training

REPO = Path(__file__).resolve().parents[1]
MFU = 0.40
# Paper 4 trains `epochs` over the AM-Thinking rows its job keeps, unknown before the data is prepared; the estimate
# assumes the ~1,800 steps of 512 rows the paper's one epoch was reported as (unverified).
P4_ROWS = 1800 * 512


def model_of(config: dict, name: str, cache: dict, mask_token: bool = False) -> torch.nn.Module:
    """A fresh copy of declared model `name` on the meta device (built once per config)."""
    key = (name, mask_token)
    if key not in cache:
        cache[key] = build_model(config, name, mask_token)
    return copy.deepcopy(cache[key])


# ------------------------------------------------------------------------------------------------- the papers


def dtype_of(name: str | None) -> torch.dtype | None:
    return getattr(torch, name) if name else None


def itemsize(name: str | None) -> int | None:
    return dtype_of(name).itemsize if name else None


def _common(config: dict, paper: str, plan: Any, launcher: dict, tokens: int) -> dict[str, Any]:
    """The fields every paper's training shares: world and batch from `check_training`, steps, dtypes."""
    tc, lc = check_training(f"papers.{paper}.runs.{plan.name}", plan.train, launcher)
    if lc.strategy != "fsdp":
        raise ConfigError(f"papers.{paper}.runs.{plan.name}: strategy {lc.strategy!r}; this plan models FSDP2")
    return dict(
        paper=paper,
        run=plan.name,
        model=plan.model,
        world=lc.num_tasks,
        nodes=lc.nodes,
        micro=tc.micro_batch_size,
        tokens=tokens,
        accumulation=tc.accumulation(lc.num_tasks),
        steps=tc.max_steps,
        step_tokens=tc.global_batch_size * tokens // tc.micro_batch_size,
        compute_bytes=itemsize(lc.fsdp_param_dtype),
        reduce_bytes=itemsize(lc.fsdp_reduce_dtype),
    )


def _elem(plan: Any, stored: torch.dtype) -> int:
    """Activation bytes: bf16 autocast (precision bf16, or auto on CUDA), else the stored dtype's."""
    return 2 if plan.train.get("precision", "auto") in ("bf16", "auto") else stored.itemsize


def _stored(config: dict, plan: Any) -> torch.dtype:
    """The dtype the loop holds the trained parameters in (`TrainConfig.param_dtype`, its default when unset)."""
    return dtype_of(TrainConfig.from_dict({"max_steps": 0, **plan.train}).param_dtype)


def p1_training(config: dict, run: str, cache: dict) -> Training:
    """Paper 1: the student trains whole; the teacher (objectives but gt) is its frozen copy, sharded too."""
    from mtp_core.papers.p1.masks import blocked_layout
    from mtp_core.papers.p1.plan import P1Plan
    from mtp_core.papers.p1.settings import P1Config

    p1 = P1Plan(config)
    plan = p1.run(run)
    cfg = P1Config.from_dict(plan.method)
    student = model_of(config, plan.model, cache, mask_token=True)
    stored = _stored(config, plan)
    e = _elem(plan, stored)

    def rows(k: int, prefix: bool) -> int:  # logit rows per sequence at k: prediction slots (+ the prefix slots)
        lay = blocked_layout(cfg.seq_len, cfg.num_regions, k, 0)
        pred = set(lay.pred_slots.flatten().tolist())
        return len(pred) + prefix * sum(1 for s in range(cfg.seq_len) if not lay.is_mask[s] and s not in pred)

    def per_slot(prefix: bool) -> float:  # LM-head rows per slot, averaged over the k draws
        ks = range(cfg.k_min, cfg.k_max + 1) if cfg.random_k else [cfg.k_max]
        return sum(rows(k, prefix) for k in ks) / len(ks) / cfg.seq_len

    b, n, shapes = plan.train["micro_batch_size"], param_counts(student), layer_shapes(student)
    tokens, teacher, prefix = b * cfg.seq_len, cfg.loss.needs_teacher, cfg.loss.prefix_weight > 0
    t_dtype = dtype_of(cfg.teacher_dtype) or stored
    costs = [Cost(n.body + n.lm_head * per_slot(prefix), len(shapes), 6)]
    if teacher:  # the teacher scores the prediction slots only
        costs.append(Cost(n.body + n.lm_head * per_slot(False), len(shapes), 2))
    return Training(
        **_common(config, "p1", plan, p1.launcher_settings(run), tokens),
        trained=sharded(student, stored),
        frozen=(sharded(student, t_dtype),) if teacher else (),
        activations=tokens * (sum(layer_activation_bytes(s, e) for s in shapes) + (4 + e) * shapes[0].hidden),
        logits=logits_bytes(
            student.config.vocab_size,
            e,
            [b * rows(cfg.k_max, prefix)],
            [b * rows(cfg.k_max, False)] if teacher else [],
            frozen_logp=True,
        ),
        costs=tuple(costs),
        attn_width=shapes[0].q,
        seq=cfg.seq_len,
        notes=f"M {cfg.num_regions}, k "
        + (f"uniform in [{cfg.k_min}, {cfg.k_max}]" if cfg.random_k else f"= {cfg.k_max}")
        + (", prefix loss" if prefix else "")
        + ("" if teacher else ", no teacher (gt)"),
    )


def p2_training(config: dict, run: str, cache: dict) -> Training:
    """Paper 2: `P2Model` (trunk all: the trunk and K heads; extension: the heads, the old ones frozen, the trunk
    outside it, frozen and sharded)."""
    from mtp_core.models.heads.deepseek import DeepSeekMTPHeads
    from mtp_core.papers.p2.plan import P2Plan
    from mtp_core.papers.p2.settings import P2Config
    from mtp_core.papers.p2.train import P2Model

    p2 = P2Plan(config)
    plan = p2.run(run)
    cfg = P2Config.from_dict(plan.method)
    if cfg.trunk == "last_layers":
        raise ConfigError(f"papers.p2.runs.{run}: trunk last_layers is not a paper-scale regime this plan models")
    trunk = model_of(config, plan.model, cache)
    trunk.requires_grad_(cfg.trunk == "all")
    with torch.device("meta"):
        heads = DeepSeekMTPHeads({"num_heads": cfg.num_heads, "block": trunk.config.to_dict(), "concat": cfg.concat})
    heads.to(dtype=next(trunk.parameters()).dtype)
    first = cfg.num_heads - int(plan.extend["new_heads"]) + 1 if plan.extend else 1  # as `train.build_heads`
    heads.heads[: first - 1].requires_grad_(False)
    model = P2Model(trunk, heads, cfg, first)
    stored = _stored(config, plan)
    e = _elem(plan, stored)
    s, b, k_all = cfg.seq_len, plan.train["micro_batch_size"], cfg.num_heads
    chunk = cfg.loss.chunk_rows or b * s

    def cap(r: int) -> int:
        return min(r, chunk)

    shapes, n = layer_shapes(trunk), param_counts(trunk)
    block = replace(shapes[0], experts=0, top_k=0, expert_mlp=0, mlp=trunk.config.intermediate_size)
    head_params = sum(p.numel() for p in unique_params(heads)) / k_all
    head_rows = [b * (s - 1 - k) for k in range(first, k_all + 1)]
    per_token = (b * s * (first == 1 and cfg.trunk == "all") + sum(head_rows)) / (b * s)
    vocab, loss = trunk.config.vocab_size, cfg.loss
    top = min(loss.topn, vocab)
    teachers = [1 if loss.teacher != "ensemble_split" else k for k in range(first, k_all + 1)]
    taught = sum(cap(r) * t for r, t in zip(head_rows, teachers))  # (row, teacher) pairs of the trained heads
    kl = 8 * (vocab if loss.index == "union" else top) * taught if loss.beta > 0 else 0
    kl += 8 * top * (cap(b * s) if loss.teacher == "main" else taught)  # the int64 Top-N index
    kl += vocab * sum(map(cap, head_rows)) if loss.index == "union" else 0  # the union's boolean mask
    main_rows = [cap(b * s)]
    logits = logits_bytes(
        vocab,
        e,
        list(map(cap, head_rows)) + (main_rows if cfg.trunk == "all" else []),
        [] if cfg.trunk == "all" else main_rows,
    )
    heads_act = (k_all - first + 1) * head_activation_bytes(block, e)
    if cfg.trunk == "all":
        act = sum(layer_activation_bytes(x, e) for x in shapes) + (4 + e) * block.hidden + heads_act
        costs = [Cost(n.body + n.lm_head * per_token + k_all * head_params, len(shapes) + k_all, 6)]
    else:
        act = heads_act
        costs = [
            Cost(n.body + n.lm_head + (first - 1) * head_params, len(shapes) + first - 1, 2),
            Cost((k_all - first + 1) * head_params, k_all - first + 1, 6),
            Cost(n.lm_head * per_token, 0, 4),
        ]
    return Training(
        **_common(config, "p2", plan, p2.launcher_settings(run), b * s),
        trained=sharded(model, stored),
        frozen=() if cfg.trunk == "all" else (sharded(trunk, stored),),
        activations=b * s * act,
        logits=logits + kl,
        costs=tuple(costs),
        attn_width=shapes[0].q,
        seq=s,
        notes=f"K {k_all}"
        + (f" (heads {first}-{k_all} train)" if first > 1 else "")
        + f", trunk {cfg.trunk}, "
        + (f"CE + KL on Top-{loss.topn}" if loss.beta > 0 else "CE only")
        + (f", {loss.teacher}" if loss.teacher != "main" else "")
        + (", union" if loss.index == "union" else "")
        + (f", loss chunks of {chunk} rows" if chunk < b * s else ""),
    )


def p4_training(config: dict, run: str, cache: dict) -> Training:
    """Paper 4: the whole model trains (embeddings unless train_embeddings false) on packed rows of max_tokens."""
    from mtp_core.papers.p4.epochs import resolve_train
    from mtp_core.papers.p4.plan import P4Plan
    from mtp_core.papers.p4.settings import DMTDConfig

    p4 = P4Plan(config)
    plan = p4.run_plan(run)
    cfg = DMTDConfig.from_dict(plan.method)
    if cfg.epochs is not None:  # the steps of its epochs over the assumed rows (the job counts the real ones)
        plan = replace(plan, train=resolve_train(plan.train, cfg.epochs, cfg.warmup_ratio, rows=P4_ROWS))
    model = model_of(config, plan.model, cache)
    if not cfg.train_embeddings:
        model.get_input_embeddings().requires_grad_(False)
        model.get_output_embeddings().requires_grad_(False)
    stored = _stored(config, plan)
    e = _elem(plan, stored)
    tokens = plan.train["micro_batch_size"] * cfg.max_tokens  # every row at max_tokens, one sequence each
    shapes, n = layer_shapes(model), param_counts(model)
    full = [layer_activation_bytes(s, e) for s in shapes]
    layers = len(shapes) * e * shapes[0].hidden + max(full) if cfg.gradient_checkpointing else sum(full)
    costs = [Cost(n.body, len(shapes), 6), Cost(n.lm_head, 0, 6 if cfg.train_embeddings else 4)]
    if cfg.gradient_checkpointing:
        costs.append(Cost(n.body, len(shapes), 2))
    return Training(
        **_common(config, "p4", plan, p4.launcher_settings(run), tokens),
        trained=sharded(model, stored),
        frozen=(),
        # + the recorded h_base (e h per token) and the final norm
        activations=tokens * (layers + e * shapes[0].hidden + (4 + e) * shapes[0].hidden),
        logits=logits_bytes(model.config.vocab_size, e, [tokens]),
        costs=tuple(costs),
        attn_width=shapes[0].q,
        seq=cfg.max_tokens,
        notes=("gradient checkpointing" if cfg.gradient_checkpointing else "no checkpointing")
        + ", tokens at max_tokens (an upper bound)",
    )


BUILDERS = {"p1": p1_training, "p2": p2_training, "p4": p4_training}


def trainings(config: dict) -> list[Training]:
    """Every training run of the enabled papers 1, 2 and 4, in config order."""
    from mtp_core.config.plan import paper_section

    cache: dict = {}
    out = []
    for paper, build in BUILDERS.items():
        section = paper_section(config, paper)
        if section.get("enabled"):
            out += [build(config, run, cache) for run in section.get("runs") or {}]
    return out


# ---------------------------------------------------------------------------------------------------- report


def _g(x: float) -> str:
    return f"{x / GIB:.2f}"


def rows(ts: list[Training], mfu: float) -> list[tuple[list[str], list[str], list[str], float]]:
    """(runs, memory cells, throughput cells, GPU-hours of all its runs) per distinct row, in first-run order."""
    groups: dict[tuple, list[Training]] = {}
    for t in ts:
        gpu = GPUS[PAPER_GPU[t.paper]]
        mem, tp = memory_terms(t), throughput(t, gpu, mfu)
        cells = (
            [t.paper, t.model, t.notes, f"{t.world} ({t.nodes} x {t.world // t.nodes})",
             f"{t.micro} x {t.tokens // t.micro} (x{t.accumulation})"]
            + [_g(mem[k]) for k in ("params", "grads", "adamw", "frozen", "gathered", "activations", "logits", "peak")]
            + [f"{gpu.name}: {fit(mem['peak'], gpu)}", fit(mem["peak"], GPUS[COMPARE_GPU])],
            [f"{tp['flops'] / 1e9:.1f}", f"{t.step_tokens:,}", f"{tp['tokens_s']:,.0f}", f"{tp['step_s']:.2f}",
             f"{t.steps:,}", f"{tp['wall_h']:,.1f}", f"{tp['gpu_h']:,.0f}"],
        )  # fmt: skip
        groups.setdefault((tuple(cells[0]), tuple(cells[1])), []).append(t)
    out = []
    for (mem, tp), members in groups.items():
        gpu_h = sum(throughput(t, GPUS[PAPER_GPU[t.paper]], mfu)["gpu_h"] for t in members)
        out.append(([t.run for t in members], list(mem), list(tp), gpu_h))
    return out


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in body]


def model_rows(config: dict, names: list[str]) -> list[list[str]]:
    out = []
    for name in names:
        spec, model = config["models"][name], build_model(config, name)
        c, n = model.config, param_counts(model)
        experts = f", {c.n_routed_experts} experts of {c.moe_intermediate_size} (top {c.num_experts_per_tok})" if (
            hasattr(c, "n_routed_experts")) else ""  # fmt: skip
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        out.append([
            name, spec.get("id", f"scratch ({spec.get('arch')})"), c.model_type, str(c.num_hidden_layers),
            str(c.hidden_size), f"{c.num_attention_heads} / {c.num_key_value_heads}", str(c.head_dim),
            f"{c.intermediate_size}{experts}", f"{c.vocab_size:,}", "yes" if tied else "no",
            f"{n.total / 1e9:.3f}", f"{n.active / 1e9:.3f}",
        ])  # fmt: skip
    return out


def render(config: dict, ts: list[Training], mfu: float, command: str, commit: str, date: str) -> str:
    groups = rows(ts, mfu)
    used = {p: GPUS[g] for p, g in PAPER_GPU.items() if any(t.paper == p for t in ts)}
    lines = [
        "# Memory and throughput plan of the paper-scale trainings",
        "",
        "**Analytic estimate, not a measurement.** Written by `benchmarks/paper_scale_plan.py` (its docstring has every",
        "formula); regenerate it, never edit it by hand.",
        "",
        f"- command: `{command}`",
        f"- commit: `{commit}`; date: {date}",
        f"- assumed MFU: {mfu:.0%} of the card's dense bf16 peak; a card fits when the peak is at most "
        f"{HEADROOM:.0%} of its memory (CUDA context, NCCL buffers, fragmentation), `tight` up to 100%, `over` above",
        "- cards: "
        + "; ".join(f"paper {p[1:]} trained on {g.name} ({g.bf16_tflops:g} TFLOP/s bf16)" for p, g in used.items())
        + f"; every peak is also compared with {GPUS[COMPARE_GPU].name}",
        "- FSDP2 full sharding over nodes x tasks_per_node processes, one per GPU; memory in GiB per GPU at the",
        "  step's peak (a micro-batch's forward end / backward start), for one micro-batch of `rows x tokens` (`x`",
        "  the accumulation micro-batches per step); paper 1 at k = k_max, paper 4 with every row at max_tokens",
        "- the stored dtype of parameters, gradients and AdamW states is each run's `train.param_dtype` (float32",
        "  master weights unless set; paper 1: bfloat16, its official bf16-true); paper 2's logits are those of",
        "  `method.loss.chunk_rows` positions per head at once (its chunked loss)",
        f"- paper 4 trains one epoch of the AM-Thinking rows its job keeps; its steps here assume {P4_ROWS:,} rows",
        "  (the ~1,800 steps of 512 rows reported for the paper's epoch, unverified)",
        "- for calibration, the papers' own figures: paper 1 trains each 100k-step run in 24-36 h on 4 GH200",
        "  (App. A.1); paper 2 ran for about 30 days on 256 H20 in all (App. B)",
        "",
        "## Models (parameter counts on the meta device)",
        "",
        *_table(
            [
                "model",
                "hub id / source",
                "type",
                "layers",
                "hidden",
                "heads / KV",
                "head_dim",
                "MLP",
                "vocab",
                "tied",
                "params (B)",
                "active (B)",
            ],
            model_rows(config, list(dict.fromkeys(t.model for t in ts))),
        ),  # fmt: skip
        "",
        "## Memory per GPU (GiB)",
        "",
        *_table(
            [
                "paper",
                "runs",
                "model",
                "setup",
                "GPUs",
                "micro-batch",
                "params",
                "grads",
                "AdamW",
                "frozen",
                "gathered",
                "activations",
                "logits",
                "peak",
                "paper's card",
                GPUS[COMPARE_GPU].name,
            ],
            [[m[0], ", ".join(r), *m[1:]] for r, m, _, _ in groups],
        ),  # fmt: skip
        "",
        f"## Throughput at {mfu:.0%} MFU on the paper's card",
        "",
        *_table(
            [
                "paper",
                "runs",
                "GFLOP / token",
                "tokens / step",
                "tokens / s / GPU",
                "step (s)",
                "steps",
                "wall-clock per run (h)",
                "GPU-hours per run",
                "GPU-hours, these runs",
            ],
            [[m[0], ", ".join(r), *tp, f"{h:,.0f}"] for r, m, tp, h in groups],
        ),  # fmt: skip
        "",
        "GPU-hours of every run of a paper: "
        + "; ".join(
            f"paper {p[1:]} {sum(h for _, m, _, h in groups if m[0] == p):,.0f}" for p in PAPER_GPU if p in used
        )
        + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/paper.yaml")
    ap.add_argument("--out", default="docs/paper_scale_plan.md")
    ap.add_argument("--mfu", type=float, default=MFU, help="assumed model FLOPs utilisation (default %(default)s)")
    args = ap.parse_args(argv)
    from mtp_core.validation import load_config

    config = load_config(args.config)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    command = " ".join(["python benchmarks/paper_scale_plan.py", *(argv if argv is not None else sys.argv[1:])])
    text = render(
        config, trainings(config), args.mfu, command, commit.stdout.strip() or "unknown", str(datetime.date.today())
    )
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
