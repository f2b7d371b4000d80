"""Paper 1, Figure 6's numbers: the per-region analysis (`confidence_vs_teacher_loss`) against plain forwards of one
region at a time, and the region filter, quantile bins and correlations the figure and its summary report, by
hand."""

from __future__ import annotations

import copy
import hashlib
import math

import pandas as pd
import pytest
import torch

from mtp_core.papers.p1.confidence import binned, confidence_vs_teacher_loss, correlations, response_regions
from mtp_core.papers.p1.mask_token import add_mask_token
from mtp_core.papers.p1.train import EncodedRows

SEQ_LEN, REGIONS, K = 32, 4, 3  # regions of width 8: P = 6 GT tokens and 2 masks at k = 3


@torch.inference_mode()
def brute_force_region(student, teacher, row: list[int], last: int, mask_id: int) -> dict:
    """Region with GT prefix row[0..last], from plain causal forwards (Eq. 2): the student reads the prefix and
    k-1 masks and proposes y' (argmax at the last k positions); the teacher reads the prefix and y'_1..y'_{k-1}."""
    prefix = row[: last + 1]
    s = student(input_ids=torch.tensor([prefix + [mask_id] * (K - 1)])).logits[0, -K:].double().softmax(-1)
    y = s.argmax(-1).tolist()
    t = teacher(input_ids=torch.tensor([prefix + y[:-1]])).logits[0, -K:].double().log_softmax(-1)
    conf = [float(s[j, y[j]]) for j in range(K)]
    nll = [-float(t[j, y[j]]) for j in range(K)]
    agree = [int(a == b) for a, b in zip(y, t.argmax(-1).tolist())]
    return {
        "confidence": sum(conf) / K,
        "confidence_min": min(conf),
        "teacher_loss": sum(nll) / K,
        "accepted_len": sum(math.prod(agree[: j + 1]) for j in range(K)),
    }


def test_regions_equal_plain_forwards_of_one_region(tiny_llama):
    student, tok = copy.deepcopy(tiny_llama.model), copy.deepcopy(tiny_llama.tokenizer)
    mask_id = add_mask_token(student, tok)
    teacher = copy.deepcopy(student)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a student that is not the teacher
        for p in student.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05 * p.std().clamp_min(1e-3))
    lengths = [40, 40, 22, 13, 40, 30]
    starts = [10, 0, 4, 2, 40, 12]
    tokens = torch.randint(3, 250, (len(lengths), 40), generator=g)
    tokens[torch.arange(40)[None] >= torch.tensor(lengths)[:, None]] = 0  # padded past the row, as encode_examples
    tokens[1, :20] = tokens[0, :20]  # rows 0 and 1 (one batch) share their opening: their first regions are twins
    enc = EncodedRows(tokens, torch.tensor(lengths), torch.tensor(starts))
    frame = confidence_vs_teacher_loss(
        student, teacher, enc, seq_len=SEQ_LEN, num_regions=REGIONS, k=K, mask_id=mask_id, pad_id=0, batch_size=4
    )
    prefix_len = SEQ_LEN // REGIONS - (K - 1)
    for b in range(len(lengths)):
        rows = frame[frame["row"] == b]
        offset = int(rows["offset"].iloc[0])
        assert -(prefix_len - 1) <= offset <= 0 and (rows["offset"] == offset).all() and (rows["k"] == K).all()
        # region r's GT prefix ends at source (r + 1) P + offset - 1; its targets are the k tokens after it; it is
        # kept when it is the first region or every target of the region before it is a real token of the row
        last = [(r + 1) * prefix_len + offset - 1 for r in range(REGIONS)]
        kept = [r for r in range(REGIONS) if r == 0 or last[r - 1] + K < lengths[b]]
        assert rows["region"].tolist() == kept, b
        for r in kept:
            got = rows[rows["region"] == r].iloc[0]
            want = brute_force_region(student, teacher, tokens[b].tolist(), last[r], mask_id)
            for key in ("confidence", "confidence_min", "teacher_loss"):
                assert got[key] == pytest.approx(want[key], abs=1e-4), (b, r, key)
            assert got["accepted_len"] == want["accepted_len"], (b, r)
            assert bool(got["in_response"]) == (last[r] + 1 >= starts[b]), (b, r)
            context = hashlib.sha1(tokens[b, : last[r] + K + 1].numpy().tobytes()).hexdigest()[:16]
            assert got["context"] == f"{context}-k{K}-o{offset}"
    assert len(set(frame["offset"])) > 1  # batches drew different offsets
    twins = frame[(frame["row"] <= 1) & (frame["region"] == 0)]["context"]
    assert twins.nunique() == 1 and frame["context"].nunique() < len(frame)
    assert 0 < frame["in_response"].sum() < len(frame) and 0 < frame["accepted_len"].sum() < K * len(frame)


# ---------------------------------------------------------------------------------- the figure's numbers by hand


def regions(confidence, loss, in_response=None, context=None) -> pd.DataFrame:
    n = len(confidence)
    return pd.DataFrame(
        {
            "confidence": confidence,
            "teacher_loss": loss,
            "in_response": in_response if in_response is not None else [True] * n,
            "context": context if context is not None else [f"c{i}" for i in range(n)],
        }
    )


def test_response_regions_keep_answers_once():
    f = regions([0.1, 0.2, 0.3, 0.4, 0.5], [1, 2, 3, 4, 5], [True, False, True, True, True], ["a", "b", "c", "a", "b"])
    kept = response_regions(f)
    assert kept["confidence"].tolist() == [0.1, 0.3, 0.5]  # b (prompt) dropped; the second a is the first's twin


def test_quantile_bins_by_hand():
    # confidence order (ties by appearance): rows 1, 2, 3, 0, 5, 4 -> three bins of two: {1, 2}, {3, 0}, {5, 4}
    f = regions([0.5, 0.1, 0.3, 0.3, 0.9, 0.7], [2.0, 5.0, 4.0, 1.0, 0.5, 1.5])
    b = binned(f, 3)
    assert b["bin"].tolist() == [0, 1, 2] and b["n"].tolist() == [2, 2, 2]
    assert b["confidence_mean"].tolist() == pytest.approx([0.2, 0.4, 0.8])
    assert b["teacher_loss_mean"].tolist() == pytest.approx([4.5, 1.5, 1.0])
    sd = [math.sqrt(((5 - 4.5) ** 2 + (4 - 4.5) ** 2) / 1), math.sqrt(0.5), math.sqrt(0.5)]
    assert b["teacher_loss_std"].tolist() == pytest.approx(sd)
    assert b["teacher_loss_sem"].tolist() == pytest.approx([s / math.sqrt(2) for s in sd])
    two = binned(f, 2)  # {1, 2, 3} and {0, 5, 4}: means, not medians
    assert two["teacher_loss_mean"].tolist() == pytest.approx([10 / 3, 4 / 3]) and two["n"].tolist() == [3, 3]
    assert len(binned(f, 10)) == 6 and binned(f.iloc[0:0], 3).empty  # never more bins than regions


def test_correlations_by_hand():
    f = regions([1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 4.0, 3.0])
    # Pearson: centred x (-1.5, -0.5, 0.5, 1.5), y (-0.5, -1.5, 1.5, 0.5): sum xy = 3, sum x^2 = sum y^2 = 5;
    # Spearman: the ranks are centred the same way, so also 0.6
    c = correlations(f)
    assert c == {"pearson": pytest.approx(0.6), "spearman": pytest.approx(0.6), "n": 4}
    g = regions([1.0, 2.0, 3.0, 10.0], [1.0, 2.0, 3.0, 4.0])  # monotone, not linear: Spearman 1, Pearson below
    x, y = [-3, -2, -1, 6], [-1.5, -0.5, 0.5, 1.5]
    pearson = sum(a * b for a, b in zip(x, y)) / math.sqrt(sum(a * a for a in x) * sum(b * b for b in y))
    assert correlations(g)["pearson"] == pytest.approx(pearson) and correlations(g)["spearman"] == pytest.approx(1.0)
    assert math.isnan(correlations(f.head(2))["pearson"]) and correlations(f.head(2))["n"] == 2
