"""The fast decode path: a preallocated (static) KV cache and forwards compiled at fixed shapes.

Every decoder takes `backend`: `eager` runs the model's own forward on a growing `DynamicCache` (the
papers' regime, and the default), `compiled` runs it on a `StaticSession`, which a decoder offers where its class
lists `compiled` in its `BACKENDS` (`decoding.base.Decoder`; others refuse it when the config is checked). Greedy
and sampling run on it so far.

A `StaticSession` holds, for one decoder:

* a `transformers.StaticCache` for the batch in hand, its length rounded up to the next of `cache_slots`' ladder
  (64, 96, 128, 192, 256, 384, ...: at most 1.5x what the batch needs, about two graphs per doubling of the
  length) so that batches of similar prompts share one cache and one compiled graph. Every step attends over the
  whole cache, so the cache is sized tightly rather than windowed (the measurements behind the choice: decision
  0026, docs/measurements.md). Cropping moves its write pointer back (the tensors keep their addresses, as CUDA
  graphs need) and `reset` empties it between batches;
* the prefill, run eager (its shape changes with every batch; compiling it would recompile per prompt);
* every later forward through one `torch.compile`d function (`dynamic=False`: a graph per input shape; the mode
  is `compile_mode`, CUDA graphs on CUDA). Forwards of many rows run at `ROW_BUCKETS` sizes (`bucket_rows`), so a
  verifier of chunks of any size would compile at most `len(ROW_BUCKETS)` graphs per batch shape; so far
  `measure_static_costs` prices those shapes, and the tree core does not run on the session yet.

Compilation happens on the first forward of each shape; its time is kept apart (`compile_s`) so that the bench
can report it beside decoding. Inductor caches what it compiled (`/tmp/torchinductor_$USER`, or
`$TORCHINDUCTOR_CACHE_DIR`), so later jobs on the same machine compile faster: SmolLM2-135M's one-row step took
70 s to compile in a first job on this project's 2-core CPU, 12 s in a second.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import StaticCache

MIN_CACHE_SLOTS = 64
ROW_BUCKETS = (1, 4, 8, 16, 32, 64, 128)
# `torch.compile`'s backend; tests of the cache logic set `aot_eager`, which traces the same graph but builds no kernels
COMPILE_BACKEND = "inductor"


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
        mode = compile_mode(self.device) if COMPILE_BACKEND == "inductor" else None
        self._compiled: Callable[..., torch.Tensor] = torch.compile(
            self._forward, backend=COMPILE_BACKEND, mode=mode, dynamic=False
        )

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
        self.cache = StaticCache(config=self.model.config, max_cache_len=shape[1])
        self.shape = shape

    def crop(self, n_drop: int) -> None:
        """Forget the last `n_drop` slots (the next forward overwrites them)."""
        if n_drop > 0:
            assert self.cache is not None
            self.cache.crop(-n_drop)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor, keep: int) -> torch.Tensor:
        return self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=self.cache, logits_to_keep=keep
        ).logits

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor) -> torch.Tensor:
        """The prompt forward, eager; logits of the last position, [B, V]. `mask`: None or [B, cache length]."""
        return self._forward(ids, mask, pos, 1)[:, -1]

    def step(self, ids: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor, keep: int = 1) -> torch.Tensor:
        """A compiled forward of `ids` [B, R] at positions `pos` [B, R]; the logits of the last `keep` rows
        (0: all). `mask`: None (causal), [B, cache length] (0/1 per slot) or a 4-D [B, 1, R, cache length] one."""
        if self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are consumed: its graph may rerun
        key = (self.shape, tuple(ids.shape), None if mask is None else (tuple(mask.shape), mask.dtype), keep)
        if key in self._shapes:
            return self._compiled(ids, mask, pos, keep)
        t0 = time.perf_counter()
        out = self._compiled(ids, mask, pos, keep)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.compile_s += time.perf_counter() - t0
        self._shapes.add(key)
        return out


@torch.inference_mode()
def measure_static_costs(
    model: torch.nn.Module, prompt: Sequence[int], rows: Sequence[int], reps: int = 5
) -> dict[str, Any]:
    """The compiled twin of `cost.calibrate_on_prompt`: seconds of one verification forward of a star-shaped tree
    chunk of R rows (R in `rows`, each a `ROW_BUCKETS` size: the shapes a compiled decoder runs) on the static cache
    of `prompt`, with a 4-D mask and the logits of every row, as tree verification needs; medians of `reps`
    interleaved timings after one untimed call per shape (its compilation, reported as `compile_s`)."""
    from .cost import timed_call
    from .tree import ancestor_mask, chunk_attention_mask

    if any(r != bucket_rows(r) for r in rows):
        raise ValueError(f"rows must be compiled sizes {ROW_BUCKETS}, got {list(rows)}")
    session = StaticSession(model)
    device = session.device
    session.begin(1, len(prompt) + max(rows))
    ids = torch.tensor([list(prompt)], device=device)
    session.prefill(ids, None, torch.arange(len(prompt), device=device)[None])
    filled = len(prompt)
    chunks = {}
    for r in rows:
        parents = torch.tensor([-1] + [0] * (r - 1))
        anc = ancestor_mask(parents)
        mask = chunk_attention_mask(torch.ones(1, filled, dtype=torch.bool, device=device), anc.to(device))
        mask = torch.nn.functional.pad(mask, (0, session.length - mask.shape[-1]), value=False)
        pos = (filled + anc.sum(1) - 1).to(device)[None]
        chunks[r] = (ids[:, -1:].expand(1, r).contiguous(), mask, pos)

    def verify(r: int) -> None:
        session.step(*chunks[r], keep=0).argmax(-1)
        session.crop(r)

    for r in rows:
        verify(r)  # compiles this shape
        verify(r)  # CUDA graphs record on a shape's second call
    times: dict[int, list[float]] = {r: [] for r in rows}
    for _ in range(max(1, reps)):
        for r in rows:
            times[r].append(timed_call(lambda r=r: verify(r), device))
    return {"seconds": {r: statistics.median(t) for r, t in times.items()}, "compile_s": session.compile_s}
