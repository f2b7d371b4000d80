"""The heads' one save format: weights alone plus heads.json, and the trunk fingerprint that guards loading."""

from __future__ import annotations

import copy

import pytest
import torch

from mtp_core.models.heads import DraftHeads, HeadsMismatch, load_heads, read_heads_meta, register_heads, save_heads
from mtp_core.models.heads.store import trunk_fingerprint
from mtp_core.models.load import tiny_model
from tests.conftest import tiny_spec


@register_heads("test_linear")
class LinearHeads(DraftHeads):
    def __init__(self, config):
        super().__init__(config)
        self.proj = torch.nn.ModuleList(
            torch.nn.Linear(config["hidden_size"], config["hidden_size"]) for _ in range(config["num_heads"])
        )


def test_round_trip_and_fingerprint_guard(tmp_path):
    trunk = tiny_model(tiny_spec("llama"))
    heads = LinearHeads({"hidden_size": 64, "num_heads": 2})
    save_heads(heads, tmp_path / "h", trunk, trunk_name="tiny-llama", extra={"run": "x"})
    meta = read_heads_meta(tmp_path / "h")
    assert meta["arch"] == "test_linear" and meta["trunk"]["name"] == "tiny-llama" and meta["extra"] == {"run": "x"}
    back = load_heads(tmp_path / "h", trunk)
    for a, b in zip(heads.state_dict().values(), back.state_dict().values()):
        assert torch.equal(a, b)
    # the state dict holds the heads only, never the trunk's embedding or output head
    assert set(back.state_dict()) == {f"proj.{i}.{w}" for i in range(2) for w in ("weight", "bias")}

    # the same trunk in bfloat16 has the same fingerprint; a fine-tuned one does not load
    assert trunk_fingerprint(copy.deepcopy(trunk).to(torch.bfloat16)) == trunk_fingerprint(trunk)
    tuned = copy.deepcopy(trunk)
    with torch.no_grad():
        tuned.model.layers[-1].mlp.down_proj.weight.mul_(1.1)
    with pytest.raises(HeadsMismatch, match="tiny-llama"):
        load_heads(tmp_path / "h", tuned)
    load_heads(tmp_path / "h", tuned, check=False)  # on purpose


def test_not_a_heads_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="heads.json"):
        read_heads_meta(tmp_path)


def test_heads_take_their_trunks_linear_kernel(tmp_path):
    from mtp_core.models.cpu_linear import PackedLinear, pack_linears

    trunk = tiny_model(tiny_spec("llama"))
    save_heads(LinearHeads({"hidden_size": 512, "num_heads": 2}), tmp_path / "h", trunk)  # weights worth packing
    assert not any(isinstance(m, PackedLinear) for m in load_heads(tmp_path / "h", trunk).modules())
    pack_linears(trunk, min_weight=0)
    assert all(type(m) is PackedLinear for m in load_heads(tmp_path / "h", trunk).proj)
