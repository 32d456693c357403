"""Slow: ``convrag evaluate-generation`` end to end on the RECOR pilot sample (built from ../shared in place) with
the embedded judge (SmolLM2-135M through llama.cpp, the placeholder: its grades are not measurements), three
hand-written predictions files (oracle / retrieved / none, three turns each, one per domain), ROUGE-L and MiniLM
BERTScore, and a retrieval run beside the retrieved-mode file for the nDCG@10 correlation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.evaluation.data import Folder
from convrag.hub.export import export_benchmark
from convrag.llm.spec import PLACEHOLDER_WARNING
from tests.conftest import DATA

pytest.importorskip("llama_cpp", reason="the default judge needs llama-cpp-python")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Answers written for this test: a grounded one (oracle), a partly right one (retrieved), a vague one (none).
ANSWERS = {
    "law:ex_111149:1": (
        "Extending a term lengthens protection for works that are still under copyright, so they enter the public "
        "domain later. Restoration is different: it takes works that were already free to use and protects them "
        "again, as the URAA did for some foreign works in the US.",
        "Extending the term delays when works become public. Restoring copyright brings public domain works back "
        "under protection; the EU did this when it applied its duration directive retroactively.",
        "A term extension makes copyright last longer. Bringing a work back is rare and depends on the country.",
    ),
    "drones:ex_3025:1": (
        "Only the bearings carry moving contact, and they are sealed with grease at the factory. Oil on the open "
        "rotor parts would collect dust and dirt that can work its way into the bearings and wear them out.",
        "The rotor and the bearings are the only moving parts, and only the bearings need lubrication; oil outside "
        "them mostly makes a mess.",
        "Lubricating exposed parts can make them slippery, so drone builders usually avoid it.",
    ),
    "biology:2:1": (
        "Yes. Humans have around 400 functional odor receptors and most odorants activate several of them, so "
        "smells are recognised from combinations of receptor activity rather than mixed from a few primaries.",
        "Mostly yes: there are hundreds of receptor types, and each odor activates a pattern of them, so there is "
        "no small set of primary smells like red, green and blue.",
        "There are some primary smells, such as sweet and sour, that combine into other smells.",
    ),
}
GOLD = {"law:ex_111149:1": "law_ex_111149_doc_2", "drones:ex_3025:1": "drones_ex_3025_doc_0",
        "biology:2:1": "RGB_equivalent_for_smells/Olfactory_receptor_3.txt"}
OTHER = {"law:ex_111149:1": "law_ex_111149_doc_0", "drones:ex_3025:1": "drones_ex_3025_doc_1",
         "biology:2:1": "RGB_equivalent_for_smells/Sense_of_smell_5.txt"}
# the run behind the retrieved-mode answers: gold first (law), gold second (drones), no gold in the top 10 (biology)
RUN = {"law:ex_111149:1": ["law_ex_111149_doc_2", "law_ex_111149_doc_1"],
       "drones:ex_3025:1": ["drones_ex_3025_doc_3", "drones_ex_3025_doc_0"],
       "biology:2:1": ["RGB_equivalent_for_smells/Sense_of_smell_8.txt"]}


def test_evaluate_generation_with_the_default_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    # Nothing else runs during this test, so llama.cpp may generate with both cores: about 1.6x faster than with the
    # one thread the backend picks on a 2-core machine by default (llama-cpp-python reads prompts with every core
    # either way).
    monkeypatch.setenv("CONVRAG_LLM_THREADS", "2")
    built = tmp_path / "recor"
    export_benchmark("recor", built, options={"source": str(DATA / "recor" / "sample")})
    corpus = {r["_id"]: r["text"] for r in Folder(built).rows("all-corpus", "test")}
    paths = []
    for i, mode in enumerate(("oracle", "retrieved", "none")):
        lines = []
        for tid, texts in ANSWERS.items():
            docs = {"oracle": [GOLD[tid]], "retrieved": [OTHER[tid]], "none": []}[mode]
            contexts = [{"document_id": d, "text": corpus[d][:400], "score": 1.0} for d in docs]
            lines.append(json.dumps({"task_id": tid, "conversation_id": tid.rsplit(":", 1)[0], "turn": 1,
                                     "domain": tid.split(":")[0], "mode": mode, "generator": "hand-written",
                                     "contexts": contexts, "predictions": [{"text": texts[i]}]}))
        path = tmp_path / f"{mode}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    Path(f"{paths[1]}.run.trec").write_text("".join(
        f"{q} Q0 {d} {r} {10 - r} hand\n" for q, docs in RUN.items() for r, d in enumerate(docs, start=1)))

    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ["evaluate-generation", str(built), *[a for p in paths for a in ("--predictions", str(p))],
            "--judge", "default", "--allow-missing", "--lexical", "rouge-l,meteor,bertscore", "--cache", str(cache),
            "--max-tokens", "120", "--concurrency", "1", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert PLACEHOLDER_WARNING in printed
    assert printed.strip().splitlines()[-1].startswith("Scoring profile authors: judge 1-10 per dimension / 10")
    assert "judge scores (Tables 7-9, 21-24, 26, Figure 3) no (placeholder judge" in printed

    summary = json.loads((out / "results.json").read_text())
    rows = [json.loads(x) for x in (out / "per_turn.jsonl").read_text().splitlines()]
    assert len(rows) == 9 and summary["counts"]["turns"] == 9
    assert summary["counts"]["judged"] + summary["counts"]["judge_failures"] == 9
    assert summary["counts"]["missing_predictions"] == 3 * 10  # 13 turns in the sample, 3 predicted per file
    assert summary["judge"]["placeholder"] and summary["lexical"]["bertscore"]["num_layers"] == 6
    for r in rows:
        if r["judged"]:
            dims = 4 if r["mode"] == "none" else 5
            assert len(r["grades"]) == dims and all(1 <= g <= 10 for g in r["grades"].values())  # authors' scale
            assert 0.0 <= r["judge_average"] <= 1.0
        else:
            assert r["failure"] and r["judge_average"] is None
        assert 0.0 <= r["lexical"]["rouge-l"] <= 1.0 and -1.0 <= r["lexical"]["bertscore"] <= 1.0
    systems = {s["mode"]: s for s in summary["systems"]}
    assert set(systems) == {"oracle", "retrieved", "none"}
    for s in systems.values():
        assert s["turns"] == 3 and s["judged"] + len(s["failed"]) == 3 and len(s["missing"]) == 10
    ndcg = {r["task_id"]: r.get("ndcg@10") for r in rows if r["mode"] == "retrieved"}
    assert ndcg["law:ex_111149:1"] > ndcg["drones:ex_3025:1"] > 0.0 and ndcg["biology:2:1"] == 0.0
    corr = systems["retrieved"]["correlation"]
    assert set(corr) >= {"pearson_domains", "pearson_turns", "domains"}
    md = (out / "results.md").read_text()
    for title in ("Table 7:", "Table 8:", "Table 21:", "Table 22:", "Table 23:", "Table 24:", "Table 25:",
                  "Table 26:", "Table 9:", "Figure 3:", PLACEHOLDER_WARNING):
        assert title in md, title
    calls = json.loads((out / "llm_report.json").read_text())["default"]["calls"]
    assert calls >= 9

    # a rerun on the same cache calls nothing for the answers judged the first time (failures are not cached)
    assert main(args) == 0
    rerun = json.loads((out / "llm_report.json").read_text())["default"]
    assert rerun["cache_hits"] == summary["counts"]["judged"]
    if summary["counts"]["judge_failures"] == 0:
        assert rerun["calls"] == 0
