"""Per-row stop tracking shared by all decoders: EOS ids and stop strings, checked token by token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import GenerationResult, StopCriteria


class StopTracker:
    """Tracks which rows of a batch have stopped and trims each row at its first stop.

    A stop string ends generation at the token whose text completes it (the stop string must end inside
    that token's text), like transformers' `StopStringCriteria`; the text is checked on a window of recent
    tokens, so the cost per token does not grow with the output length.
    """

    def __init__(self, batch_size: int, stop: StopCriteria, tokenizer: Any, max_new_tokens: int):
        self.eos = set(stop.eos_ids)
        self.stop_strings = tuple(s for s in stop.stop_strings if s)
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.tokens: list[list[int]] = [[] for _ in range(batch_size)]
        self.reason: list[str | None] = [None] * batch_size
        # a token is at least one character except special tokens; this window always covers a stop string
        self._window = max((len(s) for s in self.stop_strings), default=0) + 2

    @property
    def all_done(self) -> bool:
        return all(r is not None for r in self.reason)

    def done(self, row: int) -> bool:
        return self.reason[row] is not None

    def feed(self, row: int, new_tokens: Sequence[int]) -> int:
        """Append tokens to `row` one at a time until it stops; returns how many were kept."""
        kept = 0
        toks = self.tokens[row]
        for t in new_tokens:
            if self.reason[row] is not None:
                break
            toks.append(int(t))
            kept += 1
            if int(t) in self.eos:
                self.reason[row] = "eos"
            elif self.stop_strings and self._completes_stop_string(toks):
                self.reason[row] = "stop_string"
            elif len(toks) >= self.max_new_tokens:
                self.reason[row] = "length"
        return kept

    def results(
        self,
        prompts: Sequence[Sequence[int]],
        accepted: Sequence[list[int]],
        times: tuple[float, float, float],
        extra: dict[str, Sequence[Any]] | None = None,
    ) -> list[GenerationResult]:
        """One `GenerationResult` per row from this tracker's tokens and stop reasons.

        `times` = (start, end of prefill, end of decoding) of the batch; `extra` maps a key to one value per row.
        """
        t0, t1, t2 = times
        return [
            GenerationResult(
                tokens=self.tokens[i],
                accepted=list(accepted[i]),
                prompt_tokens=len(prompts[i]),
                prefill_s=t1 - t0,
                decode_s=t2 - t1,
                stop_reason=self.reason[i] or "length",
                extra={k: v[i] for k, v in (extra or {}).items()},
            )
            for i in range(len(prompts))
        ]

    def _completes_stop_string(self, toks: list[int]) -> bool:
        window = toks[-self._window :]
        text = self.tokenizer.decode(window, skip_special_tokens=False)
        before = self.tokenizer.decode(window[:-1], skip_special_tokens=False)
        return any(s in text and s not in before for s in self.stop_strings)
