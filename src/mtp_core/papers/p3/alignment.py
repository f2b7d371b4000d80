"""Paper 3, Section 3.2 and Figure 2: how decoder layers align a mask token's hidden state with that of the next
true token.

For a prompt and its greedy continuation x_1..x_T, a mask token hung on x_t (position of x_{t+1}, seeing the
prompt and x_1..x_t, exactly where the probing decoder hangs it: `draft_trees.mask_chain_parents`) and the true
token x_{t+1} both predict x_{t+2}. Per layer we record the cosine similarity of their hidden states, and whether
the mask's prediction would be accepted: x_{t+2} among the mask's top-`topk` tokens (top-1: a depth-1 chain draft
is accepted). The paper reports that accepted masks climb to high similarity in the late layers while rejected
ones plateau lower.

All masks of a prompt ride in one forward over `[prompt, x_1..x_T, mask_1..mask_T]` with a 4D visibility mask
(no KV cache), so every layer's hidden states come out of `output_hidden_states`. Mask embeddings come from the
probing decoder's own strategies (`ProbingDecoder.initial_embeddings`, and for `prompt_mean` with alpha > 0 the
same token-by-token moving average `ema_update` the decoder applies to every emitted token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch

from ...decoding.tree import attn_is_eager, chunk_attention_mask
from .mask_embeddings import ema_update
from .probing import ProbingDecoder

COLUMNS = ["prompt", "category", "t", "layer", "cosine", "accepted", "rank"]


def mask_embeddings(dec: ProbingDecoder, prompt: Sequence[int], cont: Sequence[int]) -> torch.Tensor:
    """[T, H] the (scaled) mask embedding the decoder hangs on each continuation token x_t, after folding the
    prompt and x_1..x_t into it as the decoder does (prompt_mean with alpha > 0; last_n with context)."""
    model = dec.model
    emb = model.get_input_embeddings()
    device = emb.weight.device
    ids = torch.tensor([list(prompt)], device=device)
    e = dec.initial_embeddings(ids, torch.ones_like(ids))  # [1, H] float32
    out = []
    with torch.no_grad():
        for tok in cont:
            x = emb(torch.tensor([[tok]], device=device)).float()
            if dec.strategy == "prompt_mean" and dec.alpha > 0:
                e = ema_update(e, x, torch.tensor([1]), dec.alpha)
            elif dec.strategy == "last_n" and dec.last_n_context:
                e = x[:, 0]
            out.append(e[0])
    return torch.stack(out) * dec.scale


def probe_layout(prompt_len: int, cont_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Visibility [N, N] (bool) and position ids [N] of `[prompt, x_1..x_T, mask_1..mask_T]`, N = P + 2T: the
    sequence is causal; mask t (row P + T + t - 1) sees the prompt, x_1..x_t and itself, at x_{t+1}'s position."""
    p, t = prompt_len, cont_len
    n = p + 2 * t
    vis = torch.zeros(n, n, dtype=torch.bool)
    vis[: p + t, : p + t] = torch.ones(p + t, p + t, dtype=torch.bool).tril()
    for j in range(t):  # mask hung on x_{j+1} (row p + j)
        row = p + t + j
        vis[row, : p + j + 1] = True
        vis[row, row] = True
    pos = torch.cat([torch.arange(p + t), torch.arange(p + 1, p + t + 1)])
    return vis, pos


@torch.inference_mode()
def probe_hidden_states(
    model: torch.nn.Module, prompt: Sequence[int], cont: Sequence[int], mask_emb: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward of `[prompt, cont, masks]`: hidden states [layers + 1, N, H] (embeddings first) and logits
    [N, V] (float32, on the CPU)."""
    p, t = len(prompt), len(cont)
    emb = model.get_input_embeddings()
    device, dtype = emb.weight.device, emb.weight.dtype
    ids = torch.tensor([list(prompt) + list(cont)], device=device)
    inputs = torch.cat([emb(ids), mask_emb.to(device=device, dtype=dtype)[None]], dim=1)
    vis, pos = probe_layout(p, t)
    mask = chunk_attention_mask(
        torch.zeros(1, 0, dtype=torch.bool, device=device), vis.to(device), dtype if attn_is_eager(model) else None
    )
    out = model(inputs_embeds=inputs, attention_mask=mask, position_ids=pos[None].to(device), output_hidden_states=True)
    hidden = torch.stack([h[0] for h in out.hidden_states]).float().cpu()
    return hidden, out.logits[0].float().cpu()


def alignment_rows(
    model: torch.nn.Module,
    dec: ProbingDecoder,
    prompt: Sequence[int],
    cont: Sequence[int],
    topk: int = 1,
    prompt_id: str = "",
    category: str = "",
) -> tuple[list[dict[str, Any]], float]:
    """Per (mask t, layer) the cosine similarity of mask t (hung on x_t) and the true x_{t+1}, with `accepted`
    (x_{t+2} in the mask's top-`topk`) and the rank of x_{t+2} among the mask's logits; for t = 1..T-2.
    Also returns the fraction of sequence positions whose argmax reproduces `cont` (1.0 for a greedy `cont`)."""
    p, t = len(prompt), len(cont)
    if t < 3:
        return [], 1.0
    hidden, logits = probe_hidden_states(model, prompt, cont, mask_embeddings(dec, prompt, cont))
    seq_pred = logits[p - 1 : p + t - 1].argmax(-1)
    consistent = float((seq_pred == torch.tensor(list(cont))).float().mean())
    rows = []
    for j in range(t - 2):  # mask on x_{j+1} vs x_{j+2}; both predict x_{j+3}
        m_row, x_row, target = p + t + j, p + j + 1, cont[j + 2]
        rank = int((logits[m_row] > logits[m_row, target]).sum())
        cos = torch.nn.functional.cosine_similarity(hidden[:, m_row], hidden[:, x_row], dim=-1)
        for layer, c in enumerate(cos.tolist()):
            rows.append(
                {
                    "prompt": prompt_id,
                    "category": category,
                    "t": j + 1,
                    "layer": layer,
                    "cosine": c,
                    "accepted": rank < topk,
                    "rank": rank,
                }
            )
    return rows, consistent


def summarize(frame: pd.DataFrame) -> dict[str, Any]:
    """Per layer and outcome (accepted / rejected): mean, std and count of the cosine similarity; plus the mask
    count and acceptance rate (each mask counted once)."""
    masks = frame[frame["layer"] == 0]
    out: dict[str, Any] = {
        "masks": int(len(masks)),
        "accepted_rate": float(masks["accepted"].mean()) if len(masks) else None,
        "layers": {},
    }
    for (layer, acc), g in frame.groupby(["layer", "accepted"]):
        d = out["layers"].setdefault(int(layer), {})
        c = g["cosine"].to_numpy()
        d["accepted" if acc else "rejected"] = {
            "mean": float(c.mean()),
            "std": float(c.std(ddof=1)) if len(c) > 1 else None,
            "n": int(len(c)),
        }
    return out
