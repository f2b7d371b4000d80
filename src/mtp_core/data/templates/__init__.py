"""Grade-school word-problem templates for the synthetic MetaMathQA-style generator.

A template declares its question quantities (integer ranges), at least two phrasings of the question
(setup + ask; the rephrasing augmentation picks another one), a declarative statement of the answer (for
self-verification rows), 2-5 solution steps (each with at least two wordings and an exact arithmetic
expression), and `solve`, a direct computation of the answer that checks the steps. Text fields are
`str.format` templates over the quantities, the step results, `{calc}` (the worked computation of the step)
and the person fields `{name} {he} {He} {his} {His} {him}`.

The templates are grouped by theme (`counting`, `money`, `rates`); `ORDER` is the generator's order of them, on
which its seeded draws depend, so a new template goes at the end of `ORDER`.
"""

from __future__ import annotations

from . import counting, money, rates
from .base import Step, Template

ORDER = (
    "cookies_left",
    "shopping_change",
    "weekly_reading",
    "savings_goal",
    "fruit_bags",
    "pencil_boxes",
    "garden_fence",
    "train_trip",
    "bakery_profit",
    "ages",
    "water_tank",
    "stamps",
    "wages",
    "pizza_party",
    "marbles_share",
    "library_books",
    "eggs_needed",
    "bus_passengers",
    "phone_bill",
    "car_wash",
    "running",
    "candy_jars",
    "field_trip",
    "birthday_money",
    "fence_painting",
    "pet_store_fish",
)


def _in_order(*groups: tuple[Template, ...]) -> tuple[Template, ...]:
    by_name = {t.name: t for g in groups for t in g}
    if sorted(by_name) != sorted(ORDER) or len(by_name) != sum(len(g) for g in groups):
        raise RuntimeError("data.templates: ORDER must name every template of the theme tables exactly once")
    return tuple(by_name[n] for n in ORDER)


TEMPLATES: tuple[Template, ...] = _in_order(counting.TEMPLATES, money.TEMPLATES, rates.TEMPLATES)

__all__ = ["ORDER", "TEMPLATES", "Step", "Template"]
