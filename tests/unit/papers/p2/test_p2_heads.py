"""DeepSeek-style cascaded heads (paper 2): the training-time parallel forward equals token-by-token decoding with
per-depth caches, looped depths run the right head, the one save format round-trips and guards the trunk, looped
extension copies exactly, and the heads initialise from the trunk."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from mtp_core.models.heads import HeadsMismatch, head_archs, load_heads, save_heads
from mtp_core.models.heads.deepseek import DeepSeekMTPHeads, chunk_mask
from mtp_core.models.load import tiny_model
from tests.conftest import tiny_spec


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def trunk(request):
    return tiny_model(tiny_spec(request.param)).eval()


def test_registered_and_sized(trunk):
    heads = DeepSeekMTPHeads.from_trunk(trunk, 3)
    assert head_archs()["deepseek_mtp"] is DeepSeekMTPHeads
    d = trunk.config.hidden_size
    # per head: one trunk layer, the 2d -> d projection and three norms; nothing of the embedding or lm_head
    layer = sum(p.numel() for p in trunk.model.layers[-1].parameters())
    assert sum(p.numel() for p in heads.parameters()) == 3 * (layer + 2 * d * d + 3 * d)
    for h in heads.heads:  # copy_last: the block is the last layer, outnorm the final norm
        for a, b in zip(h.block.state_dict().values(), trunk.model.layers[-1].state_dict().values()):
            assert torch.equal(a, b)
        assert torch.equal(h.norm.weight, trunk.model.norm.weight)
    assert not any(k.startswith(("embed", "lm_head")) for k in heads.state_dict())


@pytest.mark.parametrize("depths", [4, 8])
def test_parallel_equals_incremental(trunk, depths):
    """forward_train over a window == depth k fed one position at a time on its own cache, every depth, loops
    included (K = 4, D = 8: depths 5-8 rerun heads 1-4)."""
    torch.manual_seed(0)
    heads = DeepSeekMTPHeads.from_trunk(trunk, 4)
    s = 14
    ids = torch.randint(3, 300, (2, s))
    with torch.no_grad():
        h0 = trunk.model(input_ids=ids).last_hidden_state
        par = heads.forward_train(trunk, h0, ids, depths=depths)
        caches = [DynamicCache() for _ in range(depths)]
        inc = [[] for _ in range(depths)]
        for p in range(s - depths):  # depth k at position p reads h^{k-1}_p and t_{p+k}
            h = h0[:, p : p + 1]
            pos = torch.full((2, 1), p)
            for k in range(1, depths + 1):
                mask = chunk_mask(torch.ones(2, p, dtype=torch.bool), torch.ones(2, 1, dtype=torch.bool))
                h = heads.depth_forward(trunk, k, h, ids[:, p + k : p + k + 1], pos, mask, caches[k - 1])
                inc[k - 1].append(h)
    for k in range(depths):
        torch.testing.assert_close(torch.cat(inc[k], 1), par[k][:, : s - depths], atol=1e-4, rtol=1e-4)


def test_loop_runs_head_k_mod_K(trunk):
    """Depth d runs head ((d-1) mod K)+1: perturbing head 2 of 4 leaves depth 1 as it was and changes depth 2; depth
    6 (a loop) equals head 2 applied by hand to depth 5's output."""
    torch.manual_seed(1)
    heads = DeepSeekMTPHeads.from_trunk(trunk, 4)
    assert [heads.head_of(d) + 1 for d in range(1, 9)] == [1, 2, 3, 4, 1, 2, 3, 4]
    ids = torch.randint(3, 300, (1, 12))
    with torch.no_grad():
        h0 = trunk.model(input_ids=ids).last_hidden_state
        out = heads.forward_train(trunk, h0, ids, depths=8)
        pos = torch.arange(12)[None]
        ahead = torch.zeros_like(ids)
        ahead[:, : 12 - 6] = ids[:, 6:]
        by_hand = heads.heads[1]
        x = by_hand.proj(torch.cat([by_hand.enorm(trunk.model.embed_tokens(ahead)), by_hand.hnorm(out[4])], -1))
        y = by_hand.norm(by_hand.block(x, None, pos, None, position_embeddings=trunk.model.rotary_emb(x, pos)))
        torch.testing.assert_close(y, out[5])
        heads.heads[1].proj.weight.mul_(1.5)
        moved = heads.forward_train(trunk, h0, ids, depths=8)
    assert torch.equal(moved[0], out[0]) and not torch.allclose(moved[1], out[1])


def test_save_load_and_trunk_guard(trunk, tmp_path):
    heads = DeepSeekMTPHeads.from_trunk(trunk, 2, concat="hidden_first")
    save_heads(heads, tmp_path / "h", trunk, trunk_name="tiny")
    back = load_heads(tmp_path / "h", trunk)
    assert isinstance(back, DeepSeekMTPHeads) and back.num_heads == 2 and back.config["concat"] == "hidden_first"
    for a, b in zip(heads.state_dict().values(), back.state_dict().values()):
        assert torch.equal(a, b)
    other = tiny_model(tiny_spec(trunk.config.model_type, init_seed=1))
    with pytest.raises(HeadsMismatch, match="tiny"):
        load_heads(tmp_path / "h", other)


def test_extend_copies_groups(trunk):
    torch.manual_seed(2)
    heads = DeepSeekMTPHeads.from_trunk(trunk, 4)
    with torch.no_grad():
        for i, h in enumerate(heads.heads):
            h.proj.weight.add_(i)  # tell the heads apart

    def same(a, b):
        return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))

    ext = heads.extend(4)  # 4 -> 8: heads 5-8 <- 1-4
    assert ext.num_heads == 8 and all(same(ext.heads[4 + j], heads.heads[j]) for j in range(4))
    assert all(same(ext.heads[j], heads.heads[j]) for j in range(4))
    again = ext.extend(4, group=4)  # 8 -> 12: the latest group (5-8)
    assert all(same(again.heads[8 + j], ext.heads[4 + j]) for j in range(4))
    one = DeepSeekMTPHeads.from_trunk(trunk, 1).extend(7)  # "1 -> 8": seven copies of head 1
    assert one.num_heads == 8 and all(same(one.heads[j], one.heads[0]) for j in range(8))
    first = heads.extend(2, group=2, source="first")
    assert same(first.heads[4], heads.heads[0]) and same(first.heads[5], heads.heads[1])
    with pytest.raises(ValueError, match="group"):
        heads.extend(4, group=5)
