"""The cyclical schedule of DMTD as pure functions: which columns are cycle starts (the mask M of Eq. 3), the cycle
offset of every prediction, and the Percentage of Layers per Token (Eq. 7).

Two schedules:

* **training** (phase A, §2.1 Eq. 3): `m_i = 1 iff (i + offset) mod τ == 0`, `i` the token's position in its row
  (its column when rows are not packed; the official code's `arange(seq_len) % mtp_horizon`; `offset` 0 for
  `phase: row`, a per-row draw for `phase: random`). The prompt is masked cyclically too.
* **decoding** (phase B, §2.2 Fig. 3): the prompt x_0..x_{n-1} runs through every layer (M = 1 on every prompt
  column) and its last column n-1 is the first cycle start (the prefill emits x_n); then column c is a cycle start
  iff (c - (n-1)) mod τ == 0. This is the schedule the `dmtd` decoder runs; the teacher-forced evaluation uses it to
  score what generation would see.

The prediction made at column c (of token c+1) has cycle offset j = the number of late-only steps since the last
cycle start: j = 0 is a full-depth prediction, j = τ-1 the furthest ahead.
"""

from __future__ import annotations

import torch


def _check_tau(tau: int) -> None:
    if int(tau) < 1:
        raise ValueError(f"cycle length tau must be >= 1, got {tau}")


def training_offsets(positions: int | torch.Tensor, tau: int, offsets: torch.Tensor | None = None) -> torch.Tensor:
    """Cycle offset of the prediction at each position under the training mask: (position + offset) mod τ.

    `positions`: a width (columns 0..width-1, [width]; with per-row `offsets` [B]: [B, width]) or a tensor of
    positions (packed rows restart at 0), with `offsets` of its shape (phase random: each token its row's)."""
    _check_tau(tau)
    if isinstance(positions, int):
        cols = torch.arange(positions)
        return cols % tau if offsets is None else (cols[None, :] + offsets.to(cols.device)[:, None]) % tau
    return positions % tau if offsets is None else (positions + offsets.to(positions.device)) % tau


def training_mask(positions: int | torch.Tensor, tau: int, offsets: torch.Tensor | None = None) -> torch.Tensor:
    """M of Eq. 3 (`training_offsets` == 0): bool, the shape of the offsets."""
    return training_offsets(positions, tau, offsets) == 0


def decode_offsets(prompt_lens: torch.Tensor, width: int, tau: int) -> torch.Tensor:
    """[B, width] cycle offset of the prediction at each column of right-padded rows whose prompts have
    `prompt_lens` [B] tokens (decoding schedule): (c - (n-1)) mod τ for c >= n-1, and 0 on the prompt (full depth)."""
    _check_tau(tau)
    rel = torch.arange(width)[None, :] - (prompt_lens.long()[:, None] - 1)
    return torch.where(rel >= 0, rel % tau, torch.zeros_like(rel))


def decode_mask(prompt_lens: torch.Tensor, width: int, tau: int) -> torch.Tensor:
    """[B, width] M of the decoding schedule (phase B): 1 on the prompt, then every τ-th column from its last one."""
    return decode_offsets(prompt_lens, width, tau) == 0


def is_cycle_start(step: int, tau: int) -> bool:
    """Whether generation step `step` (0 = the prefill, which emits the first new token) runs every layer."""
    _check_tau(tau)
    return step % tau == 0


def plt(num_layers: int, tau: int, decoding_layers: int, encoding_layers: int = 0) -> float:
    """Percentage of Layers per Token (Eq. 7), extended to ExDy (late-only steps run the encoding layers
    too): 1/τ + (τ-1)/τ · (L_e + L_d)/L; the paper's formula at E = 0."""
    _check_tau(tau)
    return 1.0 / tau + (tau - 1) / tau * (encoding_layers + decoding_layers) / num_layers
