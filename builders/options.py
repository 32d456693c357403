"""Options of ``convrag build``: which keys a builder accepts and of which types, checked before building.

The accepted options are the fields of the builder's config class, less those of ``datasets.BuilderConfig``
and those that tell its configs apart (``view``, ``domain``...: chosen with ``--config``).
"""

from __future__ import annotations

import dataclasses
import typing
from contextlib import suppress
from typing import Any

import datasets
import yaml

from convrag.core.errors import ConvragError
from convrag.core.hints import accepts, describe


def builder_options(cls: type) -> dict[str, Any]:
    """Option name -> type of the options ``cls`` accepts: its config class's fields, less those of
    ``datasets.BuilderConfig`` and those that tell its configs apart (``view``, ``domain``...)."""
    config_cls = cls.BUILDER_CONFIG_CLASS
    fixed = {f.name for f in dataclasses.fields(datasets.BuilderConfig)} | per_config_fields(cls)
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls) if f.name not in fixed}


def per_config_fields(cls: type) -> set[str]:
    """Config fields whose value differs between the configs of ``cls`` (``name``, ``view``, ``domain``...)."""
    return {f.name for f in dataclasses.fields(cls.BUILDER_CONFIG_CLASS)
            if len({repr(getattr(c, f.name)) for c in cls.BUILDER_CONFIGS}) > 1}  # fmt: skip


def check_options(cls: type, options: dict[str, Any]) -> dict[str, Any]:
    """Check build options against ``builder_options(cls)``; returns them typed.

    A string value (as ``--option key=value`` gives) is kept as text when the option takes text (paths,
    ``created_at=2024-01-01``), else read as YAML (``seed=3``, ``max_train=null``). Unknown keys and values
    of the wrong type raise ``ConvragError``.
    """
    known = builder_options(cls)
    checked: dict[str, Any] = {}
    for key, value in options.items():
        if key not in known:
            per_config = key in per_config_fields(cls)
            why = "is set by each config (choose configs with --config)" if per_config else "is unknown"
            raise ConvragError(f"option {key!r} {why} for {cls.BENCHMARK}; options: {', '.join(sorted(known))}")
        hint = known[key]
        if isinstance(value, str) and not accepts(hint, value):
            with suppress(yaml.YAMLError):
                value = yaml.safe_load(value)
        if not accepts(hint, value):
            name = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
            raise ConvragError(f"option {key!r} of {cls.BENCHMARK} expects {name}, got {value!r}")
        checked[key] = value
    return checked


def options_help(width: int = 100) -> str:
    """``convrag build --help``'s list of every registered benchmark's options but ``source`` (``--source`` gives
    it): ``NAME (type, default VALUE)``, the default left out where it is None; wrapped to ``width`` characters.
    It imports the builders, so it is made only when the help is printed."""
    import textwrap

    from convrag.builders import available, get_builder_class

    lines = ["builder options (--option KEY=VALUE, repeatable; keys and value types are checked before building):"]
    for name in available():
        cls = get_builder_class(name)
        defaults = {f.name: f.default for f in dataclasses.fields(cls.BUILDER_CONFIG_CLASS)
                    if f.default is not dataclasses.MISSING}  # fmt: skip
        items = [f"{key} ({describe(hint)}" + (")" if defaults.get(key) is None else f", default {defaults[key]!r})")
                 for key, hint in builder_options(cls).items() if key != "source"]  # fmt: skip
        text = f"{name}: " + ("; ".join(items) if items else "none besides --source")
        lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False)
    return "\n".join(lines)
