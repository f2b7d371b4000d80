"""Continuation perplexity (§5.1, §6): typical acceptance is lossy, so the paper checks the quality of what a
method emits by the base LM's perplexity of its continuations, "within [x] nats" of the base LM's own (the vanilla
row's samples). Per sample: the mean negative log-likelihood, in nats per token, of the tokens the method emitted,
under the base model (the trunk its heads draft for), teacher-forced after the prompt. Per method: the mean over
prompts (± stderr), and Table 1 its difference from the vanilla row, paired by prompt (`report.table1`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ...io import atomic_write_json, read_jsonl
from ...results.write import mean_stderr, samples_path


@torch.inference_mode()
def continuation_nll(model: torch.nn.Module, prompt: Sequence[int], tokens: Sequence[int]) -> float | None:
    """Mean NLL (nats per token) of `tokens` after `prompt` under `model`, logits only at the predicting positions
    (None for an empty continuation)."""
    if not tokens:
        return None
    dev = next(model.parameters()).device
    ids = torch.tensor([[*prompt, *tokens]], device=dev)
    logits = model(input_ids=ids, logits_to_keep=len(tokens) + 1).logits[0, :-1]
    return float(F.cross_entropy(logits.float(), ids[0, len(prompt) :]))


def add_continuation_nll(model: torch.nn.Module, prompts: Sequence[Sequence[int]], results: Sequence[str]) -> None:
    """Write each result's `decode_stats.continuation_nll`: {mean, stderr, per_sample} over its samples, which hold
    one single-turn generation per prompt of `prompts`, in that order."""
    for path in results:
        samples = list(read_jsonl(samples_path(path)))
        if [s["prompt_tokens"] for s in samples] != [len(p) for p in prompts]:
            raise ValueError(f"{samples_path(path)}: its samples are not one per prompt, in the prompts' order")
        per_sample = [continuation_nll(model, p, s["tokens"]) for p, s in zip(prompts, samples, strict=True)]
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        mean, stderr = mean_stderr(per_sample)
        result["decode_stats"]["continuation_nll"] = {"mean": mean, "stderr": stderr, "per_sample": per_sample}
        atomic_write_json(path, result)
