"""P1 blocked batches (paper 1 §4.2-4.4): the builder against a brute-force reading of the definition, the
official worked example, flex BlockMask == dense SDPA mask, and model-level equivalences on tiny models."""

from __future__ import annotations

import random
import warnings

import pytest
import torch

from mtp_core.papers.p1.masks import blocked_layout, build_blocked_batch, draw_k_offset

MASK, PAD, EOS = 1, 2, 5


def brute_force(rows, *, k, offset, M, S, eos_ids=(), bda=False):
    """The definition, slowly: walk the regions appending (kind, source, region); GT restarts after each span
    at the positions its masks stood at; drop the |offset| slots cut off at the start; continue GT as a tail."""
    W, K = S // M, k - 1
    P = W - K
    entries, pos = [], offset
    for r in range(M):
        entries += [("gt", pos + j, r) for j in range(P)]
        entries += [("mask", pos + P + j, r) for j in range(K)]
        pos += P
    while len(entries) < S - offset:
        entries.append(("gt", pos, M))
        pos += 1
    entries = entries[-offset:][:S]
    assert all(src >= 0 for _, src, _ in entries)
    anchor = {r: max(src for kind, src, reg in entries if reg == r and kind == "gt") for r in range(M)}
    pred = [
        [s for s, (kind, src, reg) in enumerate(entries) if reg == r and (kind == "mask" or src == anchor[r])]
        for r in range(M)
    ]
    out = []
    for row in rows:
        L = len(row)

        def tok(p, row=row, L=L):
            return row[p] if p < L else PAD

        def is_end(p, L=L):  # the target of source position p ends the row
            return p + 1 >= L or tok(p + 1) in eos_ids

        holds_end = [any(is_end(src) for _, src, reg in entries if reg == r) for r in range(M)]
        supervised = [not any(holds_end[:r]) for r in range(M)]
        last_r = max(r for r in range(M) if supervised[r])
        last_slot = max(s for s, (_, _, reg) in enumerate(entries) if reg == last_r)
        pad = [src >= L and s > last_slot for s, (_, src, _) in enumerate(entries)]
        allowed = torch.zeros(S, S, dtype=torch.bool)
        for q, (kq, sq, rq) in enumerate(entries):
            for kv, (kk, sk, rk) in enumerate(entries):
                if kq == "gt":
                    ok = kk == "gt" and sk <= sq
                else:  # a mask sees the GT up to its region's last GT token and its own span
                    ok = (kk == "gt" and sk <= anchor[rq]) or (kk == "mask" and rk == rq and (bda or sk <= sq))
                allowed[q, kv] = ok and (not pad[kv] or kv == q)
        out.append(
            dict(
                input_ids=[MASK if kind == "mask" else tok(src) for kind, src, _ in entries],
                source=[src for _, src, _ in entries],
                is_mask=[kind == "mask" for kind, _, _ in entries],
                region=[reg for _, _, reg in entries],
                pred=pred,
                targets=[[tok(entries[s][1] + 1) for s in slots] for slots in pred],
                slot_targets=[tok(src + 1) for _, src, _ in entries],
                supervised=supervised,
                valid=[not p for p in pad],
                allowed=allowed,
            )
        )
    return out


def _rows(seed=0):
    g = random.Random(seed)
    lengths = [1, 3, 9, 14, 20, 27, 60]
    rows = [[g.randrange(10, 100) for _ in range(n)] for n in lengths]
    rows.append([g.randrange(10, 100) for _ in range(12)] + [EOS] + [g.randrange(10, 100) for _ in range(30)])
    return rows


def test_official_worked_example():
    """Reference §3: S=18, M=3, k=3, offset -2."""
    lay = blocked_layout(18, 3, 3, -2)
    assert lay.source_index.tolist() == [0, 1, 2, 3, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9, 10, 11, 10, 11]
    assert lay.is_mask.nonzero().flatten().tolist() == [2, 3, 8, 9, 14, 15]
    assert lay.pred_slots.tolist() == [[1, 2, 3], [7, 8, 9], [13, 14, 15]]
    assert lay.region_ids.tolist() == [0] * 4 + [1] * 6 + [2] * 6 + [3] * 2  # 3 = the unsupervised tail
    x = list(range(100, 130))
    b = build_blocked_batch([x], k=3, offset=-2, num_regions=3, seq_len=18, mask_id=MASK, pad_id=PAD)
    assert b.input_ids[0].tolist() == [
        100,
        101,
        MASK,
        MASK,
        102,
        103,
        104,
        105,
        MASK,
        MASK,
        106,
        107,
        108,
        109,
        MASK,
        MASK,
        110,
        111,
    ]
    assert b.position_ids[0].tolist() == lay.source_index.tolist()
    # prediction slot j of a region whose last GT is x_t predicts y_{t+1+j}
    assert b.targets[0].tolist() == [[102, 103, 104], [106, 107, 108], [110, 111, 112]]
    assert b.supervised.all() and b.valid.all() and b.pred_mask.sum() == 9
    # offset 0: region r holds sources rP .. rP+W-1, masks in its last K slots
    lay0 = blocked_layout(18, 3, 3, 0)
    assert lay0.source_index.tolist() == [0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 8, 9, 10, 11, 12, 13]
    assert lay0.pred_slots.tolist() == [[3, 4, 5], [9, 10, 11], [15, 16, 17]]


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_builder_equals_brute_force(k):
    S, M = 30, 3
    rows = _rows(k)
    P = S // M - (k - 1)
    for offset in range(-(P - 1), 1):
        for bda in (False, True):
            eos_ids = (EOS,) if bda else ()  # both end rules, over every offset
            got = build_blocked_batch(
                rows,
                k=k,
                offset=offset,
                num_regions=M,
                seq_len=S,
                mask_id=MASK,
                pad_id=PAD,
                eos_ids=eos_ids,
                bda=bda,
            )
            want = brute_force(rows, k=k, offset=offset, M=M, S=S, eos_ids=eos_ids, bda=bda)
            dense = got.dense_mask()
            for b, w in enumerate(want):
                ctx = f"k={k} offset={offset} bda={bda} row={b}"
                assert got.input_ids[b].tolist() == w["input_ids"], ctx
                assert got.position_ids[b].tolist() == w["source"], ctx
                assert got.slot_targets[b].tolist() == w["slot_targets"], ctx
                assert got.targets[b].tolist() == w["targets"], ctx
                assert got.supervised[b].tolist() == w["supervised"], ctx
                assert got.valid[b].tolist() == w["valid"], ctx
                assert torch.equal(dense[b, 0], w["allowed"]), ctx
            assert got.source_index.tolist() == want[0]["source"]
            assert got.is_mask.tolist() == want[0]["is_mask"]
            assert got.region_ids.tolist() == want[0]["region"]
            assert got.pred_slots.tolist() == want[0]["pred"]


def test_end_rule_and_padding():
    """App. A.1: the region holding the first pad/EOS target is the last supervised one."""
    S, M, k = 30, 3, 3  # W=10, P=8; at offset 0 region r's targets cover sources up to 8r+9
    rows = [list(range(10, 20)), list(range(10, 70)), [11, 12, EOS, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]]
    b = build_blocked_batch(rows, k=k, offset=0, num_regions=M, seq_len=S, mask_id=MASK, pad_id=PAD, eos_ids=(EOS,))
    # row 0: 10 tokens, the first pad target is at source 9 -> region 0 (covers up to 9) is the last kept
    # row 1: no end within the 27 source tokens -> all kept; row 2: EOS is the target of source 1 -> region 0
    assert b.supervised.tolist() == [[True, False, False], [True, True, True], [True, False, False]]
    assert b.targets[0, 0].tolist() == [18, 19, PAD]  # the last region is filled with the pad (= EOS) id
    # row 0: slots 10-11 (region 1's GT, sources 8-9) are real tokens; the rest after region 0 is padding
    assert b.valid[1].all() and b.valid[0].tolist() == [True] * 12 + [False] * 18
    # row 2 (13 tokens): real tokens after the EOS stay visible (slots 10-14, sources 8-12); padding does not
    assert b.valid[2].tolist() == [True] * 15 + [False] * 15
    assert b.pred_mask.sum().item() == (1 + 3 + 1) * k
    # tensor rows with lengths == list rows; without eos_ids only padding ends a row (the official rule)
    t = torch.full((3, 70), 0)
    for i, r in enumerate(rows):
        t[i, : len(r)] = torch.tensor(r)
    bt = build_blocked_batch(
        t,
        lengths=[len(r) for r in rows],
        k=k,
        offset=0,
        num_regions=M,
        seq_len=S,
        mask_id=MASK,
        pad_id=PAD,
        eos_ids=(EOS,),
    )
    for f in ("input_ids", "targets", "supervised", "valid", "slot_targets"):
        assert torch.equal(getattr(b, f), getattr(bt, f)), f
    b2 = build_blocked_batch(rows, k=k, offset=0, num_regions=M, seq_len=S, mask_id=MASK, pad_id=PAD)
    assert b2.supervised[2].tolist() == [True, True, False]  # 13 tokens: first pad target at source 12


def test_float_mask_and_block_mask_match_dense_sdpa():
    from torch.nn.attention.flex_attention import create_mask, flex_attention

    rows = _rows(1)
    g = torch.Generator().manual_seed(0)
    for k, offset, bda in [(2, 0, False), (4, -3, False), (5, -5, True), (3, -7, True)]:
        b = build_blocked_batch(
            rows, k=k, offset=offset, num_regions=3, seq_len=30, mask_id=MASK, pad_id=PAD, eos_ids=(EOS,), bda=bda
        )
        dense = b.dense_mask()
        fmask = b.dense_mask(torch.float32)
        assert dense.shape == (len(rows), 1, 30, 30) and fmask.dtype == torch.float32
        assert torch.equal(fmask == 0, dense) and (fmask[~dense] == torch.finfo(torch.float32).min).all()
        assert dense.diagonal(dim1=-2, dim2=-1).all()  # no empty rows
        assert torch.equal(create_mask(b.mask_mod(), len(rows), 1, 30, 30, device="cpu"), dense)
        q, kk, v = (torch.randn(len(rows), 2, 30, 8, generator=g) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q, kk, v, attn_mask=dense)
        torch.testing.assert_close(torch.nn.functional.scaled_dot_product_attention(q, kk, v, attn_mask=fmask), ref)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # flex_attention uncompiled on CPU warns
            out = flex_attention(q, kk, v, block_mask=b.block_mask(device="cpu"))
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    # the BDA flag can be overridden per call (the teacher pass is never BDA)
    assert not torch.equal(b.dense_mask(bda=False), b.dense_mask())


@torch.no_grad()
def test_blocked_forward_equals_plain_forwards(tiny_loaded):
    """GT slots give plain NTP logits; a region's prediction slots give the logits of a plain forward of its GT
    prefix followed by k-1 mask tokens (each mask sees the upstream GT and the earlier masks of its span)."""
    model = tiny_loaded.model
    mask_id = 300  # a spare embedding row of the tiny models (the geometry is what is tested here)
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, 259, (60,), generator=g).tolist(), torch.randint(3, 259, (15,), generator=g).tolist()]
    S, M = 40, 4
    for k, offset in [(4, -3), (2, 0), (5, -5)]:
        b = build_blocked_batch(rows, k=k, offset=offset, num_regions=M, seq_len=S, mask_id=mask_id, pad_id=PAD)
        assert b.supervised[1].sum() < M  # the short row ends inside the window
        mask = b.dense_mask(model.dtype)
        out = model(b.input_ids, attention_mask=mask, position_ids=b.position_ids).logits
        n = b.source_index.max().item() + 1
        x = torch.full((2, n), PAD)
        for i, r in enumerate(rows):
            x[i, : min(n, len(r))] = torch.tensor(r[:n])
        plain = model(x).logits
        gt = ~b.is_mask
        for i in range(2):
            sel = gt & b.valid[i]
            torch.testing.assert_close(out[i, sel], plain[i, b.source_index[sel]], atol=1e-4, rtol=1e-4)
            for r in range(M):
                if not b.supervised[i, r]:
                    continue
                slots = b.pred_slots[r]
                t = b.source_index[slots[0]].item()
                seq = torch.cat([x[i, : t + 1], torch.full((k - 1,), mask_id)])[None]
                ref = model(seq).logits[0, t:]
                torch.testing.assert_close(out[i, slots], ref, atol=1e-4, rtol=1e-4)


def test_student_forced_inputs():
    b = build_blocked_batch(_rows(2), k=4, offset=-2, num_regions=3, seq_len=30, mask_id=MASK, pad_id=PAD)
    preds = torch.arange(b.batch_size * 3 * 4).reshape(b.batch_size, 3, 4) + 1000
    forced = b.student_forced_inputs(preds)
    assert torch.equal(forced[:, ~b.is_mask], b.input_ids[:, ~b.is_mask])
    assert torch.equal(forced[:, b.pred_slots[:, 1:]], preds[:, :, :3])  # y'_1..y'_{k-1} in the k-1 masks
    assert not (forced == MASK).any()


def test_draws_independent_coupled_and_static():
    geo = dict(seq_len=160, num_regions=5, k_max=16)
    draws = [draw_k_offset(s, **geo) for s in range(3000)]
    assert draws == [draw_k_offset(s, **geo) for s in range(3000)]  # deterministic
    assert [draw_k_offset(s, **geo, seed=1) for s in range(50)] != draws[:50]  # the seed matters
    assert [draw_k_offset(s, **geo, rank=1) for s in range(50)] != draws[:50]  # so does the rank
    assert {k for k, _ in draws} == set(range(2, 17))
    assert all(-(32 - (k - 1) - 1) <= o <= 0 for k, o in draws)
    assert len({o for k, o in draws if k == 9}) > 15  # P=24: offsets spread over [-23, 0]
    ks, offs = torch.tensor(draws, dtype=torch.float64).T
    frac = -offs / (32 - ks + 1)  # offset as a fraction of its range: independent of k
    assert abs(torch.corrcoef(torch.stack([ks, frac]))[0, 1]) < 0.08
    # coupled: the official draw, first draws of two identically seeded Random objects
    for step, rank in [(0, 0), (5, 1), (12345, 3)]:
        s = step + rank * 12345678
        k = random.Random(s).randint(2, 16)
        off = -random.Random(s).randint(0, 32 - (k - 1) - 1)
        assert draw_k_offset(step, rank=rank, coupled_draw=True, **geo) == (k, off)
    coupled = [draw_k_offset(s, rank=r, coupled_draw=True, **geo) for s in range(1500) for r in range(2)]
    assert {o for k, o in coupled if k == 9} <= {-14, -15}
    assert draw_k_offset(3, random_k=False, random_offset=False, **geo) == (16, 0)
    assert draw_k_offset(3, random_k=False, **geo)[0] == 16


def test_bad_geometry_is_rejected():
    with pytest.raises(ValueError, match="multiple"):
        blocked_layout(31, 3, 3, 0)
    with pytest.raises(ValueError, match="k"):
        blocked_layout(30, 3, 11, 0)
    with pytest.raises(ValueError, match="offset"):
        blocked_layout(30, 3, 3, 1)
    with pytest.raises(ValueError, match="offset"):
        blocked_layout(30, 3, 3, -8)  # P = 8: offsets in [-7, 0]
    assert blocked_layout(30, 3, 3, -7).source_index.min() == 0
