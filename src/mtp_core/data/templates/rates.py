"""Word problems about rates and time: per-day and per-hour amounts, speeds, filling, ages and schedules.

Part of the synthetic generator's template table (`data.templates`, whose `ORDER` fixes the seeded draws)."""

from __future__ import annotations

from .base import S, Template, r

# A table laid out by hand (one template per block), which the formatter leaves alone.
# fmt: off
TEMPLATES: tuple[Template, ...] = (
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
)
# fmt: on
