"""Word problems about money: prices, change, savings, earnings, bills and costs.

Part of the synthetic generator's template table (`data.templates`, whose `ORDER` fixes the seeded draws)."""

from __future__ import annotations

from .base import S, Template, r

# A table laid out by hand (one template per block), which the formatter leaves alone.
# fmt: off
TEMPLATES: tuple[Template, ...] = (
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
)
# fmt: on
