"""Build and run the configurations of a strategy space: chunk, filter, index, retrieve, rewrite, rerank.

Work is shared and kept: chunks per (chunking, filter), one index per (chunking, filter, retrieval), lists per
(configuration, query). A configuration's list for a query is its top-``depth`` chunk ids:

* ``rewriter: none``: the retriever's ranking; ``llm``: :class:`convrag.retrievers.llm_rewrite.QueryRewriter` (the
  original query and up to ``n_queries`` LLM variants, each searched ``depth_each`` deep, fused by RRF);
* ``reranker: none``: unchanged; ``llm``: :class:`convrag.retrievers.llm_rerank.ListwiseReranker` over the top ``depth``
  (option, default max(K, window)); ``cross-encoder``: :class:`convrag.retrievers.llm_rerank.CrossEncoderReranker`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from convrag.core.errors import ConvragError
from convrag.core.progress import scope
from convrag.seara.chunking import ChunkingReport, chunk_documents, filter_chunks
from convrag.seara.facts import Chunk
from convrag.seara.inputs import Document
from convrag.seara.space import Configuration, Option, Space

LLMFactory = Callable[[str], Any]


class Runner:
    """Runs configurations of ``space`` over ``docs`` for ``queries`` (``{query_id: text}``).

    ``llm``: a function from an LLM spec string (an option's ``model``, default ``"default"``) to an
    :class:`~convrag.llm.LLM`; called once per spec."""

    def __init__(self, space: Space, docs: Sequence[Document], queries: Mapping[str, str], llm: LLMFactory, *,
                 progress: bool = False, echo: Callable[[str], None] | None = print) -> None:
        self.space, self.docs, self.queries = space, docs, dict(queries)
        self._llm_factory, self.progress, self.echo = llm, progress, echo
        self._llms: dict[str, Any] = {}
        self._chunks: dict[tuple[str, str], dict[str, Chunk]] = {}
        self.dropped: dict[tuple[str, str], int] = {}
        self.chunking_reports: dict[str, ChunkingReport] = {}
        self._indexes: dict[tuple[str, str, str], Any] = {}
        self._components: dict[tuple[str, str], Any] = {}
        self._lists: dict[str, dict[str, list[str]]] = {}
        #: text and source document of every chunk made so far
        self.texts: dict[str, str] = {}
        self.doc_of: dict[str, str] = {}
        #: every chunk made so far, by id (fact-level scoring reads their offsets)
        self.chunk_table: dict[str, Chunk] = {}

    # ----------------------------------------------------------------------------------------- shared work
    def llm(self, spec: str | None) -> Any:
        key = spec or "default"
        if key not in self._llms:
            self._llms[key] = self._llm_factory(key)
        return self._llms[key]

    def chunks(self, chunking: str, filter_name: str) -> dict[str, Chunk]:
        """``{chunk_id: Chunk}`` of one chunking after one filter (dropped chunks counted in ``dropped``)."""
        key = (chunking, filter_name)
        if key not in self._chunks:
            option = self.space.option("chunking", chunking)
            params = {k: v for k, v in option.params.items() if k != "strategy"}
            counts = self.chunking_reports[chunking] = ChunkingReport()
            made = chunk_documents(self.docs, str(option.params["strategy"]), report=counts, **params)
            rule = self.space.option("filter", filter_name).params
            bounds = {"min_chars": int(rule.get("min_chars", 0)), "max_chars": rule.get("max_chars")}
            kept, dropped = filter_chunks(made, **bounds) if rule else (made, 0)
            if not kept:
                raise ConvragError(f"chunking {chunking!r} with filter {filter_name!r} leaves no chunk to retrieve")
            self._chunks[key] = {c.chunk_id: c for c in kept}
            self.dropped[key] = dropped
            for c in kept:
                self.texts[c.chunk_id] = c.text
                self.doc_of[c.chunk_id] = c.doc_id
                self.chunk_table[c.chunk_id] = c
        return self._chunks[key]

    def index(self, chunking: str, filter_name: str, retrieval: str) -> Any:
        """The retriever of ``retrieval`` indexed over those chunks (built once)."""
        from convrag.retrievers import get_retriever

        key = (chunking, filter_name, retrieval)
        if key not in self._indexes:
            option = self.space.option("retrieval", retrieval)
            options = dict(option.params.get("options") or {})
            retriever = get_retriever(str(option.params["retriever"]), show_progress=self.progress, **options)
            titles = {d: t for d, t, _ in self.docs}
            rows = [{"_id": c.chunk_id, "title": titles.get(c.doc_id, ""), "text": c.text}
                    for c in self.chunks(chunking, filter_name).values()]  # fmt: skip
            with scope("select", f"chunking {chunking}", f"filter {filter_name}", retrieval):
                self._indexes[key] = retriever.index(rows)
        return self._indexes[key]

    def _component(self, option: Option) -> Any:
        key = (option.dimension, option.name)
        if key not in self._components:
            p = option.params
            if option.dimension == "rewriter":
                from convrag.retrievers.llm_rewrite import QueryRewriter

                made: Any = QueryRewriter(self.llm(p.get("model")), n_queries=int(p.get("n_queries", 4)),
                                          depth_each=int(p.get("depth_each", self.space.depth)),
                                          rrf_k=int(p.get("rrf_k", 60)))  # fmt: skip
            elif option.kind == "llm":
                from convrag.retrievers.llm_rerank import ListwiseReranker

                made = ListwiseReranker(self.llm(p.get("model")), window=int(p.get("window", 20)),
                                        stride=int(p.get("stride", 10)), doc_chars=int(p.get("doc_chars", 500)))
            else:
                from convrag.retrievers.llm_rerank import CrossEncoderReranker

                made = CrossEncoderReranker(str(p["path"]), batch_size=int(p.get("batch_size", 32)))
            self._components[key] = made
        return self._components[key]

    # ----------------------------------------------------------------------------------------- lists
    def _retrieve(self, config: Configuration, qids: Sequence[str], depth: int) -> dict[str, list[str]]:
        retriever = self.index(config.get("chunking"), config.get("filter"), config.get("retrieval"))

        def search(queries: Mapping[str, str], k: int) -> dict[str, list[str]]:
            return {q: list(r) for q, r in retriever.search(dict(queries), top_k=k, show_progress=False).items()}

        queries = {q: self.queries[q] for q in qids}
        rewriter = self.space.option("rewriter", config.get("rewriter"))
        if rewriter.kind == "none":
            return search(queries, depth)
        return self._component(rewriter).retrieve(search, queries, depth)

    def run(self, config: Configuration, qids: Sequence[str]) -> dict[str, list[str]]:
        """The configuration's top-K list for each of ``qids`` (computed once per query)."""
        done = self._lists.setdefault(config.name, {})
        todo = [q for q in qids if q not in done]
        unknown = [q for q in todo if q not in self.queries]
        if unknown:
            raise ConvragError(f"unknown query ids {unknown[:5]}")
        if todo:
            k = self.space.depth
            reranker = self.space.option("reranker", config.get("reranker"))
            depth = max(k, int(reranker.params.get("depth", max(k, int(reranker.params.get("window", 20))))))
            lists = self._retrieve(config, todo, depth if reranker.kind != "none" else k)
            if reranker.kind != "none":
                lists = self._component(reranker).rerank({q: self.queries[q] for q in todo}, lists, self.texts,
                                                         depth=depth)  # fmt: skip
            for q in todo:
                done[q] = list(lists.get(q, []))[:k]
        return {q: done[q] for q in qids}

    def report(self) -> dict[str, Any]:
        """Chunk counts per (chunking, filter), dropped chunks, and each LLM component's call report."""
        return {
            "chunks": {f"{c}/{f}": len(v) for (c, f), v in self._chunks.items()},
            "filtered_out": {f"{c}/{f}": n for (c, f), n in self.dropped.items()},
            "documents_without_chunks": {c: r.empty_documents for c, r in self.chunking_reports.items()},
            "components": {f"{d}:{n}": comp.report() for (d, n), comp in self._components.items()
                           if hasattr(comp, "report")},
        }  # fmt: skip
