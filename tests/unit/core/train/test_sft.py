"""Fine-tuned models (`source: finetuned`): response-only SFT data and loss, the method through the launcher,
and the config checks of `mtp_core.models.plan` and `mtp_core.train.finetune`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from mtp_core.config.settings import ConfigError
from mtp_core.data.rows import render_example, render_prompt
from mtp_core.models import plan as model_plan
from mtp_core.models.load import tiny_model, tiny_tokenizer
from mtp_core.train import MicroBatchSpec, TrainConfig, finetune, train
from mtp_core.train.launch import launch
from mtp_core.train.sft import IGNORE, SFTBatches, SFTStep, encode_rows, pack_rows, sft_loss
from mtp_core.train.sft_settings import SFTConfig
from mtp_core.validation import load_config
from tests.conftest import REPO, tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [
    {"query": f"What is {a} + {b}?", "response": f"{a} + {b} = {a + b}.\nThe answer is: {a + b}"}
    for a, b in [(1, 2), (13, 4), (5, 26), (7, 8), (30, 1), (2, 2)]
]


@pytest.mark.parametrize("template", ["chat", "plain"])
def test_labels_are_the_response_tokens(template):
    tok = tiny_tokenizer()
    examples = encode_rows(ROWS, tok, SFTConfig(), template)
    eos = [tok.eos_token_id] if template == "plain" else []  # the chat template ends the turn itself
    for row, (ids, start) in zip(ROWS, examples):
        assert ids == tok(render_example(row, tok, template), add_special_tokens=False).input_ids + eos
        prompt = tok(render_prompt(row, tok, template), add_special_tokens=False).input_ids
        assert ids[:start] == prompt[:start] and start <= len(prompt)
        assert tok.decode(ids[start:]).startswith(row["response"][:3])
    batch = SFTBatches(examples, tok.pad_token_id, SFTConfig(shuffle=False)).micro_batch(MicroBatchSpec(0, 0, 0, 3))
    for r, (ids, start) in enumerate(examples[:3]):  # each row whole, in one sequence, positions from 0
        at = batch["rows"] == r
        assert batch["input_ids"][at].tolist() == ids and batch["position_ids"][at].tolist() == list(range(len(ids)))
        labels = batch["labels"][at]
        assert (labels[:start] == IGNORE).all() and labels[start:].tolist() == ids[start:]
    assert (batch["labels"][batch["rows"] < 0] == IGNORE).all()
    every = encode_rows(ROWS, tok, SFTConfig(loss_on="all", max_tokens=10), template)
    assert all(start == 1 and len(ids) <= 10 for ids, start in every)


def test_rows_without_a_response_token_are_dropped(caplog):
    tok = tiny_tokenizer()
    long_query = {"query": "x" * 60, "response": "y"}
    with caplog.at_level("WARNING", logger="mtp_core.train.sft"):
        examples = encode_rows(ROWS[:2] + [long_query], tok, SFTConfig(max_tokens=40), "plain")
    assert len(examples) == 2 and all(start < len(ids) for ids, start in examples)
    assert "1 of 3 row(s) dropped" in caplog.text
    with pytest.raises(ValueError, match="no row keeps a response token"):
        encode_rows([long_query], tok, SFTConfig(max_tokens=40), "plain")


@pytest.mark.parametrize(
    ("lengths", "capacity", "bins"),
    [
        ([5, 3, 7, 2, 2, 9], 10, [[5], [2, 1], [0, 3, 4]]),
        ([4, 4, 4, 4], 8, [[0, 1], [2, 3]]),
        ([12, 3], 10, [[0], [1]]),  # longer than the capacity: a bin of its own
    ],
)
def test_pack_rows_is_first_fit_decreasing(lengths, capacity, bins):
    assert pack_rows(lengths, capacity) == bins


def _alone(model, examples):
    """Brute force: every row through the model by itself (no padding, no packing): the mean CE over its
    supervised next tokens, pooled over the rows, and their count."""
    ce, n = 0.0, 0
    for ids, start in examples:
        t = torch.tensor([ids])
        logits = model(input_ids=t).logits[0, start - 1 : -1]
        ce = ce + F.cross_entropy(logits.float(), t[0, start:], reduction="sum")
        n += len(ids) - start
    return ce / n, n


@pytest.mark.parametrize("loss_on", ["response", "all"])
def test_packed_loss_and_gradients_equal_each_row_alone(loss_on):
    """Packed rows keep apart: the loss and every gradient equal those of the rows run one by one."""
    torch.manual_seed(0)
    model, tok = tiny_model(tiny_spec("llama")), tiny_tokenizer()
    cfg = SFTConfig(shuffle=False, max_tokens=140, loss_on=loss_on)
    examples = encode_rows(ROWS, tok, cfg, "chat")
    batch = SFTBatches(examples, tok.pad_token_id, cfg).micro_batch(MicroBatchSpec(0, 0, 0, 6))
    assert batch["input_ids"].shape[0] < 6 and batch["input_ids"].shape[1] <= 140  # several rows per sequence
    loss, n = sft_loss(model, batch)
    loss.backward()
    packed = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want, n_want = _alone(model, examples)
    want.backward()
    assert n == n_want and torch.allclose(loss, want, atol=1e-5)
    assert all(torch.allclose(a, p.grad, atol=1e-5) for a, p in zip(packed, model.parameters()))


def test_training_lowers_the_response_loss_and_resumes_exactly(tmp_path):
    tok = tiny_tokenizer()
    batches = SFTBatches(encode_rows(ROWS, tok, SFTConfig(), "chat"), tok.pad_token_id, SFTConfig(seed=3))
    cfg = {
        "max_steps": 6,
        "global_batch_size": 4,
        "micro_batch_size": 2,
        "lr": 3e-3,
        "warmup_steps": 1,
        "checkpoint_every": 1,
        "progress": False,
    }
    model = tiny_model(tiny_spec("llama"))
    probe = batches.micro_batch(MicroBatchSpec(0, 0, 0, 6))
    with torch.no_grad():
        before = sft_loss(model, probe)[0].item()
    ref = train(SFTStep(tok), model, batches, TrainConfig.from_dict(cfg), tmp_path / "ref")
    with torch.no_grad():
        after = sft_loss(model, probe)[0].item()
    assert ref.steps == 6 and after < before - 0.5
    # stopped after 3 steps, then continued: the same weights as the uninterrupted run
    resumed = tiny_model(tiny_spec("llama"))
    train(SFTStep(tok), resumed, batches, TrainConfig.from_dict({**cfg, "max_steps": 3}), tmp_path / "cut")
    again = tiny_model(tiny_spec("llama"))
    train(SFTStep(tok), again, batches, TrainConfig.from_dict(cfg), tmp_path / "cut")
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)


def test_sft_method_through_the_launcher(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mtp_core.models.load import prepare_base_model

    spec = tiny_spec("qwen3", chat_template=False)
    base = prepare_base_model(spec, tmp_path / "base")
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    settings = {
        "model": spec,
        "base_dir": str(base),
        "data": str(data),
        "sft": {"max_tokens": 64},
        "train": {
            "max_steps": 2,
            "global_batch_size": 2,
            "micro_batch_size": 1,
            "warmup_steps": 1,
            "lr": 1e-3,
            "checkpoint_every": 1,
            "progress": False,
        },
    }
    res = launch(tmp_path / "ft" / "train.json", "sft", settings, {"cluster": "debug", "threads": 1})
    assert res["steps"] == 2
    model = AutoModelForCausalLM.from_pretrained(res["final_dir"])
    tok = AutoTokenizer.from_pretrained(res["final_dir"])
    assert model.config.vocab_size == AutoModelForCausalLM.from_pretrained(base).config.vocab_size
    assert tok("1 + 2").input_ids == tiny_tokenizer()("1 + 2").input_ids
    with pytest.raises(ValueError, match="sft: unknown key"):
        launch(tmp_path / "ft2" / "train.json", "sft", {**settings, "sft": {"maxtokens": 3}}, {"cluster": "debug"})


def _tiny_config(tmp_path: Path, edit) -> Path:
    import yaml

    raw = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    edit(raw["models"])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_model_plan_paths_and_settings(tmp_path):
    config = load_config(REPO / "config" / "tiny.yaml")
    assert model_plan.model_dir(config, "tiny-qwen3-math") == "results/models/finetuned/tiny-qwen3-math/model"
    assert model_plan.model_dir(config, "tiny-qwen3") == "results/models/base/tiny-qwen3"
    assert model_plan.finetuned_models(config) == ["tiny-qwen3-math"]
    s = finetune.finetune_settings(config, "tiny-qwen3-math")
    assert s["model"]["name"] == "tiny-qwen3" and s["base_dir"] == "results/models/base/tiny-qwen3"
    assert s["data"] == "results/data/math/train.jsonl" and s["train"]["threads"] == config["threads"]
    assert s["sft"]["max_tokens"] == 128 and "base_stamp" not in s  # its base is not fine-tuned
    with pytest.raises(ValueError, match="not a fine-tuned model"):
        finetune.finetune_settings(config, "tiny-qwen3")


def test_retraining_a_finetuned_base_changes_the_stamp_of_what_trains_from_it():
    """`base_stamp` (launch.trajectory_hash of the fine-tune) enters the settings of trainings from a fine-tuned
    model, so a retrained base supersedes their old state instead of resuming it; threads do not count."""
    from mtp_core.papers.p1.plan import P1Plan

    config = load_config(REPO / "config" / "tiny.yaml")
    config["models"]["tiny-qwen3-math2"] = {
        **copy.deepcopy(config["models"]["tiny-qwen3-math"]),
        "base": "tiny-qwen3-math",
    }
    run0, sft0 = P1Plan(config).run_settings("main"), finetune.finetune_settings(config, "tiny-qwen3-math2")
    assert run0["base_stamp"] == sft0["base_stamp"] == finetune.base_stamp(config, "tiny-qwen3-math")
    config["threads"] = 7
    assert P1Plan(config).run_settings("main")["base_stamp"] == run0["base_stamp"]
    config["models"]["tiny-qwen3-math"]["train"]["lr"] = 5e-4
    assert P1Plan(config).run_settings("main")["base_stamp"] != run0["base_stamp"]
    assert finetune.finetune_settings(config, "tiny-qwen3-math2")["base_stamp"] != sft0["base_stamp"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda m: m["tiny-qwen3-math"].update(base="nope"),
            "models.tiny-qwen3-math.base: model 'nope' is not declared",
        ),
        (
            lambda m: m.update(
                {
                    "a": {**copy.deepcopy(m["tiny-qwen3-math"]), "base": "b"},
                    "b": {**copy.deepcopy(m["tiny-qwen3-math"]), "base": "a"},
                }
            ),
            "a cycle of fine-tuned models",
        ),
        (lambda m: m["tiny-qwen3-math"].update(dataset="pretrain"), "models.tiny-qwen3-math.dataset"),
        (lambda m: m["tiny-qwen3-math"].update(chat_template=True), "models.tiny-qwen3-math.chat_template"),
        (lambda m: m["tiny-qwen3-math"]["train"].update(micro_batch_size=3), "models.tiny-qwen3-math.train"),
        (lambda m: m["tiny-qwen3-math"]["train"].pop("warmup_steps"), "warmup_steps 2000 >= max_steps 2"),
    ],
)
def test_bad_finetuned_models_are_rejected(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_tiny_config(tmp_path, edit))
