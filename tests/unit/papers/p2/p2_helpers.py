"""Paper 2 test helpers: the literal, cache-free Algorithm 1 (App. D) as the decoder's oracle, and heads trained on a
tiny trunk's own greedy text so that drafts are often accepted (random heads almost never are)."""

from __future__ import annotations

import torch
from transformers.masking_utils import create_causal_mask

from mtp_core.models.heads.deepseek import DeepSeekMTPHeads
from mtp_core.papers.p2.losses import p2_loss
from mtp_core.papers.p2.settings import P2LossConfig


@torch.inference_mode()
def algorithm1(trunk, heads: DeepSeekMTPHeads, prompt: list[int], depths: int, budget: int):
    """Algorithm 1 line by line, without any cache: every iteration runs the main model f over all of x and each
    head g_k over all positions 0..n-1 (x_n = the newest verified token). Returns (verified tokens after the
    prompt, per-step m, per-step drafts, A, C_cmp, C_step). `budget` is N of line 7 (which counts the unverified
    drafts in L_gen); EOS is not checked (line 32 would stop at a chat prompt's own end-of-turn tokens)."""
    x, lp = list(prompt), len(prompt)
    a, c_cmp, c_step = [0] * depths, [0] * depths, 0
    steps, drafted = [], []
    l_gen = 0
    while l_gen < budget:
        ids = torch.tensor([x])
        out = trunk(input_ids=ids, output_hidden_states=True)
        p, h = out.logits[0].argmax(-1), out.hidden_states[-1]
        verified = True
        if l_gen > 0:
            c_step += 1
            m = 0
            for j in range(1, depths + 1):
                i = depths - j + 1
                c_cmp[j - 1] += 1
                x_hat = int(p[len(x) - i - 1])  # Sample(P_{|x|-i}), 1-based -> 0-based
                if x_hat != x[len(x) - i]:  # x_{|x|-i+1}
                    x = x[: len(x) - i] + [x_hat]
                    h = h[:, : len(x) - 1]
                    verified = False
                    break
                m += 1
            for t in range(m):
                a[t] += 1
            steps.append(m)
        if verified:
            h = h[:, : len(x)]
            x = x + [int(p[len(x) - 1])]
        n = len(x) - 1  # h covers positions 0..n-1
        step_drafts = []
        for k in range(1, depths + 1):
            pos = torch.arange(n)[None]
            tok = torch.tensor([x[k : n + k]])
            mask = create_causal_mask(
                config=heads.block_config, inputs_embeds=h, attention_mask=None, cache=None, position_ids=pos
            )
            h = heads.depth_forward(trunk, k, h, tok, pos, mask)
            nxt = int(trunk.lm_head(h[:, -1]).argmax(-1))
            x.append(nxt)
            step_drafts.append(nxt)
        drafted.append(step_drafts)
        l_gen = len(x) - lp
    verified_len = len(x) - depths
    return x[lp:verified_len], steps, drafted[: len(steps)], a, c_cmp, c_step


def train_heads(trunk, num_heads: int, sequences: list[list[int]], steps: int, beta: float = 0.5, seed: int = 0):
    """Heads trained with the paper's loss (frozen trunk) on `sequences` (e.g. the trunk's own greedy text of the
    test prompts, so that their drafts are often accepted), one sequence per step; deterministic."""
    torch.manual_seed(seed)
    heads = DeepSeekMTPHeads.from_trunk(trunk, num_heads)
    opt = torch.optim.AdamW(heads.parameters(), lr=5e-3)
    cfg = P2LossConfig(beta=beta, topn=32)
    for step in range(steps):
        ids = torch.tensor([sequences[step % len(sequences)]])
        with torch.no_grad():
            h0 = trunk.model(input_ids=ids).last_hidden_state
            main = trunk.lm_head(h0)
        hs = heads.forward_train(trunk, h0, ids)
        loss = p2_loss(main, [trunk.lm_head(h) for h in hs], ids, cfg, step).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return heads.eval()
