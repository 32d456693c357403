"""Retriever registry and the spec-string factory used by the CLI (``--retrievers random,bm25,dense,hybrid``).

Spec strings (``NAME`` or ``NAME:ARGUMENT``):

* ``random`` / ``random:SEED``: uniform random scores (``seed`` option, default 0);
* ``bm25``: rank-bm25 Okapi BM25, StratRAG tokenisation;
* ``bm25s``: bm25s BM25 (large corpora);
* ``dense`` / ``dense:PATH_OR_NAME``: sentence-transformers cosine similarity (default: shipped MiniLM);
* ``hybrid`` / ``hybrid:PATH_OR_NAME``: StratRAG's min-max hybrid of bm25 and dense (argument = dense model);
* ``rrf`` / ``rrf:SPEC+SPEC+...``: reciprocal rank fusion of the given specs (default ``bm25+dense``).

Keyword options go to the retriever's constructor (``get_retriever("hybrid", alpha=0.3)``). A spec's argument
and an option may not both set the same setting.
"""

from __future__ import annotations

from typing import Any

from convrag.errors import ConvragError
from convrag.retrievers.base import Retriever
from convrag.retrievers.dense import DenseRetriever
from convrag.retrievers.fusion import HybridRetriever, RRFRetriever
from convrag.retrievers.lexical import BM25Retriever, BM25SRetriever
from convrag.retrievers.random_retriever import RandomRetriever


class RetrieverSpecError(ConvragError, ValueError):
    """A retriever spec string names no registered retriever or has a bad argument."""


RETRIEVERS: dict[str, type[Retriever]] = {}

#: Which constructor option a spec's ``NAME:ARGUMENT`` sets, per retriever name.
_ARGUMENT_OPTION = {"random": "seed", "dense": "model", "hybrid": "model", "rrf": "retrievers"}


def register_retriever(cls: type[Retriever], name: str | None = None, argument_option: str | None = None) -> None:
    """Add a retriever class to the registry under ``name`` (default ``cls.name``).

    ``argument_option`` names the constructor option that ``NAME:ARGUMENT`` sets (none: no argument allowed).
    """
    key = name or cls.name
    RETRIEVERS[key] = cls
    if argument_option:
        _ARGUMENT_OPTION[key] = argument_option


def available_retrievers() -> list[str]:
    """Registered retriever names, in registration order."""
    return list(RETRIEVERS)


def get_retriever(spec: str, **options: Any) -> Retriever:
    """Build the retriever a spec string names (see module docstring), passing ``options`` to it."""
    name, sep, argument = spec.strip().partition(":")
    name = name.strip().lower()
    if name not in RETRIEVERS:
        raise RetrieverSpecError(f"unknown retriever {name!r} in spec {spec!r}; known: {', '.join(RETRIEVERS)}")
    if sep:
        option = _ARGUMENT_OPTION.get(name)
        if option is None:
            raise RetrieverSpecError(f"retriever {name!r} takes no ':' argument (spec {spec!r})")
        if not argument.strip():
            raise RetrieverSpecError(f"empty argument after ':' in spec {spec!r}")
        if option in options:
            raise RetrieverSpecError(f"spec {spec!r} and option {option}= both set {option!r}")
        options[option] = _parse_argument(name, argument.strip(), spec)
    return RETRIEVERS[name](**options)


def _parse_argument(name: str, argument: str, spec: str) -> Any:
    if name == "random":
        try:
            return int(argument)
        except ValueError:
            raise RetrieverSpecError(f"random seed must be an integer in spec {spec!r}") from None
    if name == "rrf":
        parts = [p.strip() for p in argument.split("+")]
        if any(not p for p in parts):
            raise RetrieverSpecError(f"empty component in spec {spec!r}")
        return parts  # spec strings: RRFRetriever builds them (and can pass dense_options on)
    return argument


for _cls in (RandomRetriever, BM25Retriever, BM25SRetriever, DenseRetriever, HybridRetriever, RRFRetriever):
    register_retriever(_cls)
