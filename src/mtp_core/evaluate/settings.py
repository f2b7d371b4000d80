"""`EvalSettings`, importing neither lm-eval nor torch: the workflow reads them while it builds the DAG (paper 1's
baseline reuse), the runner (`run.run_evaluation`) runs with them."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class EvalSettings:
    """How a task is run. `apply_chat_template` None follows the model's `chat_template` setting;
    `max_gen_toks` None keeps the task's own; `until` None keeps the task's stop sequences, a list replaces them
    (the model's end-of-text token stays a stop: an empty list stops on it alone); `num_fewshot` None keeps the
    task's default;
    `chat_template_kwargs` go to the tokenizer's chat template (e.g. Qwen3's `{enable_thinking: false}`)."""

    limit: int | None = None
    batch_size: int = 8
    max_gen_toks: int | None = None
    until: tuple[str, ...] | None = None
    apply_chat_template: bool | None = None
    num_fewshot: int | None = None
    bootstrap_iters: int = 1000
    chat_template_kwargs: dict[str, Any] | None = None

    @classmethod
    def from_config(cls, config: dict, **overrides: Any) -> EvalSettings:
        """Settings from the validated config's `evaluation` section, then `overrides` (e.g. a paper's)."""
        section = config["evaluation"]
        base = cls(**{f.name: section[f.name] for f in fields(cls) if f.name in section})
        base = replace(base, **overrides)
        return base if base.until is None else replace(base, until=tuple(base.until))
