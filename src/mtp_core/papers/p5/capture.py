"""The trunk's greedy continuations with its last hidden states at every position (paper 5's self-distillation
data, §1.1 / Medusa `data_generation`, and the calibration of the offline search, spec §4.2).

Decoded by the tree core itself (`TreeDecoder` drafting nothing: one plain verification forward per token), so
the tokens are reference greedy's and the hidden states come from the same forward path the heads decoders see;
batched with left padding, rows pruned as they stop. A `Trajectory` holds, for a prompt p_1..p_P and its
continuation x_1..x_n (stop-trimmed), the hidden states of the P + n - 1 inputs p_1..p_P, x_1..x_{n-1}: position i
produced token i + 1 of the sequence, so the state whose root is x_s reads the hidden state at P + s - 2 (the
input whose output was x_s) and the trunk's logits there are `lm_head` of it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...decoding.base import StopCriteria
from ...decoding.tree import Draft, TreeDecoder, TreeState

log = logging.getLogger(__name__)


@dataclass
class Trajectory:
    prompt: list[int]
    tokens: list[int]  # the continuation, stop-trimmed
    hidden: np.ndarray  # [P + n - 1, H] float32 (float16 on disk)
    stop_reason: str

    @property
    def sequence(self) -> list[int]:
        return self.prompt + self.tokens


class _CaptureDecoder(TreeDecoder):
    """Plain greedy steps on the tree core that keep every position's final hidden state (not registered)."""

    needs_hidden = True
    needs_prompt_hidden = True

    def start(self, state: TreeState) -> None:
        mask = state.ctx.kv_mask
        self.rows: list[list[torch.Tensor]] = [
            [state.prompt_hidden[i, mask[i]].float().cpu()] for i in range(state.ctx.batch_size)
        ]

    def propose(self, state: TreeState) -> Draft | None:
        return None

    def verified(self, state: TreeState) -> None:
        h = state.last.hidden[:, 0].float().cpu()  # the root's: the one input of a plain step
        for b, row in enumerate(state.rows.tolist()):
            self.rows[row].append(h[b : b + 1])


@torch.inference_mode()
def greedy_trajectories(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop: StopCriteria,
    batch_size: int = 8,
) -> list[Trajectory]:
    """Greedy continuations of `prompts` (batches of `batch_size`) with their hidden states (module docstring)."""
    out: list[Trajectory] = []
    dec = _CaptureDecoder(model, tokenizer)
    for i in range(0, len(prompts), batch_size):
        batch = [list(p) for p in prompts[i : i + batch_size]]
        gens = dec.generate(batch, max_new_tokens, stop)
        for p, g, rows in zip(batch, gens, dec.rows):
            h = torch.cat(rows)[: len(p) + len(g.tokens) - 1]
            out.append(Trajectory(p, list(g.tokens), h.numpy(), g.stop_reason))
        log.info(
            "greedy trajectories: %d of %d prompts (%.1f s this batch)",
            len(out),
            len(prompts),
            gens[0].prefill_s + gens[0].decode_s,
        )
    return out
