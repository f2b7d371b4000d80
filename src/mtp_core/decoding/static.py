"""The fast decode path: a preallocated (static) KV cache and forwards compiled at fixed shapes.

Every decoder takes `backend`: `eager` runs the model's own forward on a growing `DynamicCache` (the
papers' regime, and the default), `compiled` runs it on a `StaticSession`, which a decoder offers where its class
lists `compiled` in its `BACKENDS` (`decoding.base.Decoder`; others refuse it when the config is checked): greedy,
sampling, the tree core's drafters (`tree.verify`), whose extra rows ride as input embeddings and whose heads
read the final hidden states the compiled forward returns, paper 1's mask decoders, and paper 4's DMTD, which
compiles its own layer segments over the session's cache (`StaticSession.call`).

A `StaticSession` holds, for one decoder:

* a `transformers.StaticCache` for the batch in hand, its length rounded up to the next of `cache_slots`' ladder
  (64, 96, 128, 192, 256, 384, ...: at most 1.5x what the batch needs, about two graphs per doubling of the
  length) so that batches of similar prompts share one cache and one compiled graph, or for the slots its decoder
  reserved if more (`Decoder.reserve`: the bench reserves a job's longest prompt, so that a job compiles once per
  shape of rows, decision 0031). Every step attends over the whole cache, so the cache is sized tightly rather
  than windowed (the measurements behind the choice: decision 0026, docs/measurements.md). Cropping moves its
  write pointer back (the tensors keep their addresses, as CUDA graphs need) and `reset` empties it between
  batches;
* the prefill, run eager (its shape changes with every batch; compiling it would recompile per prompt);
* every later forward through one `torch.compile`d function (`dynamic=False`: a graph per input shape;
  `compile_mode`: CUDA graphs on CUDA; `compiled_on`: frozen weights and C++ GEMMs on the CPU), or a decoder's own
  function through another (`call`). Forwards of many rows run at `ROW_BUCKETS` sizes (`bucket_rows`), so a
  verifier of chunks of any size compiles at most `len(ROW_BUCKETS)` graphs per batch shape (the tree core's, and
  `cost.measure_static_costs`, which prices those shapes). A tree batch whose slots outrun its cache `grow`s it.

Compilation happens on the first forward of each shape; its time is kept apart (`compile_s`) so that the bench
can report it beside decoding. Inductor caches what it compiled (`/tmp/torchinductor_$USER`, or
`$TORCHINDUCTOR_CACHE_DIR`), so later jobs on the same machine compile faster: SmolLM2-135M's one-row step took
70 s to compile in a first job on this project's 2-core CPU and 12 s in a second with inductor's default settings,
188-230 s and 97 s frozen, as the CPU now compiles (`compiled_on`), since a frozen graph misses inductor's graph
cache.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Hashable
from typing import Any

import torch
import torch._inductor.config
from transformers import StaticCache

from .layers import logits_and_hidden

MIN_CACHE_SLOTS = 64
ROW_BUCKETS = (1, 4, 8, 16, 32, 64, 128)
# `torch.compile`'s backend; tests of the cache logic set `aot_eager`, which traces the same graph but builds no kernels
COMPILE_BACKEND = "inductor"


# inductor's settings while the CPU compiles (`compiled_on`; decision 0030)
CPU_INDUCTOR_CONFIG = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP"}


def freezes(device: torch.device) -> bool:
    """Whether inductor freezes the weights of what it compiles on `device` (`compiled_on`)."""
    return device.type == "cpu" and COMPILE_BACKEND == "inductor"


def compiled_on(device: torch.device) -> contextlib.AbstractContextManager:
    """The context in which inductor compiles (and a compiled function runs) on `device`. On the CPU: the weights
    frozen into the graph as constants, and every matrix product on inductor's C++ micro-GEMM template, the one GEMM
    backend named, so no timing picks a kernel and a shape always gets the same one. A one-row step's
    matrix-vector products ran 1.2-4.2x faster than MKL's linear that way, and compiled greedy went from 1.18x to
    2.23x HF `generate` at batch 1 on 2 cores (docs/measurements.md, "The fast decode path"), for a longer first
    compile. Set while compiling, not as `torch.compile`'s options, which did not reach the freezing pass
    (measured). Freezing needs the weights fixed while a session lives: decoders run under `torch.inference_mode`
    on a loaded model."""
    if freezes(device):
        return torch._inductor.config.patch(CPU_INDUCTOR_CONFIG)
    return contextlib.nullcontext()


def compile_mode(device: torch.device) -> str:
    """`torch.compile`'s mode on `device`: CUDA graphs on CUDA (`reduce-overhead`: a decode step is bound by its
    kernel launches there), inductor's default elsewhere."""
    return "reduce-overhead" if device.type == "cuda" else "default"


def cache_slots(slots: int) -> int:
    """The static cache's length for a batch needing `slots` slots: the smallest of 64, 96, 128, 192, 256, 384, ...
    (`MIN_CACHE_SLOTS` times 1 or 1.5 times a power of 2) that holds them."""
    size = MIN_CACHE_SLOTS
    while True:
        for length in (size, size * 3 // 2):
            if slots <= length:
                return length
        size *= 2


def bucket_rows(rows: int) -> int:
    """The compiled row count a forward of `rows` rows runs at: the smallest of `ROW_BUCKETS` that holds it."""
    for b in ROW_BUCKETS:
        if rows <= b:
            return b
    raise ValueError(f"a compiled forward takes at most {ROW_BUCKETS[-1]} rows, got {rows}")


class StaticSession:
    """A static KV cache and one compiled forward, reused by every batch a decoder decodes (module docstring)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = next(model.parameters()).device
        self.cache: StaticCache | None = None
        self.shape: tuple[int, int] | None = None  # (batch, cache length) of `cache`
        self.compile_s = 0.0  # seconds spent compiling (first forwards of new shapes)
        self._shapes: set[tuple[Any, ...]] = set()
        # a graph per (rows, mask, batch, cache length): more than dynamo's default limit of 8 before it falls back
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self._compiled: dict[Callable[..., Any], Callable[..., Any]] = {}
        # frozen graphs (`_pin`): every cache this session made, by shape, so that a shape met again reuses its graph
        self._frozen = freezes(self.device)
        self._caches: dict[tuple[int, int], StaticCache] = {}

    @property
    def length(self) -> int:
        """Slots of the current cache."""
        return 0 if self.shape is None else self.shape[1]

    def begin(self, batch: int, slots: int) -> None:
        """Make the cache ready for a batch of `batch` rows needing `slots` slots: an empty cache of that batch
        and `cache_slots(slots)` slots (the last one emptied, when it has that shape)."""
        shape = (batch, cache_slots(slots))
        if shape == self.shape and self.cache is not None:
            self.cache.reset()
            return
        self.cache, self.shape = self._empty_cache(shape), shape

    def _empty_cache(self, shape: tuple[int, int]) -> StaticCache:
        """An empty cache of `shape` (batch, length): a new one, or where graphs are frozen the one this session made
        for that shape before, emptied."""
        cache = self._caches.get(shape)
        if cache is not None:
            cache.reset()
            return cache
        cache = StaticCache(config=self.model.config, max_cache_len=shape[1])
        if self._frozen:
            self._caches[shape] = cache
        return cache

    def _pin(self) -> None:
        """Where inductor freezes (the CPU, `compiled_on`), guard the compiled graphs on the addresses of this cache's
        tensors, so that another cache of the same shape (another session's: this one keeps one per shape) gets
        graphs of its own. Dynamo otherwise reuses a graph compiled over one cache for another of the same shape
        (transformers marks the tensors static without a guard), which is sound for graphs that take the cache as
        inputs, but a frozen graph run on a second cache emitted wrong tokens (measured: a second compiled greedy on
        the same model diverged from the first at its third token)."""
        assert self.cache is not None
        for layer in self.cache.layers:
            if layer.is_initialized and getattr(layer.keys, "_dynamo_static_input_type", None) != "guarded":
                for t in (layer.keys, layer.values, layer.cumulative_length):
                    torch._dynamo.mark_static_address(t, guard=True)

    def prompt_mask(self, mask: torch.Tensor) -> torch.Tensor | None:
        """The [B, cache length] 0/1 mask of a batch whose prompts fill the first slots as `mask` [B, width] says
        (every later slot a real token); None without padding (the model's causal path)."""
        if not bool((mask == 0).any()):
            return None
        full = torch.ones(mask.shape[0], self.length, dtype=mask.dtype, device=mask.device)
        full[:, : mask.shape[1]] = mask
        return full

    def grow(self, slots: int) -> None:
        """Make room for `slots` slots within a batch: a cache of the ladder's length for them holding what this one
        holds (the rows of a tree batch keep the longest row's accepted slots every step, so its slots can outrun
        its tokens). A new length is a new graph of each shape."""
        assert self.cache is not None and self.shape is not None
        shape = (self.shape[0], cache_slots(slots))
        cache = self._empty_cache(shape)
        for old, new in zip(self.cache.layers, cache.layers):
            if old.is_initialized:
                if not new.is_initialized:
                    new.lazy_initialization(old.keys, old.values)
                new.keys[:, :, : old.keys.shape[2]] = old.keys
                new.values[:, :, : old.values.shape[2]] = old.values
                new.cumulative_length.copy_(old.cumulative_length)
        self.cache, self.shape = cache, shape

    def crop(self, n_drop: int) -> None:
        """Forget the last `n_drop` slots (the next forward overwrites them)."""
        if n_drop > 0:
            assert self.cache is not None
            self.cache.crop(-n_drop)

    def _forward(
        self,
        ids: torch.Tensor | None,
        mask: torch.Tensor | None,
        pos: torch.Tensor,
        keep: int,
        embeds: torch.Tensor | None = None,
        hidden: bool = False,
    ) -> Any:
        logits, h = logits_and_hidden(
            self.model,
            keep,
            hidden,
            input_ids=ids,
            inputs_embeds=embeds,
            attention_mask=mask,
            position_ids=pos,
            cache=self.cache,
        )
        return (logits, h) if hidden else logits

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor) -> torch.Tensor:
        """The prompt forward, eager; logits of the last position, [B, V]. `mask`: None or [B, cache length]."""
        return self._forward(ids, mask, pos, 1)[:, -1]

    def step(
        self,
        ids: torch.Tensor | None,
        mask: torch.Tensor | None,
        pos: torch.Tensor,
        keep: int = 1,
        embeds: torch.Tensor | None = None,
        hidden: bool = False,
    ) -> Any:
        """A compiled forward of `ids` [B, R] (or of input embeddings `embeds` [B, R, H] instead: rows that are not
        tokens, e.g. mask embeddings) at positions `pos` [B, R]; the logits of the last `keep` rows (0: all), and
        with `hidden` the final hidden states of every row, `(logits, hidden)`. `mask`: None (causal),
        [B, cache length] (0/1 per slot) or a 4-D [B, 1, R, cache length] one."""
        x = ids if embeds is None else embeds
        key = (tuple(x.shape), None if mask is None else (tuple(mask.shape), mask.dtype), keep, hidden)
        self.new_step()
        return self.call(self._forward, key, ids, mask, pos, keep, embeds, hidden)

    def new_step(self) -> None:
        """Mark the start of a decoding step: the outputs of the last step's compiled calls are consumed, so CUDA
        graphs may reuse their memory. `step` marks one itself; a decoder that makes several compiled calls in a
        step, each reading the last one's outputs (`call`), marks once before them."""
        if self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()

    def call(self, fn: Callable[..., Any], key: Hashable, *args: Any) -> Any:
        """`fn(*args)` through `torch.compile` (one compiled function per `fn`, `dynamic=False`: a graph per input
        shape) within the current step (`new_step`); `key` names the shape, and the first call of each key on this
        cache counts in `compile_s`. The model's forward is `step`; a decoder that runs the model's layers itself
        (paper 4's layer subsets) compiles its own functions over this session's cache here."""
        compiled = self._compiled.get(fn)
        if compiled is None:
            mode = compile_mode(self.device) if COMPILE_BACKEND == "inductor" else None
            compiled = self._compiled[fn] = torch.compile(fn, backend=COMPILE_BACKEND, mode=mode, dynamic=False)
        if self._frozen:
            self._pin()
        key = (fn, self.shape, key)
        if key in self._shapes:
            with compiled_on(self.device):  # a recompile (a guard that failed) gets the same settings
                return compiled(*args)
        t0 = time.perf_counter()
        with compiled_on(self.device):
            out = compiled(*args)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.compile_s += time.perf_counter() - t0
        self._shapes.add(key)
        return out
