"""Word problems about things counted in groups: totals, leftovers, shares and how many groups are needed.

Part of the synthetic generator's template table (`data.templates`, whose `ORDER` fixes the seeded draws)."""

from __future__ import annotations

from .base import S, Template, r

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
