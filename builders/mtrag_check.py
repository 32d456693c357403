"""Type checks of MTRAG's ``conversations.json``, run on every conversation before anything is built.

Every problem is a DataError naming the file and the line where the conversation starts, with the conversation's
number and the path of the bad value (``messages[3].contexts[0].score``) in the message. A label of which a task has
one (``SINGLE_LABELS``: Answerability, Multi-Turn, Standalone Type) listing two different values is an error too.
Empty texts:

* an empty (or blank) user message is an error: a task without a question cannot be scored;
* an empty agent message is kept; the task it answers gets no reference answer (``targets`` empty), counted in the
  build report (``NO_REFERENCE``): retrieval does not need the answer, and generation scoring refuses such a task;
* a cited passage without text is kept (qrels and runs use its id) and counted (``EMPTY_PASSAGE``); where another
  citation of the same passage has text, that text is used (``cite``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from convrag.core.errors import DataError
from convrag.core.jsonl import REQUIRED, type_name, typed_field

#: build-report events
NO_REFERENCE = "tasks without a reference answer: the agent reply is empty or missing (targets left empty)"
EMPTY_PASSAGE = "cited passages without text (kept, with empty text)"
DIFFERING = "cited passages with differing texts (first kept)"
#: labels of which a task has exactly one (written as one string column); Question Type may list several
SINGLE_LABELS = ("Answerability", "answerability", "Multi-Turn", "Standalone Type")
_STR = (str,)
_NUMBER = (int, float)


class Checker:
    """Checks values of one record, raising DataErrors that name the file, the record's line and a label."""

    def __init__(self, path: str, line: int, label: str) -> None:
        self.path, self.line, self.what = path, line, label

    def fail(self, message: str) -> None:
        raise DataError(f"{self.what}: {message}", self.path, self.line)

    def get(self, obj: Any, name: str, types: tuple, prefix: str = "", required: bool = False,
            empty: bool = True) -> Any:  # fmt: skip
        """``obj[name]`` of ``types`` (None when absent and not required)."""
        try:
            return typed_field(obj, name, types, None, None, prefix, REQUIRED if required else None, empty)
        except DataError as err:
            raise DataError(f"{self.what}: {err}", self.path, self.line) from None

    def label(self, obj: Any, name: str, prefix: str = "", single: bool = False) -> None:
        """A label (answerability, question type...): absent, a string or a list of strings; a ``single`` label
        (``SINGLE_LABELS``) lists one value at most (repeats of it allowed)."""
        value = self.get(obj, name, (str, list), prefix)
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            self.fail(f"{prefix}{name} must be a string or a list of strings, got a list holding "
                      f"{type_name(next(v for v in value if not isinstance(v, str)))}")  # fmt: skip
        if single and isinstance(value, list) and len(set(value)) > 1:
            self.fail(f"{prefix}{name} holds {len(set(value))} different labels {list(dict.fromkeys(value))}; a task "
                      "has one (the release lists one), so none can be chosen")  # fmt: skip

    def labels(self, obj: dict, name: str, prefix: str = "", single: tuple[str, ...] = ()) -> None:
        """Enrichments: an object whose values are labels (those named in ``single``: one value at most)."""
        for key in self.get(obj, name, (dict,), prefix) or {}:
            self.label(obj[name], key, f"{prefix}{name}.", single=key in single)


def check_conversation(conv: Any, path: str, line: int, number: int) -> None:
    """Raise a DataError if conversation ``number`` (starting on ``line`` of ``path``) is malformed."""
    at = Checker(path, line, f"conversation {number}")
    if not isinstance(conv, dict):
        at.fail(f"expected an object, got {type_name(conv)}")
    at.get(conv, "domain", _STR, required=True)
    for name in ("author", "editor", "reviewer", "status"):
        at.get(conv, name, _STR)
    if at.get(conv, "generator", (dict,)) is not None:
        at.get(conv["generator"], "id", _STR, "generator.")
    messages = at.get(conv, "messages", (list,), required=True)
    if not messages:
        at.fail("'messages' is empty")
    for i, m in enumerate(messages):
        _check_message(at, m, f"messages[{i}].")


def _check_message(at: Checker, m: Any, prefix: str) -> None:
    if not isinstance(m, dict):
        at.fail(f"{prefix.rstrip('.')} must be an object, got {type_name(m)}")
    speaker = at.get(m, "speaker", _STR, prefix, required=True)
    if speaker not in ("user", "agent"):
        at.fail(f"{prefix}speaker must be 'user' or 'agent', got {speaker!r}")
    at.get(m, "text", _STR, prefix, required=True, empty=speaker != "user")
    at.get(m, "timestamp", (int,), prefix)
    at.get(m, "original_text", _STR, prefix)
    at.labels(m, "enrichments", prefix, single=SINGLE_LABELS)
    for j, alt in enumerate(at.get(m, "alternatives", (list,), prefix) or []):
        where = f"{prefix}alternatives[{j}]."
        at.get(alt, "text", _STR, where, required=True)
        at.labels(alt, "enrichments", where)
    for j, ctx in enumerate(at.get(m, "contexts", (list,), prefix) or []):
        where = f"{prefix}contexts[{j}]."
        at.get(ctx, "document_id", _STR, where, required=True, empty=False)
        for name in ("title", "text", "url"):
            at.get(ctx, name, _STR, where)
        at.get(ctx, "score", _NUMBER, where)
        feedback = at.get(ctx, "feedback", (dict,), where) or {}
        votes = at.get(feedback, "relevant", (dict,), f"{where}feedback.") or {}
        for annotator, vote in votes.items():
            vote_at = f"{where}feedback.relevant.{annotator}."
            at.get(vote, "value", _STR, vote_at, required=True)
            at.get(vote, "timestamp", (int,), vote_at)


def cite(cited: dict[str, dict[str, dict[str, str]]], row: dict[str, str], where: str,
         add: Callable[[str, str], None]) -> None:  # fmt: skip
    """Add a cited passage ``row`` (``_id``, ``title``, ``text``, ``url``, ``domain``) to ``cited`` (domain -> id ->
    row): the first citation with text wins; two different texts are counted (``DIFFERING``, at ``where``)."""
    known = cited.setdefault(row["domain"], {})
    doc = known.get(row["_id"])
    if doc is None or not doc["text"].strip():
        known[row["_id"]] = row
    elif row["text"].strip() and doc["text"] != row["text"]:
        add(DIFFERING, f"{where}: {row['_id']}")


def count_empty_passages(cited: dict[str, dict[str, dict[str, str]]], add: Callable[[str, str], None]) -> None:
    """Count the cited passages that no citation gives a text (``EMPTY_PASSAGE``)."""
    for domain, docs in cited.items():
        for doc_id, doc in docs.items():
            if not doc["text"].strip():
                add(EMPTY_PASSAGE, f"{domain}: {doc_id}")
