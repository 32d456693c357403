"""Option values checked against type annotations, and annotations in words, for every ``--option`` parser.

Values are as YAML (or a caller) gives them: ``int`` takes a whole number (not a bool), ``float`` any number,
``str``, ``bool``, ``None``, lists / tuples / sequences of a type, mappings (with typed keys and values where the
annotation says), and unions of these.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any

_NAMES = {int: ("a whole number", "whole numbers"), float: ("a number", "numbers"), str: ("a text", "texts"),
          bool: ("true or false", "true / false values"), type(None): ("null", "nulls")}


def accepts(tp: Any, value: Any) -> bool:
    """Whether ``value`` fits the annotation ``tp``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(accepts(a, value) for a in args)
    if tp is type(None):
        return value is None
    if origin in (list, tuple, collections.abc.Sequence):
        return isinstance(value, list | tuple) and all(accepts(args[0] if args else Any, v) for v in value)
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        return isinstance(value, dict) and (len(args) != 2 or all(
            accepts(args[0], k) and accepts(args[1], v) for k, v in value.items()))
    if tp in (int, float) and isinstance(value, bool):
        return False
    if tp is float:
        return isinstance(value, int | float)
    return isinstance(value, tp) if isinstance(tp, type) else True


def describe(tp: Any, plural: bool = False) -> str:
    """The annotation ``tp`` in words ("a whole number or null", "a list of texts")."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a, plural) for a in args)
    if origin in (list, tuple, collections.abc.Sequence):
        return f"a list of {describe(args[0], True) if args else 'values'}"
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        return "a mapping ({key: value, ...})"
    if tp in _NAMES:
        return _NAMES[tp][plural]
    return "anything" if tp is Any else getattr(tp, "__name__", str(tp))
