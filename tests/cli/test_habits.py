"""CLI habits: progress bars that say what they do, default --out folders per benchmark, early name checks."""

from __future__ import annotations

import argparse
import json
import re
import types
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.core import progress
from convrag.hub.naming import default_out, run_name
from tests.conftest import DATA

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
RESPONSES = DATA / "mtrag" / "scripts" / "evaluation" / "sample_data" / "responses-10.jsonl"
BAR = re.compile(r"([^\r\n]*?):\s+\d+%\|")  # a tqdm line: "<desc>:  40%|####  | 12/30 ..."


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("habits") / "strat"
    assert main(["build", "stratrag", "--source", str(DEV), "--out", str(out)]) == 0
    return out


def _bars(err: str) -> set[str]:
    return {m.strip() for m in BAR.findall(err)}


def test_evaluate_bars_name_benchmark_retriever_strategy_and_stage(built, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(progress.ENV, "1")
    capsys.readouterr()
    assert main(["evaluate", str(built), "--retrievers", "bm25,bm25s", "--bootstrap", "10",
                 "--out", str(tmp_path / "res")]) == 0  # fmt: skip
    bars = _bars(capsys.readouterr().err)
    assert bars, "CONVRAG_PROGRESS=1 shows bars although stderr is no terminal"
    assert all(b.startswith("stratrag · ") for b in bars), bars
    assert all(re.search(r"· bm25s?[ :]", b) for b in bars), bars  # every bar names its retriever
    assert {"stratrag · bm25 · baseline: search", "stratrag · bm25s · baseline: search",
            "stratrag · bm25: tokenising corpus", "stratrag · bm25s: tokenising corpus"} <= bars  # fmt: skip


@pytest.mark.parametrize("env, flag", [("1", ["--no-progress"]), ("0", []), (None, [])])
def test_no_progress_and_logs_show_no_bars(built, tmp_path, monkeypatch, capsys, env, flag):
    """--no-progress wins over CONVRAG_PROGRESS=1; =0 hides them; unset, a non-terminal stderr shows none."""
    if env is None:
        monkeypatch.delenv(progress.ENV, raising=False)
    else:
        monkeypatch.setenv(progress.ENV, env)
    capsys.readouterr()
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--bootstrap", "10", "--out", str(tmp_path / "r"),
                 *flag]) == 0  # fmt: skip
    assert not _bars(capsys.readouterr().err)


def test_scopes_nest_and_library_bars_are_renamed():
    with progress.scope("recor", "law", None, "bm25"), progress.scope("baseline"):
        assert progress.label("search", "bm25") == "recor · law · bm25 · baseline: search"
        assert progress.label("search", "dense") == "recor · law · bm25 · baseline · dense: search"
    assert progress.label("search") == "search"  # scopes end with their block
    made = []
    library = types.SimpleNamespace(trange=lambda *a, **k: made.append(k["desc"]))
    with progress.relabelled(library, "trange", "x · dense: encoding corpus"):
        library.trange(0, 10, desc="Batches")
    library.trange(0, 10, desc="Batches")
    assert made == ["x · dense: encoding corpus", "Batches"]
    with progress.relabelled(types.SimpleNamespace(), "trange", "ignored"):  # no such global: left alone
        pass


def test_evaluate_defaults_out_to_results_benchmark_folder(built, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", str(built), "--retrievers", "random", "--bootstrap", "10", "--no-progress"]) == 0
    out = tmp_path / "results" / "stratrag" / "strat-evaluate"
    assert json.loads((out / "results.json").read_text())["benchmark"] == "stratrag"
    assert f"Wrote {out.relative_to(tmp_path)}/results.json" in capsys.readouterr().out
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["stratrag"]


def test_default_out_separates_benchmarks_and_names_hub_repos(built, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "law"
    other.mkdir()
    (other / "README.md").write_text("---\nconvrag:\n  benchmark: recor\n---\n")
    assert str(default_out([str(other)], "audit")) == "results/recor/law-audit"
    assert str(default_out([str(built), str(other)], "audit")) == "results/stratrag+recor/strat+law-audit"
    assert run_name("org/my-bench@v1") == "my-bench"
    snapshot = tmp_path / "hub" / "datasets--org--my-bench" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    assert run_name(str(snapshot)) == "my-bench"


def test_generate_default_out_names_mode_and_retriever(built, tmp_path, monkeypatch):
    from convrag.generate.command import _check_args

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(concurrency=8, max_tokens=300, passage_chars=2000, history_chars=2000, temperature=0.0,
                              folder=str(built), out=None, mode="retrieved", retriever="bm25", run=None)
    assert str(_check_args(args)) == "results/stratrag/strat-generate/retrieved-bm25.jsonl"
    assert not (tmp_path / "results").exists()  # nothing made before the answers are written


def _refuse_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loading data, building a retriever, loading a model or an LLM fail the test."""
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the names were checked")

    import convrag.evaluation.engine as engine
    import convrag.generate.command as generate
    import convrag.llm as llm
    import convrag.retrievers.encoders as encoders

    for module, name in ((engine, "load_benchmark"), (engine, "get_retriever"), (encoders, "load_model"),
                         (llm, "get_llm"), (generate, "make_llm")):  # fmt: skip
        monkeypatch.setattr(module, name, forbidden)


@pytest.mark.parametrize("argv, flag", [
    (["evaluate", "{built}", "--retrievers", "bm25,nope"], "--retrievers"),
    (["evaluate", "{built}", "--retrievers", "rrf:bm25+nope"], "--retrievers"),
    (["evaluate", "{built}", "--strategies", "baseline,nope"], "--strategies"),
    (["evaluate", "{built}", "--views", "nope"], "--views"),
    (["audit", "{built}", "--missed", "--pool-retrievers", "bm25,nope"], "--pool-retrievers"),
    (["select", "--space", "space.yaml", "--queries", "{built}", "--query-strategy", "nope"], "--query-strategy"),
    (["generate", "{built}", "--mode", "retrieved", "--retriever", "nope"], "--retriever"),
    (["generate", "{built}", "--mode", "retrieved", "--retriever", "bm25", "--strategy", "nope"], "--strategy"),
    (["evaluate-generation", str(RESPONSES), "--judge", "default", "--metrics", "rb_alg,nope"], "--metrics"),
])  # fmt: skip
def test_unknown_names_are_refused_before_any_work(built, tmp_path, monkeypatch, capsys, argv, flag):
    monkeypatch.chdir(tmp_path)
    _refuse_work(monkeypatch)
    capsys.readouterr()
    assert main([a.replace("{built}", str(built)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"convrag {argv[0]}: error: {flag}: unknown ")
    assert "'nope'" in err and "known: " in err
    assert list(tmp_path.iterdir()) == []  # no output folder, no cache


def test_default_out_lands_beside_a_results_folder_not_inside_it(built, tmp_path, monkeypatch, capsys):
    """The README's `--out results/stratrag` makes a results folder where the default of a later run would
    nest (results/stratrag/strat-evaluate): the default goes beside it instead, and beside `results` itself when
    that is a run's folder."""
    from convrag.core.out_folder import OWNER_MARKER, unnested

    monkeypatch.chdir(tmp_path)
    args = ["evaluate", str(built), "--retrievers", "random", "--bootstrap", "10", "--no-progress"]
    assert main([*args, "--out", "results/stratrag"]) == 0
    assert str(default_out([str(built)], "evaluate")) == "results/stratrag-strat-evaluate"
    assert main(args) == 0
    assert "Wrote results/stratrag-strat-evaluate/results.json" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["stratrag", "stratrag-strat-evaluate"]
    assert not (tmp_path / "results" / "stratrag" / "strat-evaluate").exists()
    (tmp_path / "results" / OWNER_MARKER).write_text('{"command": "audit"}\n')
    assert str(unnested(Path("results/recor/law-audit"))) == "results-recor-law-audit"
    assert str(unnested(Path("elsewhere/recor/law-audit"))) == "elsewhere/recor/law-audit"


def test_plain_progress_lines_when_stderr_is_not_a_terminal(built, tmp_path, monkeypatch, capsys):
    """Under pytest stderr is no terminal: with CONVRAG_PROGRESS unset the bars print plain lines (interval set to
    0 here; 30 s by default, so short runs print none), never tqdm's carriage-return bars; --no-progress prints
    nothing, and outside a command nothing changes."""
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.0)
    capsys.readouterr()
    args = ["evaluate", str(built), "--retrievers", "bm25", "--bootstrap", "10"]
    assert main([*args, "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    lines = re.findall(r"^\[\d\d:\d\d:\d\d\] (stratrag · bm25[^:]*: [^:]+): (.*)$", err, re.M)
    assert ("stratrag · bm25 · baseline: search", "done, 30 of 30 (100%) in 00:00") in lines, err
    assert "\r" not in err and not _bars(err)
    assert not progress.wanted()  # only while a command runs
    assert main([*args, "--no-progress", "--out", str(tmp_path / "q")]) == 0
    assert not re.search(r"^\[\d\d:\d\d:\d\d\] ", capsys.readouterr().err, re.M)
