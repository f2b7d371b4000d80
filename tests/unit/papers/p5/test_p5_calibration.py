"""The calibration table against the model itself (brute force: one plain forward over prompt + continuation per
prompt): App. A's block-start entropy and the score's p0 at the distribution that produced each state's root, and
Medusa's rank of every head's target (teacher-forced; -1 beyond the top 10, outside the draft vocabulary or past
the end) and its top-1 probability (the chain the path value reads)."""

from __future__ import annotations

import pytest
import torch

from mtp_core.decoding.tree import MEDUSA_TOPK
from mtp_core.models.heads import load_heads
from tests.unit.papers.p5.p5_world import world
from tests.unit.papers.p5.test_p5_simulation import table_of


def test_table_rows_from_a_plain_forward():
    w = world()
    m = w.loaded.model
    heads = load_heads(w.heads["medusa"], m).bind(m)
    table = table_of("medusa")
    vocab = heads.out.vocab_ids.tolist()
    checked = {"ranks": 0, "misses": 0}
    for prompt, t in zip(w.prompts[:4], table[:4]):
        with torch.inference_mode():
            out = m(input_ids=torch.tensor([prompt + t.tokens.tolist()]), output_hidden_states=True)
        logits, hidden = out.logits[0].float(), out.hidden_states[-1][0]
        for i in range(t.n):
            at = len(prompt) - 1 + i  # the input whose output was the root x_{i+1}
            probs = torch.softmax(logits[at], -1)
            assert t.p0[i] == pytest.approx(float(probs.max()), rel=1e-4)
            assert t.entropy[i] == pytest.approx(float(torch.special.entr(probs).sum()), rel=1e-4, abs=1e-5)
            for j in range(heads.num_heads):
                with torch.inference_mode():
                    lg = heads.head_logits(hidden[at][None], j)[0].float()
                assert t.chain[i, j] == pytest.approx(float(torch.softmax(lg, -1).max()), rel=1e-4)
                k = i + 1 + j  # head j's target in state i
                rank = -1
                if k < t.n and int(t.tokens[k]) in vocab:
                    rank = int((lg > lg[vocab.index(int(t.tokens[k]))]).sum())
                    rank = rank if rank < MEDUSA_TOPK else -1
                assert int(t.ranks[i, j]) == rank, (i, j)
                checked["ranks" if rank >= 0 else "misses"] += 1
    assert checked["ranks"] > 20 and checked["misses"] > 20  # both kinds occur
