"""`convrag leaderboard`: six systems (bm25, bm25s and random, each with the baseline and history strategies) evaluated
on the shipped RECOR sample, and four on MTRAG's fiqa and govt tasks (one an official submission file), gathered into
a collection (a local folder, and a dataset repo on the loopback test Hub), the board built; its main table and a
paired test checked against values computed here from the per-query files with numpy / scipy only; a results folder
edited by hand, and one of another revision or qrels, refused with one line."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from convrag.cli import main
from tests.conftest import DATA, REPO
from tests.hub_server import TOKEN, serve


def _per_query(collection: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Row ``ENTRY/SYSTEM`` -> query id -> measure -> value, read from the entries' per_query.jsonl files."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for path in sorted(collection.glob("entries/*/per_query.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            out.setdefault(f"{path.parent.name}/{row.pop('system')}", {})[row.pop("query_id")] = row
    return out


def test_main_table_is_the_domain_macro_of_the_per_query_files(board):
    collection, data = board
    per_query = _per_query(collection)
    assert len(per_query) == 6 and {r["id"] for r in data["rows"]} == set(per_query)
    assert (collection / "collection.json").is_file() and data["identity"]["benchmark"] == "recor"
    for row in data["rows"]:
        scores = per_query[row["id"]]
        assert (collection / row["run"]).is_file() and row["n"] == len(scores) == 13
        for m in data["measures"]:
            domains = {q.split(":")[0] for q in scores}  # RECOR query ids are domain:conversation:turn
            macro = np.mean([np.mean([v[m] for q, v in scores.items() if q.split(":")[0] == d]) for d in domains])
            cell = row["scores"][m]
            assert cell["mean"] == pytest.approx(macro, abs=1e-12)
            assert cell["low"] <= cell["mean"] + 1e-12 and cell["mean"] <= cell["high"] + 1e-12
    primary = [r["scores"]["nDCG@10"]["mean"] for r in data["rows"]]
    assert primary == sorted(primary, reverse=True)
    assert data["turn_positions"]["n"] == {"T1": 4, "T2": 4, "T3": 4, "T4": 1}
    assert set(data["caveats"]) == {"lexical", "bm25s"} and all(data["caveats"].values())


def test_paired_test_equals_an_exact_sign_flip_test_and_scipy_t_test(board):
    collection, data = board
    a, b = "lexical/bm25|baseline", "lexical/bm25|history"
    per_query = _per_query(collection)
    qids = sorted(per_query[a])
    x = np.array([per_query[a][q]["nDCG@10"] for q in qids])
    y = np.array([per_query[b][q]["nDCG@10"] for q in qids])
    d = x - y
    flips = np.array(list(itertools.product((1, -1), repeat=d.size)))  # all 2^13 sign flips: the exact test
    null = (flips * d).mean(axis=1)
    p_exact = float(np.mean(np.abs(null) >= abs(d.mean()) - 1e-12))
    (row,) = [p for p in data["paired"] if {p["a"], p["b"]} == {a, b} and p["measure"] == "nDCG@10"]
    sign = 1 if row["a"] == a else -1
    assert row["diff"] == pytest.approx(sign * d.mean(), abs=1e-12) and row["n"] == 13
    assert row["p_randomization"] == pytest.approx(p_exact, abs=1e-9)
    assert row["p_ttest"] == pytest.approx(float(stats.ttest_rel(x, y).pvalue), abs=1e-12)
    n_rows = len(data["rows"])
    assert len(data["paired"]) == n_rows * (n_rows - 1) // 2 * len(data["measures"])


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and all(n in lines[0] for n in needles), lines


def _copy(folder: Path, to: Path, edit) -> Path:
    shutil.copytree(folder, to)
    data = json.loads((to / "results.json").read_text(encoding="utf-8"))
    edit(data)
    (to / "results.json").write_text(json.dumps(data), encoding="utf-8")
    return to


def test_a_results_folder_edited_by_hand_is_refused(results, tmp_path, capsys):
    def per_query(data: dict) -> None:
        data["per_turn"]["bm25"]["history"]["biology:2:2"]["nDCG@10"] += 0.1

    def summary(data: dict) -> None:
        data["systems"]["random"]["baseline"]["macro"]["MAP@10"] = 0.99

    collection = tmp_path / "collection"
    for edit, needles in ((per_query, ("bm25|history nDCG@10 of query biology:2:2", "re-scored from")),
                          (summary, ("random|baseline MAP@10 is 0.99", "edited by hand"))):  # fmt: skip
        edited = _copy(results["lexical"], tmp_path / edit.__name__, edit)
        _refused(capsys, ["leaderboard", "add", str(edited), "--collection", str(collection)], *needles)
    assert not collection.exists()


def test_another_revision_or_qrels_is_refused(results, tmp_path, capsys):
    def revision(sha: str):
        return lambda data: data.update(source={"repo_id": "org/recor", "revision": sha * 40})

    collection = str(tmp_path / "collection")
    first = _copy(results["lexical"], tmp_path / "at-a", revision("a"))
    assert main(["leaderboard", "add", str(first), "--collection", collection]) == 0
    other = _copy(results["bm25s"], tmp_path / "at-b", revision("b"))
    _refused(capsys, ["leaderboard", "add", str(other), "--collection", collection], "revision", "b" * 40, "a" * 40)
    fewer = _copy(results["bm25s"], tmp_path / "fewer-qrels", revision("a"))
    qrels = fewer / "runs" / "qrels.trec"
    qrels.write_text("".join(qrels.read_text(encoding="utf-8").splitlines(keepends=True)[1:]), encoding="utf-8")
    _refused(capsys, ["leaderboard", "add", str(fewer), "--collection", collection], "qrels", "not mixed")
    _refused(capsys, ["leaderboard", "add", str(first), "--collection", collection], "entry named 'at-a' exists")


def _board_on_the_hub(folders: list[Path], repo: str, tmp_path: Path, *build: str) -> tuple[str, dict, str]:
    """Each results folder added to dataset repo ``repo`` of a loopback Hub and the board built from the repo id
    (subprocesses: huggingface_hub reads HF_ENDPOINT at import): (Hub URL, board.json, the last command's output)."""
    with serve(tmp_path / "hub") as url:
        env = {**os.environ, "HF_ENDPOINT": url, "HF_TOKEN": TOKEN, "HF_HOME": str(tmp_path / "hf"),
               "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # fmt: skip
        commands = [["add", str(folder), "--collection", repo] for folder in folders]
        commands.append(["build", "--collection", repo, "--out", str(tmp_path / "board"), "--bootstrap", "200", *build])
        for argv in commands:
            done = subprocess.run([sys.executable, "-m", "convrag.cli", "leaderboard", *argv], env=env, cwd=REPO,
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
            assert done.returncode == 0, done.stderr
    return url, json.loads((tmp_path / "board" / "board.json").read_text(encoding="utf-8")), done.stdout


def test_a_collection_on_the_hub_builds_the_same_board(results, board, tmp_path):
    """Both entries pushed to a dataset repo of the loopback Hub, the board built from the repo id and its Space
    pushed."""
    url, hub_board, printed = _board_on_the_hub(list(results.values()), "convrag-test/recor-board", tmp_path,
                                                "--push", "convrag-test/recor-board-space")  # fmt: skip
    assert f"{url}/spaces/convrag-test/recor-board-space/commit/" in printed
    files = tmp_path / "hub" / "spaces" / "convrag-test" / "recor-board-space" / "files"
    space = sorted(p.name for p in files.iterdir())
    assert space == ["README.md", "app.py", "board.json", "board.md", "index.html", "requirements.txt", "sections.json"]
    local_board = board[1]
    assert hub_board["collection"]["repo_id"] == "convrag-test/recor-board"
    assert [(r["id"], r["scores"]) for r in hub_board["rows"]] == [(r["id"], r["scores"]) for r in local_board["rows"]]
    assert hub_board["paired"] == local_board["paired"]
    page = (tmp_path / "board" / "index.html").read_text(encoding="utf-8")
    assert f"{url}/datasets/convrag-test/recor-board/blob/" in page and "Caveats" in page


def test_a_mean_aggregated_benchmark_is_the_mean_over_queries(stratrag_first30, tmp_path):
    """StratRAG (aggregation ``mean``, one strategy: systems are retrievers, searched within each question's pool)."""
    argv = ["evaluate", str(stratrag_first30), "--retrievers", "bm25,random", "--bootstrap", "0", "--no-progress",
            "--out", str(tmp_path / "stratrag")]  # fmt: skip
    assert main(argv) == 0
    assert main(["leaderboard", "add", str(tmp_path / "stratrag"), "--collection", str(tmp_path / "collection")]) == 0
    argv = ["leaderboard", "build", "--collection", str(tmp_path / "collection"), "--out", str(tmp_path / "board"),
            "--bootstrap", "100"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads((tmp_path / "board" / "board.json").read_text(encoding="utf-8"))
    per_query = _per_query(tmp_path / "collection")
    assert [r["id"] for r in data["rows"]] == ["stratrag/bm25", "stratrag/random"]
    for row in data["rows"]:
        for m in data["measures"]:
            assert row["scores"][m]["mean"] == pytest.approx(np.mean([v[m] for v in per_query[row["id"]].values()]))
    assert data["identity"]["search"] == "pool" and data["turn_positions"] == {} and data["domains"] == {}


def test_the_board_space_shows_the_tables_and_compares_two_systems(board, board_space):
    """The Space folder `build --space` writes: its app (gradio only) builds, and its comparison is the board's."""
    collection, data = board
    assert "sdk: gradio" in (board_space / "README.md").read_text(encoding="utf-8")
    spec = importlib.util.spec_from_file_location("board_space_app", board_space / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    sections = json.loads((board_space / "sections.json").read_text(encoding="utf-8"))
    assert [s[0] for s in sections][:3] == ["Main table", "Caveats", "Paired tests (nDCG@10)"]
    assert app.build_demo(data, sections) is not None
    a, b = "lexical/bm25|history", "bm25s/bm25s|baseline"
    (row,) = [p for p in data["paired"] if {p["a"], p["b"]} == {a, b} and p["measure"] == "MAP@10"]
    diff = row["diff"] if row["a"] == a else -row["diff"]
    assert f"on MAP@10: mean difference {diff:.4f} over 13 queries" in app.compare(data, a, b, "MAP@10")


def test_unsupported_results_and_a_folder_that_is_no_collection_are_refused(results, tmp_path, capsys):
    other_rule = tmp_path / "other-rule"
    other_rule.mkdir()
    (other_rule / "results.json").write_text(json.dumps({"benchmark": "x", "profile": {"aggregation": "median"}}))
    _refused(capsys, ["leaderboard", "add", str(other_rule), "--collection", str(tmp_path / "c")], "'median'")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    _refused(capsys, ["leaderboard", "add", str(results["bm25s"]), "--collection", str(other)], "not a leaderboard")
    _refused(capsys, ["leaderboard", "build", "--collection", str(tmp_path / "c"), "--out", str(tmp_path / "b")],
             "not a leaderboard collection")  # fmt: skip
    assert not (tmp_path / "c").exists() and not (tmp_path / "b").exists()


def _weighted_all(
    per_query: dict[str, dict[str, float]], domain: dict[str, str], counts: dict[str, int], m: str
) -> float:
    """MTRAGEval's "all" row, computed here: per-domain means rounded to 5 decimals, weighted by submitted tasks."""
    means = {d: np.mean([v[m] for q, v in per_query.items() if domain[q] == d]) for d in counts}
    return sum(round(float(means[d]), 5) * counts[d] for d in counts) / sum(counts.values())


def test_mtrag_results_and_a_submission_on_the_board(tmp_path, capsys):
    """MTRAG's fiqa and govt tasks over their cited passages: entry ``lexical`` (bm25, random) and entry ``other``
    (bm25s, and an official submission file: bm25's with every score negated); the main table is the official
    weighted "all" row, computed here from per_query.jsonl and the submission files; a paired test against scipy
    and a sign-flip test of our own; a hand-edited MTRAG folder refused."""
    built = tmp_path / "mtrag"
    configs = [f"{d}-{v}" for d in ("fiqa", "govt") for v in ("lastturn", "qrels", "cited-corpus")]
    assert main(["build", "mtrag", "--source", str(DATA / "mtrag"), "--out", str(built),
                 *(a for c in configs for a in ("--config", c))]) == 0  # fmt: skip
    fast = ["--bootstrap", "0", "--no-progress", "--measures", "nDCG@5"]  # official rows: nDCG@5, Recall@5
    assert main(["evaluate", str(built), "--retrievers", "bm25,random", *fast, "--out", str(tmp_path / "lexical")]) == 0
    lines = [json.loads(line) for line in (tmp_path / "lexical/runs/bm25__lastturn.jsonl").read_text().splitlines()]
    for line in lines:
        line["contexts"] = [{**c, "score": -c["score"]} for c in line["contexts"]]
    submission = tmp_path / "reversed.jsonl"
    submission.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    argv = ["evaluate", str(built), "--retrievers", "bm25s", "--submission", f"rev={submission}", *fast,
            "--out", str(tmp_path / "other")]  # fmt: skip
    assert main(argv) == 0
    collection = tmp_path / "collection"
    for name in ("lexical", "other"):
        assert main(["leaderboard", "add", str(tmp_path / name), "--collection", str(collection)]) == 0
    argv = ["leaderboard", "build", "--collection", str(collection), "--out", str(tmp_path / "board"),
            "--bootstrap", "200"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads((tmp_path / "board" / "board.json").read_text(encoding="utf-8"))
    per_query = _per_query(collection)
    assert sorted(per_query) == ["lexical/bm25|lastturn", "lexical/random|lastturn", "other/bm25s|lastturn",
                                 "other/rev"]  # fmt: skip
    assert data["primary"] == "nDCG@5" and data["aggregation"] == "mtrag-official"
    for row in data["rows"]:
        filed = [json.loads(x) for x in (collection / row["run"]).with_suffix(".jsonl").read_text().splitlines()]
        domain = {x["task_id"]: "fiqa" if "fiqa" in x["Collection"] else "govt" for x in filed}
        counts = {d: list(domain.values()).count(d) for d in ("fiqa", "govt")}
        assert counts == {"fiqa": 180, "govt": 201} and row["n"] == 381
        for m in data["measures"]:
            cell = row["scores"][m]
            assert cell["mean"] == pytest.approx(_weighted_all(per_query[row["id"]], domain, counts, m), abs=1e-12)
            assert cell["low"] <= cell["mean"] + 1e-12 and cell["mean"] <= cell["high"] + 1e-12
        for d in ("fiqa", "govt"):
            (drow,) = [r for r in data["domain_table"] if r["row"] == row["id"] and r["domain"] == d]
            expected = np.mean([v["nDCG@5"] for q, v in per_query[row["id"]].items() if domain[q] == d])
            assert drow["scores"]["nDCG@5"]["mean"] == pytest.approx(expected, abs=1e-12)
    stated = json.loads((tmp_path / "lexical" / "results.json").read_text(encoding="utf-8"))["results"][0]
    (bm25,) = [r for r in data["rows"] if r["id"] == "lexical/bm25|lastturn"]
    assert bm25["scores"]["nDCG@5"]["mean"] == pytest.approx(stated["official_all"]["nDCG@5"], abs=1e-15)
    assert data["turn_positions"]["n"]["T1"] > 0 and set(data["domains"]["n"]) == {"fiqa", "govt"}
    # the same entries gathered in a dataset repo of the loopback Hub give the same board
    _, hub_board, _ = _board_on_the_hub([tmp_path / "lexical", tmp_path / "other"], "convrag-test/mtrag-board",
                                        tmp_path / "on-hub")  # fmt: skip
    assert hub_board["collection"]["repo_id"] == "convrag-test/mtrag-board"
    assert [(r["id"], r["scores"]) for r in hub_board["rows"]] == [(r["id"], r["scores"]) for r in data["rows"]]
    assert hub_board["paired"] == data["paired"] and hub_board["domain_table"] == data["domain_table"]

    a, b = "lexical/bm25|lastturn", "other/bm25s|lastturn"
    qids = sorted(per_query[a])
    x = np.array([per_query[a][q]["nDCG@5"] for q in qids])
    y = np.array([per_query[b][q]["nDCG@5"] for q in qids])
    (row,) = [p for p in data["paired"] if {p["a"], p["b"]} == {a, b} and p["measure"] == "nDCG@5"]
    sign = 1 if row["a"] == a else -1
    assert row["diff"] == pytest.approx(sign * (x - y).mean(), abs=1e-12) and row["n"] == 381
    assert row["p_ttest"] == pytest.approx(float(stats.ttest_rel(x, y).pvalue), abs=1e-12)
    flips = np.random.default_rng(7).choice((-1.0, 1.0), size=(20000, x.size))
    p_flip = float(np.mean(np.abs(flips @ (x - y) / x.size) >= abs((x - y).mean()) - 1e-12))
    assert row["p_randomization"] == pytest.approx(p_flip, abs=0.02)

    def official(data: dict) -> None:
        data["results"][1]["official_all"]["nDCG@5"] += 0.01

    def per_task(data: dict) -> None:
        data["results"][0]["per_query"][qids[0]]["Recall@5"] = 0.5

    for edit, needles in ((official, ("rev official nDCG@5 (all)", "edited by hand")),
                          (per_task, (f"bm25s|lastturn Recall@5 of query {qids[0]}", "re-scored from"))):  # fmt: skip
        edited = _copy(tmp_path / "other", tmp_path / edit.__name__, edit)
        _refused(capsys, ["leaderboard", "add", str(edited), "--collection", str(tmp_path / "c2")], *needles)
    assert not (tmp_path / "c2").exists()
