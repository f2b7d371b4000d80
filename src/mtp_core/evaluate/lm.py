"""The lm-eval model class `mtp`: any registered `Decoder` behind lm-eval's `generate_until`.

Greedy only. Requests with identical generation settings are decoded together, longest prompt first
(left-padded batches of similar length), and answered in the original order. Stop strings reach the decoder
through `LoadedModel.stop_criteria`, so decoding stops early; the text is cut at the first stop string as
lm-eval does.
Per-request decode statistics stay on the instance (`request_stats`, keyed by (task, doc_id, idx, repeat)) for
the runner to join with lm-eval's logged samples.

Construct it directly (`MTPLM(loaded, "greedy", {...})`) or through lm-eval:
`simple_evaluate(model="mtp", model_args="config=config.yaml,model=<name>,base_dir=<dir>,decoder=greedy")`,
or `model_args="pretrained=<HF dir or hub id>,decoder=static-k,decoder.k=3"` (`decoder.<param>=<value>` sets a
decoder parameter; a dict `model_args` may instead give `decoder_params`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import (
    handle_stop_sequences,
    has_bos_prefix,
    normalize_gen_kwargs,
    postprocess_generated_text,
)
from lm_eval.utils import simple_parse_args_string
from tqdm import tqdm

from ..config.settings import model_spec, read_config
from ..decoding import Decoder, GenerationResult, build_decoder
from ..models.load import LoadedModel, load_model
from ..results.write import answer_token_count

log = logging.getLogger(__name__)

RequestKey = tuple[str, int, int, int]  # (task_name, doc_id, idx, repeat)
LOAD_ARGS = ("config", "model", "pretrained", "base_dir", "checkpoint", "device", "dtype")
OWN_ARGS = ("decoder", "batch_size", "max_gen_toks")


@dataclass
class RequestStats:
    """What one request cost: the decoder's result and the token length of the stop-truncated answer."""

    gen: GenerationResult
    answer_tokens: int


@register_model("mtp")
class MTPLM(LM):
    """lm-eval `LM` over a `LoadedModel` and a decoder (a registry name with params, or an instance)."""

    def __init__(
        self,
        loaded: LoadedModel,
        decoder: str | Decoder = "greedy",
        decoder_params: dict[str, Any] | None = None,
        batch_size: int | str = 1,
        max_gen_toks: int = 256,
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        super().__init__()
        self.loaded = loaded
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if isinstance(decoder, Decoder):
            if decoder_params:
                raise ValueError("decoder_params apply to a decoder name, not to a decoder instance")
            self.decoder = decoder
        else:
            self.decoder = build_decoder(decoder, loaded.model, loaded.tokenizer, **(decoder_params or {}))
        try:
            self.batch_size = int(batch_size)
        except ValueError:
            raise ValueError(f"mtp: batch_size must be a positive integer, got {batch_size!r}") from None
        if self.batch_size < 1:
            raise ValueError(f"mtp: batch_size must be a positive integer, got {batch_size!r}")
        self.max_gen_toks = int(max_gen_toks)
        self._device = next(loaded.model.parameters()).device
        self.request_stats: dict[RequestKey, RequestStats] = {}

    # construction from lm-eval model_args
    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> MTPLM:
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict | None = None) -> MTPLM:
        """Load the model named by `arg_dict` (see the module docstring) and wrap it."""
        args = dict(arg_dict)
        args.update({k: v for k, v in (additional_config or {}).items() if v is not None})
        args.pop("max_batch_size", None)  # passed by simple_evaluate; batches here have a fixed size
        params = dict(args.pop("decoder_params", None) or {})
        params.update({k.split(".", 1)[1]: args.pop(k) for k in list(args) if k.startswith("decoder.")})
        load = {k: args.pop(k) for k in LOAD_ARGS if k in args}
        own = {k: args.pop(k) for k in OWN_ARGS if k in args}
        if args:
            raise TypeError(
                f"mtp model_args: unknown argument(s) {sorted(args)}; "
                f"known: {', '.join(LOAD_ARGS + OWN_ARGS)}, decoder_params, decoder.<param>"
            )
        return cls(load_from_args(**load), decoder_params=params, **own)

    # properties lm-eval reads
    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def max_length(self) -> int | None:
        return getattr(self.loaded.model.config, "max_position_embeddings", None)

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", None) or self.loaded.name).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.tokenizer.chat_template if chat_template else None

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt, **self.chat_template_kwargs
        )

    def get_model_info(self) -> dict[str, Any]:
        return {"mtp_model": self.loaded.name, "mtp_decoder": self.decoder.describe()}

    # requests
    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise NotImplementedError(
            "the mtp model only generates (generate_until tasks); for loglikelihood use lm-eval's hf model"
        )

    def loglikelihood_rolling(self, requests: list[Instance]) -> list[float]:
        raise NotImplementedError(
            "the mtp model only generates (generate_until tasks); for perplexity use lm-eval's hf model"
        )

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Greedy generations for `requests`, in their order; statistics go to `request_stats`."""
        prepared = [self._prepare(req) for req in requests]
        groups: dict[tuple[tuple[str, ...], int], list[int]] = defaultdict(list)
        for i, (until, max_toks, _) in enumerate(prepared):
            groups[(until, max_toks)].append(i)
        texts: list[str] = [""] * len(requests)
        gens: list[GenerationResult | None] = [None] * len(requests)
        with tqdm(total=len(requests), desc=f"mtp[{self.decoder.name}]", disable=disable_tqdm) as bar:
            for (until, max_toks), order in groups.items():
                order.sort(key=lambda i: -len(prepared[i][2]))
                stop = self.loaded.stop_criteria(until)
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start : start + self.batch_size]
                    results = self.decoder.generate([prepared[i][2] for i in chunk], max_toks, stop)
                    for i, gen in zip(chunk, results, strict=True):
                        text = self.tokenizer.decode(gen.tokens, skip_special_tokens=True)
                        texts[i] = postprocess_generated_text(text, list(until), None)
                        gens[i] = gen
                    bar.update(len(chunk))
        self._record(requests, gens, texts)
        return texts

    def _prepare(self, req: Instance) -> tuple[tuple[str, ...], int, list[int]]:
        """(stop strings, max new tokens, prompt ids) of one request."""
        context, gen_kwargs = req.args
        kw = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
        if kw.get("do_sample"):
            raise ValueError(
                f"mtp: task {req.task_name!r} asks for sampling (do_sample=True or temperature > 0); "
                "only greedy decoding is supported"
            )
        until = tuple(handle_stop_sequences(kw["until"], eos=self.tokenizer.eos_token))
        max_toks = kw["max_gen_toks"]
        add_special = not has_bos_prefix(context, self.tokenizer.bos_token)
        ids = self.tokenizer(context, add_special_tokens=add_special).input_ids
        if self.max_length is not None and len(ids) + max_toks > self.max_length:
            keep = max(1, self.max_length - max_toks)
            log.warning(
                "mtp: prompt of %d tokens cut to its last %d (task %s, doc %s)",
                len(ids),
                keep,
                req.task_name,
                req.doc_id,
            )
            ids = ids[-keep:]
        return until, max_toks, ids

    def _record(self, requests: list[Instance], gens: list[GenerationResult | None], texts: list[str]) -> None:
        """Statistics per (task, doc_id, idx, repeat); lm-eval repeats a request as the same object."""
        seen: dict[tuple[str, int, int], int] = defaultdict(int)
        for req, gen, text in zip(requests, gens, texts, strict=True):
            assert gen is not None
            base = (req.task_name, req.doc_id, req.idx)
            key = (*base, seen[base])
            seen[base] += 1
            self.request_stats[key] = RequestStats(gen, answer_token_count(self.tokenizer, gen.tokens, text))


def load_from_args(
    config: str | None = None,
    model: str | None = None,
    pretrained: str | None = None,
    base_dir: str | None = None,
    checkpoint: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
) -> LoadedModel:
    """Load a model from lm-eval style arguments: `pretrained` (an HF directory or hub id), or `config` and
    `model` (a declared model; default the config's evaluation model) with `base_dir`/`checkpoint` as for
    `models.load.load_model`."""
    if pretrained is not None:
        p = str(pretrained)
        spec = {"source": "local", "path": p} if Path(p).is_dir() else {"source": "hub", "id": p}
        spec["name"] = Path(p).name
    elif config is not None:
        cfg = read_config(config)
        spec = model_spec(cfg, model or cfg["evaluation"]["model"])
    else:
        raise ValueError("mtp model_args need pretrained=<HF dir or hub id> or config=<config.yaml>[,model=<name>]")
    return load_model(spec, base_dir=base_dir, checkpoint=checkpoint, device=device, dtype=dtype)
