"""A turn as its whole conversation: the ``{role, content}`` messages mteb takes as a conversational query, and
the ``conversation`` strategy, which renders them as mteb does.

mteb (``mteb._create_dataloaders._convert_conv_history_to_query``) turns a query given as a list of messages into
the text an encoder reads: ``role: content`` for every message, joined by ``"; "``. :func:`conversation_messages`
is a turn's conversation in that form (its earlier messages, as ``Turn.history_messages`` reads them, then the
current query as a ``user`` message); :func:`conversation_text` is the text mteb makes of it, as a
:class:`~convrag.retrievers.query_text.QueryText` whose history is the earlier messages, so that a dense encoder with
a length limit drops the oldest first (mteb's sentence-transformers encoder cuts the text at its end instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convrag.retrievers.query_text import QueryText

if TYPE_CHECKING:
    from convrag.retrievers.strategies import Turn

#: how mteb joins the ``role: content`` parts of a conversation
MTEB_SEP = "; "


def conversation_messages(turn: Turn) -> list[dict[str, str]]:
    """The earlier messages of ``turn`` (roles as read: ``user`` / ``assistant``; messages without text left out),
    then ``{"role": "user", "content": <query>}``; contents stripped."""
    earlier = [{"role": role, "content": text.strip()} for role, text in turn.history_messages() if text.strip()]
    return [*earlier, {"role": "user", "content": turn.query.strip()}]


def render(messages: list[dict[str, str]]) -> str:
    """mteb's text of a conversation: ``role: content`` parts joined by ``"; "``."""
    return MTEB_SEP.join(f"{m['role']}: {m['content']}" for m in messages)


def conversation_text(turn: Turn) -> QueryText:
    """``role: content`` for every earlier message, then ``user: <query>``, joined by ``"; "``: the text mteb encodes
    for :func:`conversation_messages` (history: the earlier messages; tail: the current query)."""
    *earlier, current = conversation_messages(turn)
    return QueryText([render([m]) for m in earlier], [render([current])], sep=MTEB_SEP)
