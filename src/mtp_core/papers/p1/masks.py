"""P1 blocked regions: the training batch layout, position ids and blocked attention of paper 1 (§4.2-4.4).

Paper 1 ("MTP via self-distillation") supervises many MTP problems in one sequence (§4.2, Fig. 2). A row of
`S` slots is cut into `M` regions of width `W = S / M`; with `K = k - 1` mask tokens per span, region `r` holds
`P = W - K` ground-truth (GT) tokens followed by `K` mask tokens. The masks stand at the source positions of
the next `K` tokens, and the next region restarts GT at exactly those positions, so the GT hidden by a span
reappears after it with its original positions (RoPE position = source position, §4.2).

Layout (`d = offset`, `-(P-1) <= d <= 0`, the official code's sign convention, §4.4 and Fig. 3): slot `s` has
`u = s - d`, region `r = u // W`, in-region index `j = u % W` and source position `r*P + j + d`; it is a mask
iff `j >= P` and `r < M`. A negative offset shifts every boundary left by `|d|`: region 0 keeps only `P - |d|`
GT tokens and the last `|d|` slots form an unsupervised GT tail (region id `M`) that continues the source.
Worked example: S=18, M=3, k=3, d=-2 gives sources
`[0,1,2,3,2,3,4,5,6,7,6,7,8,9,10,11,10,11]`, masks at slots 2,3,8,9,14,15 and prediction slots 1-3, 7-9, 13-15.

Prediction slots of region `r` (§3.2): its last GT slot (which predicts y_{t+1} as plain NTP) and its `K` masks,
`k` slots whose targets are the next tokens y_{t+1..t+k} of the GT prefix x_{0..t}.

End of a row (App. A.1): the region whose slot targets first contain an end token (a position past the row's
length, i.e. padding, or one of `eos_ids`) is the last supervised region; later regions are unsupervised.
Slots after that region whose source lies past the row are padding, excluded from attention as keys.

Attention (§4.3, Figs. 3-4), defined once in `blocked_allowed`: GT slots are causal over GT slots and blind to
every mask span; a mask slot sees the upstream GT (up to and including its region's last GT token) and the
masks of its own span causally, or the whole span with `bda=True` (the BDA ablation, App. A.6). The same
function gives the dense boolean / float-additive `[B,1,S,S]` masks (SDPA, CPU training) and the
flex_attention `BlockMask` (GPU).

Where the official code differs, on purpose:
* one mask id in every slot (its training inputs hold `mask_id + j`);
* the end region uses the shifted region boundaries for negative offsets (it uses the unshifted ones,
  which can drop the region that holds the end one region early), and counts `eos_ids` as well as padding
  (it looks for the first target equal to `pad_token_id` only; with `eos_ids=()` ours does the same);
* BDA makes a span bidirectional among its masks only (its BDA also lets the GT token before a span see
  the span's masks, so that GT logit is no longer the NTP logit);
* trailing padding beyond the last supervised region is excluded from attention (it attends to everything;
  this never changes a supervised logit, since those slots come later in slot order);
* k and the offset come from independent seeded streams; `coupled_draw=True` reproduces its coupled draw.

Complexity: the layout is O(S); building a batch is O(B * S) gathers plus O(B * S) for the end search, with
loops only over rows when the input is a list; the dense mask is O(B * S^2); `create_block_mask` evaluates
the same predicate over all (q, kv) pairs, O(B * S^2), once per step.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from .settings import check_geometry

# seed of the official coupled draw: Random(step + rank * 12345678)
_OFFICIAL_RANK_STRIDE = 12345678


@dataclass(frozen=True)
class BlockedLayout:
    """The row-independent part of a blocked batch (§4.2, Fig. 2); every row of a batch shares it.

    `source_index[s]` is the source position slot `s` holds (also its RoPE position), `is_mask[s]` marks mask
    slots, `region_ids[s]` is its region (`M` for the unsupervised tail of a negative offset) and
    `pred_slots[r]` are region r's `k` prediction slots: its last GT slot, then its `k-1` masks.
    """

    seq_len: int
    num_regions: int
    k: int
    offset: int
    width: int
    prefix_len: int
    source_index: torch.Tensor  # [S] long
    is_mask: torch.Tensor  # [S] bool
    region_ids: torch.Tensor  # [S] long, 0..M
    pred_slots: torch.Tensor  # [M, k] long

    @property
    def num_source_tokens(self) -> int:
        """Source tokens the layout reads (`M*P + K` at offset 0); targets read one more."""
        return int(self.source_index.max()) + 1


def blocked_layout(seq_len: int, num_regions: int, k: int, offset: int = 0) -> BlockedLayout:
    """Slot -> (source position, mask?, region) and the prediction slots, by index arithmetic (O(S))."""
    width, prefix = check_geometry(seq_len, num_regions, k, offset)
    u = torch.arange(seq_len) - offset
    region = u // width
    j = u % width
    source = region * prefix + j + offset
    is_mask = (j >= prefix) & (region < num_regions)
    r = torch.arange(num_regions)[:, None]
    pred = r * width + (prefix - 1) + torch.arange(k)[None, :] + offset
    return BlockedLayout(
        seq_len=seq_len,
        num_regions=num_regions,
        k=k,
        offset=offset,
        width=width,
        prefix_len=prefix,
        source_index=source,
        is_mask=is_mask,
        region_ids=region,
        pred_slots=pred,
    )


def blocked_allowed(
    q: torch.Tensor,
    kv: torch.Tensor,
    is_mask: torch.Tensor,
    region_ids: torch.Tensor,
    bda: bool = False,
    valid: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
) -> torch.Tensor:
    """THE blocked-attention predicate (§4.3): may slot `q` attend to slot `kv`? Broadcasts over index tensors.

    * GT query: GT keys at or before it (causal, skipping every mask span);
    * mask query: GT keys before it (the upstream GT up to its region's last GT token) and the masks of its
      own span at or before it, or the whole span if `bda` (App. A.6);
    * `valid[b, kv]` False (padding) hides a key, except from itself, so no row is empty.
    Used as the flex_attention `mask_mod` and, on index grids, for the dense masks.
    """
    q_mask, kv_mask = is_mask[q], is_mask[kv]
    causal = kv <= q
    same_span = q_mask & kv_mask & (region_ids[q] == region_ids[kv])
    span_ok = same_span if bda else same_span & causal
    allowed = (~kv_mask & causal) | span_ok
    if valid is not None:
        allowed = allowed & (valid[b, kv] | (q == kv))
    return allowed


@dataclass
class BlockedBatch:
    """A P1 training batch (§4.2): one example per row, `S` slots, layout shared by the rows.

    Per row: `input_ids` [B,S] (the mask id at mask slots, `pad_id` past a row's end), `position_ids` [B,S]
    (= source positions, for RoPE), `slot_targets` [B,S] (the token after each slot's source position),
    `targets` [B,M,k] (ground truth y_{t+1..t+k} at the prediction slots), `supervised` [B,M] (region kept
    by the end rule), `valid` [B,S] (False for padding keys), `lengths` [B] (tokens in each source row),
    `response_start` [B] (the row's first response token; None: unknown, every target counts as response).
    Shared: `source_index`, `is_mask`, `region_ids` [S] and `pred_slots` [M,k] (see `BlockedLayout`).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    slot_targets: torch.Tensor
    targets: torch.Tensor
    supervised: torch.Tensor
    valid: torch.Tensor
    lengths: torch.Tensor
    source_index: torch.Tensor
    is_mask: torch.Tensor
    region_ids: torch.Tensor
    pred_slots: torch.Tensor
    k: int
    offset: int
    num_regions: int
    width: int
    prefix_len: int
    mask_id: int
    pad_id: int
    bda: bool = False
    response_start: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def pred_mask(self) -> torch.Tensor:
        """[B,S] bool: the supervised prediction slots (what the loss reads), in slot order."""
        out = torch.zeros_like(self.valid)
        sup = self.supervised[:, :, None].expand(-1, -1, self.k)
        out[:, self.pred_slots.reshape(-1)] = sup.reshape(self.batch_size, -1)
        return out

    @property
    def response_targets(self) -> torch.Tensor:
        """[B,M,k] bool: the target of each prediction slot lies in its row's response (source position >=
        `response_start`); all True when the batch carries no response starts."""
        pos = self.source_index[self.pred_slots] + 1  # [M,k] source position of each target
        if self.response_start is None:
            return torch.ones((self.batch_size, *pos.shape), dtype=torch.bool, device=pos.device)
        return pos[None] >= self.response_start.to(pos.device)[:, None, None]

    def to(self, device: torch.device | str) -> BlockedBatch:
        """A copy with every tensor on `device`."""
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **moved)

    def allowed(self, b: torch.Tensor, q: torch.Tensor, kv: torch.Tensor, bda: bool | None = None) -> torch.Tensor:
        """`blocked_allowed` with this batch's geometry and padding (bda defaults to the batch's)."""
        bda = self.bda if bda is None else bda
        return blocked_allowed(q, kv, self.is_mask, self.region_ids, bda=bda, valid=self.valid, b=b)

    def dense_mask(self, dtype: torch.dtype | None = None, bda: bool | None = None) -> torch.Tensor:
        """[B,1,S,S] attention mask: bool (True = attend) if `dtype` is None, else additive float (0 / finfo.min).

        Pass the float form to HF models for eager attention (a bool mask is silently wrong there); sdpa
        takes either.
        """
        dev = self.input_ids.device
        b = torch.arange(self.batch_size, device=dev)[:, None, None]
        s = torch.arange(self.seq_len, device=dev)
        allowed = self.allowed(b, s[None, :, None], s[None, None, :], bda=bda)[:, None]
        if dtype is None:
            return allowed
        return torch.zeros(allowed.shape, dtype=dtype, device=dev).masked_fill(~allowed, torch.finfo(dtype).min)

    def mask_mod(self, bda: bool | None = None):
        """A flex_attention `mask_mod(b, h, q_idx, kv_idx)` over this batch's tensors (on their device)."""

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
            return self.allowed(b, q_idx, kv_idx, bda=bda)

        return mask_mod

    def block_mask(self, device: torch.device | str | None = None, bda: bool | None = None, **kwargs: Any):
        """The flex_attention `BlockMask` of the same predicate (GPU training; forward also runs on CPU)."""
        from torch.nn.attention.flex_attention import create_block_mask

        batch = self if device is None else self.to(device)
        dev = batch.input_ids.device
        return create_block_mask(
            batch.mask_mod(bda=bda),
            B=self.batch_size,
            H=None,
            Q_LEN=self.seq_len,
            KV_LEN=self.seq_len,
            device=dev,
            **kwargs,
        )

    def student_forced_inputs(self, pred_tokens: torch.Tensor) -> torch.Tensor:
        """Inputs of the student-forced teacher pass (§3.3): region r's mask j replaced by its prediction j.

        `pred_tokens` [B,M,k] are the student's tokens y'_{1..k} at the prediction slots; y'_{1..k-1} go into
        the k-1 mask slots (same positions, same attention), so teacher slot j scores y'_{j+1} given the GT
        prefix and y'_{1..j} (Eq. 2). Unsupervised regions are written too; they cannot affect kept slots.
        """
        out = self.input_ids.clone()
        if self.k > 1:
            out[:, self.pred_slots[:, 1:].reshape(-1)] = pred_tokens[:, :, : self.k - 1].reshape(self.batch_size, -1)
        return out


def _as_padded(
    rows: Sequence[Sequence[int]] | torch.Tensor, n: int, pad_id: int, lengths: Sequence[int] | torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows -> ([B, n] long tensor truncated / padded with `pad_id`, [B] true lengths)."""
    if isinstance(rows, torch.Tensor):
        if rows.dim() != 2:
            raise ValueError(f"rows must be a [B, L] tensor, got shape {tuple(rows.shape)}")
        B, L = rows.shape
        lens = torch.full((B,), L, dtype=torch.long) if lengths is None else torch.as_tensor(lengths, dtype=torch.long)
        x = torch.full((B, n), pad_id, dtype=torch.long)
        m = min(L, n)
        x[:, :m] = rows[:, :m].to(torch.long).cpu()
        keep = torch.arange(n)[None, :] < lens[:, None]
        x = torch.where(keep, x, torch.full_like(x, pad_id))
        return x, lens
    lens = torch.tensor([len(r) for r in rows], dtype=torch.long)
    if lengths is not None:
        raise ValueError("lengths is only for tensor rows; list rows carry their own lengths")
    x = torch.full((len(rows), n), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):  # a loop over rows, not tokens
        r = list(r[:n])
        if r:
            x[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return x, lens


def build_blocked_batch(
    rows: Sequence[Sequence[int]] | torch.Tensor,
    *,
    k: int,
    offset: int,
    num_regions: int,
    seq_len: int,
    mask_id: int,
    pad_id: int,
    eos_ids: Sequence[int] = (),
    lengths: Sequence[int] | torch.Tensor | None = None,
    bda: bool = False,
    response_start: Sequence[int] | torch.Tensor | None = None,
) -> BlockedBatch:
    """Build the P1 training batch of §4.2 (Fig. 2) from one example per row.

    `rows`: token-id lists, or a [B, L] tensor whose rows hold `lengths[b]` real tokens (all of them if
    `lengths` is None). Each row is read from position 0; it is truncated to the `num_source_tokens + 1`
    tokens the layout and its targets need and padded with `pad_id` (pass the EOS id, as the paper fills the
    last region with EOS, App. A.1). `eos_ids` are tokens that also end a row for the supervision rule;
    `response_start[b]` is row b's first response token (metrics of the targets that lie in the response).
    """
    lay = blocked_layout(seq_len, num_regions, k, offset)
    n = lay.num_source_tokens + 1
    x, lens = _as_padded(rows, n, pad_id, lengths)
    B = x.shape[0]
    src = lay.source_index
    input_ids = x[:, src]
    input_ids[:, lay.is_mask] = mask_id
    slot_targets = x[:, src + 1]
    targets = slot_targets[:, lay.pred_slots]

    # first end position e_b: the first source position whose target is padding or an EOS id (App. A.1)
    p = torch.arange(n - 1)
    ends = (p[None, :] + 1 >= lens[:, None]) | torch.isin(x[:, 1:], torch.as_tensor(list(eos_ids), dtype=torch.long))
    first_end = torch.where(ends.any(1), ends.float().argmax(1), torch.full((B,), n, dtype=torch.long))
    # region r's slot targets cover source positions up to t_r + K, t_r = (r+1)P + d - 1 its last GT position
    K = k - 1
    upper = (torch.arange(num_regions) + 1) * lay.prefix_len + offset - 1 + K
    supervised = torch.ones(B, num_regions, dtype=torch.bool)
    supervised[:, 1:] = first_end[:, None] > upper[None, :-1]
    # padding keys: slots after the last supervised region whose source is past the row
    last = supervised.sum(1) - 1
    last_slot = (last + 1) * lay.width + offset - 1
    slots = torch.arange(seq_len)
    valid = (src[None, :] < lens[:, None]) | (slots[None, :] <= last_slot[:, None])

    return BlockedBatch(
        input_ids=input_ids,
        position_ids=src[None, :].expand(B, -1).clone(),
        slot_targets=slot_targets,
        targets=targets,
        supervised=supervised,
        valid=valid,
        lengths=lens,
        source_index=src,
        is_mask=lay.is_mask,
        region_ids=lay.region_ids,
        pred_slots=lay.pred_slots,
        k=k,
        offset=offset,
        num_regions=num_regions,
        width=lay.width,
        prefix_len=lay.prefix_len,
        mask_id=mask_id,
        pad_id=pad_id,
        bda=bda,
        response_start=None if response_start is None else torch.as_tensor(response_start, dtype=torch.long),
    )


def draw_k_offset(
    step: int,
    *,
    seq_len: int,
    num_regions: int,
    k_max: int,
    k_min: int = 2,
    rank: int = 0,
    seed: int = 0,
    random_k: bool = True,
    random_offset: bool = True,
    coupled_draw: bool = False,
) -> tuple[int, int]:
    """(k, offset) for one training step (§4.4, §5.1: k uniform in [k_min, k_max], offset uniform in [-(P-1), 0]).

    Default: k and the offset come from two independent numpy streams seeded by (seed, stream, step, rank);
    the offset's range depends on the drawn k through P = W - (k - 1). `random_k=False` gives k = k_max
    (Static-k ablation), `random_offset=False` gives offset 0. `coupled_draw=True` reproduces the official
    draw bit for bit (at seed 0): `k = Random(s).randint(k_min, k_max)` and `offset = -Random(s).randint(0, P-1)`
    with the same `s = seed + step + rank * 12345678`, so both are first draws of identically seeded
    generators and strongly coupled (for k=9 at S=160, M=5 the offset is always -14 or -15).
    """
    if not 1 <= k_min <= k_max:
        raise ValueError(f"need 1 <= k_min ({k_min}) <= k_max ({k_max})")
    check_geometry(seq_len, num_regions, k_max, 0)
    width = seq_len // num_regions
    if coupled_draw:
        s = seed + step + rank * _OFFICIAL_RANK_STRIDE
        k = random.Random(s).randint(k_min, k_max) if random_k else k_max
        prefix = width - (k - 1)
        offset = -random.Random(s).randint(0, prefix - 1) if random_offset else 0
    else:
        k = int(np.random.default_rng([seed, 0, step, rank]).integers(k_min, k_max + 1)) if random_k else k_max
        prefix = width - (k - 1)
        offset = -int(np.random.default_rng([seed, 1, step, rank]).integers(0, prefix)) if random_offset else 0
    return k, offset
