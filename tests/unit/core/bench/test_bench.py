"""The bench protocol and the `mtp-repro` CLI on a tiny model."""

from __future__ import annotations

import pytest

from mtp_core.bench.protocol import (
    BenchPrompt,
    drop_compile,
    encode_prompts,
    make_batches,
    markdown_table,
    median_seconds,
    run_bench,
)
from mtp_core.decoding import GenerationResult, register_decoder
from mtp_core.decoding.greedy import GreedyDecoder


@register_decoder("test-lossy-echo")
class _Lossy(GreedyDecoder):
    """A lossy stand-in: greedy output with its last token replaced."""

    lossless = False


@register_decoder("test-broken")
class _Broken(GreedyDecoder):
    """Claims to be lossless but changes one token: the bench must say so."""

    def generate(self, prompts, max_new_tokens, stop):
        out = super().generate(prompts, max_new_tokens, stop)
        out[0].tokens[-1] = (out[0].tokens[-1] + 1) % 200 + 3
        return out


ROWS = [
    {"id": "a", "category": "x", "prompt": "hello there"},
    {"id": "b", "category": "y", "prompt": "what is 2 + 2"},
    {"id": "c", "category": "x", "prompt": "tell me a story"},
]


def test_median_seconds_drops_one_slow_batch_per_repeat():
    # batch x repeat: each repeat has one slow batch, so every repeat total (and their median) is 7 s
    secs = [[1.0, 1.0, 5.0], [1.0, 5.0, 1.0], [5.0, 1.0, 1.0]]
    assert median_seconds(secs) == 3.0
    assert median_seconds([[2.0, 4.0]]) == 3.0


def test_batches_never_mix_categories():
    prompts = [BenchPrompt(str(i), c, [1]) for i, c in enumerate("xyxxy")]
    assert make_batches(prompts, 2) == [[0, 2], [3], [1, 4]]


def test_run_bench_reports_every_decoder(tiny_llama):
    prompts = encode_prompts(tiny_llama, ROWS)
    decoders = {"greedy": {}, "hf-greedy": {}, "test-lossy-echo": {}, "test-broken": {}}
    summary, gens = run_bench(tiny_llama, decoders, prompts, 8, batch_size=2, warmup=1, repeats=2, threads=1)
    d = summary["decoders"]
    assert d["greedy"]["identical_to_greedy"] is True and d["hf-greedy"]["identical_to_greedy"] is True
    assert d["test-lossy-echo"]["identical_to_greedy"] is None
    assert d["test-broken"]["identical_to_greedy"] is False
    assert d["greedy"]["speedup_vs_greedy"] == 1.0
    assert d["hf-greedy"]["speedup_vs_greedy"] == pytest.approx(
        d["hf-greedy"]["tokens_per_s"] / d["greedy"]["tokens_per_s"]
    )
    assert set(d["greedy"]["per_category"]) == {"x", "y"}
    assert len(d["greedy"]["tokens_per_s_repeats"]) == 2
    for row in d.values():  # time = sum of per-batch medians; batches: (a, c) of x, (b) of y
        secs = row["batch_seconds"]
        assert [len(t) for t in secs] == [2, 2]
        assert row["tokens_per_s"] == pytest.approx(row["new_tokens"] / median_seconds(secs))
    y_greedy = sum(len(g.tokens) for p, g in zip(prompts, gens["greedy"]) if p.category == "y")
    assert d["greedy"]["per_category"]["y"]["tokens_per_s"] == pytest.approx(
        y_greedy / median_seconds(d["greedy"]["batch_seconds"][1:])
    )
    assert [len(g.tokens) for g in gens["greedy"]] == [len(g.tokens) for g in gens["hf-greedy"]]
    table = markdown_table(summary)
    assert "| test-broken |" in table and "NO" in table and "lossy" in table


def test_compiled_lossless_decoders_are_checked_against_compiled_greedy(tiny_llama, traced, monkeypatch):
    """Compiled kernels may round a near-tie of two logits the other way: here compiled greedy's last token differs
    from eager greedy's on the first prompt of every batch. The bench reports that agreement (`identical_fraction`,
    against eager greedy) and checks every lossless decoder on the compiled backend against compiled greedy."""
    static = GreedyDecoder._generate_static

    def near_tie(self, prompts, max_new_tokens, stop):
        out = static(self, prompts, max_new_tokens, stop)
        out[0].tokens[-1] = (out[0].tokens[-1] + 1) % 200 + 3
        return out

    monkeypatch.setattr(GreedyDecoder, "_generate_static", near_tie)
    prompts = encode_prompts(tiny_llama, ROWS)  # batches (a, c) and (b): prompts a and b differ
    compiled = {"backend": "compiled"}
    decoders = {
        "greedy": {},
        "gc": {"decoder": "greedy", **compiled},
        "gc2": {"decoder": "greedy", **compiled},
        "broken-c": {"decoder": "test-broken", **compiled},
        "lossy-c": {"decoder": "test-lossy-echo", **compiled},
    }
    d = run_bench(tiny_llama, decoders, prompts, 6, batch_size=2, warmup=0, repeats=1)[0]["decoders"]
    assert d["greedy"]["identical_to_greedy"] is True and d["greedy"]["lossless_reference"] == "greedy"
    for name in ("gc", "gc2"):
        assert d[name]["identical_to_greedy"] is True and d[name]["lossless_reference"] == "gc"
        assert d[name]["identical_fraction"] == pytest.approx(1 / 3)
    assert d["broken-c"]["identical_to_greedy"] is False and d["broken-c"]["identical_fraction"] == pytest.approx(1 / 3)
    assert d["lossy-c"]["identical_to_greedy"] is None and d["lossy-c"]["lossless_reference"] == "gc"


def test_compiled_rows_compile_once_per_shape_of_rows_and_their_times_leave_the_compile_out(
    tiny_llama, traced, monkeypatch
):
    """Prompts of 30 and 169 tokens (chat template) need caches of 64 and 192 slots: the bench reserves the longest
    for every decoder, so compiled greedy decodes both at one cache length (one graph). Without a warm-up its
    compile falls into the first measured batch: neither the bench's times nor the generations' own (a record's
    `wall_s`) keep it."""
    from mtp_core.decoding.static import StaticSession
    from mtp_core.results.write import decode_stats

    shapes = []
    begin = StaticSession.begin
    monkeypatch.setattr(StaticSession, "begin", lambda self, *a: (begin(self, *a), shapes.append(self.shape))[0])
    rows = [{"id": "s", "category": "x", "prompt": "hello there"}, {"id": "l", "category": "y", "prompt": "ab " * 50}]
    prompts = encode_prompts(tiny_llama, rows)
    assert sorted(len(p.ids) for p in prompts) == [30, 169]
    summary, gens = run_bench(tiny_llama, {"greedy": {}, "gc": {"decoder": "greedy", "backend": "compiled"}},
                              prompts, 6, warmup=0, repeats=1)  # fmt: skip
    row = summary["decoders"]["gc"]
    assert shapes == [(1, 192), (1, 192)] and row["identical_to_greedy"] is True
    assert row["compile_s"] > 0 and summary["decoders"]["greedy"]["compile_s"] == 0
    assert sum(map(sum, row["batch_seconds"])) < row["compile_s"]
    assert decode_stats(gens["gc"])["wall_s"] < row["compile_s"]
    # a tree decoder's cache holds a verification chunk beyond the tokens (41 rows, compiled at 64): its headroom
    # comes on top of the reservation, so both prompts share one length, 175 + 64 -> 256 (not 192 for the short one)
    shapes.clear()
    pl = {"pl": {"decoder": "prompt-lookup", "num_draft": 40, "backend": "compiled"}}
    run_bench(tiny_llama, pl, prompts, 6, warmup=0, repeats=1)
    assert shapes == [(1, 256), (1, 256)]


def test_a_compile_leaves_the_decoding_time_first_then_the_prefills():
    rows = [GenerationResult([5], [1], 3, prefill_s=5.0, decode_s=1.0, stop_reason="length") for _ in range(2)]
    drop_compile(rows, 3.0)  # more than decoding took: the prefill compiled too
    assert [(g.prefill_s, g.decode_s) for g in rows] == [(3.0, 0.0)] * 2
    drop_compile(rows, 0.0)
    assert [(g.prefill_s, g.decode_s) for g in rows] == [(3.0, 0.0)] * 2


def test_labels_let_one_method_run_with_several_settings(tiny_llama):
    prompts = encode_prompts(tiny_llama, ROWS[:1])
    decoders = {"greedy": {}, "greedy-unpruned": {"decoder": "greedy", "prune_finished": False}}
    summary, _ = run_bench(tiny_llama, decoders, prompts, 4, warmup=0, repeats=1)
    row = summary["decoders"]["greedy-unpruned"]
    assert row["decoder"] == {"name": "greedy", "lossless": True, "params": {"prune_finished": False}}
    assert row["identical_to_greedy"] is True


def test_warmup_decodes_the_first_batch_once_per_decoder_up_to_warmup_tokens(tiny_llama, monkeypatch):
    """The warm-up runs every decoder on the first batch `warmup` times at up to `warmup_tokens` new tokens, then
    the measured repeats decode at `max_new_tokens`."""
    import mtp_core.bench.protocol as bench

    calls = []
    real = bench.generate_turns

    def spy(decoder, loaded, batch, max_new_tokens, stop):
        calls.append((type(decoder).__name__, [p.id for p in batch], max_new_tokens))
        return real(decoder, loaded, batch, max_new_tokens, stop)

    monkeypatch.setattr(bench, "generate_turns", spy)
    prompts = encode_prompts(tiny_llama, ROWS)
    summary, _ = run_bench(tiny_llama, {"greedy": {}}, prompts, 8, batch_size=2, warmup=2, repeats=1, warmup_tokens=3)
    assert calls[:2] == [("GreedyDecoder", ["a", "c"], 3)] * 2
    assert [c[2] for c in calls[2:]] == [8, 8]  # the measured batches (a, c) and (b)
    assert summary["warmup_tokens"] == 3
    _, _ = run_bench(tiny_llama, {"greedy": {}}, prompts[:1], 2, warmup=1, repeats=1)
    assert calls[4][2] == 2  # never longer than the measured generation


TWO_TURNS = [
    {"id": "mt", "category": "writing", "prompt": "write a haiku", "turns": ["write a haiku", "now make it sadder"]},
    {"id": "st", "category": "writing", "prompt": "write a limerick"},
]


def test_multi_turn_rows_are_decoded_turn_by_turn_with_their_own_answers(tiny_llama):
    """Spec-Bench protocol: turn 2 is the chat of turn 1 with the decoder's own answer, then turn 2."""
    from mtp_core.bench.protocol import generate_turns

    prompts = encode_prompts(tiny_llama, TWO_TURNS)
    assert prompts[0].turns == ("write a haiku", "now make it sadder") and prompts[1].turns == ()
    assert make_batches(prompts, 8) == [[0], [1]]  # a batch never mixes numbers of turns
    greedy = GreedyDecoder(tiny_llama.model, tiny_llama.tokenizer)
    stop = tiny_llama.stop_criteria()
    [got] = generate_turns(greedy, tiny_llama, prompts[:1], 6, stop)
    [first] = greedy.generate([prompts[0].ids], 6, stop)
    answer = tiny_llama.tokenizer.decode(first.tokens, skip_special_tokens=True)
    chat = [
        {"role": "user", "content": "write a haiku"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "now make it sadder"},
    ]
    [second] = greedy.generate([tiny_llama.encode(chat)], 6, stop)
    assert got.tokens == first.tokens + second.tokens
    assert got.accepted == first.accepted + second.accepted
    assert got.extra["turn_new_tokens"] == [len(first.tokens), len(second.tokens)]

    summary, gens = run_bench(
        tiny_llama, {"greedy": {}, "prompt-lookup": {"num_draft": 3}}, prompts, 6, warmup=0, repeats=1, threads=1
    )
    assert gens["greedy"][0].tokens == got.tokens
    assert summary["decoders"]["prompt-lookup"]["identical_to_greedy"] is True
    assert summary["decoders"]["greedy"]["forward_passes"] == len(got.accepted) + len(gens["greedy"][1].accepted)


def test_multi_turn_rows_without_chat_template_are_an_error(tiny_llama):
    with pytest.raises(ValueError, match="'mt' has 2 turns"):
        encode_prompts(tiny_llama, TWO_TURNS, chat=False)


def test_every_repeat_starts_without_what_the_warm_up_or_earlier_repeats_learned(tiny_llama, monkeypatch):
    """The wall-clock guard learns acceptance rates as it decodes: the warm-up (16 tokens of the first batch) and
    every repeat teach it, but each repeat starts from none of that, so no batch is timed on what was learned from
    the same prompt; its cost table, a property of the machine, is calibrated once."""
    from mtp_core.decoding.prompt_lookup import PromptLookupDecoder

    seen = []
    generate = PromptLookupDecoder.generate

    def spy(self, *args):
        before, calibrated = float(self.acceptance.tries.sum()), len(self.guard._by_batch)
        out = generate(self, *args)
        seen.append((before, float(self.acceptance.tries.sum()), calibrated))
        return out

    monkeypatch.setattr(PromptLookupDecoder, "generate", spy)
    prompts = encode_prompts(tiny_llama, [{"id": "r", "category": "x", "prompt": "one two three one two three one"}])
    run_bench(tiny_llama, {"greedy": {}, "pl": {"decoder": "prompt-lookup", "adaptive": True}}, prompts, 24,
              warmup=1, repeats=2)  # fmt: skip
    assert len(seen) == 3 and all(after > before for before, after, _ in seen)  # each call learned something
    assert [before for before, _, _ in seen] == [0.0, 0.0, 0.0]  # and the next started without it
    assert [calibrated for _, _, calibrated in seen] == [0, 1, 1]  # calibrated in the warm-up, kept
