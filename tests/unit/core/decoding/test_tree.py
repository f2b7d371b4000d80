"""Tree buffers (Medusa worked example, brute force on random trees), tree verification (node logits equal plain
forwards, KV gather equals a plain forward of the accepted tokens, greedy acceptance by hand), and the generic
TreeDecoder's losslessness with an adversarial drafter (deep, branching, per-row acceptance, holes, pruning)."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import DynamicCache

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.decoding.batch import left_pad, positions_from_mask
from mtp_core.decoding.tree import (
    Draft,
    TreeContext,
    TreeDecoder,
    TreeState,
    ancestor_mask,
    candidates_from_topk,
    chain_buffers,
    chunk_attention_mask,
    greedy_accept,
    tree_buffers,
    tree_buffers_from_parents,
    tree_forward,
    verify_tree,
)
from tests.conftest import random_prompts

# ---------------------------------------------------------------- buffers


def test_medusa_worked_example():
    """The reference's worked example of `generate_medusa_buffers`, exactly."""
    b = tree_buffers([[0], [0, 0], [1], [0, 1]])
    assert b.attn_mask.int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 0, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 1, 0, 0, 1],
    ]
    assert b.tree_indices.tolist() == [0, 1, 2, 11, 12]
    assert b.position_ids.tolist() == [0, 1, 1, 2, 2]
    assert b.retrieve_indices.tolist() == [[0, 1, 4], [0, 1, 3], [0, 2, -1]]
    assert b.medusa_attn_mask().shape == (1, 1, 5, 5)
    assert b.paths == ((0,), (1,), (0, 0), (0, 1))
    assert b.num_nodes == 5 and b.max_depth == 2


def medusa_reference(choices, topk):
    """A direct transcription of the documented `generate_medusa_buffers` algorithm (loops, lists)."""
    s = sorted((tuple(c) for c in choices), key=lambda p: (len(p), p))
    n = len(s) + 1
    mask = [[int(i == j) for j in range(n)] for i in range(n)]
    for i in range(n):
        mask[i][0] = 1
    for i, p in enumerate(s):
        for c in range(len(p) - 1):
            mask[i + 1][s.index(p[: c + 1]) + 1] = 1
    tree_idx = [0] + [p[-1] + topk * (len(p) - 1) + 1 for p in s]
    pos = [0] + [len(p) for p in s]
    rows, covered = [], []
    for p in reversed(s):
        if p in covered:
            continue
        row = []
        for c in range(len(p)):
            row.append(s.index(p[: c + 1]))
            covered.append(p[: c + 1])
        rows.append(row)
    width = max(len(r) for r in rows)
    retrieve = [[0] + [x + 1 for x in r] + [-1] * (width - len(r)) for r in rows]
    return mask, tree_idx, pos, retrieve


def random_choices(rng: random.Random, n_nodes: int, topk: int, max_depth: int) -> list[tuple[int, ...]]:
    paths: set[tuple[int, ...]] = set()
    for _ in range(20 * n_nodes):  # bounded: small topk/depth may cap the tree below n_nodes
        if len(paths) == n_nodes:
            break
        parent = rng.choice([()] + [p for p in paths if len(p) < max_depth])
        kids = [p for p in paths if len(p) == len(parent) + 1 and p[:-1] == parent]
        if len(kids) < topk:
            paths.add(parent + (len(kids),))
    out = list(paths)
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_random_trees_match_brute_force(seed):
    rng = random.Random(seed)
    topk = rng.choice([3, 10])
    choices = random_choices(rng, rng.randint(1, 30), topk, rng.randint(1, 5))
    b = tree_buffers(choices, topk=topk)
    mask, tree_idx, pos, retrieve = medusa_reference(choices, topk)
    assert b.attn_mask.int().tolist() == mask
    assert b.tree_indices.tolist() == tree_idx
    assert b.position_ids.tolist() == pos
    assert b.retrieve_indices.tolist() == retrieve
    # every node's path row lists its ancestors root..node, and parents agree with the paths
    for i, row in enumerate(b.node_paths.tolist()):
        nodes = [x for x in row if x >= 0]
        assert nodes[0] == 0 and nodes[-1] == i and len(nodes) == pos[i] + 1
    again = tree_buffers_from_parents(b.parents, b.ranks, topk=topk)
    for name in ("attn_mask", "position_ids", "tree_indices", "retrieve_indices", "node_paths"):
        assert torch.equal(getattr(again, name), getattr(b, name))
    assert again.paths == b.paths


def test_invalid_choices_raise():
    with pytest.raises(ValueError, match="lacks its parent"):
        tree_buffers([(0,), (1, 0)])
    with pytest.raises(ValueError, match="duplicate"):
        tree_buffers([(0,), (0,)])
    with pytest.raises(ValueError, match="outside"):
        tree_buffers([(10,)])
    with pytest.raises(ValueError):
        ancestor_mask(torch.tensor([-1, 2, 0]))


def test_chain_and_topk_candidates_and_chunk_mask():
    c = chain_buffers(3)
    assert c.retrieve_indices.tolist() == [[0, 1, 2, 3]] and c.position_ids.tolist() == [0, 1, 2, 3]
    assert chain_buffers(0).num_nodes == 1
    b = tree_buffers([[0], [0, 0], [1], [0, 1]])
    topk_ids = torch.arange(2 * 2 * 10).reshape(2, 2, 10)  # [B, depth, topk]
    cand = candidates_from_topk(topk_ids, b)
    assert cand.tolist() == [[0, 1, 10, 11], [20, 21, 30, 31]]
    kv = torch.tensor([[False, True], [True, True]])
    m = chunk_attention_mask(kv, b.attn_mask)
    assert m.shape == (2, 1, 5, 7) and m.dtype == torch.bool
    assert m[0, 0, :, :2].tolist() == [[False, True]] * 5 and torch.equal(m[1, 0, :, 2:], b.attn_mask)
    f = chunk_attention_mask(kv, b.attn_mask, torch.float32)
    assert torch.equal(f == 0, m) and float(f.min()) == torch.finfo(torch.float32).min


def test_greedy_accept_hand_made():
    b = tree_buffers([(0,), (1,), (0, 0), (0, 1), (1, 0)])  # nodes: 1=(0) 2=(1) 3=(0,0) 4=(0,1) 5=(1,0)
    #            root (0) (1) (0,0) (0,1) (1,0)
    argmax = torch.tensor(
        [
            [7, 8, 9, 1, 2, 3],  # (1)=7 ok, then (1,0) must be argmax at node 2 = 9 -> 9 ok -> depth 2, bonus 3
            [7, 8, 9, 1, 2, 3],  # (0)=7 ok, (0,0)=8 ok -> depth 2, bonus 1
            [7, 8, 9, 1, 2, 3],  # nothing matches -> bonus 7
            [7, 8, 9, 1, 2, 3],  # (0)=7, (1)=7 (duplicate): first node wins; (0,1)=8 -> depth 2, bonus 2
            [7, 8, 9, 1, 2, 3],  # a child matches but its parent does not -> depth 0
            [7, 8, 9, 1, 2, 3],  # -1 (no candidate) is never accepted
        ]
    )
    cand = torch.tensor(
        [
            [5, 7, 0, 0, 9],
            [7, 5, 8, 0, 0],
            [1, 2, 3, 4, 5],
            [7, 7, 0, 8, 0],
            [5, 6, 8, 8, 9],
            [7, -1, -1, -1, -1],
        ]
    )
    n, last, path, tokens = greedy_accept(argmax, cand, b)
    assert n.tolist() == [2, 2, 0, 2, 0, 1]
    assert last.tolist() == [5, 3, 0, 4, 0, 1]
    assert path.tolist() == [[0, 2, 5], [0, 1, 3], [0, -1, -1], [0, 1, 4], [0, -1, -1], [0, 1, -1]]
    assert tokens.tolist() == [[7, 9, 3], [7, 8, 1], [7, -1, -1], [7, 8, 2], [7, -1, -1], [7, 8, -1]]


# ---------------------------------------------------------------- verification on tiny models


def prefix_context(model, prompts, pad_id=2) -> TreeContext:
    """Prefill a left-padded batch; ctx.root = each row's greedy next token."""
    ids, mask = left_pad(prompts, pad_id)
    pos = positions_from_mask(mask)
    cache = DynamicCache(config=model.config)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache).logits
    return TreeContext(cache, mask.bool(), logits[:, -1].argmax(-1), pos[:, -1] + 1)


def plain_logits(model, tokens: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([tokens])).logits[0, -1]


PROMPTS = [[40, 41, 42, 43, 44, 45, 46], [50, 51, 52]]


@torch.inference_mode()
@pytest.mark.parametrize("eager", [False, True])
def test_tree_forward_node_logits_equal_plain_forward(tiny_loaded, eager):
    model = tiny_loaded.model
    if eager:
        model.set_attn_implementation("eager")
    try:
        b = tree_buffers([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
        ctx = prefix_context(model, PROMPTS)
        g = torch.Generator().manual_seed(0)
        cand = torch.randint(3, 259, (2, b.num_nodes - 1), generator=g)
        # two extra rows: a 2-chain hung on node 3 (depth 2) and one on the root, fed by arbitrary embeddings
        extra_parents = torch.tensor([3, b.num_nodes, 0])
        extra = torch.randn(2, 3, model.config.hidden_size, generator=g)
        logits, _ = tree_forward(model, ctx, b, cand, extra_parents=extra_parents, extra_embeds=extra)
        assert logits.shape[1] == b.num_nodes + 3
        emb = model.get_input_embeddings()
        for row, prompt in enumerate(PROMPTS):
            toks = [int(ctx.root[row])] + cand[row].tolist()
            for node, path in enumerate(b.node_paths.tolist()):
                seq = prompt + [toks[i] for i in path if i >= 0]
                torch.testing.assert_close(logits[row, node], plain_logits(model, seq), atol=1e-4, rtol=1e-4)
            # extra rows: prefix + anchor's path + the chain of extra embeddings
            path3 = [toks[i] for i in b.node_paths[3].tolist() if i >= 0]
            base = emb(torch.tensor([prompt + path3]))
            for k in range(2):
                x = torch.cat([base, extra[row : row + 1, : k + 1]], dim=1)
                ref = model(inputs_embeds=x).logits[0, -1]
                torch.testing.assert_close(logits[row, b.num_nodes + k], ref, atol=1e-4, rtol=1e-4)
            x = torch.cat([emb(torch.tensor([prompt + toks[:1]])), extra[row : row + 1, 2:3]], dim=1)
            ref = model(inputs_embeds=x).logits[0, -1]
            torch.testing.assert_close(logits[row, -1], ref, atol=1e-4, rtol=1e-4)
    finally:
        if eager:
            model.set_attn_implementation("sdpa")


def greedy_tokens(model, prompt: list[int], n: int) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(plain_logits(model, seq).argmax()))
    return seq[len(prompt) :]


@torch.inference_mode()
@pytest.mark.parametrize("pad_small", [True, False])
def test_accept_and_kv_gather_equal_plain_forward(tiny_loaded, pad_small):
    """Row 0 accepts a deep, non-contiguous path (a real gather), row 1 a shorter one: afterwards both rows'
    caches (with a hole in row 1) give the logits of a plain forward over prefix + emitted tokens."""
    model = tiny_loaded.model
    b = tree_buffers([(0,), (1,), (0, 0), (1, 0), (1, 1), (1, 1, 0), (1, 0, 0)])
    # nodes: 1=(0) 2=(1) 3=(0,0) 4=(1,0) 5=(1,1) 6=(1,0,0) 7=(1,1,0)
    ctx = prefix_context(model, PROMPTS)
    refs = [greedy_tokens(model, p, 9) for p in PROMPTS]  # refs[r][0] == ctx.root[r]
    assert [r[0] for r in refs] == ctx.root.tolist()
    wrong = lambda t: 3 + (t + 1) % 250  # noqa: E731
    r0, r1 = refs
    cand = torch.tensor(
        [
            [wrong(r0[1]), r0[1], wrong(r0[2]), wrong(r0[2]), r0[2], wrong(r0[3]), r0[3]],  # path 2->5->7
            [r1[1], wrong(r1[1]), wrong(r1[2]), wrong(r1[2]), wrong(r1[2]), 0, 0],  # path 1 only
        ]
    )
    res = verify_tree(model, ctx, b, cand, pad_small_chunks=pad_small, return_logits=True)
    assert res.num_accepted.tolist() == [3, 1]
    assert res.path.tolist() == [[0, 2, 5, 7], [0, 1, -1, -1]]
    assert res.emitted() == [r0[1:5], r1[1:3]]
    assert ctx.kv_mask.shape[1] == 7 + 4 and ctx.kv_mask[1, -2:].tolist() == [False, False]
    assert ctx.root.tolist() == [r0[4], r1[2]]
    for row, (prompt, ref) in enumerate(zip(PROMPTS, refs)):
        n = int(res.num_accepted[row])
        for j in range(n + 1):  # logits at the path nodes are those of the plain forward
            expect = plain_logits(model, prompt + ref[: j + 1])
            torch.testing.assert_close(res.logits[row, j], expect, atol=1e-4, rtol=1e-4)
    # next step on the gathered cache: a root-only chunk, and then a chain, both equal plain forwards
    nxt = verify_tree(model, ctx, chain_buffers(0), torch.empty(2, 0, dtype=torch.long), return_logits=True)
    for row, (prompt, ref) in enumerate(zip(PROMPTS, refs)):
        n = int(res.num_accepted[row])
        expect = plain_logits(model, prompt + ref[: n + 2])
        torch.testing.assert_close(nxt.logits[row, 0], expect, atol=1e-4, rtol=1e-4)
    assert nxt.emitted() == [[r0[5]], [r1[3]]]
    # a 3-row chain (padded to 4 rows or not) on the holed cache: row 1 drafts its true continuation
    extra = [r[int(n) + 3 : int(n) + 5] for r, n in zip(refs, res.num_accepted)]  # after the current root
    cand = torch.tensor([[wrong(extra[0][0]), 0], extra[1]])
    third = verify_tree(model, ctx, chain_buffers(2), cand, pad_small_chunks=pad_small, return_logits=True)
    assert third.num_accepted.tolist() == [0, 2]
    assert third.emitted()[1][:2] == extra[1] and third.emitted()[0] == extra[0][:1]
    assert ctx.cache.get_seq_length() == ctx.kv_mask.shape[1] == 7 + 4 + 1 + 3


# ---------------------------------------------------------------- the generic decoder


class OracleTreeDecoder(TreeDecoder):
    """Adversarial drafter for tests: a fixed branching tree where, per row and step, a random branch carries
    the true greedy continuation up to a random depth and every other node a wrong token."""

    def propose(self, state: TreeState) -> Draft | None:
        rng: random.Random = self.params["rng"]
        if rng.random() < 0.2:
            return None
        b = tree_buffers([(0,), (1,), (2,), (0, 0), (1, 0), (1, 1), (1, 1, 0), (2, 0), (2, 0, 0), (2, 0, 0, 0)])
        cand = torch.zeros(state.ctx.batch_size, b.num_nodes - 1, dtype=torch.long)
        for r, (row, hist) in enumerate(zip(state.rows.tolist(), state.history)):
            ref = self.params["refs"][row]
            done = len(hist) - state.prompt_lens[r]  # ref[done - 1] is the root
            leaf = rng.choice(b.retrieve_indices.tolist())
            depth = rng.randint(0, 4)
            good = {node: d for d, node in enumerate(leaf) if 0 < d <= depth and node >= 0}
            for node in range(1, b.num_nodes):
                d = int(b.position_ids[node])
                truth = ref[done - 1 + d] if done - 1 + d < len(ref) else 5
                cand[r, node - 1] = truth if node in good else 3 + (truth + 1) % 250
        return Draft(b, cand)


@pytest.mark.parametrize("batch,prune", [(1, True), (4, True), (4, False)])
def test_tree_decoder_is_lossless(tiny_loaded, batch, prune):
    tok, model = tiny_loaded.tokenizer, tiny_loaded.model
    prompts = random_prompts(tok, batch, seed=batch)
    greedy = build_decoder("greedy", model, tok)
    free = greedy.generate(prompts, 30, StopCriteria())
    refs = [g.tokens for g in free]
    # a stop token that ends some rows early, so finished rows are pruned mid-batch
    stop = StopCriteria(eos_ids=(refs[0][9],))
    expect = [g.tokens for g in greedy.generate(prompts, 30, stop)]
    dec = OracleTreeDecoder(model, tok, refs=refs, rng=random.Random(batch), prune_finished=prune)
    out = dec.generate(prompts, 30, stop)
    assert [g.tokens for g in out] == expect
    for g in out:
        assert g.accepted[0] == 1 and sum(g.accepted) >= len(g.tokens)
        assert len(g.extra["drafted"]) == g.forward_passes
    assert sum(len(g.tokens) for g in out) / sum(g.forward_passes for g in out) > 1.3


class ProbeDecoder(TreeDecoder):
    """Exercises the extra-row paths: two probe rows in the prefill, a probe chain hung on every tree node."""

    needs_hidden = True
    needs_logits = True

    def prefill_extra_embeds(self, ids, mask):
        return self.model.get_input_embeddings().weight.mean(0).expand(ids.shape[0], 2, -1)

    def start(self, state):
        self.params["seen"].append(state.prefill_extra_logits.shape)

    def propose(self, state):
        b = chain_buffers(1)
        bsz = state.ctx.batch_size
        probe = state.prefill_extra_logits if state.last is None else state.last.extra_logits
        cand = probe[:, 0].argmax(-1)[:, None] if state.last is None else probe[:, 0, :].argmax(-1)[:, None]
        emb = self.model.get_input_embeddings().weight.mean(0).expand(bsz, 2, -1)
        return Draft(b, cand, extra_parents=torch.tensor([0, 1]), extra_embeds=emb)


def test_probe_rows_keep_decoding_lossless(tiny_llama):
    tok, model = tiny_llama.tokenizer, tiny_llama.model
    prompts = random_prompts(tok, 3, seed=7)
    expect = [g.tokens for g in build_decoder("greedy", model, tok).generate(prompts, 16, StopCriteria())]
    seen: list = []
    out = ProbeDecoder(model, tok, seen=seen).generate(prompts, 16, StopCriteria())
    assert [g.tokens for g in out] == expect
    assert seen == [torch.Size([3, 2, model.config.vocab_size])]
