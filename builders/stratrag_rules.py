"""StratRAG's processing rules (paper section 3.2), as pure functions over HotpotQA distractor records. Per example:

1. gold paragraphs = context paragraphs whose title (Unicode NFC) equals a supporting-fact title (NFC);
2. distractor paragraphs with no sentence content are dropped (a gold paragraph without content makes the example
   invalid: reported, not kept);
3. the pool holds the gold paragraphs at indices 0 and 1 in HotpotQA paragraph order, then the other valid
   distractors shuffled with a seeded RNG, up to ``pool_size`` (15) documents; short pools are padded with placeholder
   documents (as the released data is) or, with ``fill="borrow"``, topped up with distractors of other examples of
   the same split;
4. question type: ``yes-no`` if the answer is "yes"/"no", else ``comparison`` if the question contains a comparative
   keyword (``COMPARATIVE_KEYWORDS``), else ``bridge``.

Document ids follow the release, ``doc_{global_row:08d}_{hotpot_paragraph_index:02d}``; pads get
``doc_{global_row:08d}_pad{slot:02d}`` (our choice: the release's pad ids are not documented), source ``PAD_SOURCE``,
text ``PAD_TEXT``. Document text is ``"{title} {sentences joined}"``. Input checks: :func:`check_record`.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from convrag.builders.base import BuildReport
from convrag.core.errors import DataError
from convrag.core.jsonl import is_a, type_name

POOL_SIZE = 15
N_GOLD = 2
PAD_SOURCE = "__pad__"
PAD_TEXT = "__no_content__"
QUESTION_TYPES = ("bridge", "comparison", "yes-no")
#: Comparative keywords (whole words, lowercased question). The paper names the rule, not its list; this
#: list is ours.
COMPARATIVE_KEYWORDS = (
    "older", "oldest", "younger", "youngest", "earlier", "earliest", "later", "larger", "largest",
    "smaller", "smallest", "bigger", "biggest", "higher", "highest", "lower", "lowest", "longer",
    "longest", "shorter", "shortest", "more", "most", "fewer", "less", "greater", "than", "compared",
    "versus",
)  # fmt: skip
_KEYWORD_RE = re.compile(r"\b(" + "|".join(COMPARATIVE_KEYWORDS) + r")\b")
REQUIRED_FIELDS = ("_id", "question", "answer", "supporting_facts", "context")
#: build-report event: records kept although their reference answer is empty (retrieval does not need it)
EMPTY_ANSWER = "records with an empty reference answer (kept; retrieval does not use it)"


@dataclass(frozen=True)
class PoolOptions:
    """Knobs of pool construction; defaults reproduce the release."""

    pool_size: int = POOL_SIZE
    seed: int = 42
    fill: str = "pad"  # "pad" or "borrow"


def nfc(text: str) -> str:
    """Unicode NFC normal form (how titles are compared)."""
    return unicodedata.normalize("NFC", text)


def question_type(question: str, answer: str) -> str:
    """``yes-no`` if the answer is yes/no, ``comparison`` if a comparative keyword occurs, else ``bridge``."""
    if answer.strip().lower() in ("yes", "no"):
        return "yes-no"
    if _KEYWORD_RE.search(question.lower()):
        return "comparison"
    return "bridge"


def paragraph_text(title: str, sentences: Sequence[str]) -> str:
    """Document text: the title, a space, then the sentences concatenated as HotpotQA stores them."""
    return f"{title} {''.join(sentences)}"


def has_content(sentences: Sequence[str]) -> bool:
    """A paragraph has content if any sentence has a non-space character."""
    return any(s.strip() for s in sentences)


def split_prefix(split: str) -> str:
    """Record id prefix of a split (``val`` for validation, as in the release)."""
    return "val" if split == "validation" else split


def check_record(raw: Any, source: str, index: int, line: int | None = None) -> None:
    """Raise a DataError naming the file and the line where the record starts if ``raw`` (record ``index + 1`` of
    ``source``, starting on ``line``) is not a HotpotQA record: missing fields, wrong types, an empty ``_id`` or
    question (an error: a query without text cannot be scored, and dropping it would silently change the query set).
    An empty answer is kept and counted in the build report (``EMPTY_ANSWER``): retrieval does not use the answer,
    and the question type then falls back to the keyword rule."""
    number = index + 1
    line = number if line is None else line
    if not isinstance(raw, dict):
        raise DataError(f"record {number} is {type_name(raw)}, expected an object", source, line)
    missing = [f for f in REQUIRED_FIELDS if f not in raw]
    if missing:
        raise DataError(f"record {number} (_id={raw.get('_id')!r}) lacks fields {missing}", source, line)
    for name in ("_id", "question", "answer"):
        if not isinstance(raw[name], str):
            raise DataError(f"record {number}: field {name!r} must be a string, got {type_name(raw[name])}",
                            source, line)  # fmt: skip
    for name in ("type", "level"):
        if raw.get(name) is not None and not isinstance(raw[name], str):
            raise DataError(f"record {number}: field {name!r} must be a string, got {type_name(raw[name])}",
                            source, line)  # fmt: skip
    for name in ("_id", "question"):
        if not raw[name].strip():
            raise DataError(f"record {number} (_id={raw['_id']!r}): empty {name}", source, line)
    context = raw["context"]
    if not isinstance(context, list) or not all(
        isinstance(p, list | tuple)
        and len(p) == 2
        and isinstance(p[0], str)
        and isinstance(p[1], list)
        and all(isinstance(s, str) for s in p[1])
        for p in context
    ):
        raise DataError(f"record {number} (_id={raw['_id']}): context must be [[title, [sentences]]]", source, line)
    facts = raw["supporting_facts"]
    if not isinstance(facts, list) or not all(
        isinstance(f, list | tuple) and len(f) == 2 and isinstance(f[0], str) and is_a(f[1], int) and f[1] >= 0
        for f in facts
    ):
        raise DataError(f"record {number} (_id={raw['_id']}): supporting_facts must be [[title, sentence_index]] "
                        "(sentence_index an int >= 0)", source, line)  # fmt: skip


def gold_and_distractors(
    raw: dict, report: BuildReport
) -> tuple[list[int], list[int]] | None:
    """Indices of gold paragraphs and of valid (non-empty) distractors, or None if the example is invalid.

    Invalid (reported in ``report``): fewer or more than 2 gold paragraphs, or an empty gold paragraph.
    """
    gold_titles = {nfc(title) for title, _ in raw["supporting_facts"]}
    gold, distractors = [], []
    for i, (title, sentences) in enumerate(raw["context"]):
        if nfc(title) in gold_titles:
            gold.append(i)
        elif has_content(sentences):
            distractors.append(i)
        else:
            report.add("empty distractor paragraphs removed", raw["_id"])
    if len(gold) != N_GOLD:
        event = "excluded: fewer than 2 gold paragraphs" if len(gold) < N_GOLD else "excluded: more than 2 gold"
        report.add(event, raw["_id"])
        return None
    if not all(has_content(raw["context"][i][1]) for i in gold):
        report.add("excluded: empty gold paragraph", raw["_id"])
        return None
    return gold, distractors


def build_pool(
    raw: dict,
    global_row: int,
    gold: list[int],
    distractors: list[int],
    options: PoolOptions,
    borrow_from: Sequence[dict[str, str]] = (),
    report: BuildReport | None = None,
) -> list[dict[str, str]]:
    """The document pool: gold at 0 and 1 (paragraph order), shuffled distractors, then fill to pool size.

    ``borrow_from`` holds candidate documents of other examples (used only with ``fill="borrow"``).
    The RNG is seeded by (seed, HotpotQA id), so a pool does not depend on which other examples are built.
    """
    rng = random.Random(f"{options.seed}:{raw['_id']}")

    def doc(i: int) -> dict[str, str]:
        title, sentences = raw["context"][i]
        return {"doc_id": f"doc_{global_row:08d}_{i:02d}", "text": paragraph_text(title, sentences), "source": title}

    shuffled = list(distractors)
    rng.shuffle(shuffled)
    pool = [doc(i) for i in gold] + [doc(i) for i in shuffled[: options.pool_size - len(gold)]]
    missing = options.pool_size - len(pool)
    if missing > 0 and options.fill == "borrow" and borrow_from:
        taken = _borrow(rng, borrow_from, missing, {nfc(title) for title, _ in raw["context"]})
        pool.extend(taken)
        if report is not None and taken:
            report.add("pools topped up with distractors of other examples", raw["_id"])
        missing = options.pool_size - len(pool)
    for slot in range(len(pool), len(pool) + missing):
        pool.append({"doc_id": f"doc_{global_row:08d}_pad{slot:02d}", "text": PAD_TEXT, "source": PAD_SOURCE})
    if missing > 0 and report is not None:
        report.add("pools padded with placeholder documents", raw["_id"])
    return pool


def _borrow(
    rng: random.Random, candidates: Sequence[dict[str, str]], wanted: int, exclude_titles: set[str]
) -> list[dict[str, str]]:
    """Draw up to ``wanted`` candidates whose titles are new to the pool (rejection sampling, bounded)."""
    taken: list[dict[str, str]] = []
    titles = set(exclude_titles)
    for _ in range(50 * wanted):
        if len(taken) == wanted:
            break
        doc = candidates[rng.randrange(len(candidates))]
        title = nfc(doc["source"])
        if title not in titles:
            titles.add(title)
            taken.append(doc)
    return taken
