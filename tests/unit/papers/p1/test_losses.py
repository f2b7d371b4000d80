"""Paper 1's loss (§3.3, App. A.6): hand-computed terms, the student-forced teacher pass against plain forwards,
GT-slot logits against a plain causal forward, objective variants, and gradients reaching only the student."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from mtp_core.papers.p1.losses import attention_mask_for, metric_names, p1_loss, prefix_slot_mask, sequence_weighted_nll
from mtp_core.papers.p1.masks import build_blocked_batch
from mtp_core.papers.p1.settings import P1LossConfig
from mtp_core.train.losses import entropy, kl_divergence, soft_cross_entropy, token_cross_entropy

PAD = 2
MASK_ID = 300  # a spare embedding row of the tiny models
LN2, LN3 = math.log(2), math.log(3)


pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------------ pure terms by hand


def test_terms_by_hand():
    # softmax([0, ln2, 0]) = [1/4, 1/2, 1/4]; the teacher [0, 0, 0] is uniform
    s = torch.tensor([[0.0, LN2, 0.0]])
    t = torch.zeros(1, 3)
    torch.testing.assert_close(token_cross_entropy(s, torch.tensor([1])), torch.tensor([LN2]))
    torch.testing.assert_close(token_cross_entropy(s, torch.tensor([0])), torch.tensor([2 * LN2]))
    # soft CE = -(1/3)(ln 1/4 + ln 1/2 + ln 1/4) = (5/3) ln 2; KL = soft CE - H(T) = (5/3) ln 2 - ln 3
    torch.testing.assert_close(soft_cross_entropy(s, t), torch.tensor([5 / 3 * LN2]))
    torch.testing.assert_close(kl_divergence(s, t), torch.tensor([5 / 3 * LN2 - LN3]))
    torch.testing.assert_close(entropy(s), torch.tensor([1.5 * LN2]))
    torch.testing.assert_close(entropy(t), torch.tensor([LN3]))
    assert kl_divergence(t, t).abs().item() < 1e-7  # zero when the student equals the teacher
    # Eq. (3) for one region of k=2: y' = (1, 0); P_S(y') = 1/2 * 1/4, P_T(y') = 1/3 * 1/3
    s2 = torch.stack([s[0], s[0]])[None]  # [1, 2, 3]
    t2 = torch.zeros(1, 2, 3)
    y = torch.tensor([[1, 0]])
    expected = -(1 / 9) * math.log(1 / 8)
    torch.testing.assert_close(sequence_weighted_nll(s2, t2, y), torch.tensor([expected]))
    # the teacher factor is a detached weight: only the student gets a gradient
    s2 = s2.clone().requires_grad_(True)
    t2 = t2.clone().requires_grad_(True)
    sequence_weighted_nll(s2, t2, y).sum().backward()
    assert t2.grad is None and s2.grad.abs().sum() > 0


class Lookup(torch.nn.Module):
    """A stand-in LM without attention: logits at slot s = table[input_ids[s]] (HF call signature)."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(table.clone())
        self.config = SimpleNamespace(_attn_implementation="sdpa")
        self.seen_masks = []

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0, use_cache=None):
        self.seen_masks.append(attention_mask)
        logits = self.table[input_ids]
        return SimpleNamespace(logits=logits[logits_to_keep] if isinstance(logits_to_keep, torch.Tensor) else logits)


def _reference_loss(student_table, teacher_table, batch, objective, entropy_weight):
    """The objective by hand: a Python loop over rows, regions and positions with math.log / exp."""

    def probs(table, tok):
        z = [math.exp(v) for v in table[tok].tolist()]
        return [v / sum(z) for v in z]

    losses, ents = [], []
    for b in range(batch.batch_size):
        for r in range(batch.num_regions):
            if not batch.supervised[b, r]:
                continue
            slots = batch.pred_slots[r].tolist()
            inputs = [int(batch.input_ids[b, s]) for s in slots]
            p_s = [probs(student_table, tok) for tok in inputs]
            y = [max(range(len(p)), key=p.__getitem__) for p in p_s]
            forced = [inputs[0]] + y[:-1]  # slot j holds y'_j (the mask slots), slot 0 the last GT token
            p_t = [probs(teacher_table, tok) for tok in forced]
            for j in range(batch.k):
                ents.append(-sum(p * math.log(p) for p in p_s[j]))
                if objective == "hard_teacher":
                    t_arg = max(range(len(p_t[j])), key=p_t[j].__getitem__)
                    losses.append(-math.log(p_s[j][t_arg]))
                elif objective == "soft_teacher":
                    losses.append(-sum(pt * math.log(ps) for pt, ps in zip(p_t[j], p_s[j], strict=True)))
                elif objective == "gt":
                    losses.append(-math.log(p_s[j][int(batch.targets[b, r, j])]))
            if objective == "eq3":
                lp_s = sum(math.log(p_s[j][y[j]]) for j in range(batch.k))
                p_t_y = math.prod(p_t[j][y[j]] for j in range(batch.k))
                losses.append(-p_t_y * lp_s)
    loss = sum(losses) / len(losses)
    return loss + entropy_weight * sum(ents) / len(ents)


@pytest.mark.parametrize("objective", ["hard_teacher", "soft_teacher", "gt", "eq3"])
@pytest.mark.parametrize("entropy_weight", [0.0, 0.5])
def test_p1_loss_against_hand_computation(objective, entropy_weight):
    V = 12
    g = torch.Generator().manual_seed(1)
    student = Lookup(torch.randn(V, V, generator=g) * 2)
    teacher = Lookup(torch.randn(V, V, generator=g) * 2)
    rows = [torch.randint(3, 11, (40,), generator=g).tolist(), torch.randint(3, 11, (9,), generator=g).tolist()]
    batch = build_blocked_batch(rows, k=3, offset=-2, num_regions=3, seq_len=24, mask_id=11, pad_id=PAD)
    assert not batch.supervised.all()  # the short row drops regions
    cfg = P1LossConfig(objective=objective, entropy_weight=entropy_weight)
    out = p1_loss(student, teacher if objective != "gt" else None, batch, cfg)
    expected = _reference_loss(student.table.detach(), teacher.table.detach(), batch, objective, entropy_weight)
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)
    assert out.weight == int(batch.supervised.sum()) * 3
    if objective == "gt":
        assert len(teacher.seen_masks) == 0  # no teacher pass
    else:
        assert torch.is_tensor(student.seen_masks[0]) and student.seen_masks[0].dtype == torch.bool  # sdpa: bool
    # the metrics columns cover what the loss emits
    names = metric_names(16, objective, entropy_term=entropy_weight != 0)
    assert set(out.metrics) <= set(names)


# ------------------------------------------------------------------------------- tiny transformer models


def _rows(g, lengths=(70, 18, 45)):
    return [torch.randint(3, 259, (n,), generator=g).tolist() for n in lengths]


def _perturbed(model, seed=0, scale=0.05):
    """A student that differs from the teacher, so that its rollouts are not the teacher's own argmax."""
    student = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.std().clamp_min(1e-3))
    return student


def _padded(rows, n):
    x = torch.full((len(rows), n), PAD)
    for i, r in enumerate(rows):
        x[i, : min(n, len(r))] = torch.tensor(r[:n])
    return x


@pytest.mark.parametrize("k,offset,bda", [(4, -3, False), (3, 0, False), (5, -6, True)])
@torch.no_grad()
def test_teacher_slot_j_equals_plain_forward_of_prefix_plus_rollout(tiny_loaded, k, offset, bda):
    """§3.3 / Eq. 2: teacher slot j scores y'_{j+1} given the GT prefix and y'_1..y'_j; the student's slot j is
    the plain forward of the prefix followed by j+1... masks (its k-1 masks, causally)."""
    teacher = tiny_loaded.model
    student = _perturbed(teacher)
    g = torch.Generator().manual_seed(k)
    rows = _rows(g)
    batch = build_blocked_batch(
        rows, k=k, offset=offset, num_regions=4, seq_len=48, mask_id=MASK_ID, pad_id=PAD, bda=bda
    )
    out = p1_loss(student, teacher, batch, P1LossConfig())
    x = _padded(rows, int(batch.source_index.max()) + 2)
    R = 0
    for b in range(batch.batch_size):
        for r in range(batch.num_regions):
            if not batch.supervised[b, r]:
                continue
            t = int(batch.source_index[batch.pred_slots[r, 0]])
            y = out.student_tokens[R]
            # one causal forward of prefix + y'_1..y'_{k-1}: its position t + j is the plain forward of prefix + y'_1..j
            seq = torch.cat([x[b, : t + 1], y[: k - 1]])[None]
            ref = teacher(seq).logits[0, t:]
            torch.testing.assert_close(out.teacher_logits[R], ref, atol=1e-4, rtol=1e-4)
            if not bda:  # the student's causal span: prefix + k-1 masks
                seq = torch.cat([x[b, : t + 1], torch.full((k - 1,), MASK_ID)])[None]
                torch.testing.assert_close(out.student_logits[R], student(seq).logits[0, t:], atol=1e-4, rtol=1e-4)
            R += 1
    assert out.student_tokens.shape[0] == R and batch.batch_size * batch.num_regions > R
    assert torch.equal(out.student_tokens, out.student_logits.argmax(-1))
    assert torch.equal(out.teacher_tokens, out.teacher_logits.argmax(-1))


@torch.no_grad()
def test_gt_slot_logits_equal_plain_causal_forward(tiny_loaded):
    """App. A.6: logits at the GT prefix slots of the blocked forward are the plain NTP logits."""
    model = tiny_loaded.model
    g = torch.Generator().manual_seed(3)
    rows = _rows(g, (64, 30))
    batch = build_blocked_batch(rows, k=4, offset=-2, num_regions=4, seq_len=48, mask_id=MASK_ID, pad_id=PAD)
    out = p1_loss(model, model, batch, P1LossConfig(prefix_weight=1.0))
    sel = prefix_slot_mask(batch)
    assert sel.sum() == out.prefix_logits.shape[0] > 0
    x = _padded(rows, int(batch.source_index.max()) + 2)
    plain = model(x).logits
    b_idx, s_idx = sel.nonzero(as_tuple=True)
    ref = plain[b_idx, batch.source_index[s_idx]]
    torch.testing.assert_close(out.prefix_logits, ref, atol=1e-4, rtol=1e-4)
    # the prefix term is the NTP cross-entropy there, added with its weight to the MTP term
    ce = token_cross_entropy(ref, x[b_idx, batch.source_index[s_idx] + 1]).mean()
    torch.testing.assert_close(out.terms["prefix"], ce, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.loss, out.terms["mtp"] + out.terms["prefix"])
    # step 0 (student == teacher): the first prediction of every region is the teacher's own NTP argmax
    assert out.metrics["acc_teacher@1"][0].item() == out.metrics["acc_teacher@1"][1]


def test_gradient_reaches_only_the_student(tiny_llama):
    teacher = copy.deepcopy(tiny_llama.model).eval().requires_grad_(False)
    student = _perturbed(tiny_llama.model).train()
    before = {n: p.detach().clone() for n, p in teacher.named_parameters()}
    g = torch.Generator().manual_seed(5)
    batch = build_blocked_batch(_rows(g), k=3, offset=-1, num_regions=4, seq_len=48, mask_id=MASK_ID, pad_id=PAD)
    opt = torch.optim.AdamW(student.parameters(), lr=1e-2)
    for cfg in (P1LossConfig(), P1LossConfig(objective="soft_teacher", entropy_weight=0.1, prefix_weight=0.5)):
        out = p1_loss(student, teacher, batch, cfg)
        assert out.loss.requires_grad and out.teacher_logits.grad_fn is None and not out.teacher_logits.requires_grad
        opt.zero_grad()
        out.loss.backward()
        assert all(p.grad is None for p in teacher.parameters())
        grads = [p.grad for p in student.parameters()]
        assert all(gr is not None for gr in grads) and sum(gr.abs().sum() for gr in grads) > 0
        opt.step()
    for n, p in teacher.named_parameters():
        assert torch.equal(p, before[n]), n
    assert not any(p.requires_grad for p in teacher.parameters())


def test_attention_mask_encodings(tiny_llama):
    batch = build_blocked_batch([[5] * 30], k=2, offset=0, num_regions=2, seq_len=16, mask_id=MASK_ID, pad_id=PAD)
    model = tiny_llama.model
    assert attention_mask_for(model, batch).dtype == torch.bool  # sdpa
    eager = SimpleNamespace(
        config=SimpleNamespace(_attn_implementation="eager"),
        parameters=lambda: iter([torch.zeros(1, dtype=torch.float32)]),
    )
    fm = attention_mask_for(eager, batch)
    assert fm.dtype == torch.float32 and torch.equal(fm == 0, batch.dense_mask())
    with pytest.raises(ValueError, match="flex_attention"):
        attention_mask_for(model, batch, attention="flex")
    with pytest.raises(ValueError, match="objective"):
        P1LossConfig(objective="nope")
    with pytest.raises(ValueError, match="unknown key"):
        P1LossConfig.from_dict({"objectiv": "gt"})
    with pytest.raises(ValueError, match="teacher"):
        p1_loss(model, None, batch, P1LossConfig())
