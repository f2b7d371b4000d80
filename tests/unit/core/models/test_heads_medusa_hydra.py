"""Medusa and Hydra heads: what a fresh head computes, the draft vocabulary, the one save format (trunk
fingerprint), and the loaders of the published checkpoints on synthetic state dicts laid out as the reference
code saves them (Medusa `medusa_lm_head.pt`, Hydra `hydra_lm_head.pt` with its tied ResBlocks)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoModel

from mtp_core.models.heads import load_heads, save_heads
from mtp_core.models.heads.hydra import HydraHeads, load_hydra_checkpoint, prefix_config
from mtp_core.models.heads.medusa import MedusaHeads, load_medusa_checkpoint
from mtp_core.models.load import tiny_model
from tests.conftest import tiny_spec

torch.manual_seed(0)


@pytest.fixture(scope="module")
def trunk():
    return tiny_model(tiny_spec("llama")).eval()


def test_fresh_medusa_head_is_the_trunk_head_plus_a_constant(trunk):
    heads = MedusaHeads.for_trunk(trunk, num_heads=3).bind(trunk)
    h = torch.randn(2, 5, 64)
    with torch.no_grad():
        for blocks in heads.blocks:
            blocks[0].linear.bias.zero_()
        out = heads(h)
    assert out.shape == (2, 5, 3, 320)
    torch.testing.assert_close(out[:, :, 1], trunk.lm_head(h))  # zero-initialised ResBlock = identity


def test_draft_vocabulary(trunk):
    heads = MedusaHeads.for_trunk(trunk, num_heads=2, draft_vocab=5).bind(trunk)
    ids = torch.tensor([3, 7, 11, 200, 319])
    heads.out.set_vocab(ids)
    heads.bind(trunk)  # the restricted matrix is read at bind time
    h = torch.randn(4, 64)
    full = trunk.lm_head(heads.blocks[0](h))
    torch.testing.assert_close(heads.head_logits(h, 0), full[:, ids])
    assert heads.out.token_ids(torch.tensor([0, 4])).tolist() == [3, 319]
    assert heads.out.index_of(torch.tensor([7, 8, 319, -1])).tolist() == [1, -1, 4, -1]
    with pytest.raises(ValueError, match="sorted"):
        heads.out.set_vocab(torch.tensor([3, 3, 4, 5, 6]))


def test_hydra_identity_init_and_shapes(trunk):
    heads = HydraHeads.for_trunk(trunk, num_heads=3).bind(trunk)
    h = torch.randn(2, 6, 64)
    e = heads.prefix_forward(h, torch.arange(6)[None].expand(2, 6), None, None)
    # the prefix layer is an identity residual: e is h renormalised by the prefix's RMSNorm
    torch.testing.assert_close(e, heads.prefix.norm(h))
    toks = torch.randint(0, 320, (2, 6, 3))
    with torch.no_grad():
        for mlp in heads.mlps:
            mlp.cond.linear.bias.zero_()
            for b in mlp.blocks:
                b.linear.bias.zero_()
    for i in range(3):
        logits = heads.head_logits(i, e, heads.embed(toks[..., : i + 1]))
        torch.testing.assert_close(logits, trunk.lm_head(e))  # R = [I, 0, ..]: e passes through
    with pytest.raises(ValueError, match="reads 2 token embeddings"):
        heads.head_logits(1, e, heads.embed(toks[..., :1]))


def test_prefix_layer_with_cache_equals_full_pass(trunk):
    heads = HydraHeads.for_trunk(trunk, num_heads=2, init="hydra").bind(trunk)
    h = torch.randn(1, 7, 64)
    pos = torch.arange(7)[None]
    full = heads.prefix_forward(h, pos, None, None)
    cache = heads.new_prefix_cache()
    first = heads.prefix_forward(h[:, :4], pos[:, :4], None, cache)
    mask = torch.ones(1, 1, 3, 7, dtype=torch.bool).tril(4)  # the 3 new rows see the 4 cached ones and the past
    rest = heads.prefix_forward(h[:, 4:], pos[:, 4:], mask, cache)
    torch.testing.assert_close(torch.cat([first, rest], 1), full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ["medusa", "hydra"])
def test_save_and_load_round_trip(trunk, tmp_path, arch):
    cls = MedusaHeads if arch == "medusa" else HydraHeads
    heads = cls.for_trunk(trunk, num_heads=2, draft_vocab=16, init="hydra") if arch == "hydra" else None
    heads = heads or cls.for_trunk(trunk, num_heads=2, draft_vocab=16, lm_head="own")
    heads.out.set_vocab(torch.arange(0, 320, 20))
    save_heads(heads, tmp_path / "h", trunk, trunk_name="tiny-llama")
    back = load_heads(tmp_path / "h", trunk).bind(trunk)
    heads.bind(trunk)
    for (k, a), (k2, b) in zip(heads.state_dict().items(), back.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    assert "vocab_ids" in "".join(back.state_dict())  # the draft vocabulary travels with the heads
    assert not any(k.startswith(("embed", "lm_head")) for k in back.state_dict())


# ----------------------------------------------------------------------- published checkpoint layouts


class RefResBlock(nn.Module):
    """The reference ResBlock (names as saved by Medusa / Hydra)."""

    def __init__(self, h, cond_in=None):
        super().__init__()
        self.linear = nn.Linear(cond_in or h, h)
        if cond_in:
            self.res_connection = nn.Linear(cond_in, h)
        nn.init.normal_(self.linear.weight, std=0.05)

    def forward(self, x):
        res = self.res_connection(x) if hasattr(self, "res_connection") else x
        return res + nn.functional.silu(self.linear(x))


def test_medusa_checkpoint_loader(trunk):
    k, h, v = 5, 64, 320
    ref = nn.ModuleList(nn.Sequential(RefResBlock(h), nn.Linear(h, v, bias=False)) for _ in range(k))
    state = {f"medusa_head.{key}": t for key, t in ref.state_dict().items()}
    heads = load_medusa_checkpoint(state, h, v).bind(trunk)
    assert heads.num_heads == 5 and heads.config["lm_head"] == "own"  # the count comes from the keys
    x = torch.randn(3, h)
    for j in range(k):
        torch.testing.assert_close(heads.head_logits(x, j), ref[j](x))
    with pytest.raises(ValueError, match="unexpected key"):
        load_medusa_checkpoint({**state, "medusa_head.0.2.weight.extra": torch.zeros(1)}, h, v)


def reference_hydra(trunk, k: int, layers: int):
    """Hydra's module layout: a 1-layer LlamaModel as prefix (with its unused embedding), per head a Sequential
    (Dropout, conditioning block, then (Dropout, ONE ResBlock instance) x (layers - 1)) and (Dropout, Linear)."""
    h, v = 64, 320
    prefix = AutoModel.from_config(prefix_config({**trunk.config.to_dict(), "vocab_size": v}))
    prefix.config.vocab_size = v
    mlps = nn.ModuleList()
    for i in range(k):
        tied = RefResBlock(h)
        mods = [nn.Dropout(0.2), RefResBlock(h, h * (i + 2))]
        for _ in range(layers - 1):
            mods += [nn.Dropout(0.2), tied]
        mlps.append(nn.Sequential(*mods))
    lm = nn.ModuleList(nn.Sequential(nn.Dropout(0.2), nn.Linear(h, v)) for _ in range(k))
    for lin in lm:
        nn.init.normal_(lin[1].bias, std=0.1)
    return nn.ModuleDict({"prefix_embeding_layer": prefix, "hydra_mlp": mlps, "hydra_lm_head": lm}).eval()


def test_hydra_checkpoint_loader(trunk):
    k, layers = 3, 4
    ref = reference_hydra(trunk, k, layers)
    state = ref.state_dict()
    assert "hydra_mlp.0.3.linear.weight" in state and "hydra_mlp.0.7.linear.weight" in state  # tied, saved 3x
    config = {"hydra_num_heads": k, "hydra_num_layers": layers, "hydra_head_arch": "prefix-mlp", "grounded_heads": True}
    heads = load_hydra_checkpoint(state, config, trunk.config.to_dict()).bind(trunk).eval()
    assert heads.config["lm_head"] == "own" and heads.config["lm_head_bias"]
    hid = torch.randn(2, 5, 64)
    pos = torch.arange(5)[None].expand(2, 5)
    e_ref = ref["prefix_embeding_layer"](inputs_embeds=hid, position_ids=pos).last_hidden_state
    e = heads.prefix_forward(hid, pos, None, None)
    torch.testing.assert_close(e, e_ref, atol=1e-5, rtol=1e-4)
    toks = torch.randint(0, 320, (2, 5, k))
    for i in range(k):
        emb = trunk.get_input_embeddings()(toks[..., : i + 1])
        x = torch.cat([e_ref[..., None, :], emb], dim=-2).flatten(-2)
        want = ref["hydra_lm_head"][i](ref["hydra_mlp"][i](x))
        torch.testing.assert_close(heads.head_logits(i, e, emb), want, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="unexpected key"):
        load_hydra_checkpoint({**state, "hydra_extra.weight": torch.zeros(1)}, config, trunk.config.to_dict())
    with pytest.raises(ValueError, match="grounded"):
        load_hydra_checkpoint(state, {**config, "grounded_heads": False}, trunk.config.to_dict())
