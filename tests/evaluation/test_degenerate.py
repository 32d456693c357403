"""LLM output that gives nothing never passes as a result, over HTTP through the fake OpenAI-compatible server: an LLM
reranker whose every reply is unusable ends the evaluation with exit 1 and no ``bm25>llm`` row; rewrites that refuse
or say nothing are failures (counted, visible, the baseline text used with --rewrite-fallback), and when every
rewrite failed the evaluation exits 1."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from convrag.cli import main
from tests.conftest import DATA
from tests.llm.test_faults import FakeServer


@pytest.fixture(scope="module")
def recor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("degenerate") / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(out)]) == 0
    return out


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[[Callable[[dict], str]], str]]:
    monkeypatch.setenv("CONVRAG_CACHE_DIR", str(tmp_path / "cache"))
    servers: list[FakeServer] = []

    def start(responder: Callable[[dict], str]) -> str:
        server = FakeServer()
        server.responder = responder
        servers.append(server)
        return f"openai:test-model@{server.url};max_retries=0;timeout=5"

    yield start
    for server in servers:
        server.close()


def _question(body: dict) -> str:
    return body["messages"][-1]["content"].rsplit("\n", 1)[-1]


def test_a_reranker_with_no_usable_reply_scores_nothing(recor: Path, tmp_path: Path, serve, capsys) -> None:
    replies = iter(["I'm sorry, but I can't rank these passages.",
                    "Passage two seems the most relevant, then the first one.",
                    "```json\n{\"ranking\": \"unclear\"}\n```"] * 100)
    llm = serve(lambda body: next(replies))
    out = tmp_path / "out"
    code = main(["evaluate", str(recor), "--retrievers", "bm25", "--strategies", "baseline", "--rerank",
                 f"llm:{llm}@3", "--bootstrap", "20", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("convrag evaluate: failed: reranker 'llm' on bm25: all 13 reranking windows failed")
    assert "'bm25>llm' would only repeat 'bm25'; nothing was written" in err[0]
    assert not out.exists()


REFUSALS = ["Honestly I could not say.", "I'm sorry, but I can't help with rewriting that.", "N/A"]


def _rewriter(refuse_every: int) -> Callable[[dict], str]:
    """A rewriter that refuses (in turn, the forms of REFUSALS) for every ``refuse_every``-th request and otherwise
    writes a standalone question the way chat models do (a label and quotes)."""
    seen = {"n": 0}

    def reply(body: dict) -> str:
        seen["n"] += 1
        if seen["n"] % refuse_every == 0:
            return REFUSALS[seen["n"] % len(REFUSALS)]
        return f'Rewritten query: "{_question(body).strip()} (standalone)"'

    return reply


def test_refused_rewrites_are_counted_failures_with_the_baseline_visible(recor: Path, tmp_path: Path, serve,
                                                                         capsys) -> None:
    llm = serve(_rewriter(refuse_every=2))
    out = tmp_path / "out"
    args = ["evaluate", str(recor), "--retrievers", "bm25", "--strategies", "baseline,rewrite", "--llm", llm,
            "--bootstrap", "20", "--no-progress", "--out", str(out)]
    assert main(args) == 2  # without --rewrite-fallback a failed rewrite stops the run
    assert "query rewrite failed for" in capsys.readouterr().err and not out.exists()
    assert main([*args, "--rewrite-fallback"]) == 0
    results = json.loads((out / "results.json").read_text())
    rewrite = results["rewrite"]
    failed = rewrite["failures"]
    assert failed and sorted(rewrite["fallbacks"]) == sorted(failed)
    # "Honestly I could not say." and "N/A" read as queries before; an apology has no query line at all
    assert all("declines or says nothing" in r or "no query in the rewrite reply" in r for r in failed.values())
    assert any("'Honestly I could not say.'" in r for r in failed.values()), failed
    assert rewrite["llm_calls"] > len(failed)
    printed = capsys.readouterr().out
    assert f"{len(failed)} failed, {len(failed)} fell back to the baseline text" in printed


def test_every_rewrite_refused_exits_1(recor: Path, tmp_path: Path, serve, capsys) -> None:
    llm = serve(_rewriter(refuse_every=1))
    out = tmp_path / "out"
    code = main(["evaluate", str(recor), "--retrievers", "bm25", "--strategies", "baseline,rewrite", "--llm", llm,
                 "--rewrite-fallback", "--bootstrap", "20", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert "query rewrite (rewrite) failed for all 9 turns that needed it" in err[0]
    assert "would only repeat the baseline" in err[0] and not out.exists()
