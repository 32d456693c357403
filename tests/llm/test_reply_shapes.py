"""Issue 29, class 1: every shipped prompt's replies are read as real models write them, over HTTP.

For each prompt in ``convrag/prompts`` there is a corpus of at least ten hand-written replies with their expected
readings (``tests/fixtures/reply_shapes``) and a reader that goes the product's way (``tests/reply_readers_*.py``);
see :mod:`tests.reply_shapes` for the format. Every prompt also states, in its ``reply`` field, how its reply is
constrained and read per backend.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from convrag.llm import list_prompts, load_prompt
from tests.llm.test_faults import FakeServer
from tests.reply_readers_audit import READERS as AUDIT
from tests.reply_readers_dv import READERS as DV
from tests.reply_readers_misc import READERS as MISC
from tests.reply_shapes import CORPUS, MIN_REPLIES, check_prompt, load_corpus

READERS = {**AUDIT, **DV, **MISC}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


def test_every_prompt_has_a_reader_a_corpus_and_a_reply_contract() -> None:
    prompts = list_prompts()
    assert not sorted(set(prompts) - set(READERS)), "prompts without a reader"
    assert not sorted(set(READERS) - set(prompts)), "readers of prompts that do not exist"
    for name in prompts:
        assert (CORPUS / f"{name}.yaml").is_file(), f"{name}: no reply corpus"
        assert len(load_corpus(name)) >= MIN_REPLIES, name
        assert load_prompt(name).reply.strip(), f"{name}.yaml: no `reply` field saying how replies are read"


@pytest.mark.parametrize("prompt", sorted(READERS))
def test_reply_shapes(server: FakeServer, prompt: str) -> None:
    check_prompt(server, prompt, READERS[prompt])
