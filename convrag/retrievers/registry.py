"""Retriever registry (filled with the built-in retrievers by :mod:`convrag.retrievers`) and the spec-string factory
used by the CLI (``--retrievers random,bm25,dense,hybrid``). Spec strings are ``NAME`` or ``NAME:ARGUMENT``:

* ``random`` / ``random:SEED``: uniform random scores (``seed`` option, default 0);
* ``bm25``: rank-bm25 Okapi BM25, StratRAG tokenisation; ``bm25s``: bm25s BM25 (large corpora);
* ``dense`` / ``dense:PATH_OR_NAME``: sentence-transformers cosine similarity (default: shipped MiniLM);
* ``hybrid`` / ``hybrid:PATH_OR_NAME``: StratRAG's min-max hybrid of bm25 and dense (argument = dense model);
* ``rrf`` / ``rrf:SPEC+SPEC+...``: reciprocal rank fusion of the given specs (default ``bm25+dense``);
* ``dual:QUERY_MODEL,CONTEXT_MODEL``: a conversational dual encoder, queries and documents encoded by two
  transformers models (``pooling`` cls/mean, ``similarity`` dot/cosine; Dragon-multiturn's settings by default,
  see ``convrag.retrievers.dual``).

Keyword options go to the retriever's constructor (``get_retriever("hybrid", alpha=0.3)``). A spec's argument and an
option may not both set the same setting.
"""

from __future__ import annotations

from typing import Any

from convrag.core.errors import ConvragError
from convrag.retrievers.base import Retriever


class RetrieverSpecError(ConvragError, ValueError):
    """A retriever spec string names no registered retriever or has a bad argument."""


RETRIEVERS: dict[str, type[Retriever]] = {}

#: Which constructor option a spec's ``NAME:ARGUMENT`` sets, per retriever name.
_ARGUMENT_OPTION = {"random": "seed", "dense": "model", "hybrid": "model", "rrf": "retrievers", "dual": "models"}


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
    if name == "dual":
        models = [p.strip() for p in argument.split(",")]
        if len(models) != 2 or not all(models):
            raise RetrieverSpecError(f"dual needs two models, QUERY_MODEL,CONTEXT_MODEL, in spec {spec!r}")
        return models
    return argument


def split_specs(value: str) -> list[str]:
    """A comma-separated list of retriever specs (``--retrievers bm25,dual:Q,C,rrf:bm25+dual:Q,C``): split at
    commas, except the comma between a ``dual:`` spec's two models (a part ending in a one-model ``dual:Q``, alone
    or as the last ``+`` component of an ``rrf:`` spec, takes the part after it as its context model)."""
    out: list[str] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        previous = out[-1] if out else ""
        last = previous[4:] if previous.lower().startswith("rrf:") else previous
        last = last.rpartition("+")[2].strip()
        if last.lower().startswith("dual:") and "," not in last:
            out[-1] = f"{previous},{part}"
        else:
            out.append(part)
    return out


def check_retrievers(specs: list[str], flag: str) -> None:
    """Refuse, before any work, a retriever spec whose name (or a component of ``rrf:A+B``) is not registered."""
    for spec in specs:
        name, _, argument = spec.strip().partition(":")
        parts = [name, *(argument.split("+") if name.strip().lower() == "rrf" else [])]
        for part in parts:
            if part.strip() and part.partition(":")[0].strip().lower() not in RETRIEVERS:
                raise ConvragError(f"{flag}: unknown retriever {part.strip()!r}; known: {', '.join(RETRIEVERS)}")
