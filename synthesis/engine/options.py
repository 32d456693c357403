"""Stage options of a synthesis pipeline: each option given once by name goes to every chosen stage whose
constructor takes it; an option no chosen stage takes is an error that lists the valid ones.

Every option's value is checked against the type its constructor declares (``int``: a whole number, ``float``:
any number, ``str``, ``bool``, ``None``, lists and mappings, unions of them) before any stage is built, so a
wrong value is a one-line error naming the option and what it takes, in a dry run too; the constructors then
check ranges and allowed values.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from convrag.core.errors import ConvragError
from convrag.core.hints import accepts, describe
from convrag.synthesis.engine.pipeline import Stage


def stage_options(cls: type[Stage], shared: Sequence[str] = ()) -> list[str]:
    """The options (constructor keywords) of a stage class, without the ``shared`` ones the CLI itself sets."""
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", *shared)]


def order_stages(registry: Mapping[str, type[Stage]], stages: Sequence[str], pipeline: str) -> list[str]:
    """``stages`` checked against ``registry`` and put in pipeline order."""
    unknown = [s for s in stages if s not in registry]
    if unknown or not stages:
        raise ConvragError(f"--stages: unknown stage {', '.join(unknown) or '(none given)'}; "
                           f"{pipeline} stages: {', '.join(registry)}")
    return [s for s in registry if s in stages]


def split_options(registry: Mapping[str, type[Stage]], ordered: Sequence[str], options: Mapping[str, Any],
                  shared: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Stage name -> the options its constructor takes; unknown options are an error listing the valid ones."""
    taken = {o for s in ordered for o in stage_options(registry[s], shared)}
    extra = sorted(set(options) - taken)
    if extra:
        valid = "; ".join(f"{s}: {', '.join(stage_options(registry[s], shared))}" for s in ordered)
        raise ConvragError(f"--option {', '.join(extra)}: not an option of the stages run ({valid})")
    per_stage = {s: {k: v for k, v in options.items() if k in stage_options(registry[s], shared)} for s in ordered}
    for stage, given in per_stage.items():
        hints = typing.get_type_hints(registry[stage].__init__)
        for name, value in given.items():
            if name in hints and not accepts(hints[name], value):
                raise ConvragError(f"--option {name}={value!r}: {name} takes {describe(hints[name])}")
    return per_stage


