"""Boilerplate removal: cut a Wikipedia-style article at its first tail section.

Definition (the MTR-Suite curation code): the text is cut at the first occurrence of a blank line followed
by any of the headings (``"\\n\\n" + heading``), and what comes before the cut is kept. The match is a plain
substring, as in the authors' code: a paragraph that merely begins with a heading word ("Notes on ...")
also cuts. A document that would be left empty is kept whole, counted as ``boilerplate_all``.
"""

from __future__ import annotations

from collections.abc import Sequence

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

#: Tail headings of the authors' filter, in their order.
TAIL_HEADINGS = ("See also", "References", "External links", "Notes and references", "Notes", "Further reading")


def cut_tail(text: str, headings: Sequence[str] = TAIL_HEADINGS) -> str:
    """``text`` up to the earliest ``"\\n\\n" + heading`` of any heading (whole text if none occurs)."""
    cut = min((i for h in headings if (i := text.find("\n\n" + h)) >= 0), default=-1)
    return text if cut < 0 else text[:cut]


class BoilerplateRemover(PipelineStep):
    """datatrove step applying ``cut_tail`` to every document; counts cut documents and removed characters."""

    name = "boilerplate tail removal"
    type = "✂️ - FORMAT"

    def __init__(self, headings: Sequence[str] = TAIL_HEADINGS) -> None:
        super().__init__()
        self.headings = tuple(headings)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data:
            with self.track_time():
                kept = cut_tail(doc.text, self.headings)
                if len(kept) != len(doc.text):
                    if kept.strip():
                        self.stat_update("boilerplate_cut")
                        self.stat_update("boilerplate_chars_removed", value=len(doc.text) - len(kept))
                        doc.text = kept
                    else:
                        self.stat_update("boilerplate_all")
            yield doc
