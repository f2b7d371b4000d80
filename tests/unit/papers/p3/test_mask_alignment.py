"""Paper 3, Figure 2's analysis (mtp_core.papers.p3.alignment) on a tiny model: the one-forward layout against a
brute-force forward per mask, the acceptance flag, and the per-layer summary."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from mtp_core.decoding import build_decoder
from mtp_core.papers.p3.alignment import (
    alignment_rows,
    mask_embeddings,
    probe_hidden_states,
    probe_layout,
    summarize,
)
from mtp_core.papers.p3.figures import layer_curves
from mtp_core.papers.p3.probing import ProbingDecoder


def test_layout_masks_see_prefix_and_themselves():
    vis, pos = probe_layout(2, 3)  # rows: p0 p1 x1 x2 x3 m1 m2 m3
    assert vis.shape == (8, 8)
    assert vis[:5, :5].equal(torch.ones(5, 5, dtype=torch.bool).tril())
    assert vis[5].tolist() == [1, 1, 1, 0, 0, 1, 0, 0]  # mask on x1 sees p, x1, itself
    assert vis[7].tolist() == [1, 1, 1, 1, 1, 0, 0, 1]
    assert pos.tolist() == [0, 1, 2, 3, 4, 3, 4, 5]  # mask on x_t sits at x_{t+1}'s position


@pytest.mark.parametrize("strategy", ["prompt_mean", "vocab_mean"])
def test_one_forward_matches_a_forward_per_mask(tiny_llama, strategy):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompt = tiny_llama.encode("Hello there, how are you?")
    greedy = build_decoder("greedy", model, tok)
    cont = greedy.generate([prompt], 6, tiny_llama.stop_criteria())[0].tokens
    dec = ProbingDecoder(model, tok, strategy=strategy)
    emb = mask_embeddings(dec, prompt, cont)
    hidden, logits = probe_hidden_states(model, prompt, cont, emb)
    p, t = len(prompt), len(cont)
    assert hidden.shape[:2] == (model.config.num_hidden_layers + 1, p + 2 * t)
    e = model.get_input_embeddings()
    for j in (0, t - 1):  # mask j on x_{j+1}: a plain causal forward over prompt + x_1..x_{j+1} + mask
        ids = torch.tensor([prompt + cont[: j + 1]])
        inp = torch.cat([e(ids), emb[j][None, None].to(e.weight.dtype)], dim=1)
        with torch.inference_mode():
            out = model(inputs_embeds=inp, output_hidden_states=True)
        ref = torch.stack([h[0, -1] for h in out.hidden_states]).float()
        assert torch.allclose(hidden[:, p + t + j], ref, atol=1e-4)
        assert torch.allclose(logits[p + t + j], out.logits[0, -1].float(), atol=1e-4)


@torch.inference_mode()
def test_rows_equal_plain_forwards_of_each_mask_and_its_true_token(tiny_llama):
    """Every row of `alignment_rows` from two plain causal forwards: the mask hung on x_t (prompt, x_1..x_t, then
    the mask embedding) and the true x_{t+1} (prompt, x_1..x_{t+1}); per layer the cosine of their last hidden
    states, and the rank of x_{t+2} among the mask's logits (accepted: rank < topk)."""
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompt = tiny_llama.encode("Count: one two three")
    cont = build_decoder("greedy", model, tok).generate([prompt], 7, tiny_llama.stop_criteria())[0].tokens
    dec = ProbingDecoder(model, tok)
    emb, e = mask_embeddings(dec, prompt, cont), model.get_input_embeddings()
    want = []
    for t in range(1, len(cont) - 1):  # the mask on x_t and x_{t+1} both predict x_{t+2}
        ids = torch.tensor([prompt + cont[:t]])
        out_m = model(inputs_embeds=torch.cat([e(ids), emb[t - 1][None, None]], 1), output_hidden_states=True)
        out_x = model(input_ids=torch.tensor([prompt + cont[: t + 1]]), output_hidden_states=True)
        logits = out_m.logits[0, -1]
        rank = sum(1 for v in logits.tolist() if v > float(logits[cont[t + 1]]))
        for layer, (hm, hx) in enumerate(zip(out_m.hidden_states, out_x.hidden_states)):
            cos = float(hm[0, -1] @ hx[0, -1] / (hm[0, -1].norm() * hx[0, -1].norm()))
            want.append({"prompt": "p", "category": "c", "t": t, "layer": layer, "cosine": cos, "rank": rank})
    ranks = sorted({w["rank"] for w in want})
    assert len(ranks) > 1  # masks of several ranks: top-k with k = the second smallest splits them at a rank
    topk = ranks[1]
    rows, _ = alignment_rows(model, dec, prompt, cont, topk=topk, prompt_id="p", category="c")
    assert [{k: r[k] for k in ("prompt", "category", "t", "layer", "rank")} for r in rows] == [
        {k: w[k] for k in ("prompt", "category", "t", "layer", "rank")} for w in want
    ]
    assert [r["cosine"] for r in rows] == pytest.approx([w["cosine"] for w in want], abs=1e-4)
    assert [r["accepted"] for r in rows] == [w["rank"] < topk for w in want]


def test_rows_flag_acceptance_by_rank(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompt = tiny_llama.encode("Count: one two three")
    cont = build_decoder("greedy", model, tok).generate([prompt], 8, tiny_llama.stop_criteria())[0].tokens
    dec = ProbingDecoder(model, tok)
    rows, consistent = alignment_rows(model, dec, prompt, cont, topk=3, prompt_id="a", category="c")
    assert consistent == 1.0  # the sequence rows reproduce the greedy continuation
    layers = model.config.num_hidden_layers + 1
    assert len(rows) == (len(cont) - 2) * layers
    frame = pd.DataFrame(rows)
    assert ((frame["rank"] < 3) == frame["accepted"]).all() and frame["cosine"].between(-1, 1).all()
    s = summarize(frame)
    assert s["masks"] == len(cont) - 2 and len(s["layers"]) == layers
    curves = layer_curves(frame)
    assert set(curves["outcome"]) <= {"accepted", "rejected"} and curves["n"].sum() == len(frame)
    assert alignment_rows(model, dec, prompt, cont[:2])[0] == []
