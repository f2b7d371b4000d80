"""Rows of the BIG-Bench Hard stand-in (`SaylorTwift/bbh`): one generator per subtask (the 27 configs), each
giving an `input` in the subtask's question style and a `target` in its answer format (True/False, Yes/No, yes/no,
valid/invalid, an option letter "(C)", a number, a bracket sequence, sorted words). Where the answer can be
computed (boolean expressions, dates, brackets, arithmetic, navigation, counting, shapes, orderings, swaps, liars,
sorting) it is; elsewhere the option text is synthetic and the key drawn."""

from __future__ import annotations

import datetime
import random
import string
from collections.abc import Callable

from ..synthetic import PEOPLE

Subtask = Callable[[random.Random], tuple[str, str]]
YES_NO = "Options:\n- Yes\n- No"
NAMES = tuple(name for name, _ in PEOPLE)
COLORS = tuple(
    "red orange yellow green blue brown magenta fuchsia mauve teal turquoise burgundy silver gold black grey purple "  # noqa: SIM905
    "pink".split()
)
WORDS = tuple(
    "apple river candle marble orbit pepper saddle tundra velvet walnut anchor bishop cobalt dwarf ember falcon "  # noqa: SIM905
    "glacier harbor island jigsaw kettle lantern meadow nectar oyster pylon quartz".split()
)
SHAPES = ("circle", "heptagon", "hexagon", "kite", "line", "octagon", "pentagon", "rectangle", "sector", "triangle")
POLYGONS = {3: "triangle", 5: "pentagon", 6: "hexagon", 7: "heptagon", 8: "octagon"}
ADJECTIVES = (("lovely", "terrible"), ("big", "little"), ("old", "new"), ("square", "round"), ("red", "gray"))
ADJECTIVES += (("Mexican", "Japanese"), ("wooden", "plastic"), ("hiking", "smoking"))  # opinion -> purpose order
TRANSLATION_ERRORS = (
    "Modifiers or Adjectives",
    "Numerical Values",
    "Negation or Antonyms",
    "Named Entities",
    "Dropped Content",
    "Facts",
)


def letter(i: int) -> str:
    return f"({string.ascii_uppercase[i]})"


def options(texts: list[str]) -> str:
    return "Options:\n" + "\n".join(f"{letter(i)} {t}" for i, t in enumerate(texts))


def drawn_key(rng: random.Random, question: str, texts: list[str]) -> tuple[str, str]:
    """A question whose options are synthetic: the key is drawn."""
    return f"{question}\n{options(texts)}", letter(rng.randrange(len(texts)))


def keyed(question: str, texts: list[str], right: str) -> tuple[str, str]:
    return f"{question}\n{options(texts)}", letter(texts.index(right))


def boolean_expressions(rng: random.Random) -> tuple[str, str]:
    def term() -> str:
        return " ".join(["not"] * rng.randrange(2) + [rng.choice(("True", "False"))])

    parts = [term(), rng.choice(("and", "or")), f"( {term()} {rng.choice(('and', 'or'))} {term()} )"]
    expr = " ".join(parts if rng.random() < 0.5 else parts[::-1])
    return f"{expr} is", str(eval(expr))  # our own True/False/not/and/or tokens: Python has the same precedence


def causal_judgement(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(NAMES, 2)
    story = f"{a} left the gate open, and {b}'s dog ran into the street. Did {a} cause the dog to escape?"
    return (
        f"How would a typical person answer each of the following questions about causation?\n{story}\n{YES_NO}",
        rng.choice(("Yes", "No")),
    )


def date_understanding(rng: random.Random) -> tuple[str, str]:
    today = datetime.date(rng.randrange(1950, 2030), rng.randrange(1, 13), rng.randrange(1, 29))
    days = rng.choice((1, 7, 10, 30))
    right = today - datetime.timedelta(days=days)
    dates = {right, *(right + datetime.timedelta(days=d) for d in rng.sample((-365, -31, -2, 2, 31, 365), 5))}
    texts = [d.strftime("%m/%d/%Y") for d in sorted(dates)]
    question = f"Today is {today.strftime('%m/%d/%Y')}. What is the date {days} days ago in MM/DD/YYYY?"
    return keyed(question, texts, right.strftime("%m/%d/%Y"))


def disambiguation_qa(rng: random.Random) -> tuple[str, str]:
    x, y = rng.sample(("chief", "counselor", "nurse", "pilot", "clerk", "mechanic"), 2)
    question = (
        "In the following sentences, explain the antecedent of the pronoun (which thing the pronoun refers to), or "
        f"state that it is ambiguous.\nSentence: The {x} told the {y} that they would arrive late."
    )
    return drawn_key(rng, question, [f"The {x} would arrive late", f"The {y} would arrive late", "Ambiguous"])


def dyck_languages(rng: random.Random) -> tuple[str, str]:
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    opened = [rng.choice(list(pairs)) for _ in range(rng.randrange(2, 6))]
    question = "Complete the rest of the sequence, making sure that the parentheses are closed properly. Input: "
    return question + " ".join(opened), " ".join(pairs[o] for o in reversed(opened))


def formal_fallacies(rng: random.Random) -> tuple[str, str]:
    who = rng.choice(NAMES)
    valid = rng.random() < 0.5
    second, conclusion = ("a cousin of Ann", "a friend of Bo") if valid else ("a friend of Bo", "a cousin of Ann")
    argument = (
        f'"Every cousin of Ann is a friend of Bo. {who} is {second}. It follows that {who} is {conclusion}."\n'
        "Is the argument, given the explicitly stated premises, deductively valid or invalid?\n"
        "Options:\n- valid\n- invalid"
    )
    return argument, "valid" if valid else "invalid"


def geometric_shapes(rng: random.Random) -> tuple[str, str]:
    k = rng.choice(list(POLYGONS))
    points = [f"{rng.randrange(10, 90)}.00,{rng.randrange(10, 90)}.00" for _ in range(k)]
    path = f"M {points[0]} " + " ".join(f"L {p}" for p in points[1:]) + f" L {points[0]}"
    return keyed(f'This SVG path element <path d="{path}"/> draws a', list(SHAPES), POLYGONS[k])


def hyperbaton(rng: random.Random) -> tuple[str, str]:
    i, j = sorted(rng.sample(range(len(ADJECTIVES)), 2))
    first, second = rng.choice(ADJECTIVES[i]), rng.choice(ADJECTIVES[j])
    right, wrong = f"{first} {second} ship", f"{second} {first} ship"
    texts = [right, wrong] if rng.random() < 0.5 else [wrong, right]
    return keyed("Which sentence has the correct adjective order:", texts, right)


def logical_deduction(n: int) -> Subtask:
    def make(rng: random.Random) -> tuple[str, str]:
        books = rng.sample(COLORS, n)  # books[i] stands at position i from the left
        facts = [f"The {books[i]} book is the {_ordinal(i + 1)} from the left." for i in range(n - 1)]
        asked = rng.randrange(n)
        texts = [f"The {c} book is the {_ordinal(asked + 1)} from the left" for c in sorted(books)]
        question = (
            "The following paragraphs each describe a set of objects arranged in a fixed order. The statements are "
            f"logically consistent within each paragraph. On a shelf, there are {n} books: "
            f"{', '.join(sorted(books))}. {' '.join(facts)}"
        )
        return keyed(question, texts, f"The {books[asked]} book is the {_ordinal(asked + 1)} from the left")

    return make


def _ordinal(k: int) -> str:
    return ("first", "second", "third", "fourth", "fifth", "sixth", "seventh")[k - 1]


def movie_recommendation(rng: random.Random) -> tuple[str, str]:
    titles = [f"The {w.capitalize()} {v.capitalize()}" for w, v in zip(rng.sample(WORDS, 8), rng.sample(WORDS, 8))]
    return drawn_key(rng, f"Find a movie similar to {', '.join(titles[:4])}:", titles[4:])


def multistep_arithmetic_two(rng: random.Random) -> tuple[str, str]:
    def group() -> str:
        nums = [str(rng.randrange(-9, 10)) for _ in range(4)]
        ops = [rng.choice("+-*") for _ in range(3)]
        return "(" + " ".join(x for pair in zip(nums, [*ops, ""]) for x in pair if x) + ")"

    expr = f"({group()} {rng.choice('+-*')} {group()})"
    return f"{expr} =", str(eval(expr))  # integers and + - * only


def navigate(rng: random.Random) -> tuple[str, str]:
    position, heading, said = 0, 1, []
    for _ in range(rng.randrange(3, 7)):
        if rng.random() < 0.3:
            heading, said = -heading, [*said, "Turn around."]
        else:
            steps = rng.randrange(1, 5)
            position, said = position + heading * steps, [*said, f"Take {steps} steps."]
    if rng.random() < 0.5 and position:  # walk back half the time
        said += (
            ["Turn around.", f"Take {abs(position)} steps."]
            if position * heading > 0
            else [f"Take {abs(position)} steps."]
        )
        position = 0
    question = "If you follow these instructions, do you return to the starting point? " + " ".join(said)
    return f"{question}\n{YES_NO}", "Yes" if position == 0 else "No"


def object_counting(rng: random.Random) -> tuple[str, str]:
    fruits = rng.sample(("apple", "banana", "plum", "peach", "orange", "grape"), 3)
    others = rng.sample(("violin", "flute", "chair", "lamp"), 2)
    counts = {item: rng.randrange(1, 4) for item in fruits + others}
    listed = ", ".join(f"{c} {item}{'s' if c > 1 else ''}" for item, c in counts.items())
    return f"I have {listed}. How many fruits do I have?", str(sum(counts[f] for f in fruits))


def penguins_in_a_table(rng: random.Random) -> tuple[str, str]:
    penguins = [
        (name, rng.randrange(3, 12), rng.randrange(50, 95), rng.randrange(5, 20)) for name in rng.sample(NAMES, 5)
    ]
    table = "\n".join(["name, age, height (cm), weight (kg)", *(", ".join(map(str, p)) for p in penguins)])
    limit = rng.randrange(4, 11)
    count = sum(age < limit for _, age, _, _ in penguins)
    question = f"Here is a table where the first line is a header:\n{table}\nHow many penguins are less than {limit} years old?"
    return keyed(question, [str(k) for k in range(6)], str(count))


def reasoning_about_colored_objects(rng: random.Random) -> tuple[str, str]:
    items = rng.sample(("pen", "cup", "notebook", "keychain", "scarf", "mug"), 3)
    colors = rng.sample(COLORS, 3)
    asked = rng.randrange(3)
    scene = ", ".join(f"a {c} {i}" for c, i in zip(colors, items))
    return keyed(f"On the desk, I see {scene}. What is the color of the {items[asked]}?", list(COLORS), colors[asked])


def ruin_names(rng: random.Random) -> tuple[str, str]:
    name = rng.choice(WORDS)
    edits = [name[:-1] + c for c in rng.sample("bdkmtz", 4)]
    return drawn_key(rng, f"Which of the following is a humorous edit of this artist or movie name: '{name}'?", edits)


def salient_translation_error_detection(rng: random.Random) -> tuple[str, str]:
    n = rng.randrange(2, 9)
    question = (
        "The following translations from German to English contain a particular error. That error will be one of the "
        f"following types. Source: Die Stadt hat {n} Brücken. Translation: The city has {n + 1} bridges.\n"
        "The translation contains an error pertaining to"
    )
    return keyed(question, list(TRANSLATION_ERRORS), "Numerical Values")


def snarks(rng: random.Random) -> tuple[str, str]:
    thing = rng.choice(("waiting in line", "a flat tyre", "losing the keys"))
    texts = [f"Oh great, {thing} is exactly how I wanted to spend my day", f"Sadly, {thing} ruined my day"]
    rng.shuffle(texts)
    return keyed("Which statement is sarcastic?", texts, next(t for t in texts if t.startswith("Oh great")))


def sports_understanding(rng: random.Random) -> tuple[str, str]:
    plausible = rng.random() < 0.5
    act = "scored a layup in the fourth quarter" if plausible else "scored a touchdown in the fourth inning"
    return f'Is the following sentence plausible? "{rng.choice(NAMES)} {act}."', "yes" if plausible else "no"


def temporal_sequences(rng: random.Random) -> tuple[str, str]:
    start = rng.randrange(1, 7)
    free = rng.randrange(4)
    busy = "; ".join(f"from {start + k}pm to {start + k + 1}pm they were at work" for k in range(4) if k != free)
    question = (
        f"Today, {rng.choice(NAMES)} went to the museum. Between what times could they have gone? We know that {busy}. "
        f"The museum was closed after {start + 4}pm."
    )
    texts = [f"{start + k}pm to {start + k + 1}pm" for k in range(4)]
    return keyed(question, texts, texts[free])


def tracking_shuffled_objects(n: int) -> Subtask:
    def make(rng: random.Random) -> tuple[str, str]:
        people, balls = rng.sample(NAMES, n), [f"{c} ball" for c in rng.sample(COLORS, n)]
        held = dict(zip(people, balls))
        swaps = [rng.sample(people, 2) for _ in range(3)]
        for a, b in swaps:
            held[a], held[b] = held[b], held[a]
        asked = rng.choice(people)
        start = ", ".join(f"{p} has a {b}" for p, b in zip(people, balls))
        said = " Then, ".join(f"{a} and {b} swap balls." for a, b in swaps)
        question = f"{', '.join(people)} are playing a game. At the start, {start}. First, {said} At the end of the game, {asked} has the"
        return keyed(question, balls, held[asked])

    return make


def web_of_lies(rng: random.Random) -> tuple[str, str]:
    people = rng.sample(NAMES, 4)
    truthful = rng.random() < 0.5
    said = [f"{people[0]} {'tells the truth' if truthful else 'lies'}."]
    for prev, cur in zip(people, people[1:]):
        says_truth = rng.random() < 0.5
        said.append(f"{cur} says {prev} {'tells the truth' if says_truth else 'lies'}.")
        truthful = truthful == says_truth
    return f"Question: {' '.join(said)} Does {people[-1]} tell the truth?", "Yes" if truthful else "No"


def word_sorting(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(WORDS, rng.randrange(3, 8))
    return f"Sort the following words alphabetically: List: {' '.join(words)}", " ".join(sorted(words))


BBH_SUBTASKS: dict[str, Subtask] = {
    "boolean_expressions": boolean_expressions,
    "causal_judgement": causal_judgement,
    "date_understanding": date_understanding,
    "disambiguation_qa": disambiguation_qa,
    "dyck_languages": dyck_languages,
    "formal_fallacies": formal_fallacies,
    "geometric_shapes": geometric_shapes,
    "hyperbaton": hyperbaton,
    "logical_deduction_five_objects": logical_deduction(5),
    "logical_deduction_seven_objects": logical_deduction(7),
    "logical_deduction_three_objects": logical_deduction(3),
    "movie_recommendation": movie_recommendation,
    "multistep_arithmetic_two": multistep_arithmetic_two,
    "navigate": navigate,
    "object_counting": object_counting,
    "penguins_in_a_table": penguins_in_a_table,
    "reasoning_about_colored_objects": reasoning_about_colored_objects,
    "ruin_names": ruin_names,
    "salient_translation_error_detection": salient_translation_error_detection,
    "snarks": snarks,
    "sports_understanding": sports_understanding,
    "temporal_sequences": temporal_sequences,
    "tracking_shuffled_objects_five_objects": tracking_shuffled_objects(5),
    "tracking_shuffled_objects_seven_objects": tracking_shuffled_objects(7),
    "tracking_shuffled_objects_three_objects": tracking_shuffled_objects(3),
    "web_of_lies": web_of_lies,
    "word_sorting": word_sorting,
}


def bbh_rows(subtask: str, n: int, rng: random.Random) -> list[dict]:
    """`n` rows (input, target) of one BBH subtask."""
    return [dict(zip(("input", "target"), BBH_SUBTASKS[subtask](rng))) for _ in range(n)]
