"""Synthetic MetaMathQA-style math data, deterministic in a seed.

MetaMathQA (Yu et al. 2023) bootstraps GSM8K/MATH questions with four augmentation types; here the seed
problems come from the word-problem templates (`data/templates/`, one table per theme) and every augmentation is
generated with exact arithmetic, so every answer is known:

- `SYN_Seed`: the seed question with its canonical step-by-step solution;
- `SYN_AnsAug` (answer augmentation): the same question, a differently worded / ordered correct solution;
- `SYN_Rephrased` (rephrasing): another phrasing of the question (same numbers and answer), solved;
- `SYN_SV` (self-verification): one quantity replaced by `x`, the answer stated, "What is the value of
  unknown variable x?", solved for x;
- `SYN_FOBAR` (FOBAR, forward-backward reasoning): one quantity replaced by `X`, the question asked, then
  "If we know the answer to the above question is N, what is the value of unknown variable X?", solved for X.

Responses end with `#### N` and `The answer is: N` as in MetaMathQA. Train problems and test problems are
drawn from separate random streams (`random.Random` seeded with a string, no global state). Problems are told
apart by what they ask (`Problem.key`: the template and its numbers, in any roles), not by their wording: no two
seed problems are the same problem under another name or phrasing, and no test problem is a train problem in any
wording (a rephrasing of a train seed included).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from .arith import Linear, NotExact, Number, evaluate, show, solve_lines
from .templates import TEMPLATES, Template

TYPE_SEED, TYPE_ANSAUG, TYPE_REPHRASED, TYPE_SV, TYPE_FOBAR = (
    "SYN_Seed",
    "SYN_AnsAug",
    "SYN_Rephrased",
    "SYN_SV",
    "SYN_FOBAR",
)
# config key (`augmentations`) -> row type, in generation order
AUGMENTATION_TYPES = {
    "answer_augmentation": TYPE_ANSAUG,
    "rephrasing": TYPE_REPHRASED,
    "self_verification": TYPE_SV,
    "fobar": TYPE_FOBAR,
}
DEFAULT_AUGMENTATIONS = {"answer_augmentation": 2, "rephrasing": 1, "self_verification": 1, "fobar": 1}
PEOPLE = (
    ("Mia", "she"),
    ("Liam", "he"),
    ("Ava", "she"),
    ("Noah", "he"),
    ("Emma", "she"),
    ("Omar", "he"),
    ("Sofia", "she"),
    ("Ravi", "he"),
    ("Chloe", "she"),
    ("Mateo", "he"),
    ("Hana", "she"),
    ("Lucas", "he"),
    ("Zoe", "she"),
    ("Kenji", "he"),
    ("Amara", "she"),
    ("Felix", "he"),
)
_PRONOUNS = {"she": ("she", "her", "her"), "he": ("he", "his", "him")}
MAX_TRIES = 2000


@dataclass(frozen=True)
class Difficulty:
    """Which problems the generator draws (dataset key `difficulty`; the defaults draw every template as written):
    `max_steps` keeps the templates of at most that many solution steps, `operations` those whose steps use only
    these operators, `max_value` caps every quantity (ranges clipped; a template left without values is dropped),
    every step result and the answer (draws beyond it are redrawn). Smaller numbers and fewer steps make a small
    model's arithmetic succeed, so that an accuracy can move (a 135M model solves few of the default problems)."""

    max_steps: int | None = None
    operations: tuple[str, ...] = ("+", "-", "*", "/")
    max_value: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "operations", tuple(self.operations))
        bad = sorted(set(self.operations) - {"+", "-", "*", "/"})
        if bad or not self.operations:
            raise ValueError(f"difficulty.operations: {bad or 'none'} (choose from + - * /)")
        if self.max_steps is not None and self.max_steps < 1 or self.max_value is not None and self.max_value < 2:
            raise ValueError("difficulty: max_steps must be >= 1 and max_value >= 2")

    @classmethod
    def from_dict(cls, d: Mapping | None) -> Difficulty:
        return cls(**dict(d or {}))

    def quantities(self, template: Template) -> dict[str, list[int]] | None:
        """The template's quantity choices under `max_value`, None when it is not drawn at all."""
        ops = {c for step in template.steps for c in step.expr if c in "+-*/"}
        if not ops <= set(self.operations) or (self.max_steps is not None and len(template.steps) > self.max_steps):
            return None
        cap = self.max_value
        out = {k: [v for v in choices if cap is None or v <= cap] for k, choices in template.quantities.items()}
        return out if all(out.values()) else None

    def templates(self) -> list[Template]:
        out = [t for t in TEMPLATES if self.quantities(t) is not None]
        if not out:
            raise ValueError(f"difficulty {self}: no word-problem template is left")
        return out

    def admits(self, values: Mapping[str, Number]) -> bool:
        return self.max_value is None or all(v <= self.max_value for v in values.values())


ANY = Difficulty()


def stream(name: str, seed: int) -> random.Random:
    """An independent, reproducible random stream (`train`, `test`, `pretrain`, `aug/<i>`, ...)."""
    return random.Random(f"mtp-synthetic-math/{name}/{seed}")


@dataclass(frozen=True)
class Problem:
    """A template instance: quantity values, a person, and which phrasing of the question is used."""

    template: Template
    values: Mapping[str, int]
    person: tuple[str, str]
    phrasing: int

    def fields(self, display: Mapping[str, object] | None = None) -> dict[str, object]:
        name, pronoun = self.person
        he, his, him = _PRONOUNS[pronoun]
        out: dict[str, object] = {
            "name": name,
            "he": he,
            "He": he.capitalize(),
            "his": his,
            "His": his.capitalize(),
            "him": him,
        }
        out.update(self.values if display is None else display)
        return out

    def parts(self, display: Mapping[str, object] | None = None) -> tuple[str, str]:
        """(setup, ask) of this problem's phrasing, with quantities shown as in `display`."""
        setup, ask = self.template.phrasings[self.phrasing]
        f = self.fields(display)
        return setup.format(**f), ask.format(**f)

    @property
    def question(self) -> str:
        return " ".join(self.parts())

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        """The problem itself, whoever it is about and however it is worded: its template and the numbers it
        gives, in whichever roles (3 eggs a batch for 4 batches is 4 eggs a batch for 3 batches)."""
        return self.template.name, tuple(sorted(self.values.values()))

    @property
    def answer(self) -> int:
        return self.template.solve(self.values)


@dataclass(frozen=True)
class Example:
    """One generated row plus what is needed to check it: the problem, and for SV/FOBAR the masked
    quantity and the answer stated in the question."""

    row: dict
    problem: Problem
    masked: str | None = None
    stated: int | None = None


def run_steps(template: Template, env: Mapping[str, Number]) -> dict[str, Number]:
    """Values of the quantities and of every step (in declared order)."""
    values: dict[str, Number] = dict(env)
    for step in template.steps:
        values[step.target] = evaluate(step.expr, values)
    return values


def sample_problem(template: Template, rng: random.Random, difficulty: Difficulty = ANY) -> Problem:
    """Draw quantities until every step is a positive whole number within the difficulty's cap; the steps must
    agree with `solve`."""
    choices_of = difficulty.quantities(template) if difficulty is not ANY else template.quantities
    if choices_of is None:
        raise ValueError(f"template {template.name} is not drawn at difficulty {difficulty}")
    for _ in range(MAX_TRIES):
        values = {k: rng.choice(choices) for k, choices in choices_of.items()}
        person = rng.choice(PEOPLE)
        phrasing = rng.randrange(len(template.phrasings))
        try:
            steps = run_steps(template, values)
        except NotExact:
            continue
        if all(isinstance(v, int) and v > 0 for v in steps.values()) and difficulty.admits(steps):
            if steps[template.answer] != template.solve(values):
                raise RuntimeError(
                    f"template {template.name}: steps give {steps[template.answer]}, solve gives "
                    f"{template.solve(values)} for {values}"
                )
            return Problem(template, values, person, phrasing)
    raise RuntimeError(f"template {template.name}: no valid quantities in {MAX_TRIES} draws")


def seed_problems(
    n: int, rng: random.Random, exclude: frozenset[tuple] | set[tuple] = frozenset(), difficulty: Difficulty = ANY
) -> list[Problem]:
    """`n` distinct problems (`Problem.key`; none in `exclude`), cycling through the templates of `difficulty`
    in a freshly shuffled order each round so that every template is used once n >= their number."""
    seen, out = set(exclude), []
    templates = difficulty.templates()
    for _ in range(MAX_TRIES):
        order = list(templates)
        rng.shuffle(order)
        for template in order:
            if len(out) == n:
                return out
            problem = sample_problem(template, rng, difficulty)
            if problem.key not in seen:
                seen.add(problem.key)
                out.append(problem)
        if len(out) == n:
            return out
    raise RuntimeError(f"could not draw {n} distinct problems")


def solution_steps(
    problem: Problem, rng: random.Random | None = None, mask: str | None = None, symbol: str = "x"
) -> tuple[list[str], Number]:
    """The solution sentences and the final value.

    Without `rng`: the canonical solution (first wording of each step, declared order). With `rng`: a random
    wording per step and a random order consistent with the step dependencies. With `mask`: that quantity
    is the unknown `symbol`, and values depending on it are linear forms (`4x - 10`).
    """
    t = problem.template
    env: dict[str, Number] = dict(problem.values)
    if mask is not None:
        env[mask] = Linear.unknown(symbol)
    values = run_steps(t, env)
    display = {k: str(v) for k, v in values.items()}
    fields = problem.fields(display)
    order, done = [], set()
    pending = list(t.steps)
    while pending:
        ready = [s for s in pending if t.depends_on(s) <= done]
        step = ready[0] if rng is None else rng.choice(ready)
        pending.remove(step)
        done.add(step.target)
        order.append(step)
    lines = []
    for step in order:
        text = step.texts[0] if rng is None else rng.choice(step.texts)
        lines.append(text.format(**fields, calc=show(step.expr, values)))
    return lines, values[t.answer]


def _ending(value: int) -> list[str]:
    return [f"#### {value}", f"The answer is: {value}"]


def _row(query: str, lines: list[str], type_: str, problem: Problem) -> dict:
    return {"query": query, "response": "\n".join(lines), "type": type_, "original_question": problem.question}


def seed_example(problem: Problem) -> Example:
    lines, answer = solution_steps(problem)
    return Example(_row(problem.question, lines + _ending(answer), TYPE_SEED, problem), problem)


def answer_augmentations(problem: Problem, k: int, rng: random.Random) -> list[Example]:
    """`k` solutions of the seed question, each worded or ordered differently from the canonical one and
    from each other where the template allows that many variants."""
    seen = {seed_example(problem).row["response"]}
    out = []
    for _ in range(k):
        for _ in range(50):
            lines, answer = solution_steps(problem, rng)
            response = "\n".join(lines + _ending(answer))
            if response not in seen:
                break
        seen.add(response)
        out.append(Example(_row(problem.question, lines + _ending(answer), TYPE_ANSAUG, problem), problem))
    return out


def _cycled(items: list, k: int, rng: random.Random) -> list:
    """`k` items: a shuffled pass over `items`, repeated as needed."""
    items = list(items)
    rng.shuffle(items)
    return list(itertools.islice(itertools.cycle(items), k)) if items else []


def rephrasings(problem: Problem, k: int, rng: random.Random) -> list[Example]:
    """`k` other phrasings of the seed question (same numbers and answer), each with a solution."""
    others = [i for i in range(len(problem.template.phrasings)) if i != problem.phrasing]
    out = []
    for phrasing in _cycled(others, k, rng):
        rephrased = replace(problem, phrasing=phrasing)
        lines, answer = solution_steps(rephrased, rng)
        row = _row(rephrased.question, lines + _ending(answer), TYPE_REPHRASED, problem)
        out.append(Example(row, rephrased))
    return out


def maskable(problem: Problem) -> list[str]:
    """Quantities the answer depends on linearly (so that masking them leaves a solvable linear equation)."""
    out = []
    for name in problem.template.quantities:
        try:
            final = run_steps(problem.template, {**problem.values, name: Linear.unknown("x")})[problem.template.answer]
        except NotExact:
            continue
        if isinstance(final, Linear) and final.a != 0:
            out.append(name)
    return out


def _backward(problem: Problem, mask: str, symbol: str, rng: random.Random) -> tuple[list[str], str, list[str], int]:
    """Forward steps with the unknown, the equation's left side, the solving sentences and the solution."""
    lines, form = solution_steps(problem, rng, mask=mask, symbol=symbol)
    assert isinstance(form, Linear)
    solving, value = solve_lines(form, problem.answer)
    if value != problem.values[mask]:
        raise RuntimeError(f"template {problem.template.name}: solving for {mask} gives {value}")
    return lines, str(form), solving, value


def self_verifications(problem: Problem, k: int, rng: random.Random) -> list[Example]:
    """SV rows: a quantity becomes `x`, the question becomes a statement of the answer, solve for x."""
    t, answer, out = problem.template, problem.answer, []
    for mask in _cycled(maskable(problem), k, rng):
        display = {**problem.values, mask: "x"}
        setup, _ = problem.parts(display)
        statement = t.statement.format(**problem.fields(display), answer=answer)
        query = f"{setup} {statement} What is the value of unknown variable x?"
        lines, lhs, solving, value = _backward(problem, mask, "x", rng)
        what = t.describe[mask].format(**problem.fields())
        response = [
            f"To solve this problem, we need to determine the value of x, which represents {what}.",
            *lines,
            f"We know that the answer is {answer}, so we can set up the equation: {lhs} = {answer}.",
            *solving,
            f"The value of x is {value}.",
            *_ending(value),
        ]
        out.append(Example(_row(query, response, TYPE_SV, problem), problem, masked=mask, stated=answer))
    return out


def fobars(problem: Problem, k: int, rng: random.Random) -> list[Example]:
    """FOBAR rows: a quantity becomes `X`, the question is kept and its answer given, solve for X."""
    answer, out = problem.answer, []
    for mask in _cycled(maskable(problem), k, rng):
        setup, ask = problem.parts({**problem.values, mask: "X"})
        query = (
            f"{setup} {ask} If we know the answer to the above question is {answer}, "
            "what is the value of unknown variable X?"
        )
        lines, lhs, solving, value = _backward(problem, mask, "X", rng)
        response = [
            *lines,
            f"We are given that the answer is {answer}, so we can write: {lhs} = {answer}.",
            *solving,
            f"The value of X is {value}.",
            *_ending(value),
        ]
        out.append(Example(_row(query, response, TYPE_FOBAR, problem), problem, masked=mask, stated=answer))
    return out


_AUGMENTERS = {
    "answer_augmentation": answer_augmentations,
    "rephrasing": rephrasings,
    "self_verification": self_verifications,
    "fobar": fobars,
}


def augment(problem: Problem, augmentations: Mapping[str, int], rng: random.Random) -> list[Example]:
    """The seed row followed by `augmentations[kind]` rows of each MetaMathQA augmentation type."""
    unknown = set(augmentations) - set(_AUGMENTERS)
    if unknown:
        raise ValueError(f"unknown augmentation types {sorted(unknown)} (known: {', '.join(_AUGMENTERS)})")
    counts = {**DEFAULT_AUGMENTATIONS, **augmentations}
    out = [seed_example(problem)]
    for kind, fn in _AUGMENTERS.items():
        out += fn(problem, counts[kind], rng)
    return out


def generate_train(
    n_seed_problems: int, augmentations: Mapping[str, int], seed: int, difficulty: Difficulty = ANY
) -> list[Example]:
    """Seed problems from the `train` stream, each followed by its augmentations (each problem's
    augmentations use their own stream, so changing a count never changes other problems)."""
    problems = seed_problems(n_seed_problems, stream("train", seed), difficulty=difficulty)
    return [ex for i, p in enumerate(problems) for ex in augment(p, augmentations, stream(f"aug/{i}", seed))]


def generate_test(
    n_test_problems: int, seed: int, exclude: frozenset[tuple] | set[tuple] = frozenset(), difficulty: Difficulty = ANY
) -> list[Example]:
    """Held-out seed problems from the `test` stream, no augmentations, none of the problems in `exclude`
    (`Problem.key`, e.g. every train problem); rows also carry `answer` (the number as a string)."""
    out = []
    for problem in seed_problems(n_test_problems, stream("test", seed), exclude, difficulty):
        ex = seed_example(problem)
        ex.row["answer"] = str(problem.answer)
        out.append(ex)
    return out


def synthetic_documents(seed: int) -> Iterator[str]:
    """An endless stream of `query + "\\n" + response` texts (seed problems with one row of each
    augmentation type), from the `pretrain` stream: the tiny scale's pretraining text."""
    rng = stream("pretrain", seed)
    ones = {kind: 1 for kind in AUGMENTATION_TYPES}
    for i in itertools.count():
        template = TEMPLATES[i % len(TEMPLATES)]
        for ex in augment(sample_problem(template, rng), ones, rng):
            yield f"{ex.row['query']}\n{ex.row['response']}"
