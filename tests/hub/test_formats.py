"""`convrag export --format beir|trec` read back by BEIR, ir_measures and pytrec_eval, and the qrels that
`convrag evaluate` writes beside its runs re-scoring those runs to results.json's numbers."""

from __future__ import annotations

import glob
import json
import shutil
from pathlib import Path

import ir_measures
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import pytrec_eval
from beir.datasets.data_loader import GenericDataLoader

from convrag.cli import main
from convrag.core.manifest import read_card
from tests.conftest import DATA

SOURCES = {
    "stratrag": ["--source", str(DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json")],
    "recor": ["--source", str(DATA / "recor" / "sample")],
    "mtrag": ["--source", str(DATA / "mtrag"), "--config", "clapnq-lastturn", "--config", "clapnq-qrels",
              "--config", "clapnq-cited-corpus"],
}  # fmt: skip
SUBSETS = {"stratrag": [None], "recor": ["all", "biology", "drones", "earth_science", "law"], "mtrag": ["clapnq"]}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export-built")
    for name, args in SOURCES.items():
        assert main(["build", name, *args, "--out", str(root / name)]) == 0
    return {name: root / name for name in SOURCES}


def _rows(folder: Path, subset: str | None, kind: str) -> tuple[str, list[dict]]:
    """(split, rows) of the mteb-named config, read from the Parquet files its README entry lists."""
    _, card = read_card(folder)
    name = f"{subset}-{kind}" if subset else kind
    entry = next(e for e in card["configs"] if e["config_name"] == name)
    (item,) = entry["data_files"]
    files = sorted(glob.glob(str(folder / item["path"])))
    return item["split"], [row for f in files for row in pq.read_table(f).to_pylist()]


@pytest.mark.parametrize("benchmark", list(SOURCES))
def test_beir_loader_reads_the_export(built: dict[str, Path], tmp_path: Path, benchmark: str) -> None:
    out = tmp_path / "beir"
    assert main(["export", str(built[benchmark]), "--format", "beir", "--out", str(out)]) == 0
    marker = json.loads((out / "convrag-export.json").read_text())
    assert marker["format"] == "beir" and marker["benchmark"] == benchmark
    for subset in SUBSETS[benchmark]:
        split, corpus_rows = _rows(built[benchmark], subset, "corpus")
        _, query_rows = _rows(built[benchmark], subset, "queries")
        _, qrels_rows = _rows(built[benchmark], subset, "qrels")
        corpus, queries, qrels = GenericDataLoader(str(out / subset if subset else out)).load(split=split)
        assert corpus == {r["_id"]: {"text": r["text"], "title": r["title"] or ""} for r in corpus_rows}
        expected_qrels: dict[str, dict[str, int]] = {}
        for r in qrels_rows:
            expected_qrels.setdefault(r["query-id"], {})[r["corpus-id"]] = r["score"]
        assert qrels == expected_qrels and sum(map(len, qrels.values())) == len(qrels_rows) > 0
        texts = {r["_id"]: r["text"] for r in query_rows}
        assert queries == {q: texts[q] for q in expected_qrels}
        assert marker["files"][f"{subset + '/' if subset else ''}corpus.jsonl"] == len(corpus_rows)
        first = json.loads((out / subset if subset else out).joinpath("queries.jsonl").open().readline())
        assert first["metadata"] == {k: v for k, v in query_rows[0].items() if k not in ("_id", "text")}


@pytest.mark.parametrize("benchmark", ["stratrag", "mtrag"])
def test_trec_export_read_by_ir_measures_and_pytrec_eval(built: dict[str, Path], tmp_path: Path,
                                                         benchmark: str) -> None:  # fmt: skip
    out = tmp_path / "trec"
    assert main(["export", str(built[benchmark]), "--format", "trec", "--out", str(out)]) == 0
    subset = SUBSETS[benchmark][0]
    where = out / subset if subset else out
    split, qrels_rows = _rows(built[benchmark], subset, "qrels")
    expected = {(r["query-id"], r["corpus-id"], r["score"]) for r in qrels_rows}
    path = where / "qrels" / f"{split}.txt"
    assert {(q.query_id, q.doc_id, q.relevance) for q in ir_measures.read_trec_qrels(str(path))} == expected
    with path.open() as handle:
        parsed = pytrec_eval.parse_qrel(handle)
    assert {(q, d, g) for q, docs in parsed.items() for d, g in docs.items()} == expected
    _, query_rows = _rows(built[benchmark], subset, "queries")
    topics = dict(line.rstrip("\n").split("\t") for line in (where / "topics.tsv").open())
    assert topics == {r["_id"]: " ".join(r["text"].split()) for r in query_rows}
    assert (where / "topics.txt").read_text().count("<top>") == len(query_rows)
    _, corpus_rows = _rows(built[benchmark], subset, "corpus")
    docs = [json.loads(line) for line in (where / "corpus.jsonl").open()]
    assert [d["id"] for d in docs] == [r["_id"] for r in corpus_rows]
    assert all(d["contents"].endswith(r["text"]) for d, r in zip(docs, corpus_rows, strict=True))


MEASURES = {
    "stratrag": {"nDCG@5": ir_measures.nDCG @ 5, "MRR": ir_measures.RR, "Recall@5": ir_measures.R @ 5},
    "recor": {"nDCG@10": ir_measures.nDCG @ 10, "MRR@10": ir_measures.RR @ 10, "Recall@10": ir_measures.R @ 10,
              "MAP@10": ir_measures.AP @ 10},
}  # fmt: skip


@pytest.mark.parametrize("benchmark", list(MEASURES))
def test_evaluate_qrels_rescore_the_runs(built: dict[str, Path], tmp_path: Path, benchmark: str) -> None:
    """ir_measures (pytrec_eval) on runs/<run>.trec + runs/qrels.trec gives results.json's per-query numbers and
    means (RECOR: pool search off, subsets searched separately, domain-macro mean)."""
    out = tmp_path / "eval"
    folder, args = built[benchmark], []
    if benchmark == "recor":  # a drones document takes a judged biology document's id: runs and qrels qualify both
        folder, args = tmp_path / "recor", ["--strategies", "baseline"]
        shutil.copytree(built["recor"], folder)
        shared = _rows(folder, "biology", "qrels")[1][0]["corpus-id"]
        renamed = _rows(folder, "drones", "qrels")[1][0]["corpus-id"]
        for config, col in (("drones-corpus", "_id"), ("drones-qrels", "corpus-id")):
            _rewrite(folder, config, lambda rows, c=col: [{**r, c: shared if r[c] == renamed else r[c]} for r in rows])
    assert main(["evaluate", str(folder), "--retrievers", "bm25", "--bootstrap", "0", *args,
                 "--out", str(out)]) == 0  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert "runs/qrels.trec" in results["files"]
    (run_file,) = [f for f in results["files"] if f.startswith("runs/") and f != "runs/qrels.trec"]
    ours = results["per_query"]["bm25"] if benchmark == "stratrag" else results["per_turn"]["bm25"]["baseline"]
    qrels = list(ir_measures.read_trec_qrels(str(out / "runs" / "qrels.trec")))
    if benchmark == "recor":
        pairs = {(q.doc_id, q.query_id.split(":")[0]) for q in qrels}
        assert {(f"drones:{shared}", "drones"), (f"biology:{shared}", "biology")} <= pairs, sorted(pairs)
    run = list(ir_measures.read_trec_run(str(out / run_file)))
    names = {str(m): name for name, m in MEASURES[benchmark].items()}
    theirs: dict[str, dict[str, float]] = {}
    for m in ir_measures.iter_calc(list(MEASURES[benchmark].values()), qrels, run):
        theirs.setdefault(m.query_id, {})[names[str(m.measure)]] = m.value
    assert set(theirs) == set(ours)
    for qid, values in theirs.items():
        for name, value in values.items():
            assert value == pytest.approx(ours[qid][name], abs=1e-9), (qid, name)
    if benchmark == "stratrag":
        for name in MEASURES[benchmark]:
            mean = sum(v[name] for v in theirs.values()) / len(theirs)
            assert mean == pytest.approx(results["systems"]["bm25"]["overall"][name]["mean"], abs=1e-9)
    else:
        domains = results["systems"]["bm25"]["baseline"]["domains"]
        for domain, figures in domains.items():
            qids = [q for q in theirs if results["turns"][q]["domain"] == domain]
            assert qids
            for name in MEASURES[benchmark]:
                mean = sum(theirs[q][name] for q in qids) / len(qids)
                assert mean == pytest.approx(figures[name], abs=1e-9), (domain, name)


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], wanted: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("convrag export: error: ") and wanted in err, err


def test_errors_are_one_line_and_write_nothing(built: dict[str, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    folder = str(built["stratrag"])
    _one_line_error(capsys, ["export", folder, "--format", "csv", "--out", str(tmp_path / "a")], "unknown format")
    _one_line_error(capsys, ["export", str(tmp_path), "--format", "beir", "--out", str(tmp_path / "b")],
                    "README.md not found")  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    _one_line_error(capsys, ["export", folder, "--format", "beir", "--out", str(mine)], "--overwrite")
    _one_line_error(capsys, ["export", folder, "--format", "beir", "--out", str(mine), "--overwrite"],
                    "convrag-export.json")  # fmt: skip
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    done = tmp_path / "done"
    assert main(["export", folder, "--format", "beir", "--out", str(done)]) == 0
    _one_line_error(capsys, ["export", folder, "--format", "trec", "--out", str(done)], "not empty")
    assert (done / "queries.jsonl").exists()
    assert main(["export", folder, "--format", "trec", "--out", str(done), "--overwrite"]) == 0
    assert (done / "topics.tsv").exists() and not (done / "queries.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done", "mine"]  # no temporary folder left


def _rewrite(folder: Path, config: str, change) -> Path:
    (path,) = glob.glob(str(folder / config / "*.parquet"))
    rows = pq.read_table(path).to_pylist()
    pq.write_table(pa.Table.from_pylist(change(rows)), path)
    return Path(path)


def test_bad_ids_name_file_and_row_and_missing_documents_are_counted(
    built: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "stratrag"
    shutil.copytree(built["stratrag"], copy)
    path = _rewrite(copy, "corpus", lambda rows: [*rows, rows[1]])
    rows = pq.read_table(path).to_pylist()
    _one_line_error(capsys, ["export", str(copy), "--format", "beir", "--out", str(tmp_path / "x")],
                    f"{path}:{len(rows)}: duplicate corpus id {rows[1]['_id']!r}")  # fmt: skip
    _rewrite(copy, "corpus", lambda rows: rows[:-1])
    path = _rewrite(copy, "queries", lambda rows: [rows[0], {**rows[1], "_id": ""}, *rows[2:]])
    _one_line_error(capsys, ["export", str(copy), "--format", "trec", "--out", str(tmp_path / "x")],
                    f"{path}:2: '_id' must be a non-empty string")  # fmt: skip
    assert not (tmp_path / "x").exists()
    shutil.rmtree(copy)
    shutil.copytree(built["stratrag"], copy)
    _, qrels_rows = _rows(copy, None, "qrels")
    gone = qrels_rows[0]["corpus-id"]
    _rewrite(copy, "corpus", lambda rows: [r for r in rows if r["_id"] != gone])
    assert main(["export", str(copy), "--format", "beir", "--out", str(tmp_path / "x")]) == 0
    printed = capsys.readouterr().out
    named = sum(r["corpus-id"] == gone for r in qrels_rows)
    assert f"qrels/validation.tsv: {len(qrels_rows)} rows ({named} name documents missing from the corpus)" in printed
    marker = json.loads((tmp_path / "x" / "convrag-export.json").read_text())
    assert marker["qrels_missing_documents"] == {"qrels/validation.tsv": named}

