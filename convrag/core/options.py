"""Repeated ``--flag NAME=VALUE`` arguments read as a mapping (values as strings, or as YAML scalars)."""

from __future__ import annotations

import re
from typing import Any

from convrag.core.errors import ConvragError

#: ``NAME=VALUE``: a name (letters, digits, ``_``, ``-``; not starting with a digit), then anything
NAME_EQ = re.compile(r"^([A-Za-z_][\w-]*)=(.+)$")


def name_value_pairs(values: list[str] | None, flag: str, form: str = "NAME=FILE") -> dict[str, str]:
    """``flag NAME=VALUE`` arguments as a mapping of strings (``form`` names the expected shape in errors)."""
    pairs = {}
    for value in values or []:
        match = NAME_EQ.match(value)
        if not match:
            raise ConvragError(f"{flag} expects {form}, got {value!r}")
        pairs[match.group(1)] = match.group(2)
    return pairs


def parse_options(values: list[str] | None, flag: str) -> dict[str, Any]:
    """``flag key=value`` pairs; values are read as YAML scalars (ints, null, true...)."""
    import yaml

    return {k: yaml.safe_load(v) for k, v in name_value_pairs(values, flag, "key=value").items()}
