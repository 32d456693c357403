"""mteb retrieval tasks for folders written by ``convrag build`` (or pushed from them to the Hub).

``mteb.evaluate(model, convrag.mteb_tasks.get("recor", path_or_repo))`` runs mteb's own retrieval evaluation on a
built folder: one ``AbsTaskRetrieval`` subclass per benchmark and view, with complete ``TaskMetadata``; :func:`get`
sets the dataset path and revision and keeps the folder's subsets. The **current-turn view** (``view="turn"``, the
default) reads the configs of :mod:`convrag.hub.mteb_layout`:

* StratRAG: each query's 15-document pool (``top_ranked``), so scores are over pools, as in the paper; main score
  nDCG@5 within the pool (its Tables 2-3 report R@1, R@2, R@5, MRR and nDCG@5).
* RECOR: one subset per domain, the current turn's query (``baseline``) over the domain's corpus; nDCG@10.
* MTRAG, MTRAG-UN: one subset per domain, the ``lastturn`` view over the cited-passage corpus when the full corpus
  was not built; nDCG@5 (SemEval-2026 Task 8, Subtask A's ranking measure).
* MTR-Bench: the flat ``query`` config (the current turn's query) over the full corpus; nDCG@20.

The **conversation view** (``view="conversation"``: RECOR, MTRAG, MTRAG-UN, MTR-Bench) has the same corpus, qrels,
subsets and main score, and gives mteb each turn's whole conversation as its query: a list of ``{role, content}``
messages, mteb's conversational query format, read from the turns config ``convrag evaluate`` reads (RECOR's
``history``, MTRAG's task ``input``, MTR-Bench's ``history`` list) and ending with the current query as a ``user``
message. mteb encodes it as ``role: content`` parts joined by ``"; "``, which is ``convrag evaluate --strategies
conversation`` (:mod:`convrag.retrievers.conversation`).

A built folder's revision is a digest of its data files (:func:`convrag.hub.mteb_layout.content_revision`); a Hub
repo's is the revision given or the commit the Hub resolves now. mteb's subset mean is a macro average over domains,
not MTRAG's official "all" row (weighted by scored tasks).
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path
from typing import Any, ClassVar

from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.task_metadata import TaskMetadata

from convrag.builders.mtrag_un import DOMAINS as MTRAG_DOMAINS
from convrag.builders.recor_source import DOMAINS as RECOR_DOMAINS
from convrag.core.errors import ConvragError, DataError
from convrag.hub.repo import REPO_ID

#: ``dataset`` of the class-level metadata: a placeholder that :func:`get` replaces with a real path and revision
UNBUILT = {"path": "convrag-build", "revision": "unbuilt"}
ENG = ["eng-Latn"]
#: the views :func:`get` serves: the current turn (every benchmark) and the whole conversation (multi-turn ones)
VIEWS = ("turn", "conversation")


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
    """RECOR: reasoning-heavy multi-turn conversational retrieval, one subset per domain (current-turn view)."""

    metadata = _metadata(
        name="RECOR", description="Reasoning-focused multi-turn conversational retrieval: BRIGHT and StackExchange "
        "questions broken into follow-up turns. Current-turn view: each turn's query (the `text` of "
        "`<domain>-queries`, the `baseline` strategy) is searched in its domain's corpus; the history is not read "
        "(RECOR-Conversation reads it).",
        reference="https://arxiv.org/abs/2601.05461", eval_splits=["test"],
        eval_langs={d: ENG for d in RECOR_DOMAINS}, main_score="ndcg_at_10", date=("2023-01-01", "2026-01-09"),
        domains=["Academic", "Web", "Written"], task_subtypes=["Conversational retrieval"],
        license="https://huggingface.co/datasets/RECOR-Benchmark/RECOR",
        annotations_creators="LM-generated and reviewed",
        sample_creation="LM-generated and verified", bibtex_citation=_bibtex("recor.md"),
    )  # fmt: skip


class MTRAG(AbsTaskRetrieval):
    """MTRAG: human multi-turn RAG conversations, one subset per domain (current-turn view: ``lastturn``)."""

    metadata = _metadata(
        name="MTRAG", description="Multi-turn RAG conversations held by annotators with a live agent over four "
        "collections. Current-turn view: each scored task's last user question (the `<domain>-lastturn` view) is "
        "searched in its domain's corpus (the cited-passage corpus when the full corpus was not built); the "
        "conversation is not read (MTRAG-Conversation reads it).",
        reference="https://github.com/IBM/mt-rag-benchmark", eval_splits=["test"],
        eval_langs={d: ENG for d in MTRAG_DOMAINS}, main_score="ndcg_at_5", date=("2024-05-01", "2024-12-31"),
        domains=["Encyclopaedic", "Financial", "Government", "Web", "Written"],
        task_subtypes=["Conversational retrieval"], license="apache-2.0", annotations_creators="human-annotated",
        sample_creation="created", bibtex_citation=_bibtex("mtrag.md"),
    )  # fmt: skip


class MTRAGUN(AbsTaskRetrieval):
    """MTRAG-UN: MTRAG's follow-up with unanswerable, underspecified and other open challenges (current turn)."""

    metadata = _metadata(
        name="MTRAG-UN", description="Multi-turn RAG conversations on MTRAG's four collections with open challenges "
        "(unanswerable, underspecified, non-standalone turns). Current-turn view: each scored task's last user "
        "question (the `<domain>-lastturn` view) is searched in its domain's corpus (the cited-passage corpus when "
        "the full corpus was not built); the conversation is not read (MTRAG-UN-Conversation reads it).",
        reference="https://arxiv.org/abs/2602.23184", eval_splits=["test"],
        eval_langs={d: ENG for d in MTRAG_DOMAINS}, main_score="ndcg_at_5", date=("2024-05-01", "2026-02-27"),
        domains=["Encyclopaedic", "Financial", "Government", "Web", "Written"],
        task_subtypes=["Conversational retrieval"], license="apache-2.0", annotations_creators="human-annotated",
        sample_creation="created", bibtex_citation=_bibtex("mtrag-un.md"),
    )  # fmt: skip


class MTRBench(AbsTaskRetrieval):
    """MTR-Bench: synthetic 12-turn conversations with topic switches over Wikipedia 2025-01 (current turn)."""

    metadata = _metadata(
        name="MTR-Bench", description="Synthetic multi-turn conversational retrieval with topic switches over "
        "Wikipedia (2025-01). Current-turn view: each turn's query (the `text` of the flat `query` config, "
        "MTR-Suite's `lastturn`) is searched in the full corpus for its one gold document; the history is not read "
        "(MTR-Bench-Conversation reads it).",
        reference="https://github.com/rangehow/mtr-suite", eval_splits=["test"], eval_langs=ENG,
        main_score="ndcg_at_20", date=("2025-01-01", "2026-03-31"), domains=["Encyclopaedic", "Written"],
        task_subtypes=["Conversational retrieval"],
        license="https://huggingface.co/datasets/OkayestProgrammer/mtr-qwen35-fp8-12turn",
        annotations_creators="LM-generated", sample_creation="LM-generated and verified",
        bibtex_citation=_bibtex("mtr-bench.md"),
    )  # fmt: skip


#: benchmark (as ``convrag build`` names it) -> its task class (current-turn view)
TASKS: dict[str, type[AbsTaskRetrieval]] = {
    "stratrag": StratRAG, "recor": RECOR, "mtrag": MTRAG, "mtrag-un": MTRAGUN, "mtr-bench": MTRBench,
}  # fmt: skip

_CONVERSATION = ("as `{role, content}` messages, mteb's conversational query (mteb encodes it as `role: content` "
                 "parts joined by `; `, the `conversation` strategy of `convrag evaluate`)")  # fmt: skip


class ConversationView(AbsTaskRetrieval):
    """A conversation view: corpus, qrels and subsets as the current-turn view (mteb's loader reads them), queries
    each turn's whole conversation as ``{role, content}`` messages, read from the turns config of ``benchmark``'s
    profile (:func:`convrag.hub.mteb_layout.conversations`) and ending with the current query as a ``user``
    message."""

    benchmark: ClassVar[str] = ""

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        """mteb's load (corpus, qrels, the current-turn queries), then every split's queries replaced by the
        conversations of the same query ids (a ``DataError`` naming the config when one has no conversation)."""
        if self.data_loaded:
            return
        super().load_data(num_proc=num_proc, **kwargs)
        import datasets

        from convrag.builders import get_builder_class
        from convrag.hub.mteb_layout import conversation_config, conversations

        profile = get_builder_class(self.benchmark).EVALUATION
        path, revision = self.metadata.dataset["path"], self.metadata.dataset["revision"]
        features = datasets.Features({"id": datasets.Value("string"), "text": datasets.List(
            {"role": datasets.Value("string"), "content": datasets.Value("string")})})  # fmt: skip
        for subset, splits in self.dataset.items():
            config = conversation_config(profile, "" if subset == "default" else subset)
            for split, data in splits.items():
                rows = datasets.load_dataset(path, config, split=split, revision=revision).to_list()
                found = conversations(profile, rows, lambda line, c=config: (f"{path}/{c}", line))
                ids = [str(i) for i in data["queries"]["id"]]
                missing = [i for i in ids if i not in found]
                if missing:
                    raise DataError(f"{len(missing)} queries have no conversation (first: {missing[0]!r})",
                                    f"{path}/{config}")  # fmt: skip
                data["queries"] = datasets.Dataset.from_dict({"id": ids, "text": [found[i] for i in ids]}, features)


def _conversation_metadata(base: type[AbsTaskRetrieval], reads: str) -> TaskMetadata:
    """``base``'s metadata for its conversation view: named ``<name>-Conversation``, described by ``reads``."""
    description = f"{base.metadata.description.split(' Current-turn view:')[0]} Conversation view: {reads}"
    return base.metadata.model_copy(update={"name": f"{base.metadata.name}-Conversation", "description": description})


class RECORConversation(ConversationView):
    """RECOR-Conversation: RECOR with each turn's whole conversation as the query."""

    benchmark = "recor"
    metadata = _conversation_metadata(RECOR, (
        "each turn's conversation (the earlier turns of `<domain>-queries` `history`, the release's `Q:` / `A:` text "
        f"read as user / assistant messages, then the current query) {_CONVERSATION}, searched in its domain's "
        "corpus (RECOR's `history` strategy reads the same turns as `Q:` / `A:` lines)."))  # fmt: skip


_MTRAG_READS = (
    "each scored task's conversation (the `input` of `<domain>-tasks`: earlier user and agent messages, agent read as "
    f"assistant, then the task's question) {_CONVERSATION}, searched in its domain's corpus (the cited-passage corpus "
    "when the full corpus was not built); subsets need the `<domain>-tasks` config."
)


class MTRAGConversation(ConversationView):
    """MTRAG-Conversation: MTRAG with each task's whole conversation as the query."""

    benchmark = "mtrag"
    metadata = _conversation_metadata(MTRAG, _MTRAG_READS)


class MTRAGUNConversation(ConversationView):
    """MTRAG-UN-Conversation: MTRAG-UN with each task's whole conversation as the query."""

    benchmark = "mtrag-un"
    metadata = _conversation_metadata(MTRAGUN, _MTRAG_READS)


class MTRBenchConversation(ConversationView):
    """MTR-Bench-Conversation: MTR-Bench with each turn's history and query as the query."""

    benchmark = "mtr-bench"
    metadata = _conversation_metadata(MTRBench, (
        f"each turn's conversation (the `history` messages of `queries`, then the current query) {_CONVERSATION}, "
        "searched in the full corpus for its one gold document (MTR-Suite's `history` protocol, the `dialogue` "
        "strategy, reads the same messages as `User:` / `Agent:` lines)."))  # fmt: skip


#: benchmark -> its conversation-view task class (the multi-turn benchmarks)
CONVERSATION_TASKS: dict[str, type[ConversationView]] = {
    "recor": RECORConversation, "mtrag": MTRAGConversation, "mtrag-un": MTRAGUNConversation,
    "mtr-bench": MTRBenchConversation,
}  # fmt: skip


def _dataset(name: str, path_or_repo: str) -> dict[str, str]:
    """mteb's ``dataset`` entry: a built folder's path (its manifest must name ``name``) with the digest of its data
    files as revision (:func:`convrag.hub.mteb_layout.content_revision`), or a Hub repo with the revision given
    (``org/name@rev``) or else the commit sha the Hub resolves now."""
    if Path(path_or_repo).exists():
        from convrag.core.manifest import read_manifest
        from convrag.hub.mteb_layout import content_revision

        manifest = read_manifest(path_or_repo)
        if manifest.get("benchmark") != name:
            raise ConvragError(f"{path_or_repo}: built for {manifest.get('benchmark')!r}, not {name!r}")
        return {"path": str(path_or_repo), "revision": content_revision(path_or_repo)}
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


def get(name: str, path_or_repo: str, view: str = "turn") -> AbsTaskRetrieval:
    """The mteb task of benchmark ``name`` reading ``path_or_repo`` (a built folder or ``org/name[@revision]``), in
    ``view`` ``turn`` (the current turn's query) or ``conversation`` (the whole conversation as messages).

    Subsets (domains) are those the folder has ``<subset>-corpus``, ``-queries`` and ``-qrels`` configs for, and
    in the conversation view the turns config too (MTRAG: ``<subset>-tasks``)."""
    if view not in VIEWS:
        raise ConvragError(f"unknown mteb view {view!r}; known: {', '.join(VIEWS)}")
    tasks = TASKS if view == "turn" else CONVERSATION_TASKS
    if name not in tasks:
        raise ConvragError(f"no mteb task for {name!r} in the {view} view; known: {', '.join(sorted(tasks))}")
    cls = tasks[name]
    dataset = _dataset(name, path_or_repo)
    update: dict[str, Any] = {"dataset": dataset}
    langs = cls.metadata.eval_langs
    if isinstance(langs, dict) or view == "conversation":
        from datasets import get_dataset_config_names

        from convrag.builders import get_builder_class
        from convrag.hub.mteb_layout import conversation_config

        configs = set(get_dataset_config_names(dataset["path"], revision=dataset["revision"]))
        profile = get_builder_class(name).EVALUATION

        def readable(subset: str) -> bool:
            wanted = {f"{subset}-corpus", f"{subset}-queries", f"{subset}-qrels"} if subset else set()
            return wanted | ({conversation_config(profile, subset)} if view == "conversation" else set()) <= configs

        if isinstance(langs, dict):
            kept = {s: v for s, v in langs.items() if readable(s)}
            if not kept:
                raise ConvragError(f"{path_or_repo}: no {name} subset has the configs the {view} view reads")
            update["eval_langs"] = kept
        elif not readable(""):
            raise ConvragError(f"{path_or_repo}: no {conversation_config(profile, '')} config to read conversations")
    bound = type(cls.__name__, (cls,), {"metadata": cls.metadata.model_copy(update=update), "__doc__": cls.__doc__})
    return bound()
