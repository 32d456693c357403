"""Baseline retrievers behind one interface.

``get_retriever(spec, **options)`` builds one from a spec string (``random``, ``bm25``, ``bm25s``, ``dense``,
``dense:PATH_OR_NAME``, ``hybrid``, ``rrf:bm25+dense``, ``dual:QUERY_MODEL,CONTEXT_MODEL``);
``available_retrievers()`` lists the names.
Every retriever is used as ``r.index(corpus)`` then ``r.search(queries, top_k=None, pools=None)``, which
returns ``{query_id: {doc_id: score}}`` in rank order (see ``convrag.retrievers.base``).
"""

from convrag.retrievers.base import Retriever, Run, ranked_order
from convrag.retrievers.dense import DenseRetriever
from convrag.retrievers.dual import DualEncoderRetriever
from convrag.retrievers.encoders import default_model_path
from convrag.retrievers.fusion import HybridRetriever, RRFRetriever, minmax_normalize
from convrag.retrievers.lexical import BM25Retriever, BM25SRetriever, whitespace_tokenize
from convrag.retrievers.random_retriever import RandomRetriever
from convrag.retrievers.registry import (
    RETRIEVERS,
    RetrieverSpecError,
    available_retrievers,
    get_retriever,
    register_retriever,
    split_specs,
)

for _builtin in (RandomRetriever, BM25Retriever, BM25SRetriever, DenseRetriever, HybridRetriever, RRFRetriever,
             DualEncoderRetriever):
    register_retriever(_builtin)

__all__ = [
    "RETRIEVERS",
    "BM25Retriever",
    "BM25SRetriever",
    "DenseRetriever",
    "DualEncoderRetriever",
    "HybridRetriever",
    "RRFRetriever",
    "RandomRetriever",
    "Retriever",
    "RetrieverSpecError",
    "Run",
    "available_retrievers",
    "default_model_path",
    "get_retriever",
    "minmax_normalize",
    "ranked_order",
    "register_retriever",
    "split_specs",
    "whitespace_tokenize",
]
