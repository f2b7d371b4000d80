"""The one decoder interface every method of every paper implements, and its result type.

A `Decoder` wraps a loaded causal LM and its tokenizer and turns a batch of tokenised prompts into one
`GenerationResult` per prompt. Conventions shared by all decoders:

* `accepted[i]` is the number of new tokens emitted by forward pass i, the prefill included (the prefill of a
  plain decoder emits one token), so `forward_passes == len(accepted)` and, before stop trimming,
  `sum(accepted) >= len(tokens)`.
* `tokens` holds the generated ids up to and including the token that ended generation (an EOS id or the
  token completing a stop string), as `model.generate` returns them; nothing after a stop is kept.
* Times are wall-clock seconds of the whole batch the prompt was decoded in (`prefill_s` for the prompt
  forward, `decode_s` for everything after), so tokens/s of a batch is sum(new tokens) / (prefill + decode).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..io import InputError

if TYPE_CHECKING:
    import torch

    from .static import StaticSession

_DECODERS: dict[str, type[Decoder]] = {}
CORE_DECODERS = ("greedy", "hf", "lookahead", "prompt_lookup", "sample", "stand")  # the modules of the core's decoders


def register_decoder(name: str) -> Callable[[type[Decoder]], type[Decoder]]:
    """Class decorator: make a decoder available by `name` to the bench CLI, lm-eval and the rules."""

    def wrap(cls: type[Decoder]) -> type[Decoder]:
        if name in _DECODERS and _DECODERS[name] is not cls:
            raise ValueError(f"decoder {name!r} registered twice")
        cls.name = name
        _DECODERS[name] = cls
        return cls

    return wrap


@dataclass(frozen=True)
class StopCriteria:
    """When to stop a row: any of `eos_ids`, or any of `stop_strings` appearing in the decoded output."""

    eos_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()


@dataclass
class GenerationResult:
    tokens: list[int]
    accepted: list[int]
    prompt_tokens: int
    prefill_s: float
    decode_s: float
    stop_reason: str  # "eos" | "stop_string" | "length"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def forward_passes(self) -> int:
        return len(self.accepted)

    @property
    def tokens_per_forward(self) -> float:
        return len(self.tokens) / max(1, self.forward_passes)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["forward_passes"] = self.forward_passes
        d["tokens_per_forward"] = self.tokens_per_forward
        return d


class Decoder(ABC):
    """Base class of every decoding method.

    Subclasses set `lossless` (True: output must equal reference greedy token for token; False: lossy, e.g.
    Static-k) and implement `generate` for one batch. Constructor keyword arguments are the method's
    parameters; they are recorded in every result file through `params`. `label` is the name it was built
    under (`build_decoder`): the registry name, or a label standing for it with settings.
    """

    name: ClassVar[str] = "?"
    lossless: ClassVar[bool] = True
    PARAMS: ClassVar[tuple[str, ...]] = ("backend",)  # the parameters this class itself reads; its bases add theirs
    BACKENDS: ClassVar[tuple[str, ...]] = ("eager",)  # the `backend`s it runs on (`decoding.static`), default first

    @classmethod
    def accepted_params(cls) -> tuple[str, ...]:
        """Every parameter the decoder reads (its own `PARAMS` and its bases')."""
        return tuple(sorted({p for k in cls.__mro__ for p in vars(k).get("PARAMS", ())}))

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        self.model = model
        self.tokenizer = tokenizer
        self.params = params
        self.label = self.name
        self.backend = check_backend(self.name, params, self.BACKENDS)
        self.static: Any = None  # the `decoding.static.StaticSession` of `backend: compiled`, made on first use
        self.reserved_slots = 0  # `reserve`

    @property
    def compile_s(self) -> float:
        """Seconds this decoder has spent compiling (0 on the eager backend)."""
        return 0.0 if self.static is None else self.static.compile_s

    def reserve(self, slots: int) -> None:
        """Size every static cache of this decoder for at least `slots` slots of tokens from now on (`backend:
        compiled`; nothing on the eager backend), its headroom on top (`static_session`). A job that knows its
        longest batch reserves for it before its first, so that every batch runs at one cache length: one
        compiled graph per row count rather than one per length of the cache ladder (`decoding.static.cache_slots`),
        each a full compile on the CPU, where frozen graphs miss inductor's cache (decision 0031)."""
        self.reserved_slots = max(self.reserved_slots, slots)

    def static_session(self, batch: int, slots: int, headroom: int = 0) -> StaticSession:
        """`backend: compiled`: this decoder's static session (made on first use, reused by every batch), its cache
        emptied for a batch of `batch` rows needing `slots` slots for their tokens, or the slots `reserve`d if more,
        plus `headroom` slots the decoder's own chunks need beyond the tokens (a tree's verification rows, paper
        1's masks), so that a reserved job keeps one cache length for every decoder (`StaticSession.begin`)."""
        from .static import StaticSession  # torch: not at import (the plan checks read this module)

        if self.static is None:
            self.static = StaticSession(self.model)
        self.static.begin(batch, max(slots, self.reserved_slots) + headroom)
        return self.static

    @abstractmethod
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        """Decode one batch of tokenised prompts (no padding; the decoder pads as it needs)."""

    def new_run(self) -> None:
        """Forget what earlier generations taught the decoder about the text (an adaptive decoder's acceptance
        statistics), keeping what it measured of the machine (its cost tables): the bench calls it after its
        warm-up and before each repeat, so that no repeat is timed on prompts it has learned from. Nothing to
        forget by default."""
        return None

    def generate_all(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria, batch_size: int = 1
    ) -> list[GenerationResult]:
        """Decode many prompts in batches of `batch_size`, in the given order."""
        out: list[GenerationResult] = []
        for i in range(0, len(prompts), batch_size):
            out.extend(self.generate(prompts[i : i + batch_size], max_new_tokens, stop))
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "lossless": self.lossless, "params": dict(self.params)}


def decoders() -> dict[str, type[Decoder]]:
    """Every registered decoder by name: the core's (`CORE_DECODERS`) and every registered paper's (the modules each
    paper names in its `Paper.decoders`), their modules imported here on the first call."""
    from ..config import registry

    for module in CORE_DECODERS:
        importlib.import_module(f"{__package__}.{module}")
    for paper in registry.papers().values():
        for module in paper.decoders:
            importlib.import_module(module)
    return dict(sorted(_DECODERS.items()))


def registry_name(label: str, params: Mapping[str, Any]) -> str:
    """The registered decoder a label stands for: `params["decoder"]` when given (so a sweep can hold
    several settings of one method under distinct labels, e.g. `static-k4: {decoder: static-k, k: 4}`),
    else the label itself."""
    return str(params.get("decoder", label))


def check_backend(name: str, params: Mapping[str, Any], backends: Sequence[str]) -> str:
    """The `backend` parameter of decoder `name` (default: the first of `backends`, the ones it runs on); an
    `InputError` when it names another, or `compiled` with the wall-clock guard (`adaptive`, `decoding.cost`), which
    prices eager forwards, or without a KV cache (`kv_cache: false`), which leaves no cache to keep static."""
    backend = str(params.get("backend", backends[0]))
    if backend not in backends:
        raise InputError(f"{name}: backend {backend!r} is not available (this decoder runs on: {', '.join(backends)})")
    if backend == "compiled" and params.get("adaptive"):
        raise InputError(f"{name}: the wall-clock guard (adaptive) prices eager forwards; use backend eager with it")
    if backend == "compiled" and params.get("kv_cache") is False:
        raise InputError(f"{name}: decoding without a KV cache (kv_cache: false) runs eager; use backend eager with it")
    return backend


def check_params(label: str, params: Mapping[str, Any], accepted: Mapping[str, Mapping[str, Sequence[str]]]) -> str:
    """The registered name `label` stands for, after checking it against `accepted` (name -> {"params": its
    parameters, "backends": its backends}); an `InputError` names an unknown decoder (with the registered ones), an
    unknown parameter (with the accepted ones) or a backend it does not run on."""
    name = registry_name(label, params)
    if name not in accepted:
        raise InputError(f"unknown decoder {name!r} (registered: {', '.join(sorted(accepted))})")
    known = accepted[name]["params"]
    unknown = sorted(set(params) - {"decoder"} - set(known))
    if unknown:
        raise InputError(f"{name}: unknown parameter(s) {', '.join(unknown)} (accepted: {', '.join(known)})")
    check_backend(name, params, accepted[name]["backends"])
    return name


def catalog_entry(cls: type[Decoder]) -> dict[str, tuple[str, ...]]:
    """What the plan checks know of a decoder class: its parameters and backends."""
    return {"params": cls.accepted_params(), "backends": cls.BACKENDS}


def decoder_class(label: str, params: dict[str, Any]) -> type[Decoder]:
    """The registered class `label` stands for, after checking its parameters (`check_params`, against the
    classes themselves: an `InputError` names an unknown decoder or parameter)."""
    known = decoders()
    return known[check_params(label, params, {name: catalog_entry(cls) for name, cls in known.items()})]


def build_decoder(label: str, model: torch.nn.Module, tokenizer: Any, **params: Any) -> Decoder:
    """Instantiate the decoder `label` stands for (see `registry_name`) with its parameters (`decoder_class`)."""
    cls = decoder_class(label, params)
    decoder = cls(model, tokenizer, **{k: v for k, v in params.items() if k != "decoder"})
    decoder.label = label
    return decoder
