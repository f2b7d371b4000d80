"""What paper 2's workflow jobs share: loading a main (a base model, or a run's export with its trained trunk) and
the prompt rows of the AR / CAR benchmarks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...bench.prompt_sets import load_rule_model
from ...data.prompts import first_per_category
from ...io import read_jsonl
from ...models.load import LoadedModel
from ...models.plan import model_dir
from .plan import P2Plan


def load_main(config: dict, main: str) -> LoadedModel:
    """The trunk `main` names (`P2Plan.main_of`): a declared model, or the trunk a run trained (its export)."""
    plan = P2Plan(config)
    if plan.is_run(main):
        return load_rule_model(config, plan.run(main).model, None, plan.final_model(main))
    return load_rule_model(config, main, model_dir(config, main))


def prompt_rows(
    files: Sequence[str], sets: Mapping[str, int | None], single_turn: bool = False
) -> dict[str, list[dict]]:
    """Each prompt set's rows (`sets[set]` per category), from its file (in `sets` order). `single_turn`: drop the
    later turns of multi-turn rows (the acceptance benchmarks decode the first turn)."""
    out = {}
    for (name, n), f in zip(sets.items(), files):
        rows = first_per_category(list(read_jsonl(f)), n)
        out[name] = [{k: v for k, v in r.items() if k != "turns"} if single_turn else r for r in rows]
    return out
