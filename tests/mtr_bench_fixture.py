"""A small MTR-Bench source in the exact published schema (hand-written texts, our own words).

Six topic clusters of 8 passages each (volcanoes, Jean Sibelius, the Danube, the Rosetta mission, sourdough,
honey bees) plus 2 passages in no cluster make a 50-row MTR-DOCUMENT-style corpus; a passage's row index is
its ``document_idx``. Every cluster seeds one 12-turn conversation (question, answer, gold passage).

* ``release="12turn"``: ``test`` = volcano, Sibelius, Danube|Rosetta and Rosetta|Danube (a hard-switch pair
  spliced at K = 5: the back conversation's rows keep its gold, ctxs and cluster_idx); ``train`` = sourdough,
  honey bees. Files ``test.*``, ``train.*``, ``corpus.*``.
* ``release="8turn"`` (legacy): 4 + 4 turn conversations (first 4 turns of two clusters), no ``turn`` /
  ``switch_turn`` columns, in the Hub layout ``MTR-BENCH/data/train-*``, ``MTR-train/data/train-*`` and
  ``MTR-DOCUMENT/data/train-*`` (``layout="hub"`` writes the 12-turn release that way too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

DOC = pa.struct([("document_idx", pa.int64()), ("edu_quality", pa.float64()), ("id", pa.string()),
                 ("naive_quality", pa.int64()), ("text", pa.string()), ("title", pa.string()),
                 ("url", pa.string())])  # fmt: skip
MESSAGE = pa.struct([("content", pa.string()), ("role", pa.string())])
LEGACY_FIELDS = [("messages", pa.list_(MESSAGE)), ("ctxs", pa.list_(DOC)), ("ground_truth_document_idx", pa.int64()),
                 ("ground_truth_ctx", DOC), ("cluster_idx", pa.int64()), ("prompt_tokens", pa.int64()),
                 ("completion_tokens", pa.int64())]  # fmt: skip
SCHEMA_8 = pa.schema(LEGACY_FIELDS)
SCHEMA_12 = pa.schema([*LEGACY_FIELDS, ("turn", pa.int64()), ("switch_turn", pa.int64())])
CORPUS_SCHEMA = pa.schema([("id", pa.string()), ("url", pa.string()), ("title", pa.string()), ("text", pa.string()),
                           ("naive_quality", pa.int64()), ("edu_quality", pa.float64())])  # fmt: skip

# cluster key -> (cluster_idx, [(title, text)] x 8)
CLUSTERS: dict[str, tuple[int, list[tuple[str, str]]]] = {
    "volcano": (1207, [
        ("Mount Etna", "Mount Etna is an active stratovolcano on the east coast of Sicily. At about 3,300 metres it "
         "is the tallest active volcano in Europe outside the Caucasus, and its height changes with each eruption."),
        ("Stratovolcano", "A stratovolcano is a steep cone built from alternating layers of hardened lava, ash and "
         "rock. Its thick lava traps gas, so its eruptions are often explosive."),
        ("Pyroclastic flow", "A pyroclastic flow is a fast current of hot gas and volcanic debris running down a "
         "volcano's slopes. It can exceed 100 km/h at several hundred degrees Celsius."),
        ("Volcanic Explosivity Index", "The Volcanic Explosivity Index rates eruptions from 0 to 8 by erupted volume "
         "and column height; each step means roughly ten times more material."),
        ("1669 eruption of Mount Etna", "In 1669 a fissure opened on Etna's southern flank and lava flowed for "
         "about four months. It overran the walls of Catania and reached the sea; people tried to divert it."),
        ("Lava tube", "A lava tube forms when a lava flow crusts over on top while molten lava keeps moving below. "
         "Once the flow drains, the empty channel can remain as a long cave."),
        ("Volcano monitoring", "Volcanoes are watched with seismometers, GPS stations that detect swelling, and "
         "sensors for gases such as sulfur dioxide. A swarm of small earthquakes often means magma is moving."),
        ("Tephra", "Tephra is any rock fragment thrown into the air by an eruption. Fine ash can drift thousands of "
         "kilometres, while large blocks and bombs land near the vent."),
    ]),
    "sibelius": (3318, [
        ("Jean Sibelius", "Jean Sibelius (1865-1957) was a Finnish composer of the late Romantic period whose music "
         "became tied to Finland's growing national identity before independence."),
        ("Finlandia", "Finlandia is a tone poem Sibelius wrote in 1899 and revised in 1900. Its hymn-like middle "
         "section later became a popular song on its own."),
        ("Symphony No. 5 (Sibelius)", "Sibelius's Fifth Symphony premiered on his 50th birthday in December 1915. "
         "He revised it twice; the 1919 version ends with six widely spaced chords."),
        ("Violin Concerto (Sibelius)", "The Violin Concerto in D minor is Sibelius's only concerto. First played in "
         "1904, it was tightened in 1905, and that version is the one heard today."),
        ("Ainola", "Ainola was the home of Sibelius and his wife Aino near Lake Tuusula from 1904. The house is now "
         "a museum and both are buried in its garden."),
        ("Kalevala", "The Kalevala is a 19th-century collection of Finnish and Karelian folk poetry compiled by "
         "Elias Lonnrot. It inspired Sibelius works such as the Lemminkainen Suite."),
        ("Silence of Jarvenpaa", "Sibelius published almost no new music in his last thirty years. He worked on an "
         "Eighth Symphony but burned many manuscripts in the 1940s."),
        ("Tapiola", "Tapiola (1926) was Sibelius's last major orchestral work; it portrays the forest god Tapio."),
    ]),
    "danube": (5402, [
        ("Danube", "The Danube is Europe's second-longest river, about 2,850 kilometres long. It rises in the Black "
         "Forest in Germany and flows east to the Black Sea."),
        ("Danube Delta", "In the Danube Delta, in Romania and Ukraine, the river splits into three main arms before "
         "the Black Sea. Its reed beds and lakes shelter hundreds of bird species."),
        ("Iron Gates", "The Iron Gates is a Danube gorge on the Serbia-Romania border. Hydroelectric dams built there "
         "from the 1970s raised the water and submerged old villages."),
        ("Danube-Black Sea Canal", "The Danube-Black Sea Canal in Romania, opened in 1984, gives ships a shorter "
         "route from the river to the port of Constanta."),
        ("Danube Commission", "The Danube Commission, based in Budapest, oversees navigation on the river under a "
         "convention signed in Belgrade in 1948."),
        ("Budapest", "Budapest, the capital of Hungary, lies on both banks of the Danube. It was formed in 1873 by "
         "joining Buda and Obuda on the west bank with Pest on the east bank."),
        ("Wachau", "The Wachau is a Danube valley in Lower Austria between Melk and Krems, known for terraced "
         "vineyards, apricot orchards and castles."),
        ("Rhine-Main-Danube Canal", "The Rhine-Main-Danube Canal in Bavaria, completed in 1992, joins the Danube to "
         "the Main and the Rhine, so barges can travel from the North Sea to the Black Sea."),
    ]),
    "rosetta": (7731, [
        ("Rosetta (spacecraft)", "Rosetta was a European Space Agency probe launched in March 2004 to study comet "
         "67P/Churyumov-Gerasimenko, which it reached in August 2014."),
        ("Philae (spacecraft)", "Philae was Rosetta's lander. It touched down on comet 67P on 12 November 2014, but "
         "its harpoons failed, and it bounced before settling in a shaded spot."),
        ("67P/Churyumov-Gerasimenko", "Comet 67P is a Jupiter-family comet with an orbit of about six and a half "
         "years. Its nucleus has two lobes joined by a narrow neck, like a rubber duck."),
        ("Gravity assist", "A gravity assist uses a planet's motion to change a spacecraft's speed without fuel. "
         "Rosetta flew past Mars once and Earth three times on its way to the comet."),
        ("Rosetta hibernation", "To save power far from the Sun, Rosetta hibernated from June 2011 and woke up as "
         "planned in January 2014."),
        ("ROSINA", "ROSINA, an instrument on Rosetta, analysed the gases around the comet and found its water much "
         "richer in deuterium than Earth's oceans."),
        ("End of the Rosetta mission", "The mission ended on 30 September 2016 with a controlled descent onto the "
         "comet, sending images until contact was lost."),
        ("Naming of Rosetta", "The probe was named after the Rosetta Stone, which helped decipher hieroglyphs; its "
         "lander was named after Philae, a Nile island where a related obelisk was found."),
    ]),
    "sourdough": (8865, [
        ("Sourdough", "Sourdough is bread leavened by wild yeasts and lactic acid bacteria instead of baker's yeast. "
         "Acids made by the bacteria give it a tangy taste."),
        ("Sourdough starter", "A starter is flour and water in which wild microbes multiply. Bakers keep it alive by "
         "feeding it fresh flour and water regularly."),
        ("Levain", "A levain is a portion of starter built up in the hours before baking and mixed into the dough."),
        ("Autolyse", "Autolyse is a rest of 20 minutes to an hour after mixing only flour and water. Gluten starts to "
         "form and the dough becomes easier to shape."),
        ("San Francisco sourdough", "San Francisco has been known for sourdough since the 1849 Gold Rush; the "
         "bacterium Lactobacillus sanfranciscensis was named after the city."),
        ("Bread proofing", "Proofing is the last rise of shaped dough before baking. Sourdough is often proofed in "
         "the refrigerator overnight, which deepens its flavour."),
        ("Scoring (baking)", "Scoring is cutting a shallow slash in the dough just before baking. It controls where "
         "the loaf opens and forms a raised edge called an ear."),
        ("Dutch oven baking", "Home bakers often bake sourdough in a preheated lidded cast-iron pot. The lid traps "
         "steam, keeping the crust soft so the loaf can rise fully."),
    ]),
    "honeybee": (9140, [
        ("Western honey bee", "A colony of the western honey bee, Apis mellifera, has one queen, thousands of female "
         "workers and, in summer, a few hundred male drones."),
        ("Waggle dance", "Foragers perform a waggle dance to show where food is: the angle of the run gives the "
         "direction relative to the Sun and its length the distance."),
        ("Queen bee", "A queen develops from an ordinary fertilised egg when the larva is fed royal jelly. She can "
         "lay up to about 2,000 eggs a day."),
        ("Honey", "Bees make honey by collecting nectar, adding enzymes and fanning it until most water evaporates; "
         "it is then sealed in wax cells."),
        ("Beeswax", "Workers secrete beeswax from glands on the abdomen and build hexagonal comb with it. People use "
         "it in candles, polishes and cosmetics."),
        ("Swarming (honey bee)", "In a swarm the old queen leaves with about half the workers to found a new nest, "
         "and a new queen takes over the old hive."),
        ("Varroa destructor", "Varroa destructor is a parasitic mite that feeds on honey bees and spreads viruses; "
         "it is a major cause of colony losses."),
        ("Drone (bee)", "Drones are male honey bees from unfertilised eggs. They neither sting nor forage; they mate "
         "with queens of other colonies."),
    ]),
}  # fmt: skip
EXTRA_DOCS = [
    ("Lighthouse", "A lighthouse is a tower with a bright lamp that guides ships near dangerous coasts."),
    ("Chess opening", "A chess opening is the first series of moves of a game, many of which have names."),
]
# cluster key -> 12 turns (question, answer, index of the gold passage in the cluster)
CONVERSATIONS: dict[str, list[tuple[str, str, int]]] = {
    "volcano": [
        ("How tall is Mount Etna?", "About 3,300 metres. The exact height shifts because eruptions keep changing "
         "the summit.", 0),
        ("what kind of volcano is it", "A stratovolcano: a steep cone of lava, ash and rock layers.", 1),
        ("has it ever destroyed a town?", "In 1669 lava from a flank fissure overran the walls of Catania and ran "
         "into the sea.", 4),
        ("how long did that go on", "That eruption lasted about four months.", 4),
        ("what are the fast clouds of hot gas that come down the sides", "Pyroclastic flows. They can move faster "
         "than 100 km/h at several hundred degrees.", 2),
        ("how do they measure how big an eruption is", "With the Volcanic Explosivity Index, from 0 to 8; each step "
         "is about ten times more material.", 3),
        ("and the stuff blasted into the air?", "That is tephra, from fine ash to big bombs near the vent.", 7),
        ("can lava really make caves", "Yes. A flow that crusts over and drains can leave a lava tube behind.", 5),
        ("how do scientists know its about to erupt", "They watch earthquakes, ground swelling and gases. Swarms "
         "of small quakes often mean magma is moving.", 6),
        ("which gas do they check", "Mainly sulfur dioxide.", 6),
        ("is it still active", "Yes, Etna is an active volcano and erupts often.", 0),
        ("why are those cone ones so explosive again", "Their thick lava traps gas until the pressure releases "
         "violently.", 1),
    ],
    "sibelius": [
        ("Who was Jean Sibelius?", "A Finnish composer (1865-1957) whose music became linked to Finnish national "
         "identity.", 0),
        ("whats his most famous piece", "Probably Finlandia, a tone poem from 1899.", 1),
        ("why did it matter so much to finns", "It came out as national feeling was growing before independence.", 0),
        ("did he write concertos", "Just one, the Violin Concerto in D minor, revised in 1905.", 3),
        ("and symphonies?", "His Fifth is among the best loved; it premiered on his 50th birthday in 1915.", 2),
        ("how many times did he change it", "Twice; the final version is from 1919.", 2),
        ("where did he live", "At Ainola near Lake Tuusula from 1904, with his wife Aino.", 4),
        ("is he buried there", "Yes, he and Aino are buried in the garden at Ainola.", 4),
        ("did he use folk stories", "Yes. The Kalevala inspired works such as the Lemminkainen Suite.", 5),
        ("who put that together", "Elias Lonnrot compiled it in the 19th century.", 5),
        ("what was his last big orchestral work", "Tapiola, from 1926.", 7),
        ("why did he stop composing", "Nobody knows for sure. He worked on an Eighth Symphony but burned many "
         "manuscripts in the 1940s.", 6),
    ],
    "danube": [
        ("Where does the Danube river start?", "In the Black Forest in Germany; it then flows about 2,850 km east to "
         "the Black Sea.", 0),
        ("is it the longest in europe", "No, it is the second-longest.", 0),
        ("what happens where it meets the sea", "It forms a delta with three main arms, full of birds.", 1),
        ("does it go through budapest", "Yes, the city lies on both banks; it was formed in 1873 from Buda, Obuda "
         "and Pest.", 5),
        ("i heard theres a gorge somewhere", "The Iron Gates, on the Serbia-Romania border.", 2),
        ("the valley with the vineyards, where is that", "The Wachau, in Lower Austria between Melk and Krems.", 6),
        ("can ships skip the delta", "Yes, through the Danube-Black Sea Canal to Constanta, opened in 1984.", 3),
        ("and get to the north sea?", "Via the Rhine-Main-Danube Canal, finished in 1992.", 7),
        ("whos in charge of shipping on it", "The Danube Commission in Budapest.", 4),
        ("why were those dams built", "They are hydroelectric dams, built from the 1970s.", 2),
        ("what fruit grows in that valley", "Apricots, besides the grapes of its vineyards.", 6),
        ("lots of birds in the delta?", "Yes, hundreds of species live in its reed beds and lakes.", 1),
    ],
    "rosetta": [
        ("When was the Rosetta spacecraft launched?", "In March 2004, by the European Space Agency.", 0),
        ("which comet was it going to", "Comet 67P/Churyumov-Gerasimenko.", 2),
        ("what does it look like", "Two lobes joined by a neck, a bit like a rubber duck.", 2),
        ("how did it get out there", "Gravity assists: one flyby of Mars and three of Earth.", 3),
        ("was it switched on the whole way", "No, it hibernated from June 2011 to January 2014.", 4),
        ("did it carry a lander", "Yes, Philae, which touched down on 12 November 2014.", 1),
        ("so did the landing work", "Partly: the harpoons failed and it bounced into a shaded spot.", 1),
        ("why is it called philae", "After a Nile island where an obelisk that helped with hieroglyphs was found.", 7),
        ("and the orbiter's name?", "After the Rosetta Stone.", 7),
        ("what did they learn about the water on it", "It holds much more deuterium than Earth's oceans.", 5),
        ("which instrument found that", "ROSINA, which analysed the comet's gases.", 5),
        ("how did the mission end", "With a controlled descent onto the comet on 30 September 2016.", 6),
    ],
    "sourdough": [
        ("What makes sourdough different from normal bread?", "It rises with wild yeasts and lactic acid bacteria, "
         "not baker's yeast.", 0),
        ("how do i make the starter", "Mix flour and water and let wild microbes grow; feed it regularly.", 1),
        ("how often do i feed it", "Regularly, with fresh flour and water, or it weakens.", 1),
        ("whats a levain, same thing?", "Not quite: it is starter built up a few hours before baking.", 2),
        ("my recipe says autolyse first", "Rest just the flour and water for 20 to 60 minutes before adding the "
         "rest.", 3),
        ("should it rise in the fridge", "Many bakers proof it overnight in the fridge for flavour.", 5),
        ("why do people cut the top", "Scoring controls where the loaf opens and makes an ear.", 6),
        ("do i need a special oven", "No, a preheated lidded cast-iron pot works well.", 7),
        ("why does the steam matter", "It keeps the crust soft so the loaf can keep rising.", 7),
        ("is san francisco sourdough a real thing", "Yes, the city is known for it since the 1849 Gold Rush.", 4),
        ("is there a bacterium named after it", "Yes, Lactobacillus sanfranciscensis.", 4),
        ("so where does the sour taste come from", "From acids made by the lactic acid bacteria.", 0),
    ],
    "honeybee": [
        ("How many bees live in a honey bee colony?", "One queen, thousands of workers and a few hundred drones in "
         "summer.", 0),
        ("what do the males do", "They mate with queens of other colonies; they neither sting nor forage.", 7),
        ("how does a bee become queen", "Her larva is fed royal jelly throughout its growth.", 2),
        ("how many eggs can she lay", "Up to about 2,000 a day.", 2),
        ("how do they tell each other where flowers are", "With the waggle dance: angle for direction, length for "
         "distance.", 1),
        ("how is honey made", "Nectar plus enzymes, fanned until the water evaporates, then sealed in wax.", 3),
        ("where does the wax come from", "Glands on the workers' abdomen.", 4),
        ("what do people use it for", "Candles, polishes and cosmetics.", 4),
        ("why do bees swarm", "It is how colonies reproduce: the old queen leaves with half the workers.", 5),
        ("what happens to the old hive", "A new queen takes it over.", 5),
        ("are mites killing them", "Varroa mites are a major cause of colony losses.", 6),
        ("whats that mite called again", "Varroa destructor.", 6),
    ],
}  # fmt: skip
SWITCH_K = 5
SPLITS_12 = {"test": ["volcano", "sibelius", ("danube", "rosetta"), ("rosetta", "danube")],
             "train": ["sourdough", "honeybee"]}  # fmt: skip
SPLITS_8 = {"test": [("volcano", "sibelius"), ("danube", "rosetta")], "train": [("sourdough", "honeybee")]}
LEGACY_DIRS = {"test": "MTR-BENCH", "train": "MTR-train", "corpus": "MTR-DOCUMENT"}


def corpus_rows() -> list[dict[str, Any]]:
    """The 50 corpus rows in row order (row index = document_idx); cluster passages are spread over the rows."""
    keys = [(c, j) for c in CLUSTERS for j in range(8)]
    index = {key: (k * 17) % 50 for k, key in enumerate(keys)}
    free = sorted(set(range(50)) - set(index.values()))
    rows: list[dict[str, Any] | None] = [None] * 50
    docs = [(index[key], CLUSTERS[key[0]][1][key[1]]) for key in keys]
    docs += [(free[n], doc) for n, doc in enumerate(EXTRA_DOCS)]
    for idx, (title, text) in docs:
        rows[idx] = {"id": f"{9000 + idx}-{idx % 3}", "url": "https://en.wikipedia.org/wiki/" + title.replace(" ", "_"),
                     "title": title, "text": text, "naive_quality": 0, "edu_quality": round(2.0 + idx / 40, 4)}
    return [r for r in rows if r is not None]


def _doc(corpus: list[dict[str, Any]], idx: int) -> dict[str, Any]:
    r = corpus[idx]
    return {"document_idx": idx, "edu_quality": r["edu_quality"], "id": r["id"], "naive_quality": r["naive_quality"],
            "text": r["text"], "title": r["title"], "url": r["url"]}  # fmt: skip


def base_rows(key: str, corpus: list[dict[str, Any]], turns: int = 12) -> list[dict[str, Any]]:
    """One unspliced conversation of cluster ``key``: a row per turn, messages growing by 2 each turn."""
    titles = [r["title"] for r in corpus]
    cluster_idx, docs = CLUSTERS[key]
    ctxs = [_doc(corpus, titles.index(title)) for title, _ in docs]
    rows, messages = [], []
    for t, (question, answer, j) in enumerate(CONVERSATIONS[key][:turns], start=1):
        messages = [*messages, {"content": question, "role": "user"}, {"content": answer, "role": "assistant"}]
        gold = ctxs[j]
        rows.append({"messages": messages, "ctxs": ctxs, "ground_truth_document_idx": gold["document_idx"],
                     "ground_truth_ctx": gold, "cluster_idx": cluster_idx, "prompt_tokens": 900 + 40 * t,
                     "completion_tokens": 30 + t, "turn": t, "switch_turn": -1})  # fmt: skip
    return rows


def spliced(front: list[dict], back: list[dict], k: int) -> list[dict]:
    """front[1..k] + back[k+1..T]: back rows keep their gold, ctxs and cluster_idx; history = front's k turns."""
    head = front[k - 1]["messages"]
    rows = [{**r, "switch_turn": k} for r in front[:k]]
    for r in back[k:]:
        rows.append({**r, "messages": head + r["messages"][2 * k:], "switch_turn": k})
    return rows


def split_rows(release: str = "12turn") -> dict[str, list[dict[str, Any]]]:
    """Rows per split in file order (legacy rows lack ``turn`` / ``switch_turn``)."""
    corpus = corpus_rows()
    out: dict[str, list[dict[str, Any]]] = {}
    for split, items in (SPLITS_12 if release == "12turn" else SPLITS_8).items():
        rows: list[dict[str, Any]] = []
        for item in items:
            if release == "12turn":
                rows += base_rows(item, corpus) if isinstance(item, str) else spliced(
                    base_rows(item[0], corpus), base_rows(item[1], corpus), SWITCH_K)
            else:
                a, b = base_rows(item[0], corpus, 4), base_rows(item[1], corpus, 4)
                rows += a + [{**r, "messages": a[-1]["messages"] + r["messages"]} for r in b]
        if release != "12turn":
            rows = [{k: v for k, v in r.items() if k not in ("turn", "switch_turn")} for r in rows]
        out[split] = rows
    return out


def write_table(path: Path, rows: list[dict[str, Any]], schema: pa.Schema, fmt: str = "parquet") -> Path:
    """Write ``rows`` as Parquet (exact ``schema`` types) or JSONL; returns the path written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=7)
    else:
        with open(path, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_fixture(folder: Path, release: str = "12turn", fmt: str = "parquet", layout: str = "flat") -> dict[str, Any]:
    """Write the source into ``folder``; returns the facts tests check (rows, ids, switches, file paths)."""
    folder = Path(folder)
    rows = split_rows(release)
    corpus = corpus_rows()
    schema = SCHEMA_12 if release == "12turn" else SCHEMA_8
    files: dict[str, Path] = {}
    for name, data, sch in [("test", rows["test"], schema), ("train", rows["train"], schema),
                            ("corpus", corpus, CORPUS_SCHEMA)]:  # fmt: skip
        if release == "8turn" or layout == "hub":
            repo = LEGACY_DIRS[name] if release == "8turn" else ("MTR-DOCUMENT" if name == "corpus" else "release")
            split = "train" if name == "corpus" or release == "8turn" else name
            path = folder / repo / "data" / f"{split}-00000-of-00001.{fmt}"
        else:
            path = folder / f"{name}.{fmt}"
        files[name] = write_table(path, data, sch, fmt)
    turns = 12 if release == "12turn" else 8
    ids = {split: [f"{split}-{n:05d}" for n in range(len(r) // turns)] for split, r in rows.items()}
    return {"folder": folder, "files": files, "rows": rows, "corpus": corpus, "turns": turns, "ids": ids,
            "switch": {"test-00002": SWITCH_K, "test-00003": SWITCH_K} if release == "12turn" else {}}  # fmt: skip
