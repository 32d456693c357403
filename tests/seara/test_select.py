"""`convrag select`: the strategy-space file, the inputs, grid / staged / racing search over judged pools, and the
command end to end (a scripted judge that reads the real HotpotQA labels; the slow test uses the local model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import convrag.llm as llm_module
from convrag.cli import main
from convrag.judging.pooling import OracleJudge
from convrag.llm import LLM
from convrag.llm.backends.fake import FakeBackend
from convrag.seara.inputs import read_corpus, read_turns
from convrag.seara.runner import Runner
from convrag.seara.search import Searcher
from convrag.seara.space import SpaceError, load_space, parse_space
from tests.conftest import DATA

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def hotpot(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The 30 dev questions as a user's files: corpus.jsonl (their 291 unique paragraphs), queries.jsonl, and
    the truth (question id -> gold paragraph ids)."""
    folder = tmp_path_factory.mktemp("hotpot")
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))
    ids: dict[str, str] = {}
    texts: dict[str, str] = {}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            for title, sentences in r["context"]:
                if title not in ids:
                    ids[title] = f"d{len(ids) + 1}"
                    texts[ids[title]] = "".join(sentences)
                    f.write(json.dumps({"_id": ids[title], "title": title, "text": texts[ids[title]]}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({"_id": r["_id"], "text": r["question"]}) + "\n")
    gold = {r["_id"]: {ids[t] for t, _ in r["supporting_facts"]} for r in records}
    questions = {r["question"].strip(): r["_id"] for r in records}
    return {"folder": folder, "gold": gold, "texts": texts, "questions": questions}


SPACE = {
    "depth": 10,
    "dimensions": {
        "chunking": {"original": {"strategy": "original"}, "sent2": {"strategy": "sentences", "n": 2}},
        "retrieval": {"bm25": {"retriever": "bm25"}, "bm25s": {"retriever": "bm25s"},
                      "random": {"retriever": "random"}},
    },
    "search": {"strategy": "staged", "bootstrap": 200,
               "stages": [{"name": "chunking", "vary": ["chunking"]}, {"name": "retrieval", "vary": ["retrieval"]}]},
}


class ChunkOracle(OracleJudge):
    """The oracle over chunks: relevant when the chunk comes from a gold paragraph of the question."""

    def __init__(self, runner: Runner, gold: dict[str, set[str]], fail: set[str] = frozenset()) -> None:
        super().__init__({}, name="chunk-oracle")
        self.runner, self.gold, self.fail = runner, gold, fail

    def truth(self, item, doc) -> bool:  # noqa: ANN001
        return self.runner.doc_of[doc.doc_id] in self.gold[item.item_id]

    def verdict(self, item, doc, dimension="pooled"):  # noqa: ANN001
        verdict = super().verdict(item, doc, dimension)
        if item.item_id in self.fail:
            verdict.score, verdict.error = None, "call failed: EndpointUnreachable"
        return verdict


def _runner(hotpot: dict, space_data: dict) -> Runner:
    space = parse_space(space_data, "space.yaml")
    docs = read_corpus(hotpot["folder"] / "corpus.jsonl")
    turns = read_turns(hotpot["folder"] / "queries.jsonl")
    return Runner(space, docs, {t.qid: t.query for t in turns}, llm=lambda spec: None, echo=None)


# ------------------------------------------------------------------------------------------------ space
def test_space_defaults_costs_grid_and_exclusions() -> None:
    space = parse_space({**SPACE, "exclude": [{"chunking": "sent2", "retrieval": "random"}]}, "s.yaml")
    assert space.baseline == {"chunking": "original", "filter": "none", "retrieval": "bm25", "rewriter": "none",
                              "reranker": "none"}
    grid = space.full_grid()
    assert [c.name for c in grid] == ["original/none/bm25/none/none", "original/none/bm25s/none/none",
                                      "original/none/random/none/none", "sent2/none/bm25/none/none",
                                      "sent2/none/bm25s/none/none"]
    # cost: position in the listing unless given; a configuration sums its options
    assert [space.cost(c) for c in grid] == [0, 1, 2, 1, 2]
    priced = parse_space({**SPACE, "dimensions": {"retrieval": {"a": {"retriever": "bm25", "cost": 5},
                                                                "b": {"retriever": "bm25s", "cost": 0.5}}}}, "s")
    assert priced.baseline["retrieval"] == "a"
    assert [priced.cost(c) for c in priced.full_grid()] == [5, 0.5]
    reranker = parse_space({"dimensions": {"reranker": {"none": {}, "llm": {"window": 20}, "ce": {"path": "/m"}}}},
                           "s")
    assert [o.kind for o in reranker.options["reranker"].values()] == ["none", "llm", "cross-encoder"]


@pytest.mark.parametrize("data, message", [
    ({"dimensions": {}}, "s.yaml: 'dimensions' lists nothing"),
    ({**SPACE, "depht": 5}, "s.yaml: the top level: unknown key 'depht'"),
    ({**SPACE, "depth": 0}, "s.yaml: depth must be an integer >= 1, got 0"),
    ({**SPACE, "baseline": {"retrieval": "dense"}}, "s.yaml: baseline: dimension 'retrieval' has no option 'dense'"),
    ({**SPACE, "baseline": {"embedding": "x"}}, "s.yaml: baseline: unknown dimension 'embedding'"),
    ({"dimensions": {"retrieval": {"bm25": {"retriever": "bm25", "k1": 1}}}},
     "s.yaml: dimensions.retrieval.bm25: unknown key 'k1'"),
    ({"dimensions": {"retrieval": {"bm25": {}}}}, "s.yaml: dimensions.retrieval.bm25.retriever must name"),
    ({"dimensions": {"retrieval": {"x": {"retriever": "bm26"}}}}, "got 'bm26'"),
    ({"dimensions": {"retrieval": {"x": {"retriever": "dense", "options": ["m"]}}}}, "x.options must be a mapping"),
    ({"dimensions": {"reranker": {"ce": {"kind": "cross-encoder"}}}}, "needs 'path'"),
    ({"dimensions": {"reranker": {"x": {"kind": "colbert"}}}}, "kind must be one of none, llm, cross-encoder"),
    ({"dimensions": {"reranker": {"x": {"kind": "llm", "window": 1}}}},
     "s.yaml: dimensions.reranker.x.window must be an integer >= 2, got 1"),
    ({"dimensions": {"rewriter": {"x": {"n_queries": "four"}}}}, "dimensions.rewriter.x.n_queries must be an integer"),
    ({**SPACE, "search": {"strategy": "tpe"}}, "search.strategy must be one of grid, staged, racing"),
    ({**SPACE, "search": {"strategy": "staged"}}, "search.stages must be a non-empty list"),
    ({**SPACE, "search": {"strategy": "staged", "stages": [{"vary": {"retrieval": ["best@later"]}}]}},
     "search.stages[0].vary.retrieval: 'best@later' names no earlier stage"),
    ({**SPACE, "search": {"strategy": "racing", "racing": {"start": 0}}}, "0 < start <= 1"),
    ({**SPACE, "judge": {"level": 4}}, "judge.level must be 1, 2 or 3"),
    ({**SPACE, "judge": {"facts": "sometimes"}}, "judge.facts must be one of auto, always, never, got 'sometimes'"),
    ({**SPACE, "judge": {"max_judgments": "20k"}}, "judge.max_judgments must be an integer >= 1, got '20k'"),
    ({**SPACE, "search": {"strategy": "racing", "racing": {"start": "25%"}}}, "search.racing.start must be a number"),
    ({"dimensions": {"chunking": {"f": {"strategy": "fixed", "chunk_size": 512}}}},
     "dimensions.chunking.f: chunking 'fixed': unknown parameter(s) ['chunk_size']"),
    ({"dimensions": {"chunking": {"r": {"strategy": "recursve"}}}}, "unknown chunking strategy 'recursve'"),
    ({"dimensions": {"retrieval": {"b": {"retriever": "bm25", "options": {"k_1": 1.2}}}}},
     "dimensions.retrieval.b: "),
    ({"dimensions": {"reranker": {"x": {"kind": "llm", "window": 10, "stride": 20}}}}, "stride must be at most window"),
    ({"dimensions": {"reranker": {"x": {"kind": "llm", "path": "/m"}}}}, "'path' is for kind cross-encoder"),
])
def test_space_errors_name_the_file_and_key(data: dict, message: str) -> None:
    with pytest.raises(SpaceError) as err:
        parse_space(data, "s.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_space_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "space.yaml"
    bad.write_text("depth: 10\ndimensions:\n  retrieval: [bm25\n", encoding="utf-8")
    with pytest.raises(SpaceError, match=r"space.yaml:4: not valid YAML"):
        load_space(bad)
    bad.write_bytes(b"depth: \xff\n")
    with pytest.raises(SpaceError, match="not UTF-8"):
        load_space(bad)
    with pytest.raises(SpaceError, match="no such strategy-space file"):
        load_space(tmp_path / "missing.yaml")


# ------------------------------------------------------------------------------------------------ inputs
def test_queries_from_text_and_jsonl_with_history(tmp_path: Path) -> None:
    txt = tmp_path / "q.txt"
    txt.write_text("who built the tower?\n\n  when was it finished?  \n", encoding="utf-8")
    assert [(t.qid, t.query) for t in read_turns(txt)] == [("q1", "who built the tower?"),
                                                           ("q3", "when was it finished?")]
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text(json.dumps({"_id": "c1-2", "text": "and its height?", "history": [
        {"role": "user", "content": "who built the Eiffel tower?"},
        {"role": "assistant", "content": "Gustave Eiffel's company."}]}) + "\n", encoding="utf-8")
    from convrag.seara.inputs import query_texts

    turns = read_turns(jsonl)
    assert query_texts(turns, "baseline") == {"c1-2": "and its height?"}
    with_history = query_texts(turns, "history")["c1-2"]
    assert "who built the Eiffel tower?" in with_history and with_history.endswith("and its height?")


@pytest.mark.parametrize("content, message", [
    ('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', "duplicate query ids ['a']"),
    ('{"_id": "a", "text": "  "}\n', "q.jsonl:1: query a: field 'text' must be a non-empty string"),
    ('{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', "q.jsonl:2: invalid JSON"),
    ('{"text": "x"}\n', "q.jsonl:1: query id (_id or id) must be"),
    ('{"_id": "a", "text": "x", "history": 3}\n', "q.jsonl:1: query a: 'history' must be"),
])
def test_bad_query_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(Exception) as err:
        read_turns(path)
    assert message in str(err.value)


# ------------------------------------------------------------------------------------------------ search
def test_staged_search_with_an_oracle_picks_the_true_best_in_a_common_final_pool(hotpot: dict) -> None:
    runner = _runner(hotpot, SPACE)
    seen: list[str] = []
    found = Searcher(runner.space, runner, ChunkOracle(runner, hotpot["gold"]), echo=None,
                     on_pool=lambda p: seen.append(p.label)).run()
    assert seen == ["stage chunking", "stage retrieval", "final common pool"]
    chunking, retrieval, final = found.pools
    assert {c.name for c in chunking.configurations} == {"original/none/bm25/none/none", "sent2/none/bm25/none/none"}
    # stage 2 varies retrieval over the stage-1 winner's chunking
    winner_chunking = chunking.winner.get("chunking")
    assert {c.get("chunking") for c in retrieval.configurations} == {winner_chunking}
    assert {c.get("retrieval") for c in retrieval.configurations} == {"bm25", "bm25s", "random"}
    # final pool: baseline + winner and runner-up of each stage, each configuration once
    names = [c.name for c in final.configurations]
    assert len(names) == len(set(names)) and "original/none/bm25/none/none" in names
    assert {chunking.pick.winner, retrieval.pick.winner} <= set(names)
    assert "original/none/random/none/none" not in [retrieval.pick.winner]
    # random retrieval is far below BM25 under the oracle
    assert retrieval.scores["original/none/random/none/none"]["pr_auc"] < 0.5 * max(
        s["pr_auc"] for s in retrieval.scores.values())
    # every pool is judged by its own signature, and the final pick is made there
    signatures = {p.pseudo.signature for p in found.pools}
    assert len(signatures) == 3
    assert found.chosen.name == final.pick.winner
    assert all(s["pool_signature"] == final.pseudo.signature for s in final.scores.values())
    # the oracle and depth-10 lists: pooled recall is over the pooled relevant chunks, so R'@K <= 1
    assert all(0 < s["recall_at_k"] <= 1 for s in final.scores.values())
    totals = found.judge_totals()
    # unique judgments over the whole search: the final pool re-uses the stage pools' pairs
    assert totals["pools"] == 3 and totals["unique"] == len({j.key for p in found.pools for j in p.pseudo.judgments})
    assert totals["unique"] < sum(p.pseudo.summary()["unique"] for p in found.pools)


def test_grid_and_racing(hotpot: dict) -> None:
    grid_space = {**SPACE, "dimensions": {"retrieval": SPACE["dimensions"]["retrieval"]},
                  "search": {"strategy": "grid", "bootstrap": 200}}
    runner = _runner(hotpot, grid_space)
    grid = Searcher(runner.space, runner, ChunkOracle(runner, hotpot["gold"]), echo=None).run()
    assert len(grid.pools) == 1 and len(grid.final.configurations) == 3
    racing = {**grid_space, "search": {"strategy": "racing", "bootstrap": 200, "racing": {"start": 0.25,
                                                                                           "factor": 2}}}
    runner = _runner(hotpot, racing)
    found = Searcher(runner.space, runner, ChunkOracle(runner, hotpot["gold"]), echo=None).run()
    # 30 queries: 8, 16, 30; random is dropped once its CI is below the leader's
    assert [r["queries"] for r in found.rounds] == [8, 16, 30]
    dropped = [name for r in found.rounds for name in r["dropped"]]
    assert "original/none/random/none/none" in dropped
    # nothing is dropped on fewer than min_scored (10) scored queries, nor after the last round
    assert found.rounds[0]["dropped"] == [] and found.rounds[0]["scored"] < 10 and found.rounds[-1]["dropped"] == []
    assert found.final.query_ids and len(found.final.query_ids) == 30
    assert found.chosen.get("retrieval") in ("bm25", "bm25s")
    # queries are a seeded shuffle: the first round's queries are not simply the first 8 of the file
    assert found.pools[0].query_ids != list(runner.queries)[:8]


def test_failed_judgments_leave_their_queries_out_of_every_score(hotpot: dict) -> None:
    space = {**SPACE, "dimensions": {"retrieval": SPACE["dimensions"]["retrieval"]},
             "search": {"strategy": "grid", "bootstrap": 100}}
    runner = _runner(hotpot, space)
    broken = set(list(runner.queries)[:2])
    found = Searcher(runner.space, runner, ChunkOracle(runner, hotpot["gold"], fail=broken), echo=None).run()
    assert found.final.failed_queries == sorted(broken)
    for scores in found.final.scores.values():
        assert scores["n_scored"] + scores["n_excluded"] == 28
        assert not broken & {row["query_id"] for row in scores["per_query"]}
    assert found.final.pseudo.summary()["failed_pairs"] > 0


# ------------------------------------------------------------------------------------------------ the command
def _scripted_judge(hotpot: dict) -> FakeBackend:
    """A judge whose replies are short rationales ending in "Rating: N", right for gold paragraphs (it looks the
    question and passage up in the real labels), with one malformed reply first; asked for minimal facts, it
    quotes the passage's first sentence in a fenced JSON block after a preamble."""

    def reply(messages: list) -> str:
        user = messages[-1]["content"]
        if "Passage:" in user:  # the fact extractor
            passage = user.split("Passage:", 1)[1].split("List the shortest stretches")[0].strip()
            first = re.split(r"(?<=[.!?])\s", passage, maxsplit=1)[0]
            return f'Here is the evidence:\n```json\n{json.dumps({"quotes": [first]})}\n```'
        question = re.search(r"Latest question: (.*)", user).group(1).strip()
        passage = user.split("Document:", 1)[1].split("Grade the document")[0].strip()
        gold = hotpot["gold"][hotpot["questions"][question]]
        relevant = any(passage[-60:] in hotpot["texts"][d] for d in gold)
        if relevant:
            return "The passage names the person the question asks about and gives the fact needed.\nRating: 3"
        return "This document covers another topic; it does not help to answer.\n\nRating: 0"

    return FakeBackend(["I am not sure what to say about this one."], responder=reply, model="scripted-judge")


def test_select_command_end_to_end(hotpot: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture) -> None:
    space = tmp_path / "space.yaml"
    combine = {"name": "combine",
               "vary": {"chunking": ["original", "sent2"], "retrieval": ["best@retrieval", "random"]}}
    data = {**SPACE, "search": {**SPACE["search"], "stages": [*SPACE["search"]["stages"], combine]}}
    space.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    backend = _scripted_judge(hotpot)
    monkeypatch.setattr(llm_module, "get_llm", lambda spec=None, **kw: LLM(backend, cache=False))
    out = tmp_path / "out"
    folder = hotpot["folder"]
    rc = main(["select", "--space", str(space), "--corpus", str(folder / "corpus.jsonl"), "--queries",
               str(folder / "queries.jsonl"), "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert rc == 0
    assert {p.name for p in out.iterdir()} == {"leaderboard.md", "leaderboard.csv", "leaderboard.json", "chosen.yaml",
                                               "pr_curves.png", "pr_curves.csv", "pools", "report.json",
                                               "interaction.png", ".convrag-out.json"}
    assert sorted(p.name for p in (out / "pools").iterdir()) == ["01-stage-chunking", "02-stage-retrieval",
                                                                  "03-stage-combine", "04-final-common-pool"]
    assert (out / "pools" / "04-final-common-pool" / "pseudo-qrels.trec").read_text().strip()
    from PIL import Image  # a pool that chooses by facts says its curves are the chunk-level ones

    note = Image.open(out / "pools" / "01-stage-chunking" / "pr_curves.png").info["Description"]
    assert note.startswith("chunk-level curves; this pool chooses by fact-level PR-AUC")
    assert "chooses by" not in Image.open(out / "pools" / "02-stage-retrieval" / "pr_curves.png").info["Description"]
    assert (out / "pr_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    chosen = yaml.safe_load((out / "chosen.yaml").read_text(encoding="utf-8"))
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert chosen["configuration"] == report["chosen"] and chosen["configuration"] in printed
    assert chosen["dimensions"]["retrieval"] in ("bm25", "bm25s")
    board = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))
    # judge calls per row: the unique judgments its own lists need, at most 30 queries x depth 10
    assert all(0 < row["judge_calls"] <= 300 for row in board["rows"])
    assert board["pool_signature"] == report["pools"][-1]["signature"]
    assert report["judge_totals"]["pools"] == 4 and report["queries"] == 30
    # the combine stage is a 2 x 2 factorial (and the final pool is one too when its finalists cover the four
    # cells, which it then takes): its effects drive the interaction plot
    factorial = report["factorial"]
    assert factorial["pool"] in ("stage combine", "final common pool")
    assert set(factorial["levels"]) == {"chunking", "retrieval"}
    for factor, (first, second) in factorial["levels"].items():  # an effect is against the factor's first level
        means = factorial["means"][factor]
        assert factorial["main_effects"][factor] == {second: means[second] - means[first]}
    assert list(factorial["interactions"]) == ["chunking x retrieval"]
    assert (out / "interaction.png").read_bytes()[:4] == b"\x89PNG"
    # the malformed first reply is a counted failure, never a grade: its query is left out of the first pool
    first = report["pools"][0]
    assert first["judgments"]["failed_pairs"] == 1 and first["judgments"]["failures"] == {"unparseable": 1}
    assert len(first["failed_queries"]) == 1 and report["judge_totals"]["failed_pairs"] == 1
    # no cache in this test: every pool asks for its own unique pairs (and extracts its own facts); with a cache the
    # union would be asked once
    extraction = report["fact_totals"]
    assert extraction["pools"] == 3 and extraction["calls"] == extraction["pairs"] > 0  # judge.facts: auto
    assert report["judge_llm"]["calls"] == sum(p["judgments"]["unique"] for p in report["pools"]) + extraction["calls"]
    # every pool varies the chunking but the retrieval stage: facts are made and choose there, chunks elsewhere
    assert [p["measure"] for p in report["pools"]] == ["facts", "chunks", "facts", "facts"]
    assert chosen["measure"] == "facts" and "differ in chunking" in chosen["measure_reason"]
    assert board["headline"] == "facts" and all(row["fact_pr_auc"] is not None for row in board["rows"])
    assert "fact PR-AUC" in (out / "leaderboard.md").read_text(encoding="utf-8")
    assert report["judge_totals"]["unique"] < report["judge_llm"]["calls"]
    assert "PR-AUC micro" in printed and "Chosen:" in printed and "Judge: 4 pools" in printed
    # other queries into the same --out: refused before anything is read, the first results intact
    other = tmp_path / "five.jsonl"
    other.write_text("".join((folder / "queries.jsonl").read_text(encoding="utf-8").splitlines(True)[:5]))
    before = (out / "leaderboard.json").read_bytes()
    assert main(["select", "--space", str(space), "--corpus", str(folder / "corpus.jsonl"), "--queries", str(other),
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"holds the `convrag select` results of queries {folder / 'queries.jsonl'}" in err[0]
    assert "pass --overwrite to replace them" in err[0] and (out / "leaderboard.json").read_bytes() == before


def test_select_dry_run_and_refusals(hotpot: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE, sort_keys=False), encoding="utf-8")
    folder = hotpot["folder"]
    base = ["select", "--space", str(space), "--corpus", str(folder / "corpus.jsonl"), "--queries",
            str(folder / "queries.jsonl")]
    assert main([*base, "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "stage chunking" in printed and "final common pool" in printed and "600" in printed
    assert "Fact extraction" in printed and "judged-relevant (query, chunk) pair" in printed
    assert not (tmp_path / "dry").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine", encoding="utf-8")
    for args, message in (([*base, "--out", str(busy)], "is not a results folder of `convrag select`"),
                          ([*base, "--out", str(folder / "queries.jsonl")], "--out names an existing file"),
                          ([*base, "--out", str(tmp_path / "o"), "--max-queries", "0"], "--max-queries must be"),
                          (["select", "--space", str(tmp_path / "none.yaml"), "--corpus", "x", "--queries",
                            str(folder / "queries.jsonl"), "--out", str(tmp_path / "o")], "no such strategy-space"),
                          (["select", "--space", str(space), "--queries", str(folder / "queries.jsonl"), "--out",
                            str(tmp_path / "o")], "--corpus is required")):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
    assert (busy / "keep.txt").read_text(encoding="utf-8") == "mine" and not (tmp_path / "o").exists()


def test_a_failure_mid_search_leaves_no_output(hotpot: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    data = {**SPACE, "judge": {"max_judgments": 100}}
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    monkeypatch.setattr(llm_module, "get_llm", lambda spec=None, **kw: LLM(_scripted_judge(hotpot), cache=False))
    folder = hotpot["folder"]
    rc = main(["select", "--space", str(space), "--corpus", str(folder / "corpus.jsonl"), "--queries",
               str(folder / "queries.jsonl"), "--out", str(tmp_path / "out"), "--no-progress"])
    assert rc == 2
    assert "exceed max_calls=100" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


# ------------------------------------------------------------------------------------------------ the local model
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_select_end_to_end_with_the_default_local_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    """Plumbing only: the embedded placeholder judges the pool and writes the rewriter's queries; its grades are
    not evidence of anything. Two HotpotQA questions over their 20 paragraphs, pools of depth 2, 2 retrievers x 2
    rewriters (each placeholder call costs seconds on 2 cores: the judged pool and the rewrites are kept small)."""
    pytest.importorskip("llama_cpp", reason="the default backend needs llama-cpp-python")
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))[:2]
    titles: dict[str, str] = {}
    with open(tmp_path / "docs.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            for title, sentences in r["context"]:
                if title not in titles:
                    titles[title] = f"d{len(titles) + 1}"
                    f.write(json.dumps({"_id": titles[title], "title": title, "text": "".join(sentences)}) + "\n")
    (tmp_path / "questions.txt").write_text("".join(r["question"].strip() + "\n" for r in records), encoding="utf-8")
    space = {"depth": 2, "judge": {"level": 1, "concurrency": 1},
             "dimensions": {"retrieval": {"bm25": {"retriever": "bm25"}, "bm25s": {"retriever": "bm25s"}},
                            "rewriter": {"none": {}, "llm": {"kind": "llm", "n_queries": 2, "depth_each": 2}}},
             "search": {"strategy": "grid", "bootstrap": 200}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space, sort_keys=False), encoding="utf-8")
    args = ["select", "--space", str(tmp_path / "space.yaml"), "--corpus", str(tmp_path / "docs.jsonl"),
            "--queries", str(tmp_path / "questions.txt"), "--cache", str(tmp_path / "cache"), "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["judge"] == "default" and report["queries"] == 2
    totals = report["judge_totals"]
    assert totals["pools"] == 1 and totals["calls"] >= 1
    assert totals["unique"] == totals["calls"] + totals["cache_hits"] or totals["failures"] > 0
    rewriter = report["runner"]["components"]["rewriter:llm"]
    assert rewriter["calls"] + rewriter["cache_hits"] >= 2  # one request per question (or its re-asks)
    board = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))
    assert {row["configuration"] for row in board["rows"]} == {"original/none/bm25/none/none",
                                                              "original/none/bm25s/none/none",
                                                              "original/none/bm25/llm/none",
                                                              "original/none/bm25s/llm/none"}
    assert (out / "pr_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "Chosen:" in printed and "placeholder" in printed
    # a second run is answered from the cache: no new judge or rewriter call
    assert main([*args, "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "report.json").read_text(encoding="utf-8"))
    assert again["judge_llm"]["cache_misses"] == 0 or again["judge_llm"]["failures"] > 0
    assert again["chosen"] == report["chosen"] or again["judge_llm"]["failures"] > 0


def test_a_built_benchmark_folder_gives_queries_and_corpus(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A folder written by `convrag build` (StratRAG here): its queries config and its corpus config; the qrels
    are never read."""
    built = tmp_path / "stratrag"
    assert main(["build", "stratrag", "--source", str(HOTPOT), "--out", str(built)]) == 0
    turns = read_turns(built)
    assert len(turns) == 30 and turns[0].qid == "val_000000" and turns[0].query.startswith("Were Scott Derrickson")
    assert len(read_corpus(built)) == 450
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE, sort_keys=False), encoding="utf-8")
    capsys.readouterr()
    assert main(["select", "--space", str(space), "--queries", str(built), "--out", str(tmp_path / "o"),
                 "--dry-run", "--max-queries", "5"]) == 0
    assert "450 documents, 5 queries" in capsys.readouterr().out


def test_every_output_names_the_models_of_the_llm_components() -> None:
    from convrag.seara.command import component_models
    from convrag.seara.report import judge_lines

    data = {**SPACE, "dimensions": {
        **SPACE["dimensions"],
        "rewriter": {"none": {}, "multi": {"kind": "llm", "n_queries": 2, "model": "openai:qwen2.5-7b@http://h/v1"}},
        "reranker": {"none": {}, "listwise": {"kind": "llm", "window": 4, "stride": 2}}}}
    space = parse_space(data)
    judge_spec = "openai:qwen2.5-72b@http://h/v1"
    parts = component_models(space, "baseline", judge_spec)
    assert parts == {"rewriter multi": "openai:qwen2.5-7b@http://h/v1", "reranker listwise": judge_spec}
    lines = judge_lines({"label": judge_spec, "placeholder": False, "components": parts})
    assert lines[1] == (f"LLMs of the configurations: rewriter multi: openai:qwen2.5-7b@http://h/v1; reranker "
                        f"listwise: {judge_spec}.")
    assert lines[2].startswith("Caution: the judge is also the model of reranker listwise, so it grades lists")
    assert component_models(space, "rewrite", "default")["query strategy rewrite"].endswith(
        "(embedded placeholder, not a measurement)")
