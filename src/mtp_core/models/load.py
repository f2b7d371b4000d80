"""One loader for every model source: HF hub id, local directory, packaged GGUF, tiny random config, a model of a
declared architecture trained from scratch (`scratch`: random weights, another model's tokenizer).

`prepare_base_model` materialises the sources that need it (the packaged GGUF is dequantised once; a tiny
random model is initialised once) as an HF checkpoint under `results/models/base/<name>/`, so every later
load is a plain `from_pretrained` of a local directory. Tokenizer, chat template, EOS/stop ids and dtype
travel with the model in `LoadedModel`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config.settings import checkpoint_location
from ..decoding.base import StopCriteria
from .cpu_linear import DEFAULT_CPU_LINEAR, pack_linears

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}

# ChatML, the template of SmolLM2 and Qwen; tiny models use it without a default system turn.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TINY_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


@dataclass
class LoadedModel:
    """A model with everything a decoder or trainer needs to use it the way it was trained."""

    name: str
    model: Any
    tokenizer: Any
    chat_template: bool
    eos_ids: tuple[int, ...]
    stop_strings: tuple[str, ...] = ()
    spec: dict = field(default_factory=dict)
    load_s: float = 0.0

    def render(self, prompt: str | list[dict], chat: bool | None = None) -> str:
        """Prompt text as the model sees it: the chat template (with generation prompt) or the raw text."""
        chat = self.chat_template if chat is None else chat
        if isinstance(prompt, list) and not chat:
            raise ValueError("a list of chat turns needs the chat template")
        if not chat:
            return prompt  # type: ignore[return-value]
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(self, prompt: str | list[dict], chat: bool | None = None) -> list[int]:
        """Token ids of a prompt; a BOS is added only where the tokenizer adds one to raw text."""
        chat = self.chat_template if chat is None else chat
        text = self.render(prompt, chat)
        return self.tokenizer(text, add_special_tokens=not chat).input_ids

    def stop_criteria(self, extra_stop_strings: tuple[str, ...] | list[str] = ()) -> StopCriteria:
        strings = tuple(dict.fromkeys([*self.stop_strings, *extra_stop_strings]))
        return StopCriteria(eos_ids=self.eos_ids, stop_strings=strings)


def package_file(package: str, file: str) -> Path:
    """Path of a data file shipped inside an installed package (e.g. the SmolLM2 GGUF)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed (it ships {file})")
    path = Path(next(iter(spec.submodule_search_locations))) / file
    if not path.exists():
        raise FileNotFoundError(f"{path} not found in package {package!r}")
    return path


def eos_ids_of(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    for e in eos if isinstance(eos, (list, tuple)) else [eos]:
        if e is not None:
            ids.append(int(e))
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    return tuple(dict.fromkeys(ids))


def _bytes_to_unicode() -> dict[int, str]:
    """The reversible byte -> printable character map of byte-level BPE tokenizers."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


SYSTEM_PROMPTS = ("default", "none")
_PROBE = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]


def without_default_system(tokenizer: Any, name: str) -> None:
    """Give `tokenizer` plain ChatML in place of a ChatML template that writes a default system turn when the
    conversation has none (SmolLM2's: a constant 24-token header; model spec `system_prompt: none`). Checked: both
    templates render a conversation that has its own system turn identically, so the only difference is the
    default turn; another template is refused (a ValueError naming the model)."""
    if tokenizer.chat_template is None or tokenizer.chat_template == CHATML_TEMPLATE:
        return
    for gen in (False, True):
        own = tokenizer.apply_chat_template(_PROBE[:2] if gen else _PROBE, tokenize=False, add_generation_prompt=gen)
        chatml = tokenizer.apply_chat_template(
            _PROBE[:2] if gen else _PROBE, tokenize=False, add_generation_prompt=gen, chat_template=CHATML_TEMPLATE
        )
        if own != chatml:
            raise ValueError(
                f"model {name!r}: system_prompt 'none' needs a ChatML chat template (with or without a default "
                f"system turn); this one renders {own!r}"
            )
    tokenizer.chat_template = CHATML_TEMPLATE


def byte_level_tokenizer(
    specials: tuple[str, ...],
    *,
    eos: str,
    pad: str | None = None,
    bos: str | None = None,
    unk: str | None = None,
    chat_template: str | None = None,
) -> Any:
    """A byte-level BPE tokenizer without merges (`specials` first, then the 256 bytes): offline and lossless.
    `bos` is prepended to every encoding with special tokens (as Llama's tokenizers do to raw text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(specials)}
    for b, ch in _bytes_to_unicode().items():
        vocab[ch] = len(specials) + b
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(specials))
    if bos is not None:
        core.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=eos, pad_token=pad, bos_token=bos, unk_token=unk)
    tok.chat_template = chat_template
    return tok


def tiny_tokenizer() -> Any:
    """The tokenizer of tiny random models: byte-level, 3 ChatML specials + 256 bytes, ChatML template."""
    return byte_level_tokenizer(TINY_SPECIAL_TOKENS, eos="<|im_end|>", pad="<|im_end|>", chat_template=CHATML_TEMPLATE)


def tiny_model(spec: dict) -> Any:
    """A randomly initialised Llama or Qwen3 causal LM of a few M parameters, deterministic in `init_seed`.

    The vocabulary is padded to a multiple of 64 above the tokenizer's 259 ids, so the embedding matrix has
    spare rows (as Qwen's does), and weights use a wide init so that argmax decisions are not near-ties.
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    common = dict(
        vocab_size=320,
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_layers"],
        num_attention_heads=spec["num_heads"],
        num_key_value_heads=spec["num_kv_heads"],
        max_position_embeddings=spec["max_position_embeddings"],
        tie_word_embeddings=spec["tie_word_embeddings"],
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=2,
        pad_token_id=2,
    )
    if spec["arch"] == "llama":
        cfg = LlamaConfig(**common)
    else:
        cfg = Qwen3Config(head_dim=spec["hidden_size"] // spec["num_heads"], **common)
    cpu_rng = torch.random.get_rng_state()
    torch.manual_seed(spec["init_seed"])
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(cpu_rng)
    model.generation_config.eos_token_id = 2
    model.generation_config.pad_token_id = 2
    return model


SCRATCH_ARCHS = ("llama", "qwen3", "glm4_moe")


def scratch_model(spec: dict, tokenizer: Any) -> Any:
    """A randomly initialised causal LM of a declared architecture and sizes, with another declared model's
    tokenizer (`source: scratch`; paper 2 pretrains its 2B dense / A1B MoE models from scratch, App. B Table 3),
    deterministic in `init_seed`. The vocabulary is the tokenizer's size rounded up to a multiple of 64 unless
    `vocab_size` is given; weights N(0, `initializer_range`). `glm4_moe`: `first_k_dense_replace` dense layers,
    then MoE layers with shared experts, qk-norm, full rotary dimension."""
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = spec["arch"]
    if arch not in SCRATCH_ARCHS:
        raise ValueError(f"scratch arch {arch!r} is not one of {', '.join(SCRATCH_ARCHS)}")
    vocab = spec.get("vocab_size") or -(-len(tokenizer) // 64) * 64
    rope = {"rope_type": "default", "rope_theta": float(spec.get("rope_theta", 10000.0))}
    kw: dict[str, Any] = dict(
        vocab_size=int(vocab),
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_layers"],
        num_attention_heads=spec["num_heads"],
        num_key_value_heads=spec["num_kv_heads"],
        head_dim=spec.get("head_dim") or spec["hidden_size"] // spec["num_heads"],
        max_position_embeddings=spec.get("max_position_embeddings", 4096),
        rms_norm_eps=spec.get("rms_norm_eps", 1e-5),
        tie_word_embeddings=spec.get("tie_word_embeddings", False),
        initializer_range=spec.get("initializer_range", 0.02),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    if arch == "glm4_moe":
        rope["partial_rotary_factor"] = 1.0
        moe = spec.get("moe") or {}
        kw.update(
            moe_intermediate_size=moe.get("expert_hidden_size", 768),
            n_routed_experts=moe.get("num_experts", 128),
            num_experts_per_tok=moe.get("top_k", 8),
            n_shared_experts=moe.get("num_shared_experts", 1),
            first_k_dense_replace=moe.get("dense_layers", 1),
            use_qk_norm=True,
        )
    cfg = AutoConfig.for_model(arch, rope_parameters=rope, **kw)
    cpu_rng = torch.random.get_rng_state()
    torch.manual_seed(int(spec.get("init_seed", 0)))
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=DTYPES[spec.get("dtype", "float32")])
    finally:
        torch.random.set_rng_state(cpu_rng)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def _from_gguf(spec: dict) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = package_file(spec["package"], spec["file"])
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # the weights are dequantised to float32 on load; drop the GGUF marker so they save as a plain checkpoint
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tok


def prepare_base_model(spec: dict, out_dir: str | os.PathLike, tokenizer_from: tuple[str, dict] | None = None) -> Path:
    """Write the HF checkpoint of a `gguf`, `tiny` or `scratch` model to `out_dir` (atomically: temp dir, rename).
    `tokenizer_from` (scratch): where its tokenizer model is (`config.settings.checkpoint_location`)."""
    out_dir = Path(out_dir)
    if spec["source"] == "gguf":
        model, tok = _from_gguf(spec)
    elif spec["source"] == "tiny":
        model, tok = tiny_model(spec), tiny_tokenizer()
    elif spec["source"] == "scratch":
        from transformers import AutoTokenizer

        if tokenizer_from is None:
            raise ValueError(f"model {spec.get('name')!r} (scratch) needs its tokenizer model's location")
        tok = AutoTokenizer.from_pretrained(tokenizer_from[0], **tokenizer_from[1])
        model = scratch_model(spec, tok)
    else:
        raise ValueError(f"model source {spec['source']!r} is loaded directly, nothing to prepare")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out_dir


def load_model(
    spec: dict,
    base_dir: str | os.PathLike | None = None,
    checkpoint: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    dtype: str | None = None,
    random_weights: int | None = None,
) -> LoadedModel:
    """Load a declared model.

    `base_dir` is the prepared checkpoint of a gguf/tiny/finetuned model (`mtp_core.models.plan.model_dir`); `checkpoint`
    overrides the location entirely (a trained student saved in HF format). `random_weights` (a seed): the weights
    are not read, the location's config gets its architecture's initialisation under that seed, for measurements
    that depend on the shapes alone (step prices, paper 4's random-prompt speed); the folder then needs only
    `config.json` and the tokenizer. On the CPU its linear layers run inference on oneDNN's packed weights unless
    the spec says `cpu_linear: aten` (`models.cpu_linear`; training steps are unaffected).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    if checkpoint is not None:
        where, kwargs = str(checkpoint), {}
    else:
        where, kwargs = checkpoint_location(spec, base_dir)
    torch_dtype = DTYPES[dtype or spec.get("dtype", "float32")]
    tok = AutoTokenizer.from_pretrained(where, **kwargs)
    if random_weights is None:
        model = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, **kwargs)
    else:
        torch.manual_seed(random_weights)
        with torch.device(device):  # initialised where they run: a 7B model's weights in seconds on a GPU
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(where, **kwargs), dtype=torch_dtype)
    model = model.to(device).eval()
    if torch.device(device).type == "cpu":
        pack_linears(model, spec.get("cpu_linear", DEFAULT_CPU_LINEAR))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if spec.get("system_prompt", "default") == "none":
        without_default_system(tok, spec.get("name", where))
    loaded = LoadedModel(
        name=spec.get("name", where),
        model=model,
        tokenizer=tok,
        chat_template=bool(spec.get("chat_template", True)) and tok.chat_template is not None,
        eos_ids=eos_ids_of(model, tok),
        stop_strings=tuple(spec.get("stop_strings", ())),
        spec=spec,
        load_s=time.perf_counter() - t0,
    )
    log.info("loaded %s from %s in %.1fs", loaded.name, where, loaded.load_s)
    return loaded
