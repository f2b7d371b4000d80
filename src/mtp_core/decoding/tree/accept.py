"""Acceptance rules of one tree verification (step 2 of `decoding.tree`): which drafted nodes a row accepts.

`greedy_accept` (lossless, Medusa `evaluate_posterior` at temperature 0) and `typical_accept` (Medusa's typical
acceptance, lossy), vectorised over rows and nodes; both honour `allowed` (Hydra's `max_accepts`, paper 5's union
tree rollouts). `accepted_nodes` is the ancestor closure both share.
"""

from __future__ import annotations

import torch

from .buffers import TreeBuffers


def greedy_accept(
    node_argmax: torch.Tensor, candidates: torch.Tensor, buffers: TreeBuffers, allowed: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy tree acceptance (Medusa `evaluate_posterior`, temperature 0), vectorised over rows and nodes.

    `node_argmax` [B, N]: the model's argmax at every node; `candidates` [B, N-1]: drafted tokens (-1 = none);
    `allowed` [N] bool: nodes that may be accepted (None: all). Returns `(num_accepted [B], last_node [B],
    path [B, D+1], tokens [B, D+1])`; `tokens` are the accepted drafts followed by the bonus token (the argmax at
    `last_node`), -1 padded.
    """
    return _greedy_from_ok(node_argmax, candidates, buffers, node_ok(node_argmax, candidates, buffers, allowed))


def _greedy_from_ok(
    node_argmax: torch.Tensor, candidates: torch.Tensor, buffers: TreeBuffers, ok: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    accepted = accepted_nodes(ok, buffers)
    depth = buffers.position_ids.to(ok.device)
    last_node = torch.where(accepted, depth[None], -1).argmax(1)  # first maximum: tie-break in node order
    return _emit(node_argmax, candidates, buffers, last_node)


def node_ok(
    node_argmax: torch.Tensor, candidates: torch.Tensor, buffers: TreeBuffers, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """[B, N] bool: node i's token equals the argmax at its parent (the root is always ok), within `allowed`."""
    dev = node_argmax.device
    parents = buffers.parents.to(dev)
    cand = candidates.to(dev)
    ok = torch.ones_like(node_argmax, dtype=torch.bool)
    ok[:, 1:] = (cand == node_argmax[:, parents[1:]]) & (cand >= 0)
    return ok if allowed is None else ok & allowed.to(dev)[None]


def accepted_nodes(ok: torch.Tensor, buffers: TreeBuffers) -> torch.Tensor:
    """[B, N] bool: nodes whose own and every ancestor's `ok` hold (accepted under either rule)."""
    return ~((~ok)[:, None, :] & buffers.attn_mask.to(ok.device)[None]).any(-1)


def typical_accept(
    node_logits: torch.Tensor,
    candidates: torch.Tensor,
    buffers: TreeBuffers,
    temperature: float,
    posterior_threshold: float = 0.09,
    posterior_alpha: float = 0.3,
    allowed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Medusa's typical acceptance (`evaluate_posterior` with `sampling="typical"`, `fast=True`; Hydra's with
    `max_accepts` = `allowed`), per node instead of per retrieve row, which is the same rule.

    At each node's parent p = softmax(logits / T); the node's token x passes when p(x) > min(eps, alpha * exp(-H(p))),
    H = -sum p log(p + 1e-5) (eps = `posterior_threshold`, alpha = `posterior_alpha`, Medusa's defaults 0.09 and
    0.3); a node is accepted when it and its ancestors pass. The deepest accepted depth wins; among its nodes the
    largest path log-likelihood sum log p(x) (first in node order on exact ties; Medusa takes the first retrieve
    row). The bonus token is the argmax at the chosen node (no sampling: Medusa's `fast` root). NOT lossless: the
    output differs from greedy and from sampling the model (Medusa issue #56).

    Returns `greedy_accept`'s 4-tuple and `ok` [B, N] (each node's token passes at its parent, `allowed` or not).
    """
    if temperature <= 0:
        raise ValueError(f"typical acceptance needs temperature > 0, got {temperature}")
    dev = node_logits.device
    parents = buffers.parents.to(dev)
    probs = torch.softmax(node_logits.float() / temperature, dim=-1)
    entropy = -(probs * torch.log(probs + 1e-5)).sum(-1)  # [B, N]
    limit = torch.clamp(posterior_alpha * torch.exp(-entropy), max=posterior_threshold)
    cand = candidates.to(dev)
    p_cand = probs[:, parents[1:]].gather(-1, cand.clamp(min=0)[..., None]).squeeze(-1)  # [B, N-1]
    ok = torch.ones(probs.shape[:2], dtype=torch.bool, device=dev)
    ok[:, 1:] = (p_cand > limit[:, parents[1:]]) & (cand >= 0)
    accepted = accepted_nodes(ok if allowed is None else ok & allowed.to(dev)[None], buffers)
    depth = buffers.position_ids.to(dev)
    deepest = torch.where(accepted, depth[None], -1)
    logp = torch.cat([torch.zeros_like(p_cand[:, :1]), torch.log(p_cand)], dim=1)
    path_ll = logp @ buffers.attn_mask.to(dev, logp.dtype).T  # [B, N]: sum over ancestors and self
    best = deepest == deepest.max(1, keepdim=True).values
    last_node = torch.where(best, path_ll, -torch.inf).argmax(1)
    return (*_emit(node_logits.argmax(-1), candidates, buffers, last_node), ok)


def _emit(
    node_argmax: torch.Tensor, candidates: torch.Tensor, buffers: TreeBuffers, last_node: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(num_accepted, last_node, path, tokens)` of acceptance ending at `last_node` (its path is accepted)."""
    b, dev = node_argmax.shape[0], node_argmax.device
    num_accepted = buffers.position_ids.to(dev)[last_node]
    path = buffers.node_paths.to(dev)[last_node]
    all_tok = torch.cat([node_argmax.new_zeros(b, 1), candidates.to(dev)], dim=1)
    tokens = torch.cat([all_tok.gather(1, path.clamp(min=0))[:, 1:], all_tok.new_full((b, 1), -1)], dim=1)
    tokens.scatter_(1, num_accepted[:, None], node_argmax.gather(1, last_node[:, None]))
    j = torch.arange(tokens.shape[1], device=dev)
    tokens = tokens.masked_fill(j[None] > num_accepted[:, None], -1)
    return num_accepted, last_node, path, tokens
