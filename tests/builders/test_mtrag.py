"""MTRAG / MTRAG-UN builders on the real release in ../shared/data/mtrag (read in place)."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import datasets
import pytest

from convrag.builders.mtrag import MTRAG
from convrag.builders.mtrag_source import (
    normalize_domain,
    normalize_task_id,
    split_task_id,
    user_prefix_texts,
)
from convrag.builders.mtrag_un import MTRAGUN
from convrag.core.errors import DataError
from convrag.hub.export import export_benchmark, read_manifest
from tests.conftest import DATA

SRC = DATA / "mtrag"
RT = SRC / "mtrag-human" / "retrieval_tasks"
DOMAIN_QUERIES = {"clapnq": 208, "cloud": 188, "fiqa": 180, "govt": 201}


def _load(folder, config):
    return datasets.load_dataset(str(folder), config, split="test")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both benchmarks exported once from the staged release (every config the source can build)."""
    out = tmp_path_factory.mktemp("mtrag")
    options = {"source": str(SRC)}
    mtrag = export_benchmark("mtrag", out / "mtrag", configs=MTRAG.default_configs(options), options=options)
    un = export_benchmark("mtrag-un", out / "un", configs=MTRAGUN.default_configs(options), options=options)
    return {"mtrag": mtrag, "un": un}


def test_every_config_loads_with_its_counts(built):
    for summary in built.values():
        for config, per_split in summary.rows.items():
            assert len(_load(summary.out_dir, config)) == per_split["test"], config
    # corpora are not staged: every config but the full corpora is built, for both benchmarks
    assert set(built["mtrag"].rows) == {c.name for c in MTRAG.BUILDER_CONFIGS if c.view != "corpus"}
    assert set(built["un"].rows) == {c.name for c in MTRAGUN.BUILDER_CONFIGS if c.view != "corpus"}
    assert read_manifest(built["mtrag"].out_dir)["benchmark"] == "mtrag"


def test_mtrag_counts(built):
    rows = built["mtrag"].rows
    assert rows["all-conversations"]["test"] == 110
    assert rows["all-tasks"]["test"] == 842
    for view in ("lastturn", "questions", "rewrite"):
        assert rows[f"all-{view}"]["test"] == 777
        for d, n in DOMAIN_QUERIES.items():
            assert rows[f"{d}-{view}"]["test"] == n
    tasks = _load(built["mtrag"].out_dir, "all-tasks")
    assert Counter(tasks["answerability"]) == {"ANSWERABLE": 709, "PARTIAL": 68, "UNANSWERABLE": 55,
                                               "CONVERSATIONAL": 10}  # fmt: skip
    assert sum(tasks["scored"]) == 777
    assert Counter(d for d, s in zip(tasks["domain"], tasks["scored"], strict=True) if s) == DOMAIN_QUERIES
    # released qrels file sizes (minus header) and their agreement with the latest relevance votes
    for d in DOMAIN_QUERIES:
        lines = (RT / d / "qrels" / "dev.tsv").read_text().splitlines()
        assert rows[f"{d}-qrels"]["test"] == len(lines) - 1
    report = built["mtrag"].report["counts"]
    assert report["scored tasks whose qrels equal the passages last judged relevant"] == 777
    assert "tasks whose qrels disagree with answerability" not in report


def test_mtrag_spot_check_conversation_and_tasks(built):
    folder = built["mtrag"].out_dir
    conv = next(r for r in _load(folder, "clapnq-conversations") if r["conversation_id"].startswith("dd6b6ffd"))
    assert conv["conversation_id"] == "dd6b6ffd177f2b311abe676261279d2f"
    assert conv["collection"] == "mt-rag-clapnq-elser-512-100-20240503" and conv["n_turns"] == 8
    first, answer = conv["turns"][0], conv["turns"][1]
    assert (first["turn"], first["speaker"], first["text"]) == (
        1,
        "user",
        "where do the arizona cardinals play this week",
    )
    assert first["answerability"] == "UNANSWERABLE" and first["multi_turn"] == "N/A"
    assert first["question_type"] == ["Factoid"]
    assert answer["speaker"] == "agent" and answer["turn"] == 1
    cited = {c["document_id"]: c for c in answer["contexts"]}
    table = cited["822086267_7384-8758-0-1374"]
    assert table["title"] == "2017 Arizona Cardinals season" and table["score"] == pytest.approx(18.35049)
    assert {(f["value"], f["timestamp"]) for f in table["feedback"]} == {("yes", 1724708754), ("no", 1726476057)}
    assert table["relevant"] == "no"  # the later vote wins
    assert cited["822086267_6698-7277-0-579"]["relevant"] == "no"

    tasks = {t["task_id"]: t for t in _load(folder, "clapnq-tasks")}
    t1, t2 = tasks["dd6b6ffd177f2b311abe676261279d2f<::>1"], tasks["dd6b6ffd177f2b311abe676261279d2f<::>2"]
    assert not t1["scored"] and t1["relevant_passages"] == []
    assert t2["question"] == "Do the Arizona Cardinals play outside the US?"
    assert [m["speaker"] for m in t2["input"]] == ["user", "agent", "user"]
    assert t2["input"][1]["text"] == "I'm sorry, but I don't have the answer to your question."
    assert t2["targets"][0]["text"].startswith("The Arizona Cardinals do play outside the United States.")
    assert t2["scored"] and t2["answerability"] == "ANSWERABLE" and t2["multi_turn"] == "Clarification"
    assert t2["question_type"] == ["Explanation"] and t2["standalone"] == ""
    assert [p["document_id"] for p in t2["relevant_passages"]] == [  # released qrels, in file order
        "822086267_7384-8758-0-1374", "822086267_6698-7277-0-579", "822086267_453-961-0-508"]  # fmt: skip
    assert all(p["text"] for p in t2["relevant_passages"])
    queries = {v: {q["_id"]: q for q in _load(folder, f"clapnq-{v}")} for v in ("lastturn", "rewrite")}
    assert queries["lastturn"][t2["task_id"]]["text"] == "|user|: Do the Arizona Cardinals play outside the US?"
    assert queries["rewrite"][t2["task_id"]]["text"] == (
        "|user|: Where do the Arizona Cardinals play, regardless of location, this week?"
    )
    assert queries["lastturn"][t2["task_id"]]["answerability"] == "ANSWERABLE"


def test_query_views_equal_release_files_and_derivation(built):
    folder = built["mtrag"].out_dir
    tasks = {t["task_id"]: t for t in _load(folder, "all-tasks")}
    for d in DOMAIN_QUERIES:
        for view in ("lastturn", "questions", "rewrite"):
            released = [json.loads(x) for x in (RT / d / f"{d}_{view}.jsonl").read_text().splitlines() if x]
            built_rows = _load(folder, f"{d}-{view}")
            assert list(zip(built_rows["_id"], built_rows["text"], strict=True)) == [
                (r["_id"], r["text"]) for r in released]  # fmt: skip
            if view != "rewrite":  # our derivation (used for MTRAG-UN) reproduces the released text exactly
                position = 0 if view == "lastturn" else 1
                for r in released:
                    users = [m["text"] for m in tasks[r["_id"]]["input"] if m["speaker"] == "user"]
                    assert user_prefix_texts(users)[position] == r["text"]


def test_sample_task_input_matches_our_tasks(built):
    tasks = {t["task_id"]: t for t in _load(built["mtrag"].out_dir, "all-tasks")}
    sample = SRC / "scripts" / "evaluation" / "sample_data" / "taskac_input.jsonl"
    for line in sample.read_text().splitlines():
        item = json.loads(line)
        task = tasks[normalize_task_id(item["task_id"])]
        assert [(m["speaker"], m["text"]) for m in task["input"]] == [(m["speaker"], m["text"]) for m in item["input"]]
        assert task["collection"] == item["Collection"]


def test_mtrag_un_counts_and_record(built):
    folder = built["un"].out_dir
    tasks = _load(folder, "all-tasks")
    assert len(tasks) == 507
    assert Counter(tasks["answerability"]) == {"ANSWERABLE": 285, "PARTIAL": 47, "UNANSWERABLE": 97,
                                               "UNDERSPECIFIED": 78}  # fmt: skip
    assert Counter(tasks["domain"]) == {"govt": 157, "clapnq": 142, "cloud": 131, "fiqa": 77}
    assert Counter(tasks["multi_turn"]) == {"Follow-up": 330, "N/A": 103, "Clarification": 74}
    assert Counter(d for d, s in zip(tasks["domain"], tasks["scored"], strict=True) if s) == {
        "clapnq": 83, "cloud": 86, "fiqa": 58, "govt": 105}  # fmt: skip
    assert all(s == (a in ("ANSWERABLE", "PARTIAL")) for s, a in zip(tasks["scored"], tasks["answerability"],
                                                                      strict=True))  # fmt: skip
    assert built["un"].rows["all-lastturn"]["test"] == 507 and built["un"].rows["all-qrels"]["test"] == 851
    assert built["un"].report["counts"]["collection names normalised: ibmcloud -> cloud"] == 131
    t = next(r for r in tasks if r["task_id"] == "18ef26058d321c5d96ca3ebf8117789e<::>7")
    assert (t["conversation_id"], t["turn"], t["domain"]) == ("18ef26058d321c5d96ca3ebf8117789e", 7, "fiqa")
    assert t["collection"] == "mt-rag-fiqa-beir-elser-512-100-20240501"
    assert t["answerability"] == "ANSWERABLE" and t["multi_turn"] == "Clarification"
    assert t["question_type"] == ["Opinion", "Summarization"]
    assert t["input"][0]["text"] == "How to pay with cash when car shopping?" and len(t["input"]) == 13
    assert t["targets"][0]["text"].startswith("The longevity of EV batteries can indeed impact")
    assert [c["document_id"] for c in t["contexts"]][:2] == ["162428-0-349", "181880-0-671"]
    assert {p["document_id"] for p in t["relevant_passages"]} == {c["document_id"] for c in t["contexts"]}
    q = next(r for r in _load(folder, "fiqa-lastturn") if r["_id"] == t["task_id"])
    assert q["text"] == f"|user|: {t['question']}" and q["answerability"] == "ANSWERABLE"


def test_normalisation_of_names_and_ids():
    for name in ("clapnq", "mt-rag-clapnq-elser-512-100-20240503", "CLAPNQ"):
        assert normalize_domain(name) == "clapnq"
    for name in ("cloud", "ibmcloud", "mt-rag-ibmcloud-elser-512-100-20240502"):
        assert normalize_domain(name) == "cloud"
    assert normalize_domain("mt-rag-fiqa-beir-elser-512-100-20240501") == "fiqa"
    assert normalize_domain("mt-rag-govt-elser-512-100-20240611") == "govt"
    with pytest.raises(DataError, match="unknown MTRAG collection 'banking'"):
        normalize_domain("banking")
    assert normalize_task_id("abc::3") == normalize_task_id("abc<::>3") == "abc<::>3"
    assert split_task_id("abc<::>12") == ("abc", 12)
    for bad in ("abc", "abc::x", "::3", "a<::>1<::>2"):
        with pytest.raises(DataError, match="malformed task id"):
            normalize_task_id(bad, "f.jsonl", 4)


def _un_copy(tmp_path, edit):
    """A copy of the MTRAG-UN files with the reference file rewritten by ``edit(list of dicts)``."""
    root = tmp_path / "src"
    shutil.copytree(SRC / "mtragun-human", root / "mtragun-human")
    ref = root / "mtragun-human" / "generation_tasks" / "reference.jsonl"
    rows = [json.loads(x) for x in ref.read_text().splitlines()]
    ref.write_text("\n".join(edit(rows)) + "\n")
    return root


def test_un_accepts_double_colon_ids_and_long_collection_names(tmp_path):
    def edit(rows):
        for r in rows[:5]:
            r["task_id"] = r["task_id"].replace("<::>", "::")
            r["Collection"] = {"ibmcloud": "mt-rag-ibmcloud-elser-512-100-20240502"}.get(
                r["Collection"], r["Collection"]
            )
        return [json.dumps(r) for r in rows]

    root = _un_copy(tmp_path, edit)
    builder = MTRAGUN(config_name="all-tasks", source=str(root), cache_dir=str(tmp_path / "cache"))
    builder.download_and_prepare()
    tasks = builder.as_dataset(split="test")
    assert len(tasks) == 507 and all("<::>" in t for t in tasks["task_id"])
    assert builder.report.counts["task ids normalised to '<::>'"] == 5
    assert Counter(tasks["domain"])["cloud"] == 131


def test_un_errors_name_file_and_line(tmp_path):
    root = _un_copy(tmp_path, lambda rows: [json.dumps(rows[0]), "{not json", *map(json.dumps, rows[1:])])
    with pytest.raises(DataError, match=r"reference.jsonl:2: invalid JSON"):
        MTRAGUN(config_name="all-tasks", source=str(root), cache_dir=str(tmp_path / "c1")).download_and_prepare()
    dup = _un_copy(tmp_path / "b", lambda rows: [json.dumps(r) for r in [rows[0], *rows]])
    with pytest.raises(DataError, match=r"reference.jsonl:2: duplicate task id"):
        MTRAGUN(config_name="all-tasks", source=str(dup), cache_dir=str(tmp_path / "c2")).download_and_prepare()
    gone = _un_copy(tmp_path / "c", lambda rows: [json.dumps({k: v for k, v in r.items() if k != "targets"})
                                                  for r in rows])  # fmt: skip
    with pytest.raises(DataError, match=r"reference.jsonl:1: missing field 'targets'"):
        MTRAGUN(config_name="all-tasks", source=str(gone), cache_dir=str(tmp_path / "c3")).download_and_prepare()


def _mtrag_copy(tmp_path, domains=("clapnq", "cloud", "fiqa", "govt")):
    root = tmp_path / "src"
    (root / "mtrag-human").mkdir(parents=True)
    shutil.copytree(SRC / "mtrag-human" / "conversations", root / "mtrag-human" / "conversations")
    for d in domains:
        shutil.copytree(RT / d, root / "mtrag-human" / "retrieval_tasks" / d)
    return root


def test_mtrag_errors_name_file_and_line(tmp_path):
    root = _mtrag_copy(tmp_path)
    qfile = root / "mtrag-human" / "retrieval_tasks" / "fiqa" / "fiqa_rewrite.jsonl"
    lines = qfile.read_text().splitlines()
    qfile.write_text("\n".join([lines[0], lines[0], *lines[1:]]) + "\n")
    with pytest.raises(DataError, match=r"fiqa_rewrite.jsonl:2: duplicate query id"):
        MTRAG(config_name="all-tasks", source=str(root), cache_dir=str(tmp_path / "c1")).download_and_prepare()
    qfile.write_text("\n".join(lines) + "\n")
    qrels = root / "mtrag-human" / "retrieval_tasks" / "govt" / "qrels" / "dev.tsv"
    qrels.write_text(qrels.read_text() + "deadbeef<::>1\tdoc\t1\n")
    with pytest.raises(DataError, match=r"dev.tsv:523: qrels name unknown query 'deadbeef<::>1'"):
        MTRAG(config_name="govt-qrels", source=str(root), cache_dir=str(tmp_path / "c2")).download_and_prepare()


def test_mtrag_with_some_domains_missing(tmp_path):
    root = _mtrag_copy(tmp_path, domains=("clapnq", "govt"))
    options = {"source": str(root)}
    names = MTRAG.default_configs(options)
    assert "clapnq-rewrite" in names and "fiqa-rewrite" not in names and "all-rewrite" not in names
    assert "fiqa-tasks" in names and "all-conversations" in names
    builder = MTRAG(config_name="all-tasks", source=str(root), cache_dir=str(tmp_path / "c"))
    builder.download_and_prepare()
    tasks = builder.as_dataset(split="test")
    assert len(tasks) == 842
    assert sum(tasks["scored"]) == 208 + 201  # only domains with qrels have relevant passages
    assert builder.report.counts["conversation ids synthesised (no questions file matches)"] == 27 + 26
    with pytest.raises(DataError, match="needs .*fiqa-rewrite"):
        MTRAG(config_name="fiqa-rewrite", source=str(root), cache_dir=str(tmp_path / "d")).download_and_prepare()
    with pytest.raises(DataError, match="cited-corpus"):
        MTRAG(config_name="clapnq-corpus", source=str(root), cache_dir=str(tmp_path / "e")).download_and_prepare()
