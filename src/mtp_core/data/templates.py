"""Grade-school word-problem templates for the synthetic MetaMathQA-style generator.

A template declares its question quantities (integer ranges), at least two phrasings of the question
(setup + ask; the rephrasing augmentation picks another one), a declarative statement of the answer (for
self-verification rows), 2-5 solution steps (each with at least two wordings and an exact arithmetic
expression), and `solve`, a direct computation of the answer that checks the steps. Text fields are
`str.format` templates over the quantities, the step results, `{calc}` (the worked computation of the step)
and the person fields `{name} {he} {He} {his} {His} {him}`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .arith import names


@dataclass(frozen=True)
class Step:
    """One solution step: `target = expr`, written in any of `texts` (each holds `{calc}` once)."""

    target: str
    expr: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Template:
    name: str
    quantities: Mapping[str, Sequence[int]]
    phrasings: tuple[tuple[str, str], ...]
    statement: str
    steps: tuple[Step, ...]
    solve: Callable[[Mapping[str, int]], int]
    describe: Mapping[str, str]

    @property
    def answer(self) -> str:
        """Name of the step whose value is the answer (the last one)."""
        return self.steps[-1].target

    def depends_on(self, step: Step) -> frozenset[str]:
        """The earlier steps that `step` uses."""
        return names(step.expr) & {s.target for s in self.steps}


def r(lo: int, hi: int, step: int = 1) -> range:
    """Inclusive integer range."""
    return range(lo, hi + 1, step)


def S(target: str, expr: str, *texts: str) -> Step:
    return Step(target, expr, texts)


# A table laid out by hand (one template per block), which the formatter leaves alone.
# fmt: off
TEMPLATES: tuple[Template, ...] = (
    Template(
        name="cookies_left",
        quantities={"trays": r(2, 9), "per_tray": r(6, 12), "given": r(3, 20)},
        phrasings=(
            ("{name} bakes {trays} trays of cookies with {per_tray} cookies on each tray. {He} gives {given} cookies "
             "to {his} neighbors.", "How many cookies does {name} have left?"),
            ("There are {per_tray} cookies on each of the {trays} trays that {name} baked. After baking, {name} gives "
             "away {given} cookies to the neighbors.", "How many cookies remain with {name}?"),
        ),
        statement="{name} has {answer} cookies left.",
        steps=(
            S("total", "trays * per_tray", "{name} bakes {calc} cookies in total.",
              "The trays hold {calc} cookies altogether."),
            S("left", "total - given", "After giving some away, {he} has {calc} cookies left.",
              "Subtracting the cookies given away leaves {calc} cookies."),
        ),
        solve=lambda v: v["trays"] * v["per_tray"] - v["given"],
        describe={"trays": "the number of trays", "per_tray": "the number of cookies on each tray",
                  "given": "the number of cookies given away"},
    ),
    Template(
        name="shopping_change",
        quantities={"n_a": r(2, 6), "p_a": r(2, 9), "n_b": r(2, 5), "p_b": r(1, 4), "bill": (50, 100)},
        phrasings=(
            ("{name} buys {n_a} notebooks that cost ${p_a} each and {n_b} pens that cost ${p_b} each. {He} pays "
             "with a ${bill} bill.", "How much change does {he} get back?"),
            ("At the store, {name} picks up {n_b} pens at ${p_b} apiece and {n_a} notebooks at ${p_a} apiece, and "
             "hands the cashier ${bill}.", "How many dollars of change should {name} receive?"),
        ),
        statement="{name} gets ${answer} in change.",
        steps=(
            S("notebooks", "n_a * p_a", "The notebooks cost {calc} dollars.",
              "For the notebooks, {he} spends {calc} dollars."),
            S("pens", "n_b * p_b", "The pens cost {calc} dollars.", "The pens add up to {calc} dollars."),
            S("total", "notebooks + pens", "Altogether {he} spends {calc} dollars.",
              "The total cost is {calc} dollars."),
            S("change", "bill - total", "So {he} gets {calc} dollars in change.", "The change is {calc} dollars."),
        ),
        solve=lambda v: v["bill"] - v["n_a"] * v["p_a"] - v["n_b"] * v["p_b"],
        describe={"n_a": "the number of notebooks", "p_a": "the price of one notebook in dollars",
                  "n_b": "the number of pens", "p_b": "the price of one pen in dollars",
                  "bill": "the amount paid in dollars"},
    ),
    Template(
        name="weekly_reading",
        quantities={"weekday": r(5, 30), "weekend": r(10, 40), "weeks": r(2, 6)},
        phrasings=(
            ("{name} reads {weekday} pages every weekday and {weekend} pages on each day of the weekend.",
             "How many pages does {he} read in {weeks} weeks?"),
            ("Every Monday through Friday, {name} reads {weekday} pages of a book, and on Saturday and Sunday {he} "
             "reads {weekend} pages per day.", "How many pages will {name} have read after {weeks} weeks?"),
        ),
        statement="{name} reads {answer} pages in {weeks} weeks.",
        steps=(
            S("wd", "5 * weekday", "On weekdays {he} reads {calc} pages a week.",
              "Over the five weekdays that is {calc} pages."),
            S("we", "2 * weekend", "On the weekend {he} reads {calc} pages.", "The two weekend days add {calc} pages."),
            S("week", "wd + we", "So {he} reads {calc} pages each week.", "One week comes to {calc} pages."),
            S("total", "week * weeks", "In {weeks} weeks {he} reads {calc} pages.",
              "Over {weeks} weeks that is {calc} pages."),
        ),
        solve=lambda v: (5 * v["weekday"] + 2 * v["weekend"]) * v["weeks"],
        describe={"weekday": "the number of pages read each weekday",
                  "weekend": "the number of pages read on each weekend day", "weeks": "the number of weeks"},
    ),
    Template(
        name="savings_goal",
        quantities={"price": r(60, 300), "saved": r(10, 80), "weekly": r(5, 25)},
        phrasings=(
            ("{name} wants to buy a bike that costs ${price}. {He} has already saved ${saved} and saves ${weekly} "
             "more every week.", "How many weeks will it take {him} to have exactly enough money for the bike?"),
            ("A bike costs ${price}. {name} has ${saved} in {his} piggy bank and adds ${weekly} each week.",
             "After how many weeks will {name} have exactly the price of the bike?"),
        ),
        statement="It takes {name} {answer} weeks to save enough for the bike.",
        steps=(
            S("need", "price - saved", "{He} still needs {calc} dollars.",
              "The amount left to save is {calc} dollars."),
            S("weeks", "need / weekly", "At {weekly} dollars a week, it takes {calc} weeks.",
              "So {he} needs {calc} weeks."),
        ),
        solve=lambda v: (v["price"] - v["saved"]) // v["weekly"],
        describe={"price": "the price of the bike in dollars", "saved": "the amount already saved in dollars",
                  "weekly": "the amount saved each week in dollars"},
    ),
    Template(
        name="fruit_bags",
        quantities={"baskets": r(3, 9), "per_basket": r(8, 20), "rotten": r(2, 15), "bag": r(2, 6)},
        phrasings=(
            ("A farmer picks {baskets} baskets of apples with {per_basket} apples in each basket. Of these, {rotten} "
             "apples are rotten and thrown away. The rest are packed into bags of {bag} apples.",
             "How many bags does the farmer fill?"),
            ("On a farm, {baskets} baskets are filled with {per_basket} apples each. After removing {rotten} rotten "
             "apples, the good apples are packed {bag} to a bag.", "How many bags of apples are there?"),
        ),
        statement="The farmer fills {answer} bags.",
        steps=(
            S("total", "baskets * per_basket", "The farmer picks {calc} apples.", "There are {calc} apples in total."),
            S("good", "total - rotten", "After throwing away the rotten ones, {calc} apples are left.",
              "The good apples number {calc}."),
            S("bags", "good / bag", "They fill {calc} bags.", "Packing them gives {calc} bags."),
        ),
        solve=lambda v: (v["baskets"] * v["per_basket"] - v["rotten"]) // v["bag"],
        describe={"baskets": "the number of baskets", "per_basket": "the number of apples in each basket",
                  "rotten": "the number of rotten apples", "bag": "the number of apples in each bag"},
    ),
    Template(
        name="pencil_boxes",
        quantities={"students": r(12, 36), "pencils": r(2, 6), "box": (6, 8, 10, 12)},
        phrasings=(
            ("A teacher has {students} students, and each student needs {pencils} pencils. Pencils are sold in "
             "boxes of {box}.", "How many boxes of pencils does the teacher need to buy?"),
            ("Each of the {students} students in a class needs {pencils} pencils, and one box holds {box} pencils.",
             "How many boxes are needed for the whole class?"),
        ),
        statement="The teacher needs {answer} boxes of pencils.",
        steps=(
            S("total", "students * pencils", "The class needs {calc} pencils.",
              "Altogether the students need {calc} pencils."),
            S("boxes", "total / box", "That is {calc} boxes.", "With {box} pencils per box, {calc} boxes are needed."),
        ),
        solve=lambda v: v["students"] * v["pencils"] // v["box"],
        describe={"students": "the number of students", "pencils": "the number of pencils each student needs",
                  "box": "the number of pencils in a box"},
    ),
    Template(
        name="garden_fence",
        quantities={"length": r(5, 30), "width": r(3, 20), "cost": r(2, 9)},
        phrasings=(
            ("{name} has a rectangular garden that is {length} meters long and {width} meters wide. Fencing costs "
             "${cost} per meter.", "How much will it cost to put a fence around the whole garden?"),
            ("A rectangular garden measures {length} meters by {width} meters. {name} wants to fence all four "
             "sides, and the fence costs ${cost} for each meter.", "What is the total cost of the fence in dollars?"),
        ),
        statement="The fence around {name}'s garden costs ${answer}.",
        steps=(
            S("half", "length + width", "The length plus the width is {calc} meters.",
              "One length and one width together are {calc} meters."),
            S("perimeter", "2 * half", "The perimeter is {calc} meters.",
              "Around the garden that is {calc} meters of fence."),
            S("total", "perimeter * cost", "The fence costs {calc} dollars.",
              "At {cost} dollars per meter, the cost is {calc} dollars."),
        ),
        solve=lambda v: 2 * (v["length"] + v["width"]) * v["cost"],
        describe={"length": "the length of the garden in meters", "width": "the width of the garden in meters",
                  "cost": "the cost of one meter of fence in dollars"},
    ),
    Template(
        name="train_trip",
        quantities={"speed1": r(40, 90), "hours1": r(2, 5), "speed2": r(30, 80), "hours2": r(2, 4)},
        phrasings=(
            ("A train travels at {speed1} kilometers per hour for {hours1} hours and then at {speed2} kilometers "
             "per hour for {hours2} hours.", "How many kilometers does the train travel in total?"),
            ("For the first {hours1} hours of a trip a train averages {speed1} km per hour; for the next {hours2} "
             "hours it averages {speed2} km per hour.", "What is the total distance covered, in kilometers?"),
        ),
        statement="The train travels {answer} kilometers in total.",
        steps=(
            S("d1", "speed1 * hours1", "In the first part it travels {calc} kilometers.",
              "The first leg covers {calc} km."),
            S("d2", "speed2 * hours2", "In the second part it travels {calc} kilometers.",
              "The second leg covers {calc} km."),
            S("total", "d1 + d2", "The total distance is {calc} kilometers.", "Altogether the train covers {calc} km."),
        ),
        solve=lambda v: v["speed1"] * v["hours1"] + v["speed2"] * v["hours2"],
        describe={"speed1": "the speed in the first part in km per hour", "hours1": "the hours of the first part",
                  "speed2": "the speed in the second part in km per hour", "hours2": "the hours of the second part"},
    ),
    Template(
        name="bakery_profit",
        quantities={"cakes": r(3, 12), "cake_price": r(8, 20), "pies": r(2, 10), "pie_price": r(5, 12),
                    "costs": r(20, 80)},
        phrasings=(
            ("A bakery sells {cakes} cakes for ${cake_price} each and {pies} pies for ${pie_price} each. The "
             "ingredients cost ${costs}.", "How much profit does the bakery make?"),
            ("The ingredients for today's baking cost a bakery ${costs}. It sold {pies} pies at ${pie_price} per "
             "pie and {cakes} cakes at ${cake_price} per cake.", "What is the bakery's profit in dollars?"),
        ),
        statement="The bakery makes a profit of ${answer}.",
        steps=(
            S("cake_sales", "cakes * cake_price", "The cakes bring in {calc} dollars.",
              "Cake sales are {calc} dollars."),
            S("pie_sales", "pies * pie_price", "The pies bring in {calc} dollars.", "Pie sales are {calc} dollars."),
            S("revenue", "cake_sales + pie_sales", "Total sales are {calc} dollars.",
              "Together that is {calc} dollars of revenue."),
            S("profit", "revenue - costs", "After paying for ingredients, the profit is {calc} dollars.",
              "The profit is {calc} dollars."),
        ),
        solve=lambda v: v["cakes"] * v["cake_price"] + v["pies"] * v["pie_price"] - v["costs"],
        describe={"cakes": "the number of cakes sold", "cake_price": "the price of a cake in dollars",
                  "pies": "the number of pies sold", "pie_price": "the price of a pie in dollars",
                  "costs": "the cost of the ingredients in dollars"},
    ),
    Template(
        name="ages",
        quantities={"age": r(5, 15), "older": r(2, 8), "years": r(2, 10)},
        phrasings=(
            ("{name} is {age} years old. {His} cousin is {older} years older than twice {his} age.",
             "What will be the sum of their ages in {years} years?"),
            ("{name}'s cousin is {older} years more than double {name}'s age, and {name} is {age} years old.",
             "In {years} years, what will the two ages add up to?"),
        ),
        statement="In {years} years the sum of their ages will be {answer}.",
        steps=(
            S("twice", "2 * age", "Twice {name}'s age is {calc}.", "Doubling {his} age gives {calc}."),
            S("cousin", "twice + older", "The cousin is {calc} years old.", "So the cousin's age is {calc}."),
            S("now", "age + cousin", "Together they are {calc} years old now.", "Their ages now add up to {calc}."),
            S("later", "2 * years", "In {years} years both are {years} years older, which adds {calc} years.",
              "Each of them gets {years} years older, adding {calc} years in total."),
            S("total", "now + later", "The sum of their ages will be {calc}.", "So the sum will be {calc}."),
        ),
        solve=lambda v: 3 * v["age"] + v["older"] + 2 * v["years"],
        describe={"age": "the age of {name}", "older": "how many years the cousin is older than twice the age",
                  "years": "the number of years"},
    ),
    Template(
        name="water_tank",
        quantities={"capacity": r(60, 600, 10), "inflow": r(6, 20), "leak": r(2, 5)},
        phrasings=(
            ("An empty tank holds {capacity} liters of water. A pipe fills it at {inflow} liters per minute, but "
             "the tank leaks {leak} liters per minute.", "How many minutes does it take to fill the tank?"),
            ("Water flows into an empty {capacity}-liter tank at {inflow} liters each minute while {leak} liters "
             "leak out each minute.", "After how many minutes is the tank full?"),
        ),
        statement="It takes {answer} minutes to fill the tank.",
        steps=(
            S("net", "inflow - leak", "The tank gains {calc} liters per minute.",
              "Each minute the water level rises by {calc} liters."),
            S("minutes", "capacity / net", "It takes {calc} minutes to fill.",
              "Filling {capacity} liters takes {calc} minutes."),
        ),
        solve=lambda v: v["capacity"] // (v["inflow"] - v["leak"]),
        describe={"capacity": "the capacity of the tank in liters", "inflow": "the liters flowing in per minute",
                  "leak": "the liters leaking out per minute"},
    ),
    Template(
        name="stamps",
        quantities={"stamps": r(10, 60), "packs": r(2, 8), "per_pack": r(5, 15)},
        phrasings=(
            ("{name} has {stamps} stamps. {He} buys {packs} packs of stamps with {per_pack} stamps in each pack. "
             "Then {he} gives a third of all {his} stamps to {his} sister.", "How many stamps does {name} have now?"),
            ("{name} buys {packs} packs of {per_pack} stamps to add to the {stamps} stamps {he} already has, and "
             "afterwards gives one third of the collection to {his} sister.",
             "How many stamps are left in {name}'s collection?"),
        ),
        statement="{name} has {answer} stamps now.",
        steps=(
            S("bought", "packs * per_pack", "{He} buys {calc} stamps.", "The packs contain {calc} stamps."),
            S("total", "stamps + bought", "{He} then has {calc} stamps.", "The collection grows to {calc} stamps."),
            S("given", "total / 3", "A third of them is {calc} stamps.", "{He} gives away {calc} stamps."),
            S("left", "total - given", "{name} has {calc} stamps now.", "That leaves {calc} stamps."),
        ),
        solve=lambda v: (v["stamps"] + v["packs"] * v["per_pack"]) * 2 // 3,
        describe={"stamps": "the number of stamps at the start", "packs": "the number of packs bought",
                  "per_pack": "the number of stamps in each pack"},
    ),
    Template(
        name="wages",
        quantities={"rate": r(10, 30), "hours": r(4, 10), "days": r(3, 6), "bonus": r(20, 100, 5)},
        phrasings=(
            ("{name} earns ${rate} per hour. {He} works {hours} hours a day for {days} days and also gets a "
             "${bonus} bonus.", "How much money does {he} earn in total?"),
            ("Working {days} days this week, {hours} hours each day, {name} is paid ${rate} an hour, plus a bonus "
             "of ${bonus}.", "What are {name}'s total earnings in dollars?"),
        ),
        statement="{name} earns ${answer} in total.",
        steps=(
            S("daily", "rate * hours", "Each day {he} earns {calc} dollars.", "{His} daily pay is {calc} dollars."),
            S("wage", "daily * days", "Over {days} days {he} earns {calc} dollars.",
              "For all {days} days that is {calc} dollars."),
            S("total", "wage + bonus", "With the bonus, {he} earns {calc} dollars.",
              "Adding the bonus gives {calc} dollars."),
        ),
        solve=lambda v: v["rate"] * v["hours"] * v["days"] + v["bonus"],
        describe={"rate": "the hourly pay in dollars", "hours": "the hours worked each day",
                  "days": "the number of days worked", "bonus": "the bonus in dollars"},
    ),
    Template(
        name="pizza_party",
        quantities={"pizzas": r(2, 6), "slices": (6, 8, 10, 12), "friends": r(3, 8), "each": r(2, 3)},
        phrasings=(
            ("{name} orders {pizzas} pizzas, and each pizza is cut into {slices} slices. {He} and {his} {friends} "
             "friends each eat {each} slices.", "How many slices are left?"),
            ("There are {pizzas} pizzas with {slices} slices each at {name}'s party. {name} and {friends} friends "
             "eat {each} slices apiece.", "How many slices remain?"),
        ),
        statement="There are {answer} slices left.",
        steps=(
            S("total", "pizzas * slices", "There are {calc} slices in total.",
              "The pizzas have {calc} slices altogether."),
            S("people", "friends + 1", "Counting {name}, {calc} people eat pizza.",
              "{name} plus the friends makes {calc} people."),
            S("eaten", "people * each", "They eat {calc} slices.", "Together they eat {calc} slices."),
            S("left", "total - eaten", "So {calc} slices are left.", "That leaves {calc} slices."),
        ),
        solve=lambda v: v["pizzas"] * v["slices"] - (v["friends"] + 1) * v["each"],
        describe={"pizzas": "the number of pizzas", "slices": "the number of slices per pizza",
                  "friends": "the number of friends", "each": "the number of slices each person eats"},
    ),
    Template(
        name="marbles_share",
        quantities={"marbles": r(10, 80), "more": r(5, 40), "friends": r(2, 6)},
        phrasings=(
            ("{name} has {marbles} marbles and wins {more} more in a game. {He} then shares all of {his} marbles "
             "equally among {friends} friends.", "How many marbles does each friend get?"),
            ("After winning {more} marbles to add to {his} {marbles}, {name} splits every marble equally between "
             "{friends} friends.", "How many marbles does each friend receive?"),
        ),
        statement="Each friend gets {answer} marbles.",
        steps=(
            S("total", "marbles + more", "{name} has {calc} marbles.", "After the game there are {calc} marbles."),
            S("each", "total / friends", "Each friend gets {calc} marbles.",
              "Shared among {friends} friends, that is {calc} marbles each."),
        ),
        solve=lambda v: (v["marbles"] + v["more"]) // v["friends"],
        describe={"marbles": "the number of marbles at the start", "more": "the number of marbles won",
                  "friends": "the number of friends"},
    ),
    Template(
        name="library_books",
        quantities={"books": r(80, 200), "monday": r(5, 30), "returned": r(3, 20)},
        phrasings=(
            ("A library shelf holds {books} books. On Monday {monday} books are borrowed, on Tuesday {returned} "
             "books are returned, and on Wednesday twice as many books as on Monday are borrowed.",
             "How many books are on the shelf after Wednesday?"),
            ("There are {books} books on a library shelf. Readers borrow {monday} books on Monday and return "
             "{returned} on Tuesday; on Wednesday they borrow double Monday's number.",
             "How many books remain on the shelf at the end of Wednesday?"),
        ),
        statement="There are {answer} books on the shelf after Wednesday.",
        steps=(
            S("after_mon", "books - monday", "After Monday there are {calc} books.",
              "Monday leaves {calc} books on the shelf."),
            S("after_tue", "after_mon + returned", "After the returns on Tuesday there are {calc} books.",
              "Tuesday brings the shelf to {calc} books."),
            S("wednesday", "2 * monday", "On Wednesday {calc} books are borrowed.",
              "Wednesday's borrowing is {calc} books."),
            S("left", "after_tue - wednesday", "So {calc} books are left after Wednesday.",
              "The shelf ends with {calc} books."),
        ),
        solve=lambda v: v["books"] - 3 * v["monday"] + v["returned"],
        describe={"books": "the number of books on the shelf at the start",
                  "monday": "the number of books borrowed on Monday",
                  "returned": "the number of books returned on Tuesday"},
    ),
    Template(
        name="eggs_needed",
        quantities={"eggs": r(2, 4), "batches": r(3, 8), "have": r(2, 10)},
        phrasings=(
            ("A cake recipe needs {eggs} eggs per batch. {name} wants to bake {batches} batches and has {have} eggs "
             "at home.", "How many more eggs does {name} need to buy?"),
            ("{name} has {have} eggs and plans to make {batches} batches of a cake, each batch using {eggs} eggs.",
             "How many additional eggs must {he} buy?"),
        ),
        statement="{name} needs to buy {answer} more eggs.",
        steps=(
            S("needed", "eggs * batches", "{He} needs {calc} eggs in total.", "The batches use {calc} eggs."),
            S("buy", "needed - have", "{He} has to buy {calc} more eggs.", "So {calc} more eggs are needed."),
        ),
        solve=lambda v: v["eggs"] * v["batches"] - v["have"],
        describe={"eggs": "the number of eggs per batch", "batches": "the number of batches",
                  "have": "the number of eggs at home"},
    ),
    Template(
        name="bus_passengers",
        quantities={"start": r(20, 50), "off": r(2, 15), "on": r(3, 20)},
        phrasings=(
            ("A bus leaves the station with {start} passengers. At the first stop {off} passengers get off and {on} "
             "get on. At the second stop half of the passengers get off.",
             "How many passengers are still on the bus?"),
            ("There are {start} people on a bus. At stop one, {off} people leave and {on} board; at stop two, half "
             "of everyone on board leaves.", "How many people remain on the bus?"),
        ),
        statement="There are {answer} passengers still on the bus.",
        steps=(
            S("after_off", "start - off", "After {off} get off there are {calc} passengers.",
              "First, {calc} passengers remain."),
            S("after_on", "after_off + on", "Then {calc} passengers are on the bus.",
              "With the new passengers there are {calc}."),
            S("left", "after_on / 2", "Half of them stay, so {calc} passengers remain.",
              "After half leave, {calc} passengers are left."),
        ),
        solve=lambda v: (v["start"] - v["off"] + v["on"]) // 2,
        describe={"start": "the number of passengers at the start",
                  "off": "the number of passengers who get off at the first stop",
                  "on": "the number of passengers who get on at the first stop"},
    ),
    Template(
        name="phone_bill",
        quantities={"fee": r(15, 40), "per_gb": r(2, 10), "limit": r(2, 10), "used": r(11, 25)},
        phrasings=(
            ("{name}'s phone plan costs ${fee} a month and includes {limit} GB of data. Each extra GB costs "
             "${per_gb}. This month {name} used {used} GB.", "What is {his} phone bill this month?"),
            ("A phone plan charges ${fee} per month for the first {limit} GB and ${per_gb} for every GB beyond "
             "that. {name} used {used} GB this month.", "How much does {name} pay this month in dollars?"),
        ),
        statement="{name}'s phone bill is ${answer} this month.",
        steps=(
            S("extra", "used - limit", "{He} used {calc} extra GB.", "The data over the limit is {calc} GB."),
            S("extra_cost", "extra * per_gb", "The extra data costs {calc} dollars.", "That adds {calc} dollars."),
            S("total", "fee + extra_cost", "The bill is {calc} dollars.", "In total {he} pays {calc} dollars."),
        ),
        solve=lambda v: v["fee"] + (v["used"] - v["limit"]) * v["per_gb"],
        describe={"fee": "the monthly fee in dollars", "per_gb": "the price of each extra GB in dollars",
                  "limit": "the GB included in the plan", "used": "the GB used this month"},
    ),
    Template(
        name="car_wash",
        quantities={"rate1": r(3, 8), "hours1": r(2, 6), "rate2": r(2, 7), "hours2": r(2, 5), "price": r(5, 12)},
        phrasings=(
            ("At a car wash, {name} washes {rate1} cars per hour for {hours1} hours on Saturday and {rate2} cars per "
             "hour for {hours2} hours on Sunday. Each wash costs ${price}.",
             "How much money does {name} collect over the weekend?"),
            ("{name} charges ${price} per car wash. On Saturday {he} washes {rate1} cars an hour for {hours1} hours, "
             "and on Sunday {rate2} cars an hour for {hours2} hours.", "How many dollars does {he} earn in total?"),
        ),
        statement="{name} collects ${answer} over the weekend.",
        steps=(
            S("saturday", "rate1 * hours1", "On Saturday {he} washes {calc} cars.", "Saturday's total is {calc} cars."),
            S("sunday", "rate2 * hours2", "On Sunday {he} washes {calc} cars.", "Sunday's total is {calc} cars."),
            S("cars", "saturday + sunday", "That is {calc} cars in all.", "Over the weekend {he} washes {calc} cars."),
            S("money", "cars * price", "{He} collects {calc} dollars.",
              "At {price} dollars each, that is {calc} dollars."),
        ),
        solve=lambda v: (v["rate1"] * v["hours1"] + v["rate2"] * v["hours2"]) * v["price"],
        describe={"rate1": "the cars washed per hour on Saturday", "hours1": "the hours worked on Saturday",
                  "rate2": "the cars washed per hour on Sunday", "hours2": "the hours worked on Sunday",
                  "price": "the price of one wash in dollars"},
    ),
    Template(
        name="running",
        quantities={"lap": (200, 250, 300, 400), "laps": r(3, 10), "warmup": r(100, 500, 50), "days": r(3, 7)},
        phrasings=(
            ("{name} runs {laps} laps around a {lap}-meter track every day, plus a {warmup}-meter warm-up jog.",
             "How many meters does {he} run in {days} days?"),
            ("Every day, {name} jogs {warmup} meters to warm up and then runs {laps} laps of a track that is {lap} "
             "meters long.", "What distance, in meters, does {name} cover over {days} days?"),
        ),
        statement="{name} runs {answer} meters in {days} days.",
        steps=(
            S("laps_m", "laps * lap", "The laps are {calc} meters a day.", "Each day the laps cover {calc} meters."),
            S("daily", "laps_m + warmup", "With the warm-up, {he} runs {calc} meters a day.",
              "{His} daily distance is {calc} meters."),
            S("total", "daily * days", "Over {days} days {he} runs {calc} meters.",
              "In {days} days that is {calc} meters."),
        ),
        solve=lambda v: (v["laps"] * v["lap"] + v["warmup"]) * v["days"],
        describe={"lap": "the length of the track in meters", "laps": "the number of laps each day",
                  "warmup": "the length of the warm-up in meters", "days": "the number of days"},
    ),
    Template(
        name="candy_jars",
        quantities={"jars": r(2, 6), "per_jar": r(20, 50), "per_day": r(2, 6), "days": r(3, 10)},
        phrasings=(
            ("{name} has {jars} jars with {per_jar} candies in each jar. {He} eats {per_day} candies every day for "
             "{days} days.", "How many candies are left?"),
            ("Each of {name}'s {jars} jars holds {per_jar} candies. For {days} days, {he} eats {per_day} candies a "
             "day.", "How many candies does {name} have left after that?"),
        ),
        statement="{name} has {answer} candies left.",
        steps=(
            S("total", "jars * per_jar", "{He} starts with {calc} candies.", "The jars hold {calc} candies."),
            S("eaten", "per_day * days", "{He} eats {calc} candies.", "Over {days} days {he} eats {calc} candies."),
            S("left", "total - eaten", "There are {calc} candies left.", "That leaves {calc} candies."),
        ),
        solve=lambda v: v["jars"] * v["per_jar"] - v["per_day"] * v["days"],
        describe={"jars": "the number of jars", "per_jar": "the number of candies in each jar",
                  "per_day": "the number of candies eaten each day", "days": "the number of days"},
    ),
    Template(
        name="field_trip",
        quantities={"students": r(20, 60), "teachers": r(2, 6), "seats": r(8, 15), "van_cost": r(50, 150, 5)},
        phrasings=(
            ("For a field trip, {students} students and {teachers} teachers ride in vans. Each van holds {seats} "
             "people and costs ${van_cost} to rent.", "If every van is full, how much does it cost to rent the vans?"),
            ("A school rents vans for a trip. Each van seats {seats} people and costs ${van_cost}. There are "
             "{students} students and {teachers} teachers going.",
             "What is the total rental cost in dollars if every van is filled?"),
        ),
        statement="Renting the vans costs ${answer}.",
        steps=(
            S("people", "students + teachers", "There are {calc} people going.",
              "In total {calc} people go on the trip."),
            S("vans", "people / seats", "They need {calc} vans.", "That fills {calc} vans."),
            S("cost", "vans * van_cost", "The vans cost {calc} dollars.", "Renting them costs {calc} dollars."),
        ),
        solve=lambda v: (v["students"] + v["teachers"]) // v["seats"] * v["van_cost"],
        describe={"students": "the number of students", "teachers": "the number of teachers",
                  "seats": "the number of people each van holds", "van_cost": "the cost of one van in dollars"},
    ),
    Template(
        name="birthday_money",
        quantities={"money": r(20, 120), "part": r(2, 5), "snack": r(2, 10)},
        phrasings=(
            ("{name} gets ${money} for {his} birthday. {He} spends 1/{part} of it on a book and then ${snack} on "
             "snacks.", "How much money does {he} have left?"),
            ("Out of the ${money} {name} received for {his} birthday, {he} used 1/{part} for a book and ${snack} for "
             "snacks.", "How many dollars does {name} have left?"),
        ),
        statement="{name} has ${answer} left.",
        steps=(
            S("book", "money / part", "The book costs {calc} dollars.", "{He} spends {calc} dollars on the book."),
            S("after", "money - book", "After the book {he} has {calc} dollars.", "That leaves {calc} dollars."),
            S("left", "after - snack", "After the snacks {he} has {calc} dollars left.",
              "Subtracting the snacks, {calc} dollars remain."),
        ),
        solve=lambda v: v["money"] - v["money"] // v["part"] - v["snack"],
        describe={"money": "the birthday money in dollars", "part": "the fraction denominator",
                  "snack": "the money spent on snacks in dollars"},
    ),
    Template(
        name="fence_painting",
        quantities={"sections": r(20, 80), "done": r(2, 15), "per_day": r(2, 8)},
        phrasings=(
            ("A fence has {sections} sections. {name} has already painted {done} sections and paints {per_day} "
             "sections each day.", "How many more days will it take {him} to finish painting the fence?"),
            ("{name} is painting a {sections}-section fence. {He} finished {done} sections already and can paint "
             "{per_day} sections a day.", "How many days does {he} still need to finish?"),
        ),
        statement="It takes {name} {answer} more days to finish the fence.",
        steps=(
            S("left", "sections - done", "{He} still has {calc} sections to paint.", "There are {calc} sections left."),
            S("days", "left / per_day", "It takes {calc} days.", "At {per_day} sections a day, that is {calc} days."),
        ),
        solve=lambda v: (v["sections"] - v["done"]) // v["per_day"],
        describe={"sections": "the number of sections of the fence", "done": "the number of sections already painted",
                  "per_day": "the number of sections painted each day"},
    ),
    Template(
        name="pet_store_fish",
        quantities={"tanks": r(3, 8), "fish": r(5, 15), "sold": r(3, 20), "new_tanks": r(2, 4)},
        phrasings=(
            ("A pet store has {tanks} fish tanks with {fish} fish in each tank. It sells {sold} fish and then "
             "receives {new_tanks} more tanks with {fish} fish in each.", "How many fish does the store have now?"),
            ("There are {fish} fish in each of the {tanks} tanks at a pet store. After {sold} fish are sold, a "
             "delivery brings {new_tanks} new tanks holding {fish} fish apiece.",
              "How many fish are in the store now?"),
        ),
        statement="The store has {answer} fish now.",
        steps=(
            S("start", "tanks * fish", "The store starts with {calc} fish.", "At first there are {calc} fish."),
            S("after", "start - sold", "After the sale there are {calc} fish.", "Selling some leaves {calc} fish."),
            S("delivered", "new_tanks * fish", "The delivery brings {calc} fish.", "The new tanks hold {calc} fish."),
            S("total", "after + delivered", "Now the store has {calc} fish.", "Altogether there are {calc} fish."),
        ),
        solve=lambda v: (v["tanks"] + v["new_tanks"]) * v["fish"] - v["sold"],
        describe={"tanks": "the number of tanks at the start", "fish": "the number of fish in each tank",
                  "sold": "the number of fish sold", "new_tanks": "the number of tanks delivered"},
    ),
)
# fmt: on
