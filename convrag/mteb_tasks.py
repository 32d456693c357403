"""mteb retrieval tasks for folders written by ``convrag build`` (or pushed from them to the Hub).

``mteb.evaluate(model, convrag.mteb_tasks.get("recor", path_or_repo))`` runs mteb's own retrieval evaluation on a
built folder: one ``AbsTaskRetrieval`` subclass per benchmark, with complete ``TaskMetadata``; :func:`get` sets the
dataset path and revision and keeps the folder's subsets. mteb reads the configs of :mod:`convrag.hub.mteb_layout`:

* StratRAG: each query's 15-document pool (``top_ranked``), so scores are over pools, as in the paper; main score
  nDCG@5 within the pool (its Tables 2-3 report R@1, R@2, R@5, MRR and nDCG@5).
* RECOR: one subset per domain, the current turn's query (``baseline``) over the domain's corpus; nDCG@10.
* MTRAG, MTRAG-UN: one subset per domain, the ``lastturn`` view over the cited-passage corpus when the full corpus
  was not built; nDCG@5 (SemEval-2026 Task 8, Subtask A's ranking measure).
* MTR-Bench: the flat ``query`` config (the current turn's query) over the full corpus; nDCG@20.

mteb's subset mean is a macro average over domains, not MTRAG's official "all" row (weighted by scored tasks).
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path
from typing import Any

from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.task_metadata import TaskMetadata

from convrag.builders.mtrag_un import DOMAINS as MTRAG_DOMAINS
from convrag.builders.recor_source import DOMAINS as RECOR_DOMAINS
from convrag.core.errors import ConvragError
from convrag.hub.repo import REPO_ID

#: ``dataset`` of the class-level metadata: a placeholder that :func:`get` replaces with a real path and revision
UNBUILT = {"path": "convrag-build", "revision": "unbuilt"}
ENG = ["eng-Latn"]


def _bibtex(card: str) -> str:
    """The BibTeX block of a shipped dataset card (without its Jinja ``raw`` markers)."""
    text = importlib.resources.files("convrag.dataset_cards").joinpath(card).read_text(encoding="utf-8")
    match = re.search(r"```bibtex\n(.*?)```", text, re.S)
    return match.group(1).replace("{% raw %}", "").replace("{% endraw %}", "").strip() if match else ""


def _metadata(**fields: Any) -> TaskMetadata:
    """A complete ``TaskMetadata`` for a retrieval task over English text."""
    common = {"dataset": UNBUILT, "type": "Retrieval", "category": "t2t", "modalities": ["text"], "dialect": []}
    return TaskMetadata(**common, **fields)


class StratRAG(AbsTaskRetrieval):
    """StratRAG: multi-hop questions, each ranked within its own 15-document pool."""

    metadata = _metadata(
        name="StratRAG", description="Multi-hop retrieval over 15-document pools built from HotpotQA (distractor "
        "setting): 2 gold and 13 distractor paragraphs per question; documents are ranked within each query's pool.",
        reference="https://arxiv.org/abs/2604.22757", eval_splits=["validation"], eval_langs=ENG,
        main_score="ndcg_at_5", date=("2017-10-01", "2026-04-30"), domains=["Encyclopaedic", "Written"],
        task_subtypes=["Question answering"], license="cc-by-sa-4.0", annotations_creators="human-annotated",
        sample_creation="found", bibtex_citation=_bibtex("stratrag.md"),
    )  # fmt: skip


class RECOR(AbsTaskRetrieval):
    """RECOR: reasoning-heavy multi-turn conversational retrieval, one subset per domain."""

    metadata = _metadata(
        name="RECOR", description="Reasoning-focused multi-turn conversational retrieval: BRIGHT and StackExchange "
        "questions broken into follow-up turns; each turn's query is searched in its domain's corpus.",
        reference="https://arxiv.org/abs/2601.05461", eval_splits=["test"],
        eval_langs={d: ENG for d in RECOR_DOMAINS}, main_score="ndcg_at_10", date=("2023-01-01", "2026-01-09"),
        domains=["Academic", "Web", "Written"], task_subtypes=["Conversational retrieval"],
        license="https://huggingface.co/datasets/RECOR-Benchmark/RECOR",
        annotations_creators="LM-generated and reviewed",
        sample_creation="LM-generated and verified", bibtex_citation=_bibtex("recor.md"),
    )  # fmt: skip


class MTRAG(AbsTaskRetrieval):
    """MTRAG: human multi-turn RAG conversations, one subset per domain (``lastturn`` view)."""

    metadata = _metadata(
        name="MTRAG", description="Multi-turn RAG conversations held by annotators with a live agent over four "
        "collections; each scored task's last user question (lastturn view) is searched in its domain's corpus "
        "(the cited-passage corpus when the full corpus was not built).",
        reference="https://github.com/IBM/mt-rag-benchmark", eval_splits=["test"],
        eval_langs={d: ENG for d in MTRAG_DOMAINS}, main_score="ndcg_at_5", date=("2024-05-01", "2024-12-31"),
        domains=["Encyclopaedic", "Financial", "Government", "Web", "Written"],
        task_subtypes=["Conversational retrieval"], license="apache-2.0", annotations_creators="human-annotated",
        sample_creation="created", bibtex_citation=_bibtex("mtrag.md"),
    )  # fmt: skip


class MTRAGUN(AbsTaskRetrieval):
    """MTRAG-UN: MTRAG's follow-up with unanswerable, underspecified and other open challenges."""

    metadata = _metadata(
        name="MTRAG-UN", description="Multi-turn RAG conversations on MTRAG's four collections with open challenges "
        "(unanswerable, underspecified, non-standalone turns); each scored task's last user question (lastturn "
        "view) is searched in its domain's corpus (the cited-passage corpus when the full corpus was not built).",
        reference="https://arxiv.org/abs/2602.23184", eval_splits=["test"],
        eval_langs={d: ENG for d in MTRAG_DOMAINS}, main_score="ndcg_at_5", date=("2024-05-01", "2026-02-27"),
        domains=["Encyclopaedic", "Financial", "Government", "Web", "Written"],
        task_subtypes=["Conversational retrieval"], license="apache-2.0", annotations_creators="human-annotated",
        sample_creation="created", bibtex_citation=_bibtex("mtrag-un.md"),
    )  # fmt: skip


class MTRBench(AbsTaskRetrieval):
    """MTR-Bench: synthetic 12-turn conversations with topic switches over Wikipedia 2025-01."""

    metadata = _metadata(
        name="MTR-Bench", description="Synthetic multi-turn conversational retrieval with topic switches over "
        "Wikipedia (2025-01); each turn's current query (the flat `query` config) is searched in the full corpus "
        "for its one gold document.",
        reference="https://github.com/rangehow/mtr-suite", eval_splits=["test"], eval_langs=ENG,
        main_score="ndcg_at_20", date=("2025-01-01", "2026-03-31"), domains=["Encyclopaedic", "Written"],
        task_subtypes=["Conversational retrieval"],
        license="https://huggingface.co/datasets/OkayestProgrammer/mtr-qwen35-fp8-12turn",
        annotations_creators="LM-generated", sample_creation="LM-generated and verified",
        bibtex_citation=_bibtex("mtr-bench.md"),
    )  # fmt: skip


#: benchmark (as ``convrag build`` names it) -> its task class
TASKS: dict[str, type[AbsTaskRetrieval]] = {
    "stratrag": StratRAG, "recor": RECOR, "mtrag": MTRAG, "mtrag-un": MTRAGUN, "mtr-bench": MTRBench,
}  # fmt: skip


def _dataset(name: str, path_or_repo: str) -> dict[str, str]:
    """mteb's ``dataset`` entry: a built folder's path with revision ``convrag-<benchmark>-<builder version>`` from
    its manifest (which must name ``name``), or a Hub repo with the revision given (``org/name@rev``) or else the
    commit sha the Hub resolves now."""
    if Path(path_or_repo).exists():
        from convrag.core.manifest import read_manifest

        manifest = read_manifest(path_or_repo)
        if manifest.get("benchmark") != name:
            raise ConvragError(f"{path_or_repo}: built for {manifest.get('benchmark')!r}, not {name!r}")
        return {"path": str(path_or_repo), "revision": f"convrag-{name}-{manifest.get('builder_version')}"}
    match = REPO_ID.match(path_or_repo)
    if not match:
        raise ConvragError(f"{path_or_repo}: no such folder, and not a Hub dataset repo id (org/name[@revision])")
    repo, revision = match.group("repo"), match.group("revision")
    if not revision:
        from huggingface_hub import HfApi

        try:
            revision = HfApi().dataset_info(repo).sha
        except Exception as err:  # noqa: BLE001 (offline, missing repo, no access: one line either way)
            raise ConvragError(f"{path_or_repo}: cannot resolve its revision on the Hub ({type(err).__name__}); "
                               "give org/name@revision") from None  # fmt: skip
    return {"path": repo, "revision": str(revision)}


def get(name: str, path_or_repo: str) -> AbsTaskRetrieval:
    """The mteb task of benchmark ``name`` reading ``path_or_repo`` (a built folder or ``org/name[@revision]``).

    Subsets (domains) are those the folder has ``<subset>-corpus``, ``-queries`` and ``-qrels`` configs for."""
    if name not in TASKS:
        raise ConvragError(f"no mteb task for {name!r}; known: {', '.join(sorted(TASKS))}")
    cls = TASKS[name]
    dataset = _dataset(name, path_or_repo)
    update: dict[str, Any] = {"dataset": dataset}
    langs = cls.metadata.eval_langs
    if isinstance(langs, dict):
        from datasets import get_dataset_config_names

        configs = set(get_dataset_config_names(dataset["path"], revision=dataset["revision"]))
        kept = {s: v for s, v in langs.items() if {f"{s}-corpus", f"{s}-queries", f"{s}-qrels"} <= configs}
        if not kept:
            raise ConvragError(f"{path_or_repo}: no {name} subset has corpus, queries and qrels configs")
        update["eval_langs"] = kept
    bound = type(cls.__name__, (cls,), {"metadata": cls.metadata.model_copy(update=update), "__doc__": cls.__doc__})
    return bound()
