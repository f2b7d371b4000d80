"""The trunk's greedy continuations with its last hidden states at every position (paper 5's self-distillation
data, §1.1 / Medusa `data_generation`, and the calibration of the offline search), and the calibration
tables computed from them (`build_table`; the format is `calibration`'s).

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
from ...decoding.tree import MEDUSA_TOPK, Draft, TreeDecoder, TreeState
from ...models.heads import DraftHeads
from ...models.heads.hydra import HydraHeads
from .calibration import MISS, PromptTable

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


def _ranks(logits: torch.Tensor, target: torch.Tensor, topk: int) -> torch.Tensor:
    """Rank of each row's target index among its logits (number of strictly larger logits), MISS for targets
    outside the vocabulary (-1) or ranked >= topk."""
    at = logits.gather(-1, target.clamp(min=0)[:, None])
    rank = (logits > at).sum(-1)
    return torch.where((target >= 0) & (rank < topk), rank, MISS)


@torch.inference_mode()
def prompt_table(heads: DraftHeads, traj: Trajectory, lm_head: torch.nn.Module, topk: int = MEDUSA_TOPK) -> PromptTable:
    """The calibration rows of one greedy trajectory (heads bound to their trunk)."""
    dev = lm_head.weight.device
    p, n, k = len(traj.prompt), len(traj.tokens), heads.num_heads
    h = torch.from_numpy(np.asarray(traj.hidden, dtype=np.float32)).to(dev, lm_head.weight.dtype)
    toks = torch.tensor(traj.tokens, device=dev)
    idx = torch.arange(n, device=dev)
    probs = torch.softmax(lm_head(h[p - 1 : p - 1 + n]).float(), dim=-1)  # the root's distribution per state
    p0 = probs.max(-1).values
    entropy = -(probs * torch.log(probs.clamp(min=1e-30))).sum(-1)
    ranks = torch.full((n, k), MISS, dtype=torch.long, device=dev)
    chain = torch.zeros(n, k, device=dev)
    hydra = isinstance(heads, HydraHeads)
    if hydra:
        pos = torch.arange(h.shape[0], device=dev)[None]
        x = heads.prefix_forward(h[None], pos, None, None)[0, p - 1 : p - 1 + n]
        chain_toks = toks[:, None]
    else:
        x = h[p - 1 : p - 1 + n]
    for j in range(k):
        target_at = idx + 1 + j  # tokens[i + 1 + j] is head j's target in state i
        ok = target_at < n
        if hydra:
            path = (idx[:, None] + torch.arange(j + 1, device=dev)[None]).clamp(max=n - 1)  # root .. draft j
            logits = heads.head_logits(j, x, heads.embed(toks[path]))
            chain_logits = heads.head_logits(j, x, heads.embed(chain_toks))
            chain_toks = torch.cat([chain_toks, heads.out.token_ids(chain_logits.argmax(-1))[:, None]], dim=1)
        else:
            logits = chain_logits = heads.head_logits(x, j)
        target = heads.out.index_of(torch.where(ok, toks[target_at.clamp(max=n - 1)], -1))
        ranks[:, j] = _ranks(logits.float(), target, topk)
        chain[:, j] = torch.softmax(chain_logits.float(), dim=-1).max(-1).values
    return PromptTable(
        id="",
        tokens=np.asarray(traj.tokens, dtype=np.int64),
        ranks=ranks.cpu().numpy().astype(np.int16),
        chain=chain.cpu().numpy().astype(np.float32),
        p0=p0.cpu().numpy().astype(np.float32),
        entropy=entropy.cpu().numpy().astype(np.float32),
        prompt_len=p,
    )


def build_table(
    heads: DraftHeads, trajectories: Sequence[Trajectory], lm_head: torch.nn.Module, ids: Sequence[str]
) -> list[PromptTable]:
    out = []
    for i, t in zip(ids, trajectories):
        if not t.tokens:
            continue
        pt = prompt_table(heads, t, lm_head)
        pt.id = str(i)
        out.append(pt)
    return out
