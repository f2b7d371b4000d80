"""mtp_core.evaluate: the `mtp` lm-eval model class, local tasks and the runner, on a tiny random model."""

from __future__ import annotations

import json
from collections.abc import Sequence

import lm_eval
import pytest
from lm_eval.api.instance import Instance

from mtp_core.config.settings import REPO_ROOT
from mtp_core.decoding import Decoder, GenerationResult, StopCriteria
from mtp_core.decoding.stopping import StopTracker
from mtp_core.evaluate import (
    MTPLM,
    EvalSettings,
    check_task_data,
    lm_eval_metrics,
    run_evaluation,
    task_dataset,
    task_manager_for,
    write_task_yaml,
)
from mtp_core.io import BadRowError
from mtp_core.models.load import load_model, prepare_base_model
from mtp_core.results.write import answer_token_count, effective_k, samples_path
from mtp_core.validation import load_config

TINY = {
    "source": "tiny",
    "arch": "llama",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "init_seed": 0,
    "name": "t",
}
ROWS = [
    {
        "query": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
        "answer": str(a + b),
        "response": f"{a} + {b} = {a + b}\nThe answer is: {a + b}",
        "type": "seed",
        "original_question": f"Tom has {a} apples and buys {b} more.",
    }
    for a, b in [(3, 4), (12, 30), (7, 100), (250, 1), (5, 5)]
]
TASK = "synthetic_math_cot"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return prepare_base_model(TINY, tmp_path_factory.mktemp("models") / "t")


@pytest.fixture(scope="module")
def loaded(model_dir):
    return load_model(TINY, base_dir=model_dir)


@pytest.fixture(scope="module")
def data_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


@pytest.fixture(scope="module")
def config():
    return load_config(REPO_ROOT / "config" / "tiny.yaml")


def answer_text(row_index: int) -> str:
    """The oracle's answer: right for even rows, wrong for odd ones, ending with a newline."""
    value = ROWS[row_index]["answer"] if row_index % 2 == 0 else "99999"
    return f"Add them up. The answer is: {value}.\n"


class OracleDecoder(Decoder):
    """Emits `answer_text(row)` in one step, then 'Question: ...' four tokens per step, trimmed at the stop
    the way real decoders trim (StopTracker); remembers the stop criteria it was given."""

    name = "oracle"
    lossless = False

    def __init__(self, model, tokenizer, **params):
        super().__init__(model, tokenizer, **params)
        self.stops: list[StopCriteria] = []

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria):
        self.stops.append(stop)
        out = []
        for ids in prompts:
            prompt = self.tokenizer.decode(list(ids))
            row = next(i for i, r in enumerate(ROWS) if r["query"] in prompt)
            answer = self.tokenizer(answer_text(row), add_special_tokens=False).input_ids
            rest = self.tokenizer("Question: and then more text", add_special_tokens=False).input_ids
            tracker = StopTracker(1, stop, self.tokenizer, max_new_tokens)
            accepted = [tracker.feed(0, answer)]
            while not tracker.done(0) and rest:
                accepted.append(tracker.feed(0, rest[:4]))
                rest = rest[4:]
            reason = tracker.reason[0] or "length"
            out.append(GenerationResult(tracker.tokens[0], accepted, len(ids), 0.0, 0.01, reason))
        return out


def requests(items: list[tuple[str, dict]], task: str = "t") -> list[Instance]:
    return [
        Instance("generate_until", doc={}, arguments=(ctx, kw), idx=0, metadata=(task, i, 1))
        for i, (ctx, kw) in enumerate(items)
    ]


def read_samples(result_path) -> list[dict]:
    return [json.loads(line) for line in open(samples_path(str(result_path)))]


# --- effective k, by hand ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "accepted, answer_tokens, expected",
    [
        ([1, 3, 2, 4], 4, 2.0),  # cumulative 1, 4 | 6, 10: steps within 4 tokens are (1, 3)
        ([1, 3, 2, 4], 5, 2.0),
        ([1, 3, 2, 4], 6, 2.0),  # (1, 3, 2)
        ([1, 3, 2, 4], 10, 2.5),  # all steps
        ([1, 3, 2, 4], 0, 1.0),  # the first step is always kept
        ([5, 1, 1], 5, 5.0),
        ([2, 2, 2, 2], 7, 2.0),
    ],
)
def test_effective_k_hand_computed(accepted, answer_tokens, expected):
    assert effective_k(accepted, answer_tokens) == expected


def test_answer_token_count_on_stop_truncated_text(loaded):
    tok = loaded.tokenizer
    tokens = tok("The answer is: 7.\nQuestion:", add_special_tokens=False).input_ids  # one byte per token
    assert answer_token_count(tok, tokens, "The answer is: 7.\n") == 18
    assert answer_token_count(tok, tokens, "The answer is: 7.\nQuestion:") == len(tokens)
    # a closing EOS is not part of the answer (the official script matches the tokenised response)
    assert answer_token_count(tok, tokens + [2], "The answer is: 7.\nQuestion:") == len(tokens)
    # nor is a whitespace stop string (BBH stops at "\n\n"): 21 bytes of answer, then the 2 of the stop
    cut = tok("So the answer is (A).\n\n", add_special_tokens=False).input_ids
    assert len(cut) == 23 and answer_token_count(tok, cut, "So the answer is (A).") == 21


# --- the model class ---------------------------------------------------------------------------------------


def test_generate_until_passes_stops_to_decoder_and_truncates(loaded):
    oracle = OracleDecoder(loaded.model, loaded.tokenizer)
    lm = MTPLM(loaded, oracle)
    ctx = f"Question: {ROWS[0]['query']}\nAnswer:"
    out = lm.generate_until(requests([(ctx, {"until": ["Question:"], "max_gen_toks": 64})]))
    assert out == [answer_text(0)]
    assert "Question:" in oracle.stops[0].stop_strings and "<|im_end|>" in oracle.stops[0].stop_strings
    assert oracle.stops[0].eos_ids == loaded.eos_ids
    st = lm.request_stats[("t", 0, 0, 0)]
    n_answer = len(answer_text(0))  # byte tokenizer: one token per ASCII character
    assert st.answer_tokens == n_answer
    assert st.gen.accepted == [n_answer, 4, 4, 1] and st.gen.stop_reason == "stop_string"
    assert effective_k(st.gen.accepted, st.answer_tokens) == n_answer  # the 'Question:' steps are trimmed


def test_greedy_stops_early_at_until(loaded):
    lm = MTPLM(loaded, "greedy")
    ctx = "hello there " * 6
    free = lm.generate_until(requests([(ctx, {"until": [], "max_gen_toks": 16})]))[0]
    n_free = len(lm.request_stats[("t", 0, 0, 0)].gen.tokens)
    stop = next(c for c in free[1:] if c.isascii() and c.isalnum())  # a character the model writes anyway
    cut = lm.generate_until(requests([(ctx, {"until": [stop], "max_gen_toks": 16})]))[0]
    st = lm.request_stats[("t", 0, 0, 0)]
    assert cut == free[: free.index(stop)]
    assert st.gen.stop_reason == "stop_string" and len(st.gen.tokens) < n_free
    assert st.answer_tokens == len(st.gen.tokens) - 1  # the answer ends before the stop token


def test_batching_restores_order_and_matches_batch_size_one(loaded):
    short = {"until": ["\n\n"], "max_gen_toks": 6}
    longer = {"until": ["Question:"], "max_gen_toks": 9, "do_sample": False}
    items = [
        ("a", short),
        ("Question: what is two plus two?\nAnswer:", longer),
        ("hello there " * 6, short),
        ("xyz", longer),
        ("the quick brown fox", short),
        ("0123456789" * 3, longer),
        ("b", longer),
    ]
    reqs = requests(items)
    lm1, lm3 = MTPLM(loaded, "greedy", batch_size=1), MTPLM(loaded, "greedy", batch_size=3)
    out1, out3 = lm1.generate_until(reqs), lm3.generate_until(reqs)
    assert out3 == out1 and len(out1) == len(items)
    for i, (ctx, kw) in enumerate(items):
        g1, g3 = lm1.request_stats[("t", i, 0, 0)].gen, lm3.request_stats[("t", i, 0, 0)].gen
        assert g3.tokens == g1.tokens
        assert g1.prompt_tokens == len(loaded.tokenizer(ctx).input_ids)
        assert len(g1.tokens) <= kw["max_gen_toks"]
    # a repeated instance is recorded once per repeat
    lm1.generate_until([reqs[0], reqs[0]])
    assert ("t", 0, 0, 1) in lm1.request_stats


def test_greedy_only_and_no_loglikelihood(loaded):
    lm = MTPLM(loaded, "greedy")
    with pytest.raises(ValueError, match="greedy"):
        lm.generate_until(requests([("a", {"until": [], "do_sample": True, "temperature": 0.7})]))
    with pytest.raises(NotImplementedError, match="generate_until"):
        lm.loglikelihood([])
    with pytest.raises(ValueError, match="batch_size"):
        MTPLM(loaded, "greedy", batch_size="auto")


def test_chat_template_hooks(loaded):
    lm = MTPLM(loaded, "greedy")
    chat = lm.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert chat == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert lm.chat_template(True) == loaded.tokenizer.chat_template and lm.chat_template(False) is None
    assert "/" not in lm.tokenizer_name


def test_model_args_construction(model_dir):
    lm = MTPLM.create_from_arg_string(
        f"config={REPO_ROOT / 'config' / 'tiny.yaml'},model=tiny-llama,base_dir={model_dir},"
        "decoder.prune_finished=False",
        {"batch_size": 2, "max_batch_size": None, "device": "cpu"},
    )
    assert lm.loaded.name == "tiny-llama" and lm.batch_size == 2
    assert lm.decoder.describe() == {"name": "greedy", "lossless": True, "params": {"prune_finished": False}}
    with pytest.raises(TypeError, match="unknown argument"):
        MTPLM.create_from_arg_obj({"pretrained": str(model_dir), "temprature": 0})


def test_simple_evaluate_by_registered_name(model_dir, data_path, tmp_path):
    res = lm_eval.simple_evaluate(
        model="mtp",
        model_args=f"pretrained={model_dir},decoder=greedy",
        tasks=[TASK],
        task_manager=task_manager_for(TASK, data_path, tmp_path),
        limit=2,
        batch_size=2,
        gen_kwargs={"max_gen_toks": 4},
        bootstrap_iters=0,
    )
    metrics = lm_eval_metrics(res["results"][TASK])
    assert set(metrics) == {"exact_match,strict-match", "exact_match,flexible-extract"}
    assert all(m["stderr"] is None for m in metrics.values())  # bootstrap_iters=0: "N/A"
    assert res["config"]["mtp_decoder"]["name"] == "greedy"
    assert len(res["samples"][TASK]) == 2 * 2  # one entry per (doc, filter)


# --- local tasks -------------------------------------------------------------------------------------------


def test_task_yaml_and_data_checks(config, data_path, tmp_path):
    text = write_task_yaml(TASK, data_path, tmp_path / "tasks").read_text()
    assert json.dumps(str(data_path.resolve())) in text and "__TEST_JSONL__" not in text
    assert check_task_data(TASK, data_path) == len(ROWS)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"query": "no answer"}) + "\n")
    with pytest.raises(BadRowError, match="row 2.*answer"):
        check_task_data(TASK, bad)
    assert task_dataset(config, TASK) == "math" and task_dataset(config, "gsm8k_cot") is None
    with pytest.raises(ValueError, match="synthetic_math"):
        task_dataset({"datasets": {"s": {"kind": "sharegpt"}}}, TASK)


def test_settings_from_config(config):
    s = EvalSettings.from_config(config, limit=2)
    assert (s.limit, s.batch_size, s.max_gen_toks, s.bootstrap_iters) == (2, 4, 12, 1000)


# --- the runner --------------------------------------------------------------------------------------------


def test_run_evaluation_result_and_per_doc_join(config, loaded, data_path, tmp_path):
    out = tmp_path / "oracle.json"
    oracle = OracleDecoder(loaded.model, loaded.tokenizer)
    result = run_evaluation(
        config,
        loaded,
        oracle,
        TASK,
        out,
        data_path=data_path,
        paper="p1",
        run="student",
        settings=EvalSettings(limit=4, batch_size=3, max_gen_toks=64),
    )
    assert json.loads(out.read_text()) == result
    assert (result["kind"], result["paper"], result["run"], result["model"], result["task"]) == (
        "eval",
        "p1",
        "student",
        "t",
        TASK,
    )
    assert result["decoder"] == {"name": "oracle", "lossless": False, "params": {}}
    assert result["n"] == 4 and result["scale"] == "tiny" and len(result["config_hash"]) == 12
    # docs 0 and 2 right, 1 and 3 wrong: mean 0.5, stderr = sqrt(1/3)/2 (sample std, n-1)
    for key in ("exact_match,strict-match", "exact_match,flexible-extract"):
        assert result["metrics"][key]["value"] == 0.5
        assert result["metrics"][key]["stderr"] == pytest.approx((1 / 3) ** 0.5 / 2)
    settings = result["settings"]
    assert settings["max_gen_toks"] == 64 and settings["until"] == ["Question:", "</s>", "<|im_end|>"]
    assert settings["apply_chat_template"] is True and settings["n_docs"] == len(ROWS)
    # effective k is trimmed to the answer: one step of len(answer) tokens per doc
    lengths = [len(answer_text(i)) for i in range(4)]
    assert result["decode_stats"]["effective_k"]["mean"] == pytest.approx(sum(lengths) / 4)
    per_forward = [(n + len("Question:")) / 4 for n in lengths]  # steps: answer, 'Ques', 'tion', ':'
    assert result["decode_stats"]["tokens_per_forward"]["mean"] == pytest.approx(sum(per_forward) / 4)

    samples = read_samples(out)
    assert [s["doc_id"] for s in samples] == [0, 1, 2, 3]
    for i, s in enumerate(samples):
        assert ROWS[i]["query"] in s["prompt"] and s["target"] == ROWS[i]["answer"]
        assert s["response"] == answer_text(i)
        assert s["answer_tokens"] == lengths[i] and s["effective_k"] == lengths[i]  # joined by doc id
        assert s["prompt_tokens"] == len(loaded.tokenizer(s["prompt"], add_special_tokens=False).input_ids)
        assert set(s["filtered"]) == {"strict-match", "flexible-extract"}
        right = float(i % 2 == 0)
        assert s["metrics"] == {"exact_match,strict-match": right, "exact_match,flexible-extract": right}
        assert s["filtered"]["strict-match"] == (f"{ROWS[i]['answer']}." if right else "99999.")


@pytest.mark.parametrize(
    ("until", "response"),
    [
        (["answer is"], lambda i: "Add them up. The "),  # cut where the given string starts, not at "Question:"
        ([], lambda i: answer_text(i) + "Question: and then more text"),  # no string: the whole continuation
    ],
)
def test_run_evaluation_replaces_the_tasks_stop_sequences(config, loaded, data_path, tmp_path, until, response):
    """`until` replaces the task's stop sequences (its YAML stops at "Question:"), as paper 1 App. A.1 sets them
    per task; the recorded settings show the list that ran."""
    out = tmp_path / "oracle.json"
    oracle = OracleDecoder(loaded.model, loaded.tokenizer)
    settings = EvalSettings.from_config(config, limit=2, batch_size=2, max_gen_toks=64, until=until)
    result = run_evaluation(config, loaded, oracle, TASK, out, data_path=data_path, settings=settings)
    assert result["settings"]["until"] == until
    assert [s["response"] for s in read_samples(out)] == [response(i) for i in range(2)]


def test_run_evaluation_greedy_chat_template_on_off(config, loaded, data_path, tmp_path):
    prompts = {}
    for chat in (True, False):
        out = tmp_path / f"greedy-{chat}.json"
        result = run_evaluation(
            config,
            loaded,
            "greedy",
            TASK,
            out,
            data_path=data_path,
            settings=EvalSettings(limit=3, batch_size=2, max_gen_toks=8, apply_chat_template=chat),
        )
        samples = read_samples(out)
        assert result["n"] == 3 and result["paper"] == "base" and result["run"] == "t"
        assert result["decode_stats"]["forward_passes"] == sum(s["forward_passes"] for s in samples)
        assert all(s["new_tokens"] <= 8 for s in samples)
        prompts[chat] = samples[0]["prompt"]
    assert prompts[True].startswith("<|im_start|>user\nQuestion: ")
    assert prompts[False] == f"Question: {ROWS[0]['query']}\nAnswer: Let's think step by step."
