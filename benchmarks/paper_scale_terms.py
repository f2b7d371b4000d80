"""Terms of the paper-scale memory and throughput plan (`paper_scale_plan.py`): an analytic estimate, not a
measurement. Models live on the meta device (`meta_model`; hub models from the architecture facts in `HUB`, their
`config.json` on the hub). Per GPU, world = nodes x tasks_per_node, FSDP2 full sharding:

* stored: parameters (the train key `param_dtype` when set, else each parameter's dtype: the model's `dtype`; the
  GLM-4-MoE router stays float32), gradients (FSDP2 keeps sharded gradients in the parameter dtype) and AdamW's two
  states (torch creates them in the parameter dtype), each / world; frozen modules (paper 1's teacher, a looped
  extension's trunk) sharded in their dtype / world;
* gathered in flight (`fsdp_param_dtype`, else the stored dtype): during backward, the root's parameters (those
  outside every unit: embeddings, final norm, LM head) and their unsharded gradients, two units (the current one and
  the prefetched one) and one unit's gradients, plus its copy in `fsdp_reduce_dtype` when that differs; for a
  frozen module, its root and two units during its forward; the larger of the two counts;
* activations of one micro-batch, bytes per token per decoder layer with SDPA / flash attention (no T x T scores),
  e = 2 bytes (bf16 autocast), h hidden, q = heads x head_dim, kv = KV heads x head_dim, I the MLP width:
  2 RMSNorms x (4 + e) h (HF's RMSNorm keeps a float32 copy of its input and its e-byte output) + e (2q + 2kv)
  (q, k, v, attention output) + (4 + e)(q + kv) with qk-norm (Qwen3, GLM-4-MoE) + 4 e I (SwiGLU: gate, up,
  silu(gate), product); a MoE layer: shared experts as SwiGLU, plus 4h + 4E (float32 router input and scores) and,
  per routed expert a token visits (top-k), e (2h + 4 I_e) (gathered input, SwiGLU, expert output); + (4 + e) h for
  the final norm. A paper-2 head: its block + 3 RMSNorms + the 2h concatenation. Gradient checkpointing (paper 4)
  keeps e h per token per layer (each layer's input) and one layer's activations during its recomputation;
* logits, V bytes per row times the larger of two moments: the forward's end, (e + 4) per trained row (the
  logits and their float32 log-softmax) + e per frozen row (+ 4 where its log-softmax is computed: paper 1's
  teacher) + 4 for one head's float32 upcast; the backward's start, 4 per trained row (the log-softmax saved for
  backward) + (8 + e) for one head's gradients (float32 of the log-softmax and of the upcast, e of the logits).
  Paper 1: rows at k = k_max (plus the prefix slots under the prefix loss); paper 2: K + 1 heads, 8 N per row of
  each trained head when beta > 0 (Top-N log-probabilities; `index: union` is full-vocabulary, N = V, plus its
  boolean mask) and 8 N for the int64 Top-N index (each teacher's under an ensemble); with
  `papers.p2.method.loss_chunk_rows` (the chunked loss) at most that many positions per head at once; paper 4:
  every token of the packed micro-batch (the upper bound: its rows at max_tokens, all supervised).

Throughput: FLOPs per token = 6 x trained active matmul parameters (+ 2 x those recomputed under checkpointing)
+ 4 x frozen parameters gradients pass through (an extension's LM head) + 2 x frozen forward parameters (teacher,
frozen trunk), where the LM head counts once per logit row per token and embeddings count nothing; attention adds
2 x the same factor x layers x q x seq (12 L q s for trained layers; q, not the hidden size: Qwen3 and GLM-4-MoE
attend in another width). Step time = tokens per step x FLOPs per token / (world x MFU x the card's dense bf16 peak).
Not counted: the optimiser step's temporaries (activations are freed by then), allocator and communication buffers
(the headroom a card keeps, `HEADROOM`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mtp_core.models.load import DTYPES, scratch_model
from mtp_core.train.dist import shard_units

GIB = 2**30
HEADROOM = 0.9  # of the card's memory: CUDA context, NCCL buffers and allocator fragmentation take the rest


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float
    bf16_tflops: float  # dense peak


GPUS = {
    "H100": GPU("H100 SXM 80 GB", 80, 989),
    "GH200": GPU("GH200 96 GB", 96, 989),
    "H20": GPU("H20 96 GB", 96, 148),
    "A100": GPU("A100 40 GB", 40, 312),
}
# the cards each paper trained on: paper 1 App. A.1 (one node of 4 x GH200), paper 2 §4.1 / App. B (256 x H20, "98
# GB"), paper 4 §3.4 (A100-40GB; its official training scripts run 8 of them)
PAPER_GPU = {"p1": "GH200", "p2": "H20", "p4": "A100"}
COMPARE_GPU = "H100"

# architecture facts of the hub models the trainings start from, as each model's config.json on the hub has them;
# tokenizer_len: entries of its tokenizer (paper 1 adds `<MTP>` past them, a new row when the matrix is full)
HUB_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings", "tokenizer_len")  # fmt: skip
HUB: dict[str, dict[str, Any]] = {
    hub_id: dict(zip(HUB_FIELDS, facts))
    for hub_id, facts in {
        "Magpie-Align/Llama-3.1-8B-Magpie-Align-SFT-v0.1": (
            "llama",
            4096,
            32,
            32,
            8,
            128,
            14336,
            128256,
            False,
            128256,
        ),
        "Qwen/Qwen3-4B-Instruct-2507": ("qwen3", 2560, 36, 32, 8, 128, 9728, 151936, True, 151669),
        "Qwen/Qwen3-4B": ("qwen3", 2560, 36, 32, 8, 128, 9728, 151936, True, 151669),
        "Qwen/Qwen3-1.7B": ("qwen3", 2048, 28, 16, 8, 128, 6144, 151936, True, 151669),
        "Qwen/Qwen3-0.6B": ("qwen3", 1024, 28, 16, 8, 128, 3072, 151936, True, 151669),
    }.items()
}


# ----------------------------------------------------------------------------------------------- models on meta


def meta_model(model_type: str, dtype: torch.dtype = torch.bfloat16, **config: Any) -> torch.nn.Module:
    """`AutoModelForCausalLM.from_config` of an architecture on the meta device (no memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config), dtype=dtype)


class _TokenizerStandIn:
    """What `scratch_model` reads of a tokenizer: its length and special ids."""

    bos_token_id = eos_token_id = pad_token_id = None

    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length


def build_model(config: dict, name: str, mask_token: bool = False) -> torch.nn.Module:
    """Declared model `name` on the meta device; `mask_token`: with paper 1's `<MTP>` row when it needs a new one."""
    spec = config["models"][name]
    dtype = DTYPES[spec.get("dtype", "float32")]
    if spec["source"] == "scratch":
        tok = hub_facts(config["models"][spec["tokenizer"]], spec["tokenizer"])["tokenizer_len"]
        with torch.device("meta"):
            return scratch_model(spec, _TokenizerStandIn(tok))
    facts = dict(hub_facts(spec, name))
    tok = facts.pop("tokenizer_len")
    if mask_token and tok >= facts["vocab_size"]:
        facts["vocab_size"] = tok + 1  # `add_mask_token` resizes to the tokenizer's new length
    return meta_model(dtype=dtype, **facts)


def hub_facts(spec: dict, name: str) -> dict[str, Any]:
    if spec["source"] != "hub" or spec["id"] not in HUB:
        raise ValueError(f"model {name!r} ({spec['source']} {spec.get('id', '')}): no architecture facts in HUB")
    return HUB[spec["id"]]


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int  # MoE: top-k of the routed experts
    body: int  # active matmul parameters but the embeddings and LM head
    lm_head: int


def unique_params(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return list({id(p): p for p in module.parameters()}.values())


def routed_fraction(module: torch.nn.Module) -> tuple[int, float]:
    """(routed-expert parameters, the share a token uses: top_k / experts)."""
    cfg = module.config
    routed = sum(p.numel() for m in module.modules() if type(m).__name__.endswith("Experts") for p in m.parameters())
    return routed, (cfg.num_experts_per_tok / cfg.n_routed_experts) if routed else 1.0


def param_counts(model: torch.nn.Module) -> ParamCounts:
    total = sum(p.numel() for p in unique_params(model))
    routed, share = routed_fraction(model)
    active = total - routed + round(routed * share)
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    return ParamCounts(total, active, active - emb.numel() - (0 if head is emb else head.numel()), head.numel())


@dataclass(frozen=True)
class LayerShape:
    """What one decoder layer's activations depend on (module docstring)."""

    hidden: int
    q: int
    kv: int
    mlp: int  # SwiGLU width (a MoE layer: its shared experts')
    qk_norm: bool
    experts: int = 0
    top_k: int = 0
    expert_mlp: int = 0


def layer_shapes(model: torch.nn.Module) -> list[LayerShape]:
    cfg = model.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    qk = hasattr(model.model.layers[0].self_attn, "q_norm")
    dense = LayerShape(
        cfg.hidden_size, cfg.num_attention_heads * d, cfg.num_key_value_heads * d, cfg.intermediate_size, qk
    )
    if not hasattr(cfg, "n_routed_experts"):
        return [dense] * cfg.num_hidden_layers
    moe = replace(
        dense,
        mlp=cfg.moe_intermediate_size * cfg.n_shared_experts,
        experts=cfg.n_routed_experts,
        top_k=cfg.num_experts_per_tok,
        expert_mlp=cfg.moe_intermediate_size,
    )
    k = cfg.first_k_dense_replace
    return [dense] * k + [moe] * (cfg.num_hidden_layers - k)


def layer_activation_bytes(s: LayerShape, e: int) -> int:
    """Bytes one token leaves for backward in one decoder layer (module docstring's formula)."""
    out = 2 * (4 + e) * s.hidden + e * (2 * s.q + 2 * s.kv) + 4 * e * s.mlp
    if s.qk_norm:
        out += (4 + e) * (s.q + s.kv)
    if s.experts:
        out += 4 * s.hidden + 4 * s.experts + s.top_k * e * (2 * s.hidden + 4 * s.expert_mlp)
    return out


def head_activation_bytes(block: LayerShape, e: int) -> int:
    """A paper-2 head per token: its block, enorm, hnorm and outnorm, the 2h concatenation the projection keeps."""
    return layer_activation_bytes(block, e) + 3 * (4 + e) * block.hidden + 2 * e * block.hidden


# ------------------------------------------------------------------------------------------- what FSDP2 holds


@dataclass(frozen=True)
class Sharded:
    """One module FSDP2 wraps: parameter counts (all, trained, its root's, its largest unit's) and stored bytes."""

    params: int
    trained: int
    root: int
    root_trained: int
    unit: int
    unit_trained: int
    stored_bytes: int
    trained_bytes: int

    def gathered_bytes(self, compute: int | None) -> float:
        """Bytes per gathered parameter: the FSDP2 param dtype, else the stored one."""
        return compute or self.stored_bytes / max(self.params, 1)


def sharded(module: torch.nn.Module, dtype: torch.dtype | None = None) -> Sharded:
    """What FSDP2 holds of `module` (units: `shard_units`), parameters stored in `dtype` (None: their own)."""
    params = unique_params(module)
    units = shard_units(module)
    in_unit = {id(p) for u in units for p in u.parameters()}

    def count(ps, trained=False):
        return sum(p.numel() for p in ps if p.requires_grad or not trained)

    def nbytes(ps):
        return sum(p.numel() * (dtype or p.dtype).itemsize for p in ps)

    root = [p for p in params if id(p) not in in_unit]
    return Sharded(
        params=count(params),
        trained=count(params, True),
        root=count(root),
        root_trained=count(root, True),
        unit=max((count(u.parameters()) for u in units), default=0),
        unit_trained=max((count(u.parameters(), True) for u in units), default=0),
        stored_bytes=nbytes(params),
        trained_bytes=nbytes([p for p in params if p.requires_grad]),
    )


@dataclass(frozen=True)
class Cost:
    """FLOPs of a part per token: `mult` x (`params` + 2 x `layers` x q x seq); mult 6 trained, 4 frozen with
    gradients through it, 2 frozen forward (or recomputed)."""

    params: float
    layers: int
    mult: int


@dataclass(frozen=True)
class Training:
    """One training's numbers (per GPU); everything the memory and throughput columns need."""

    paper: str
    run: str
    model: str
    world: int
    nodes: int
    micro: int  # rows per micro-batch
    tokens: int  # tokens per micro-batch
    accumulation: int
    steps: int
    step_tokens: int
    trained: Sharded
    frozen: tuple[Sharded, ...]
    compute_bytes: int | None  # FSDP2 param dtype (None: stored)
    reduce_bytes: int | None
    activations: float
    logits: float
    costs: tuple[Cost, ...]
    attn_width: int
    seq: int
    notes: str = ""


def memory_terms(t: Training) -> dict[str, float]:
    """Bytes per GPU by term (module docstring); `peak` their sum."""
    m, w = t.trained, t.world
    c = m.gathered_bytes(t.compute_bytes)
    r = t.reduce_bytes if t.reduce_bytes not in (None, t.compute_bytes) else 0
    train_flight = (m.root + 2 * m.unit) * c + (m.root_trained + m.unit_trained) * c + m.unit_trained * r
    frozen_flight = [(f.root + 2 * f.unit) * f.gathered_bytes(t.compute_bytes) for f in t.frozen]
    terms = {
        "params": m.stored_bytes / w,
        "grads": m.trained_bytes / w,
        "adamw": 2 * m.trained_bytes / w,
        "frozen": sum(f.stored_bytes for f in t.frozen) / w,
        "gathered": max([train_flight, *frozen_flight]),
        "activations": t.activations,
        "logits": t.logits,
    }
    return {**terms, "peak": sum(terms.values())}


def flops_per_token(t: Training) -> float:
    return sum(c.mult * (c.params + 2 * c.layers * t.attn_width * t.seq) for c in t.costs)


def logits_bytes(vocab: int, e: int, trained: list[int], frozen: list[int] = (), frozen_logp: bool = False) -> float:
    """Logit buffers of one micro-batch (rows per trained / frozen head) at the larger of the forward's end and the
    backward's start (module docstring)."""
    r = max(trained, default=0)
    forward = (e + 4) * sum(trained) + (e + (4 if frozen_logp else 0)) * sum(frozen) + 4 * r
    return vocab * max(forward, 4 * sum(trained) + (8 + e) * r)


def throughput(t: Training, gpu: GPU, mfu: float) -> dict[str, float]:
    """Tokens per second per GPU, step seconds, one run's wall-clock and GPU hours at `mfu` of the bf16 peak."""
    flops = flops_per_token(t)
    per_gpu = mfu * gpu.bf16_tflops * 1e12 / flops
    step_s = t.step_tokens / (per_gpu * t.world)
    return {"flops": flops, "tokens_s": per_gpu, "step_s": step_s, "wall_h": t.steps * step_s / 3600,
            "gpu_h": t.steps * step_s * t.world / 3600}  # fmt: skip


def fit(peak: float, gpu: GPU) -> str:
    use = peak / (gpu.memory_gib * GIB)
    verdict = "fits" if use <= HEADROOM else "tight" if use <= 1 else "over"
    return f"{use:.0%} {verdict}"
