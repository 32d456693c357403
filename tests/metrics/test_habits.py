"""Input habits of other tools read by the evaluate modules (issue 18, item 5).

Retrieval: integer document / query ids and ir_measures' measure names, checked against ir_measures itself on a
BM25 run over real HotpotQA passages. Generation: metric names in any case, and a plain predictions / references
call that computes the judge-free components, checked against rouge-score and the module's BERTScore scorer.
"""

from __future__ import annotations

import json
import math
import re

import ir_measures
import pytest
from rank_bm25 import BM25Okapi
from rouge_score import rouge_scorer

from tests.conftest import DATA, REPO

IR_MEASURES_NAMES = ["nDCG@10", "nDCG", "R@5", "R@100", "P@1", "P@10", "RR", "RR@10", "AP", "AP@100",
                     "Success@1", "Success@5"]  # fmt: skip


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


@pytest.fixture(scope="module")
def hotpot() -> tuple[dict[int, dict[int, float]], dict[int, dict[int, int]]]:
    """A BM25 run (top 100) over the deduplicated paragraphs of 30 HotpotQA dev questions, with integer query and
    document ids, and qrels: supporting paragraphs grade 2 when they contain the answer, else 1; distractors 0."""
    records = json.loads((DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json").read_text(encoding="utf-8"))
    ids: dict[tuple[str, str], int] = {}
    qrels: dict[int, dict[int, int]] = {}
    for qid, record in enumerate(records):
        supporting = {title for title, _ in record["supporting_facts"]}
        judged = qrels.setdefault(qid, {})
        for title, sentences in record["context"]:
            text = "".join(sentences)
            doc = ids.setdefault((title, text), len(ids))
            relevant = title in supporting
            judged[doc] = (2 if record["answer"].lower() in text.lower() else 1) if relevant else 0
    texts = [f"{title} {text}" for title, text in ids]
    bm25 = BM25Okapi([_tokens(t) for t in texts])
    run = {}
    for qid, record in enumerate(records):
        scores = bm25.get_scores(_tokens(record["question"]))
        top = sorted(range(len(texts)), key=lambda d: -scores[d])[:100]
        run[qid] = {doc: float(scores[doc]) for doc in top}
    return run, qrels


def _as_strings(table: dict) -> dict[str, dict[str, float]]:
    return {str(q): {str(d): v for d, v in inner.items()} for q, inner in table.items()}


@pytest.fixture(scope="module")
def retrieval():
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "retrieval"))


def _scored(run: dict, qids: list) -> list[list[dict]]:
    return [[{"id": d, "score": s} for d, s in run[q].items()] for q in qids]


def _graded(qrels: dict, qids: list) -> list[list[dict]]:
    return [[{"id": d, "grade": g} for d, g in qrels[q].items()] for q in qids]


def test_ir_measures_names_equal_ir_measures(retrieval, hotpot) -> None:
    run, qrels = hotpot
    qids = list(qrels)
    out = retrieval.compute(predictions=_scored(run, qids), references=_graded(qrels, qids), query_ids=qids,
                            measures=IR_MEASURES_NAMES, per_query=True)  # fmt: skip
    measures = [ir_measures.parse_measure(name) for name in IR_MEASURES_NAMES]
    theirs = ir_measures.calc_aggregate(measures, _as_strings(qrels), _as_strings(run))
    assert out["num_queries"] == len(qids) == 30
    for name, measure in zip(IR_MEASURES_NAMES, measures, strict=True):
        assert out[name] == pytest.approx(theirs[measure], abs=1e-12, rel=0), name
    assert 0 < out["nDCG@10"] < 1 and 0 < out["RR@10"] <= out["RR"] < 1  # a run that is neither perfect nor empty
    per_query = {(m.query_id, str(m.measure)): m.value
                 for m in ir_measures.iter_calc(measures, _as_strings(qrels), _as_strings(run))}  # fmt: skip
    assert len(per_query) == len(qids) * len(measures)
    for (qid, name), value in per_query.items():
        assert out["per_query"][qid][name] == pytest.approx(value, abs=1e-12, rel=0), (qid, name)


def test_results_keyed_by_the_names_asked(retrieval, hotpot) -> None:
    run, qrels = hotpot
    qids = list(qrels)
    pairs = [("RR", "MRR"), ("RR@10", "MRR@10"), ("R@5", "Recall@5"), ("AP", "MAP"), ("AP@100", "MAP@100")]
    names = [name for pair in pairs for name in pair]
    out = retrieval.compute(predictions=_scored(run, qids), references=_graded(qrels, qids), query_ids=qids,
                            measures=names)  # fmt: skip
    assert list(out)[:len(names)] == names
    for theirs, ours in pairs:
        assert out[theirs] == out[ours]


def test_integer_ids_equal_string_ids(retrieval, hotpot) -> None:
    run, qrels = hotpot
    qids = list(qrels)
    groups = {q: q % 3 for q in qids}
    kwargs = {"measures": ["nDCG@10", "R@5", "MRR", "P@3"], "per_query": True}
    as_ints = retrieval.compute(predictions=_scored(run, qids), references=_graded(qrels, qids), query_ids=qids,
                                groups=groups, **kwargs)  # fmt: skip
    s_run, s_qrels = _as_strings(run), _as_strings(qrels)
    s_qids = [str(q) for q in qids]
    as_strings = retrieval.compute(predictions=_scored(s_run, s_qids), references=_graded(s_qrels, s_qids),
                                   query_ids=s_qids, groups={str(q): g for q, g in groups.items()}, **kwargs)
    assert as_ints == as_strings and set(as_ints["per_query"]) == set(s_qids)
    # ranked lists of ids and lists of relevant ids, integers against strings, numbered queries by default
    ranked = [sorted(run[q], key=lambda d: -run[q][d]) for q in qids]
    relevant = [[d for d, g in qrels[q].items() if g > 0] for q in qids]
    lists_ints = retrieval.compute(predictions=ranked, references=relevant, **kwargs)
    lists_strings = retrieval.compute(predictions=[[str(d) for d in r] for r in ranked],
                                      references=[[str(d) for d in r] for r in relevant], **kwargs)  # fmt: skip
    assert lists_ints == lists_strings and lists_ints["nDCG@10"] > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"predictions": [[3, "3"]], "references": [[3]]}, r"'3' and 3 name the same document"),
        ({"predictions": [[{"id": "7", "score": 1.0}, {"id": 7, "score": 0.5}]], "references": [[7]]},
         "name the same document"),
        ({"predictions": [[1]], "references": [[4, "4"]]}, "name the same document"),
        ({"predictions": [[True, 2]], "references": [[1]]}, r"True is not a document id"),
        ({"predictions": [[1]], "references": [[{"id": False, "grade": 1}]]}, "not a document id"),
        ({"predictions": [[3.0]], "references": [[3]]}, r"a string or an integer.*3\.0 \(float\)"),
        ({"predictions": [[1], [2]], "references": [[1], [2]], "query_ids": [5, "5"]}, "unique strings or integers"),
        ({"predictions": [[1]], "references": [[1]], "query_ids": [True]}, "not a query id"),
        ({"predictions": [[1], [2]], "references": [[1], [2]], "query_ids": [5, 6], "groups": {5: "a", "5": "b"}},
         "names a query twice"),
    ],
)
def test_id_errors(retrieval, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        retrieval.compute(**kwargs)


@pytest.mark.parametrize(
    ("name", "match"),
    [("ndcg@10", "unknown measure 'ndcg@10'.*case-sensitive"), ("RR(rel=2)", "parameters such as"),
     ("AP(judged_only=True)@10", "not supported"), ("R", "needs a cut-off"), ("Success", "needs a cut-off"),
     ("Recall", "needs a cut-off"), ("RR@0", "positive integer"), ("MRR@x", "unknown measure"),
     ("Judged@10", "unknown measure")],
)
def test_unknown_measure_names_are_errors(retrieval, name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        retrieval.compute(predictions=[[1, 2]], references=[[2]], measures=[name])


# --- generation ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generation():
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "generation"))


@pytest.fixture(scope="module")
def scorer():
    from convrag.metrics.generation.components import BertScorer

    return BertScorer()


@pytest.fixture(scope="module")
def pairs() -> tuple[list[str], list[str], list[list[str]]]:
    """Three answers (a supporting sentence of a HotpotQA question), references (another supporting sentence or
    the answer in a sentence) and passages (the question's supporting paragraphs)."""
    records = json.loads((DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json").read_text(encoding="utf-8"))
    predictions, references, passages = [], [], []
    for record in records[2:5]:
        context = {title: sentences for title, sentences in record["context"]}
        titles = list(dict.fromkeys(title for title, _ in record["supporting_facts"]))
        predictions.append(context[titles[0]][0].strip())
        references.append(f"{context[titles[1]][0].strip()} The answer is {record['answer']}.")
        passages.append(["".join(context[t]) for t in titles])
    return predictions, references, passages


def test_metric_names_case_insensitive(generation) -> None:
    from convrag.metrics.generation.generation import metric_names

    assert metric_names(["RB_ALG", "Rb-Llm", "RL_F"]) == ("rb_alg", "rb_llm", "rl_f")
    assert metric_names(["rougeL", "K-Precision", "RECALL", "rb-alg-raw"]) == ("rouge_l", "k_precision", "recall",
                                                                              "rb_alg_raw")  # fmt: skip
    for bad, match in ((["bleu"], "unknown metric 'bleu'"), (["rouge_l", "ROUGE-L"], "asked for twice"),
                       ([3], "unknown metric 3")):
        with pytest.raises(ValueError, match=match):
            metric_names(bad)
    lower = generation.compute(predictions=["It is Paris."], references=["Paris."], metrics=["rouge_l"])
    upper = generation.compute(predictions=["It is Paris."], references=["Paris."], metrics=["ROUGE-L"])
    assert upper["rouge_l"] == lower["rouge_l"] > 0 and upper["summary"]["metrics"] == ["rouge_l"]
    with pytest.raises(ValueError, match="unknown metric 'BLEU'"):
        generation.compute(predictions=["a"], references=["b"], metrics=["BLEU"])


def test_judged_metric_names_case_insensitive(generation) -> None:
    from convrag.llm import LLM
    from convrag.llm.backends.fake import FakeBackend

    def reply(messages: list[dict[str, str]]) -> str:
        return "Rating: [[7]]" if "Rating: [[N]]" in messages[-1]["content"] else "no"

    kwargs = {"predictions": ["Paris."], "references": ["Paris is the capital."], "passages": [["Paris is big."]],
              "conversations": [[{"speaker": "user", "text": "Capital of France?"}]], "n_bootstrap": 10}
    upper = generation.compute(judge=LLM(FakeBackend(responder=reply), cache=False), metrics=["RB_LLM"], **kwargs)
    lower = generation.compute(judge=LLM(FakeBackend(responder=reply), cache=False), metrics=["rb_llm"], **kwargs)
    assert upper["rb_llm"] == lower["rb_llm"] == 0.7 and upper["summary"]["metrics"] == ["rb_llm"]


def test_plain_call_computes_judge_free_components(generation, scorer, pairs) -> None:
    predictions, references, passages = pairs
    out = generation.compute(predictions=predictions, references=references, bertscore_model=scorer)
    rouge = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    expected_rouge = [rouge.score(r, p)["rougeL"].fmeasure for p, r in zip(predictions, references, strict=True)]
    _, bert_recall, _ = scorer.score(predictions, references)
    expected_recall = [(r + 1) / 2 for r in bert_recall]
    assert [row["rouge_l"] for row in out["per_task"]] == expected_rouge
    assert [row["recall"] for row in out["per_task"]] == pytest.approx(expected_recall, abs=1e-6)
    assert out["rouge_l"] == pytest.approx(math.fsum(expected_rouge) / 3, abs=1e-12)
    assert out["recall"] == pytest.approx(math.fsum(expected_recall) / 3, abs=1e-6)
    assert 0 < out["rouge_l"] < 1 and 0.5 < out["recall"] < 1
    # without passages K-Precision is left out and named, never a silent 0; the judged metrics are named too
    assert "k_precision" not in out and "rb_alg_raw" not in out
    assert set(out["not_computed"]) == {"k_precision", "rb_alg_raw", "rb_alg", "rb_llm", "rl_f"}
    assert "passages" in out["not_computed"]["k_precision"] and "judge" in out["not_computed"]["rb_alg"]
    assert out["summary"]["bertscore"]["model"].startswith("sentence-transformers/all-MiniLM-L6-v2")

    with_passages = generation.compute(predictions=predictions, references=references, passages=passages,
                                       bertscore_model=scorer, metrics=["K-Precision", "rb_alg_raw"])  # fmt: skip
    expected_k = []
    for prediction, texts in zip(predictions, passages, strict=True):
        precision, _, _ = scorer.score([prediction] * len(texts), texts)
        expected_k.append((max(precision) + 1) / 2)
    rows = with_passages["per_task"]
    assert [row["k_precision"] for row in rows] == pytest.approx(expected_k, abs=1e-6)
    assert max(expected_k) > 0.9  # each answer is a sentence of one of its passages
    for row, r, k, recall in zip(rows, expected_rouge, expected_k, expected_recall, strict=True):
        assert row["rb_alg_raw"] == pytest.approx(3 / (1 / recall + 1 / r + 1 / k), abs=1e-6)
    assert with_passages["not_computed"] == {} and set(with_passages["summary"]["metrics"]) == {"k_precision",
                                                                                                "rb_alg_raw"}
    with pytest.raises(ValueError, match="k_precision: needs passages"):
        generation.compute(predictions=predictions, references=references, metrics=["k_precision"])
