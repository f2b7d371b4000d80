"""The hub mirror (the rehearsal's stand-ins for the hub): the config rewrite, the model families' stand-ins, the
published-layout heads and the Spec-Bench file, each read back by the loader the paper scale uses."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from mtp_core.config import hub_mirror as plan
from mtp_core.config.settings import ConfigError, hub_task_datasets
from mtp_core.data.hub.files import write_file_standin
from mtp_core.data.prompts import jsonl_prompts
from mtp_core.io import ReadReport
from mtp_core.models.heads.hydra import HydraHeads, hydra_checkpoint, load_hydra_checkpoint
from mtp_core.models.heads.medusa import MedusaHeads, load_medusa_checkpoint, medusa_checkpoint
from mtp_core.models.hub.checkpoints import FAMILIES, write_model_standin
from mtp_core.models.hub.heads import write_heads_standin
from mtp_core.models.load import load_model

URL = "https://example.org/data/question.jsonl"


def _config() -> dict:
    return {
        "models": {
            "a": {"source": "hub", "id": "org/model-a", "revision": "main", "dtype": "bfloat16"},
            "b": {"source": "hub", "id": "org/not-mirrored"},
        },
        "datasets": {
            "math": {"kind": "metamathqa", "path": "org/math", "test": {"path": "org/gsm", "name": "main"}},
            "chat": {"kind": "sharegpt", "path": ["org/chat1", "org/elsewhere"]},
        },
        "prompt_sets": {"sb": {"source": "jsonl", "path": "results/external/q.jsonl", "url": URL}},
        "papers": {"p5": {"heads": {"hydra": {"source": "hub", "id": "org/heads", "num_heads": 4}}}},
        "hub_mirror": {
            "models": {"org/model-a": {"family": "qwen3", "tie_word_embeddings": True}},
            "heads": {"org/heads": {"format": "hydra", "base": "org/model-a", "num_heads": 4}},
            "datasets": {"org/math": {}, "org/gsm": {"tasks": ["gsm8k_cot"]}, "org/chat1": {}},
            "files": {URL: {"kind": "spec_bench_questions"}},
        },
    }


def test_apply_points_every_mirrored_hub_reference_at_its_standin_and_nothing_else():
    config = _config()
    before = copy.deepcopy(config)
    done = plan.apply(config)
    assert config["models"]["a"] == {"source": "local", "path": "results/hub/models/org/model-a", "dtype": "bfloat16"}
    assert config["models"]["b"] == before["models"]["b"]
    assert config["datasets"]["math"]["path"] == "results/hub/datasets/org/math"
    assert config["datasets"]["math"]["test"] == {"path": "results/hub/datasets/org/gsm", "name": "main"}
    assert config["datasets"]["chat"]["path"] == ["results/hub/datasets/org/chat1", "org/elsewhere"]
    assert config["papers"]["p5"]["heads"]["hydra"] == {
        "source": "local",
        "path": "results/hub/heads/org/heads",
        "num_heads": 4,
    }
    url = config["prompt_sets"]["sb"]["url"]
    assert url.startswith("file:///") and url.endswith("results/hub/files/example.org/data/question.jsonl")
    assert config["hub_mirror"] == before["hub_mirror"]
    assert sorted(done["models"]) == ["models.a", "papers.p5.heads.hydra"]
    assert len(done["datasets"]) == 3 and done["files"] == ["prompt_sets.sb.url"]
    again = copy.deepcopy(config)
    plan.apply(again)
    assert again == config  # a Slurm job re-parses the workflow: applying twice changes nothing


def test_no_mirror_changes_nothing():
    config = _config()
    del config["hub_mirror"]
    before = copy.deepcopy(config)
    assert plan.apply(config) == {}
    assert config == before


def test_inputs_are_the_standins_among_paths_and_task_datasets_follow_their_tasks():
    config = _config()
    plan.apply(config)
    assert plan.inputs(config, config["datasets"]["chat"]["path"]) == ["results/hub/datasets/org/chat1"]
    assert plan.inputs(config, config["prompt_sets"]["sb"]["url"]) == [
        "results/hub/files/example.org/data/question.jsonl"
    ]
    assert plan.inputs(config, "results/elsewhere") == [] and plan.inputs(config, None) == []
    assert hub_task_datasets(config, "gsm8k_cot") == {"org/gsm": "results/hub/datasets/org/gsm"}
    assert hub_task_datasets(config, "ifeval") == {}


def test_check_refuses_heads_without_a_mirrored_base():
    config = _config()
    config["hub_mirror"]["heads"]["org/heads"]["base"] = "org/not-mirrored"
    with pytest.raises(ConfigError, match="hub_mirror.heads.org/heads.base"):
        plan.check(config)


SIZES = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)


# What each model line's real checkpoints do, written out by hand (not read from FAMILIES).
EXPECTED = {
    "llama3": dict(
        arch="llama",
        rope="llama3",
        bos="<|begin_of_text|>",
        stop={"<|end_of_text|>", "<|eot_id|>"},
        chat="<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date",
    ),
    "qwen3": dict(
        arch="qwen3", rope="default", bos=None, stop={"<|im_end|>", "<|endoftext|>"}, chat="<|im_start|>user\nhi"
    ),
    "qwen3-instruct": dict(
        arch="qwen3", rope="default", bos=None, stop={"<|im_end|>", "<|endoftext|>"}, chat="<|im_start|>user\nhi"
    ),
    "vicuna": dict(arch="llama", rope="default", bos="<s>", stop={"</s>"}, chat=None),
}


def test_every_family_is_expected():
    assert set(EXPECTED) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(EXPECTED))
@pytest.mark.parametrize("tie", [True, False])
def test_model_standin_loads_as_its_family(tmp_path, family, tie):
    spec = {"family": family, "tie_word_embeddings": tie, "max_position_embeddings": 4096, **SIZES}
    out = write_model_standin(spec, tmp_path / "m")
    want = EXPECTED[family]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == want["arch"] and cfg["tie_word_embeddings"] is tie
    assert cfg["rope_parameters"]["rope_type"] == want["rope"]
    lm = load_model({"source": "local", "path": str(out), "chat_template": want["chat"] is not None})
    tok = lm.tokenizer
    assert {tok.convert_ids_to_tokens(i) for i in lm.eos_ids} == want["stop"]
    raw = tok("hi").input_ids
    assert tok.convert_ids_to_tokens(raw[0]) == (want["bos"] or "h") and len(raw) == 2 + bool(want["bos"])
    assert tok.decode(tok("a b\n").input_ids, skip_special_tokens=True) == "a b\n"
    emb, head = lm.model.get_input_embeddings().weight, lm.model.get_output_embeddings().weight
    assert (emb.data_ptr() == head.data_ptr()) is tie
    if want["chat"] is None:
        assert tok.chat_template is None and lm.render("hi") == "hi"
    else:
        assert lm.render("hi").startswith(want["chat"])
    with torch.no_grad():
        assert lm.model(torch.tensor([raw])).logits.shape[-1] == cfg["vocab_size"]


def test_qwen3_thinking_template_closes_the_think_block_only_when_asked(tmp_path):
    spec = {"family": "qwen3", "tie_word_embeddings": True, "max_position_embeddings": 4096, **SIZES}
    lm_dir = write_model_standin(spec, tmp_path / "m")
    tok = load_model({"source": "local", "path": str(lm_dir)}).tokenizer
    chat = [{"role": "user", "content": "x"}]
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True).endswith("assistant\n")
    off = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("assistant\n<think>\n\n</think>\n\n")


@pytest.fixture(scope="module")
def vicuna(tmp_path_factory):
    d = tmp_path_factory.mktemp("vicuna") / "m"
    write_model_standin({"family": "vicuna", "tie_word_embeddings": False, "max_position_embeddings": 4096, **SIZES}, d)
    return d


def test_published_layouts_round_trip_through_their_loaders(vicuna):
    trunk = load_model({"source": "local", "path": str(vicuna)}).model
    torch.manual_seed(0)
    hydra = HydraHeads.for_trunk(trunk, num_heads=3, num_layers=3, lm_head="own", init="hydra")
    medusa = MedusaHeads.for_trunk(trunk, num_heads=5, num_layers=2, lm_head="own")
    for heads in (hydra, medusa):
        with torch.no_grad():
            for p in heads.parameters():
                p.normal_()
    state, cfg = hydra_checkpoint(hydra, "org/vicuna")
    assert cfg["hydra_head_arch"] == "prefix-mlp" and cfg["hydra_num_layers"] == 3
    back = load_hydra_checkpoint(state, cfg, trunk.config.to_dict())
    assert back.state_dict().keys() == hydra.state_dict().keys()
    assert all(torch.equal(back.state_dict()[k], v) for k, v in hydra.state_dict().items())
    state, cfg = medusa_checkpoint(medusa, "org/vicuna")
    back = load_medusa_checkpoint(state, trunk.config.hidden_size, trunk.config.vocab_size)
    assert all(torch.equal(back.state_dict()[k], v) for k, v in medusa.state_dict().items())


@pytest.mark.parametrize("fmt,heads,layers", [("hydra", 4, 4), ("medusa", 5, 1)])
def test_heads_standin_is_read_by_paper5s_import(tmp_path, vicuna, fmt, heads, layers):
    from mtp_core.papers.p5.import_heads import read_checkpoint

    out = write_heads_standin(
        {"format": fmt, "base": "lmsys/vicuna-7b-v1.3", "num_heads": heads, "num_layers": layers},
        vicuna,
        tmp_path / "h",
    )
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(["config.json", f"{fmt}_lm_head.pt"])
    saved = torch.load(out / f"{fmt}_lm_head.pt", weights_only=True)
    assert {v.dtype for v in saved.values()} == {torch.float16}
    trunk = load_model({"source": "local", "path": str(vicuna)}).model
    got = read_checkpoint({"source": "local", "path": str(out)}, trunk)
    assert got.arch == fmt and got.num_heads == heads


def test_spec_bench_standin_reads_as_spec_bench(tmp_path):
    out = write_file_standin({"kind": "spec_bench_questions", "rows": 1}, tmp_path / "question.jsonl")
    raw = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(set(r) == {"question_id", "category", "turns"} for r in raw)
    rows = jsonl_prompts(out, "error", ReadReport(str(out)))
    assert len(rows) == len(raw) and len({r["category"] for r in rows}) == len(rows) > 4
