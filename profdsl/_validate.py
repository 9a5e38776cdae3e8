"""Validators and converters shared by the config classes.

Each one raises :class:`~profdsl.errors.ConfigError` with a message naming the field (as
``Class.field``) and the offending value, so a bad YAML key is found without a traceback dive.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any, Callable, TypeVar

import attrs

from profdsl.errors import ConfigError

T = TypeVar("T")


def _where(inst: object, attribute: attrs.Attribute[Any]) -> str:
    return f"{type(inst).__name__}.{attribute.name}"


def is_int(value: object) -> bool:
    """True for a real integer; ``bool`` is excluded although it subclasses ``int``."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_at_least(minimum: int) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """An attrs validator: an integer (not a bool) ``>= minimum``."""

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not is_int(value) or value < minimum:  # type: ignore[operator]
            raise ConfigError(
                f"{_where(inst, attribute)} must be an integer >= {minimum}, got {value!r}"
            )

    return check


def boolean(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: exactly ``True`` or ``False`` (YAML ``"yes"`` is not a bool)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{_where(inst, attribute)} must be true or false, got {value!r}")


def positive_finite(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a finite number of seconds > 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(
            f"{_where(inst, attribute)} must be a finite number of seconds > 0, got {value!r}"
        )


def one_of(choices: Iterable[str]) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """An attrs validator: one of ``choices``, suggesting the closest one on a typo."""
    allowed = tuple(choices)

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in allowed:
            raise ConfigError(
                f"{_where(inst, attribute)} must be one of {', '.join(map(repr, allowed))}, "
                f"got {value!r}{suggest(value, allowed)}"
            )

    return check


def suggest(value: object, choices: Iterable[str]) -> str:
    """A ``"; did you mean 'x'?"`` tail for an error message, or ``""``."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def to_int_set(where: str, value: object, *, minimum: int = 0) -> tuple[int, ...]:
    """Convert any iterable of integers to a sorted tuple without duplicates.

    ``None`` means empty. A string is refused explicitly: ``"0,1"`` iterates as characters.
    """
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigError(f"{where} must be a list of integers, got {value!r}")
    items = list(value)
    for item in items:
        if not is_int(item) or item < minimum:
            raise ConfigError(
                f"{where} must contain integers >= {minimum}, got {item!r} in {value!r}"
            )
    return tuple(sorted(set(items)))


def to_name_set(where: str, value: object, allowed: frozenset[str]) -> frozenset[str]:
    """Convert an iterable of names from ``allowed`` to a frozenset."""
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigError(f"{where} must be a list of names from {sorted(allowed)}, got {value!r}")
    items = frozenset(value)
    for item in sorted(items, key=repr):
        if item not in allowed:
            raise ConfigError(
                f"{where} has unknown item {item!r}; allowed: {', '.join(sorted(allowed))}"
                f"{suggest(item, allowed)}"
            )
    return items


def to_nested(where: str, value: object, cls: type[T]) -> T:
    """Convert a plain mapping (YAML/JSON input) to ``cls`` via its ``from_mapping``."""
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return cls.from_mapping(value, _path=where)  # type: ignore[attr-defined, no-any-return]
    raise ConfigError(f"{where} must be a {cls.__name__} or a mapping, got {value!r}")


def check_keys(path: str, mapping: Mapping[str, Any], cls: type) -> None:
    """Refuse keys of ``mapping`` that are not fields of ``cls``, with a close-match hint."""
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{path} must be a mapping, got {mapping!r}")
    names = [a.name for a in attrs.fields(cls)]
    for key in mapping:
        if key not in names:
            raise ConfigError(
                f"unknown key {key!r} in {path}{suggest(key, names)} "
                f"(known keys: {', '.join(names)})"
            )
