"""MTR-Pipeline assembly: splices, the paper's 4+4 pairs, splits, MTR-Bench rows, and the stage end to end
through the real MTR-Bench builder (hand-written conversations, our own words)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.hub.export import read_manifest
from convrag.synthesis.engine.pipeline import StageContext
from convrag.synthesis.engine.records import write_shard
from convrag.synthesis.mtr.assemble import (
    INCOMPLETE,
    NO_TURN,
    ODD,
    TURN_SCHEMA,
    Assemble,
    assemble,
    paper_pair,
    splice,
    split,
    turn_rows,
)

# topic -> (6 passages (title, text), 6 turns (original question, final question, answer, gold passage index))
TOPICS: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str, str, int]]]] = {
    "etna": ([
        ("Mount Etna", "Mount Etna is an active stratovolcano on the east coast of Sicily, about 3,300 metres high."),
        ("1669 eruption", "In 1669 lava from a flank fissure of Etna overran the walls of Catania."),
        ("Stratovolcano", "A stratovolcano is a steep cone of alternating lava, ash and rock layers."),
        ("Volcano monitoring", "Seismometers, GPS and gas sensors watch volcanoes for signs of rising magma."),
        ("Tephra", "Tephra is rock thrown into the air by an eruption, from fine ash to large bombs."),
        ("Lava tube", "A lava tube is a cave left behind when a crusted-over lava flow drains."),
    ], [
        ("How tall is Mount Etna?", "How tall is Mount Etna?", "About 3,300 metres, changing with eruptions.", 0),
        ("What kind of volcano is Mount Etna?", "what kind of volcano is it", "A stratovolcano.", 2),
        ("Has Mount Etna ever destroyed a town?", "has it ever wrecked a town", "In 1669 lava reached Catania.", 1),
        ("How do scientists know Etna is about to erupt?", "how do they know its about to blow",
         "They track small earthquakes, swelling and gases.", 3),
        ("What is the material thrown into the air by Etna called?", "whats the stuff it throws up called",
         "Tephra, from ash to bombs.", 4),
        ("Can lava from Etna form caves?", "can lava make caves", "Yes, drained flows leave lava tubes.", 5),
    ]),
    "lighthouse": ([
        ("Lighthouse", "A lighthouse is a tower with a lamp that guides ships along dangerous coasts."),
        ("Fresnel lens", "The Fresnel lens, invented in 1822, focuses a lighthouse beam with concentric rings."),
        ("Pharos of Alexandria", "The Pharos of Alexandria was a lighthouse of the third century BC."),
        ("Lighthouse keeper", "Keepers trimmed wicks and wound clockwork until automation in the 20th century."),
        ("Bell Rock Lighthouse", "Bell Rock, off Scotland, is the oldest surviving sea-washed lighthouse, from 1810."),
        ("Light characteristic", "Each lighthouse flashes its own pattern so sailors can tell them apart."),
    ], [
        ("What is a lighthouse for?", "What is a lighthouse for?", "It guides ships near dangerous coasts.", 0),
        ("Which lens do lighthouses use?", "what lens do they use", "The Fresnel lens, from 1822.", 1),
        ("Which was the first famous lighthouse?", "which one was first", "The Pharos of Alexandria.", 2),
        ("What did lighthouse keepers do?", "what did keepers do all day", "Trimmed wicks, wound clockwork.", 3),
        ("What is the oldest sea-washed lighthouse?", "oldest one standing in the sea?", "Bell Rock, 1810.", 4),
        ("How do sailors tell lighthouses apart?", "how do sailors tell them apart", "By their flash pattern.", 5),
    ]),
    "sourdough": ([
        ("Sourdough", "Sourdough rises with wild yeasts and lactic acid bacteria instead of baker's yeast."),
        ("Sourdough starter", "A starter is flour and water fermented by wild microbes and fed regularly."),
        ("Levain", "A levain is starter built up a few hours before mixing the dough."),
        ("Autolyse", "Autolyse rests flour and water for 20 to 60 minutes before the other ingredients."),
        ("Scoring (baking)", "Scoring the loaf controls where it opens in the oven."),
        ("Dutch oven baking", "A preheated lidded cast-iron pot traps steam around the loaf."),
    ], [
        ("What makes sourdough different from other bread?", "What makes sourdough different from other bread?",
         "Wild yeasts and lactic acid bacteria.", 0),
        ("How do I make a sourdough starter?", "how do i make the starter", "Ferment flour and water, feed it.", 1),
        ("Is a levain the same as a starter?", "is a levain the same thing", "It is starter built up to bake.", 2),
        ("What does autolyse mean in a sourdough recipe?", "what does autolyse mean", "Resting flour and water.", 3),
        ("Why do bakers cut the top of the loaf?", "why cut the top", "To control where it opens.", 4),
        ("Do I need a special oven for sourdough?", "do i need a special oven", "A lidded cast-iron pot works.", 5),
    ]),
    "bees": ([
        ("Honey bee", "A honey bee colony has one queen, thousands of workers and some drones."),
        ("Waggle dance", "Foragers dance to show the direction and distance of flowers."),
        ("Queen bee", "A queen is raised on royal jelly and lays up to 2,000 eggs a day."),
        ("Honey", "Bees turn nectar into honey with enzymes and by fanning off water."),
        ("Beeswax", "Workers secrete wax from glands on the abdomen to build comb."),
        ("Varroa destructor", "Varroa mites feed on bees and spread viruses between them."),
    ], [
        ("How many bees live in a colony?", "How many bees live in a colony?", "One queen, thousands of workers.", 0),
        ("How do bees tell each other where flowers are?", "how do they show where flowers are",
         "With the waggle dance.", 1),
        ("How does a bee become a queen?", "how does one become queen", "She is fed royal jelly.", 2),
        ("How is honey made?", "how is honey made", "Nectar, enzymes and fanning.", 3),
        ("Where does beeswax come from?", "where does the wax come from", "Glands on the workers' abdomen.", 4),
        ("What is killing honey bee colonies?", "whats killing them", "Varroa mites, mostly.", 5),
    ]),
}  # fmt: skip
KEYS = list(TOPICS)


def record(i: int, key: str | None = None, turns: int = 6, complete: bool = True) -> dict[str, Any]:
    """Conversation record ``c{i:06d}`` on topic ``key`` (default: the i-th topic, cycling), cluster i."""
    key = key or KEYS[i % len(KEYS)]
    doc_ids = [f"d{i:02d}-{j}" for j in range(6)]
    made = [{"turn": t, "question": q, "original_question": orig, "answer": a, "gold": doc_ids[g],
             "drawn": doc_ids[:5] if g < 5 else doc_ids[1:], "prompt_tokens": 800 + 50 * t + i,
             "completion_tokens": 40 + t, "polish": "first turn" if t == 1 else "rewritten"}
            for t, (orig, q, a, g) in enumerate(TOPICS[key][1][:turns], start=1)]  # fmt: skip
    return {"id": f"c{i:06d}", "cluster_idx": i, "doc_ids": doc_ids, "turns": made, "complete": complete,
            "stop_reason": "" if complete else f"questioner unparsable at turn {turns + 1}"}


def documents(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The documents.py rows of the records' pools (document_idx in order of appearance)."""
    docs: dict[str, dict[str, Any]] = {}
    for r in records:
        key = KEYS[r["cluster_idx"] % len(KEYS)]
        for doc_id, (title, text) in zip(r["doc_ids"], TOPICS[key][0], strict=True):
            docs[doc_id] = {"document_idx": len(docs), "id": doc_id, "url": "", "title": title, "text": text,
                            "naive_quality": -1, "edu_quality": float("nan")}
    return docs


def exchange(r: dict[str, Any], t: int) -> list[dict[str, str]]:
    turn = r["turns"][t - 1]
    return [{"role": "user", "content": turn["question"]}, {"role": "assistant", "content": turn["answer"]}]


# -- splice / paper pair --------------------------------------------------------------------------------------
def test_splice_history_gold_pool_and_cluster_of_both_children() -> None:
    etna, bees = record(0, "etna"), record(3, "bees")
    docs = documents([etna, bees])
    for front, back in ((etna, bees), (bees, etna)):
        c = splice(front, back, 3)
        assert c["id"] == f"{front['id']}+{back['id']}" and c["switch_turn"] == 3
        assert c["sources"] == [front["id"], back["id"]] and [t["turn"] for t in c["turns"]] == [1, 2, 3, 4, 5, 6]
        for t in c["turns"]:
            src = front if t["turn"] <= 3 else back
            assert (t["gold"], t["doc_ids"], t["cluster_idx"], t["source"]) == (
                src["turns"][t["turn"] - 1]["gold"], src["doc_ids"], src["cluster_idx"], src["id"])
            assert t["question"] == src["turns"][t["turn"] - 1]["question"]
        rows = turn_rows(c, docs)
        # turn 5: the front's first 3 exchanges, then the back's turns 4 and 5
        expected = [m for t in (1, 2, 3) for m in exchange(front, t)] + exchange(back, 4) + exchange(back, 5)
        assert rows[4]["messages"] == expected
        assert rows[3]["messages"][:6] == [m for t in (1, 2, 3) for m in exchange(front, t)]
        assert {r["cluster_idx"] for r in rows[:3]} == {front["cluster_idx"]}
        assert {r["cluster_idx"] for r in rows[3:]} == {back["cluster_idx"]}
        assert rows[3]["ground_truth_ctx"]["id"] == back["turns"][3]["gold"]
        assert [d["id"] for d in rows[3]["ctxs"]] == back["doc_ids"]
        assert {r["switch_turn"] for r in rows} == {3}


def test_splice_rejects_a_switch_point_outside_the_conversation() -> None:
    a, b = record(0), record(1)
    for k in (0, 6, 7):
        with pytest.raises(ValueError, match="cannot splice"):
            splice(a, b, k)
    with pytest.raises(ValueError, match="cannot splice"):
        splice(record(0, turns=2, complete=False), b, 3)  # the front has only 2 turns


def test_paper_pair_appends_b_after_all_of_a() -> None:
    a, b = record(0, "etna", turns=4), record(1, "lighthouse", turns=4)
    c = paper_pair(a, b)
    assert c["id"] == "c000000+c000001" and c["switch_turn"] == 4 and c["unit"] == c["id"]
    assert [t["turn"] for t in c["turns"]] == list(range(1, 9))
    rows = turn_rows(c, documents([a, b]))
    assert rows[4]["messages"] == [m for t in (1, 2, 3, 4) for m in exchange(a, t)] + exchange(b, 1)
    assert rows[7]["messages"][8:] == [m for t in (1, 2, 3, 4) for m in exchange(b, t)]
    assert [r["cluster_idx"] for r in rows] == [0] * 4 + [1] * 4
    assert rows[5]["ground_truth_ctx"]["id"] == b["turns"][1]["gold"]


# -- assemble -------------------------------------------------------------------------------------------------
def _switched(convs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in convs if c["switch_turn"] != -1]


@pytest.mark.parametrize(("ratio", "n_switched"), [(0, 0), (0.5, 4), (0.3, 2), (0.2, 2), (1, 10), (0.95, 8)])
def test_assemble_switches_an_even_share(ratio: float, n_switched: int) -> None:
    records = [record(i) for i in range(10)]
    convs, dropped = assemble(records, switch_ratio=ratio, seed=7)
    assert not dropped and len(convs) == 10
    switched = _switched(convs)
    assert len(switched) == n_switched
    by_id = {c["id"]: c for c in convs}
    for c in switched:  # both children of every pair: the same K, the same unit, swapped sources
        front, back = c["sources"]
        twin = by_id[f"{back}+{front}"]
        assert twin["switch_turn"] == c["switch_turn"] and twin["unit"] == c["unit"]
    sources = Counter(s for c in switched for s in c["sources"])
    assert all(n == 2 for n in sources.values())  # each source conversation is the front once and the back once
    # every conversation keeps its place: the one at position i is whole or a child whose front is record i
    assert [c["sources"][0] for c in convs] == [r["id"] for r in records]
    assert all(c["unit"] == c["id"] and c["sources"] == [c["id"]] for c in convs if c["switch_turn"] == -1)


def test_switch_points_cover_two_to_t_minus_one() -> None:
    records = [record(i) for i in range(4)]
    seen = Counter(c["switch_turn"] for seed in range(150)
                   for c in _switched(assemble(records, switch_ratio=1, seed=seed)[0]))  # fmt: skip
    assert set(seen) == {2, 3, 4, 5}
    assert min(seen.values()) > 40  # 600 switched conversations over 4 values: roughly uniform


def test_incomplete_conversations_are_never_spliced() -> None:
    records = [record(i) for i in range(6)] + [record(i, turns=3, complete=False) for i in range(6, 10)]
    records.append(record(10, turns=0, complete=False))  # failed at turn 1: nothing to keep
    for seed in range(20):
        convs, dropped = assemble(records, switch_ratio=1, seed=seed)
        assert dropped == Counter({NO_TURN: 1})
        assert {s for c in _switched(convs) for s in c["sources"]} == {f"c{i:06d}" for i in range(6)}
        kept = {c["id"]: c for c in convs if c["switch_turn"] == -1}
        assert set(kept) == {f"c{i:06d}" for i in range(6, 10)}
        assert all(len(c["turns"]) == 3 and not c["complete"] for c in kept.values())


def test_assemble_is_deterministic_per_seed() -> None:
    records = [record(i) for i in range(12)]
    runs = {seed: assemble(records, seed=seed)[0] for seed in range(6)}
    assert assemble(records, seed=3)[0] == runs[3]
    layouts = {tuple((c["id"], c["switch_turn"]) for c in convs) for convs in runs.values()}
    assert len(layouts) > 1


def test_paper_layout_pairs_complete_conversations_and_counts_drops() -> None:
    records = [record(i, turns=4) for i in range(5)] + [record(5, turns=2, complete=False),
                                                         record(6, turns=0, complete=False)]  # fmt: skip
    convs, dropped = assemble(records, layout="paper", seed=1)
    assert dropped == Counter({INCOMPLETE: 2, ODD: 1})
    assert len(convs) == 2
    used = [s for c in convs for s in c["sources"]]
    assert len(used) == len(set(used)) == 4 and set(used) <= {f"c{i:06d}" for i in range(5)}
    assert all(c["switch_turn"] == 4 and len(c["turns"]) == 8 and c["unit"] == c["id"] for c in convs)
    assert assemble(records, layout="paper", seed=1)[0] == convs
    with pytest.raises(ValueError, match="layout"):
        assemble(records, layout="mixed")


# -- split ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "size", "fraction", "expected"), [
    (10, 1000, 0.2, 2), (10, 1, 0.5, 1), (4, 1000, 0.2, 1), (10, 1000, 1.0, 10), (25, 3, 0.2, 3), (4, 0, 0.5, 0)])
def test_split_sizes_without_pairs(n: int, size: int, fraction: float, expected: int) -> None:
    convs, _ = assemble([record(i) for i in range(n)], switch_ratio=0)
    test, train = split(convs, test_size=size, test_fraction=fraction, seed=5)
    assert len(test) == expected and len(train) == n - expected
    assert {c["id"] for c in test}.isdisjoint(c["id"] for c in train)
    ids = [c["id"] for c in convs]  # both keep the assembled order
    assert [c["id"] for c in test] == [i for i in ids if i in {c["id"] for c in test}]


def test_split_keeps_the_children_of_a_pair_together() -> None:
    convs, _ = assemble([record(i) for i in range(10)], switch_ratio=1, seed=2)
    for seed in range(10):
        test, train = split(convs, test_fraction=0.3, seed=seed)
        assert len(test) == 4  # target 3, reached by the second whole pair
        for part in (test, train):
            assert all(n == 2 for n in Counter(c["unit"] for c in part).values())
    mixed, _ = assemble([record(i) for i in range(10)], switch_ratio=0.5, seed=2)
    sizes = {len(split(mixed, test_fraction=0.3, seed=s)[0]) for s in range(30)}
    assert sizes <= {3, 4} and len(sizes) == 2  # passes the target by one only when a pair comes last


def test_split_is_deterministic() -> None:
    convs, _ = assemble([record(i) for i in range(40)], seed=0)
    first = split(convs, test_fraction=0.25, seed=11)
    assert split(convs, test_fraction=0.25, seed=11) == first
    others = {tuple(c["id"] for c in split(convs, test_fraction=0.25, seed=s)[0]) for s in range(5)}
    assert len(others) > 1


# -- rows -----------------------------------------------------------------------------------------------------
def test_turn_rows_messages_gold_and_pool() -> None:
    r = record(2, "sourdough")
    docs = documents([r])
    conv, _ = assemble([r], switch_ratio=0)
    rows = turn_rows(conv[0], docs)
    assert [row["turn"] for row in rows] == list(range(1, 7))
    for t, row in enumerate(rows, start=1):
        assert len(row["messages"]) == 2 * t
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"] * t
        assert row["messages"][-2]["content"] == r["turns"][t - 1]["question"]
        assert row["original_query"] == r["turns"][t - 1]["original_question"]
        assert row["ground_truth_ctx"]["document_idx"] == row["ground_truth_document_idx"]
        assert row["ground_truth_ctx"] in row["ctxs"] and row["ground_truth_ctx"]["id"] == r["turns"][t - 1]["gold"]
        assert [d["document_idx"] for d in row["ctxs"]] == [docs[d]["document_idx"] for d in r["doc_ids"]]
        assert row["switch_turn"] == -1 and row["conversation_id"] == "c000002" and row["cluster_idx"] == 2
        assert set(row) == set(TURN_SCHEMA.names)
    assert (rows[2]["original_query"], rows[2]["messages"][-2]["content"]) == (
        "Is a levain the same as a starter?", "is a levain the same thing")
    bad = {**conv[0], "turns": [{**conv[0]["turns"][0], "gold": "d99-0"}]}
    with pytest.raises(ConvragError, match="not in the turn's pool"):
        turn_rows(bad, docs)


# -- the stage ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{"layout": "mixed"}, {"switch_ratio": 1.5}, {"switch_ratio": "half"},
                                    {"test_size": -1}, {"test_size": 2.5}, {"test_fraction": -0.1}])  # fmt: skip
def test_stage_options_are_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConvragError, match=f"assemble option {next(iter(kwargs))}"):
        Assemble(**kwargs)


def _run_folder(tmp: Path, records: list[dict[str, Any]], stage: str = "converse") -> tuple[Path, Path]:
    """OUT with a finished ``stage`` holding ``records``, and a JSONL corpus (pool documents + 2 others)."""
    out = tmp / "out"
    (out / stage).mkdir(parents=True, exist_ok=True)
    write_shard(out / stage / "part-00000.parquet", records, {"records_in": len(records)})
    (out / stage / "report.json").write_text(json.dumps({"stage": stage, "records_in": len(records),
                                                         "records_out": len(records)}))  # fmt: skip
    docs = documents(records)
    lines = [{"_id": "x-lamp", "title": "Oil lamp", "text": "An oil lamp burns fuel through a wick."}]
    lines += [{"_id": d["id"], "title": d["title"], "text": d["text"]} for d in docs.values()]
    lines.append({"_id": "x-chess", "title": "Chess", "text": "Chess is a board game for two players."})
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return out, corpus


def _run(out: Path, stage: Assemble, seed: int = 0):
    return stage.run(StageContext(out=out, folder=out / "assemble", seed=seed, progress=False))


def _load(folder: Path, config: str, split_name: str = "test") -> list[dict[str, Any]]:
    return datasets.load_dataset(str(folder), config, split=split_name).to_list()


def test_stage_end_to_end_through_the_mtr_bench_builder(tmp_path: Path) -> None:
    records = [record(i) for i in range(8)] + [record(8, turns=4, complete=False)]
    out, corpus = _run_folder(tmp_path, records)
    stage = Assemble(str(corpus), switch_ratio=0.5, test_fraction=0.5)
    assert stage.estimate(StageContext(out=out, folder=out / "assemble", seed=0)).records == 9
    (out / "assemble").mkdir()
    report = _run(out, stage)
    expected, _ = assemble(records, switch_ratio=0.5, seed=0)
    test, train = split(expected, test_fraction=0.5, seed=0)
    assert (report.records_in, report.records_out, report.dropped) == (9, 9, {})
    assert report.figures == {"test_conversations": len(test), "train_conversations": len(train),
                              "test_turns": sum(len(c["turns"]) for c in test),
                              "train_turns": sum(len(c["turns"]) for c in train), "spliced_pairs": 2,
                              "corpus_documents": 9 * 6 + 2}  # fmt: skip
    assert len(test) in (4, 5) and len(test) + len(train) == 9  # target floor(9 * 0.5) = 4, by whole units
    table = pq.read_table(out / "assemble" / "test.parquet")
    assert table.schema.remove_metadata() == TURN_SCHEMA
    corpus_rows = pq.read_table(out / "assemble" / "corpus.parquet").to_pylist()
    assert corpus_rows[0]["id"] == "x-lamp" and corpus_rows[-1]["id"] == "x-chess"
    index = {row["id"]: i for i, row in enumerate(corpus_rows)}

    built = tmp_path / "built"
    assert main(["build", "mtr-bench", "--source", str(out / "assemble"), "--out", str(built)]) == 0
    for name, part in (("test", test), ("train", train)):
        queries = {q["_id"]: q for q in _load(built, "queries", name)}
        qrels = {q["query-id"]: q["corpus-id"] for q in _load(built, "qrels", name)}
        pools = {q["query-id"]: q["corpus-ids"] for q in _load(built, "candidates", name)}
        assert len(queries) == len(qrels) == sum(len(c["turns"]) for c in part)
        for c in part:
            k = c["switch_turn"]
            for t in c["turns"]:
                qid = f"{c['id']}:{t['turn']}"
                q = queries[qid]
                assert (q["turn"], q["text"], q["cluster_idx"], q["switch_turn"]) == (
                    t["turn"], t["question"], t["cluster_idx"], k)
                assert qrels[qid] == str(index[t["gold"]])
                assert pools[qid] == [str(index[d]) for d in t["doc_ids"]]
                phase = ("no switch" if k == -1 else "before switch" if t["turn"] <= k
                         else "first turn after switch" if t["turn"] == k + 1 else "after switch")
                assert q["switch_phase"] == phase
                assert len(q["history"]) == 2 * (t["turn"] - 1)
    phases = Counter(q["switch_phase"] for name in ("test", "train") for q in _load(built, "queries", name))
    assert phases["first turn after switch"] == 4 and phases["no switch"] == 6 * 4 + 4  # 5 whole conversations
    manifest = read_manifest(built)
    counts = manifest["report"]["counts"]
    assert counts["conversations: test"] == len(test) and counts["conversations: train"] == len(train)
    assert not [event for event in counts if "differs" in event or "cluster_idx" in event or "unlike" in event]
    assert len(_load(built, "corpus")) == 56


def test_stage_reads_polish_once_finished_and_skips_an_empty_train_split(tmp_path: Path) -> None:
    records = [record(i) for i in range(4)]
    out, corpus = _run_folder(tmp_path, records)
    polished = [{**r, "turns": [{**t, "question": t["question"].upper()} for t in r["turns"]]} for r in records]
    (out / "polish").mkdir()
    write_shard(out / "polish" / "part-00000.parquet", polished, {"records_in": 4})
    stage = Assemble(str(corpus), switch_ratio=1, test_fraction=1.0)
    for name in ("early", "assemble"):
        (out / name).mkdir()
        report = stage.run(StageContext(out=out, folder=out / name, seed=0, progress=False))
        rows = pq.read_table(out / name / "test.parquet").to_pylist()
        assert len(rows) == 24 and all(r["switch_turn"] in range(2, 6) for r in rows)
        # polish without its report is unfinished: the converse records are read
        assert all(r["messages"][-2]["content"].isupper() == (name == "assemble") for r in rows)
        (out / "polish" / "report.json").write_text("{}")
    assert report.figures["train_conversations"] == 0 and not (out / "assemble" / "train.parquet").exists()
    before = (out / "assemble" / "corpus.parquet").stat().st_mtime_ns
    assert _run(out, stage).figures == report.figures  # a rerun finds its files and keeps them
    assert (out / "assemble" / "corpus.parquet").stat().st_mtime_ns == before
    empty = tmp_path / "empty"
    with pytest.raises(ConvragError, match="'converse' has not finished"):
        Assemble(str(corpus)).run(StageContext(out=empty, folder=empty / "assemble", seed=0, progress=False))
    assert Assemble().estimate(StageContext(out=empty, folder=empty / "assemble", seed=0)).records is None
