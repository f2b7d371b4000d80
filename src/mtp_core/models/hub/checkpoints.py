"""Stand-ins for hub models: a tiny random checkpoint of the same architecture class and config features.

A family names what the real checkpoints of a model line share and the pipeline depends on:

| family | class | tokenizer (byte-level stand-in) | chat template | RoPE |
|---|---|---|---|---|
| `llama3` | Llama | `<|begin_of_text|>` prepended to raw text; `<|eot_id|>` ends a turn | Llama 3 headers, a default system turn with the knowledge-date lines | `llama3` scaling, θ 500,000 |
| `qwen3` | Qwen3 (qk-norm, explicit head_dim) | no BOS; `<|im_end|>` ends a turn, `<|endoftext|>` pads | ChatML; the hybrid-thinking models' empty think block when `enable_thinking=False` | θ 1,000,000 |
| `qwen3-instruct` | Qwen3 | as `qwen3` | plain ChatML (the 2507 instruct models never think) | θ 1,000,000 |
| `vicuna` | Llama (v1) | `<s>` prepended, `</s>` ends, `<unk>` pads | none (the prompt frame is written into the prompts) | default, θ 10,000 |

Sizes and `tie_word_embeddings` come from the stand-in's spec (the real model's tying: Qwen3 up to 4B and Llama
3.2-3B tie, Llama 3.1-8B, Qwen3-8B/32B and Vicuna do not). The written folder is what `from_pretrained` reads from
the hub: `config.json`, `generation_config.json` (the family's stop ids), weights, tokenizer files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...io import atomic_dir
from ..load import byte_level_tokenizer

LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] != 'system' %}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\nCutting Knowledge Date: December 2023\\n"
    "Today Date: 26 Jul 2024\\n\\n<|eot_id|>' }}{% endif %}"
    "{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim"
    " + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
)
QWEN3_TEMPLATE = (
    CHATML
    + "{% if enable_thinking is defined and not enable_thinking %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}"
)
QWEN3_INSTRUCT_TEMPLATE = CHATML + "{% endif %}"


@dataclass(frozen=True)
class Family:
    """What the checkpoints of one model line share (module docstring)."""

    arch: str
    specials: tuple[str, ...]
    eos: str
    stop: tuple[str, ...]
    pad: str | None
    bos: str | None
    unk: str | None
    chat_template: str | None
    rope: dict[str, Any]


FAMILIES: dict[str, Family] = {
    "llama3": Family(
        arch="llama",
        specials=("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        eos="<|eot_id|>",
        stop=("<|end_of_text|>", "<|eot_id|>"),
        pad=None,
        bos="<|begin_of_text|>",
        unk=None,
        chat_template=LLAMA3_TEMPLATE,
        rope={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024,
        },
    ),
    "qwen3": Family(
        arch="qwen3",
        specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"),
        eos="<|im_end|>",
        stop=("<|im_end|>", "<|endoftext|>"),
        pad="<|endoftext|>",
        bos=None,
        unk=None,
        chat_template=QWEN3_TEMPLATE,
        rope={"rope_type": "default", "rope_theta": 1000000.0},
    ),
    "qwen3-instruct": Family(
        arch="qwen3",
        specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"),
        eos="<|im_end|>",
        stop=("<|im_end|>", "<|endoftext|>"),
        pad="<|endoftext|>",
        bos=None,
        unk=None,
        chat_template=QWEN3_INSTRUCT_TEMPLATE,
        rope={"rope_type": "default", "rope_theta": 1000000.0},
    ),
    "vicuna": Family(
        arch="llama",
        specials=("<unk>", "<s>", "</s>"),
        eos="</s>",
        stop=("</s>",),
        pad="<unk>",
        bos="<s>",
        unk="<unk>",
        chat_template=None,
        rope={"rope_type": "default", "rope_theta": 10000.0},
    ),
}


def standin_tokenizer(family: str) -> Any:
    f = FAMILIES[family]
    return byte_level_tokenizer(f.specials, eos=f.eos, pad=f.pad, bos=f.bos, unk=f.unk, chat_template=f.chat_template)


def standin_model(spec: dict, tokenizer: Any) -> Any:
    """A random model of the family's class and features, sized by `spec` (`hidden_size`, `num_layers`,
    `num_heads`, `num_kv_heads`, `head_dim`, `intermediate_size`, `max_position_embeddings`,
    `tie_word_embeddings`, `init_seed`); the vocabulary is the tokenizer's rounded up to a multiple of 64."""
    from transformers import AutoConfig, AutoModelForCausalLM

    f = FAMILIES[spec["family"]]
    ids = [tokenizer.convert_tokens_to_ids(t) for t in f.stop]
    kw: dict[str, Any] = dict(
        vocab_size=-(-len(tokenizer) // 64) * 64,
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_layers"],
        num_attention_heads=spec["num_heads"],
        num_key_value_heads=spec["num_kv_heads"],
        max_position_embeddings=spec["max_position_embeddings"],
        tie_word_embeddings=spec["tie_word_embeddings"],
        rope_parameters=dict(f.rope),
        rms_norm_eps=1e-6 if f.arch == "qwen3" else 1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=ids[0] if len(ids) == 1 else ids,
        pad_token_id=tokenizer.pad_token_id,
    )
    if f.arch == "qwen3":
        kw["head_dim"] = spec.get("head_dim") or spec["hidden_size"] // spec["num_heads"]
    cfg = AutoConfig.for_model(f.arch, **kw)
    rng = torch.random.get_rng_state()
    torch.manual_seed(int(spec.get("init_seed", 0)))
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(rng)
    model.generation_config.eos_token_id = ids
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def write_model_standin(spec: dict, out_dir: str | os.PathLike) -> Path:
    """Write the stand-in of one hub model (`spec`: `family` + sizes) as an HF checkpoint folder, atomically."""
    if spec["family"] not in FAMILIES:
        raise ValueError(f"hub_mirror: model family {spec['family']!r} is not one of {', '.join(FAMILIES)}")
    tok = standin_tokenizer(spec["family"])
    model = standin_model(spec, tok)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    return Path(out_dir)
