"""The field codec of everything profdsl writes: a schema class is an attrs class whose fields
say how a reader checks them (:func:`field`), and :func:`decode` / :func:`to_json` turn JSON into
such a class and back.

Every check is one of profdsl's field checks (:mod:`profdsl.config._checks`), with null allowed:
a reader names the field in the same words a config does (``step must be an integer >= 0 or
None, got '3'``), raised as :class:`RecordError`. Fields a class does not know (written by a
newer profdsl) are kept in ``unknown`` and written back unchanged.

Examples:
    >>> @attrs.frozen(kw_only=True)
    ... class Note:
    ...     step: int | None = field(count(0), "the step", always=True)
    ...     unknown: Mapping[str, Any] = unknown_field()
    >>> decode(Note, {"step": 3, "colour": "red"})
    Note(step=3)
    >>> to_json(decode(Note, {"step": None, "colour": "red"}))
    {'step': None, 'colour': 'red'}
    >>> decode(Note, {"step": "3"})
    Traceback (most recent call last):
    ...
    profdsl.records.fields.RecordError: step must be an integer >= 0 or None, got '3'
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import attrs

from profdsl.config._checks import (
    brief,
    is_int,
    refuse,
    require_bool,
    require_int,
    require_list,
    require_mapping,
    require_number,
    require_text,
)
from profdsl.config._parallel import DIMS
from profdsl.core._naming import is_relative
from profdsl.errors import ConfigError

#: The version of the schema, written into every record, trace and line. Readers take any
#: version: the fields they know are checked, the others kept. 2: ``capture`` (on-demand and
#: automatic captures), capture requests and the metrics log.
SCHEMA_VERSION: Final = 2
#: The key that holds it.
VERSION_KEY: Final = "schema"

T = TypeVar("T")
#: How a reader checks one field: ``check(key, value)`` gives the typed value or raises.
Check = Callable[[str, Any], Any]


class RecordError(ValueError):
    """A manifest record, trace metadata, request or metrics log line that does not fit the
    schema (the message names the field and the value)."""


def nullable(check: Callable[..., Any], *args: Any, **kwargs: Any) -> Check:
    """``check(key, value, *args, optional=True, **kwargs)``: a field check (from
    :mod:`profdsl.config._checks`) that takes null too."""

    def run(key: str, value: Any) -> Any:
        return check(key, value, *args, optional=True, **kwargs)

    return run


def count(low: int, high: int | None = None) -> Check:
    """An integer in ``low..high`` (no upper bound when None), or null."""
    return nullable(require_int, low, high)


def _duration(key: str, value: Any, *, optional: bool = False) -> float:
    """A finite number >= 0 (``optional``: or null): a duration, a value of ``seconds_map``,
    a span's start."""
    return require_number(key, value, 0, sys.float_info.max, optional=optional, what="a finite number >= 0")


DURATION: Final = nullable(_duration)
TEXT: Final = nullable(require_text)
INTEGER: Final = nullable(require_int, None)
FLAG: Final = nullable(require_bool)
TEXTS: Final = nullable(require_list, lambda v: isinstance(v, str), "a list of strings")
INTEGERS: Final = nullable(require_list, is_int, "a list of integers")
OBJECT: Final = nullable(require_mapping)


def _objects(key: str, value: Any) -> tuple[dict[str, Any], ...] | None:
    listed = require_list(key, value, lambda v: isinstance(v, Mapping), "a list of objects", optional=True)
    return None if listed is None else tuple(dict(v) for v in listed)


def _path(key: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and is_relative(value)):
        return value
    refuse(key, "a file name relative to the folder", value, optional=True)


def _window(key: str, value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        first, last = (require_int(key, v, 0) for v in value)
        return first, last
    refuse(key, "[first, last]", value, optional=True)


OBJECTS: Final = _objects
PATH: Final = _path
WINDOW: Final = _window


def counts_of(key_check: Callable[[str, Any], None], low: int) -> Check:
    """A mapping of names (``key_check``) to integers >= ``low``."""

    def check(key: str, value: Any) -> dict[str, int] | None:
        mapping = require_mapping(key, value, optional=True)
        for name, number in (mapping or {}).items():
            key_check(key, name)
            require_int(f"{key}.{name}", number, low)
        return mapping

    return check


def seconds_map(key: str, value: Any) -> dict[str, float] | None:
    """A mapping of strings to finite numbers >= 0 (seconds)."""
    mapping = require_mapping(key, value, optional=True)
    for name, number in (mapping or {}).items():
        _duration(f"{key}.{name}", number)
    return mapping


def spans_map(key: str, value: Any) -> dict[str, tuple[tuple[float, float], ...]] | None:
    """A mapping of strings to lists of ``[start, end]`` pairs of finite numbers >= 0, start <= end."""
    mapping = require_mapping(key, value, optional=True)
    if mapping is None:
        return None
    out: dict[str, tuple[tuple[float, float], ...]] = {}
    for name, spans in mapping.items():
        pairs = require_list(
            f"{key}.{name}",
            spans,
            lambda v: isinstance(v, (list, tuple)) and len(v) == 2,
            "a list of [start, end] pairs",
        )
        checked = []
        for start, end in pairs:
            a = _duration(f"{key}.{name}", start)
            b = require_number(f"{key}.{name}", end, a, sys.float_info.max, what="a finite number >= its start")
            checked.append((float(a), float(b)))
        out[name] = tuple(checked)
    return out


def text_map(key: str, value: Any) -> dict[str, str] | None:
    """A mapping of strings to strings."""
    mapping = require_mapping(key, value, optional=True)
    for name, text in (mapping or {}).items():
        require_text(f"{key}.{name}", text, blank=False)
    return mapping


def path_counts(key: str, value: Any) -> tuple[tuple[tuple[str, ...], int], ...] | None:
    """``[[[label, ...], count], ...]``: the items of that shape (labels not empty, count > 0),
    summed per path; items of another shape are left out (a reader's count falls back to the
    labels' ``continued``)."""
    items = require_list(key, value, lambda _: True, "a list of [labels, count]", optional=True)
    if items is None:
        return None
    found: dict[tuple[str, ...], int] = {}
    for item in items:
        if (
            isinstance(item, (list, tuple))
            and len(item) == 2
            and type(item[1]) is int
            and item[1] > 0
            and isinstance(item[0], (list, tuple))
            and item[0]
            and all(isinstance(v, str) for v in item[0])
        ):
            path = tuple(item[0])
            found[path] = found.get(path, 0) + item[1]
    return tuple(sorted(found.items()))


def dim(key: str, name: Any) -> None:
    """A key that names a parallel dimension."""
    if name not in DIMS:
        raise RecordError(f"{key} names a parallel dimension ({', '.join(DIMS)}), got {brief(name)}")


def any_name(key: str, name: Any) -> None:
    """A key that is a string."""
    if not isinstance(name, str):
        raise RecordError(f"{key} must have string keys, got {brief(name)}")


def nested(cls: type[T]) -> Check:
    """An object of ``cls``, or null."""

    def check(key: str, value: Any) -> T | None:
        return None if value is None else decode(cls, value, f"{key}.")

    return check


def nested_list(cls: type[T]) -> Check:
    """A list of objects of ``cls``, or null."""

    def check(key: str, value: Any) -> tuple[T, ...] | None:
        items = require_list(key, value, lambda _: True, "a list", optional=True)
        return None if items is None else tuple(decode(cls, item, f"{key}[{i}].") for i, item in enumerate(items))

    return check


def nested_map(cls: type[T]) -> Check:
    """A mapping of names to objects of ``cls``, or null."""

    def check(key: str, value: Any) -> dict[str, T] | None:
        mapping = require_mapping(key, value, optional=True)
        if mapping is None:
            return None
        for name in mapping:
            any_name(key, name)
        return {name: decode(cls, item, f"{key}.{name}.") for name, item in mapping.items()}

    return check


def field(check: Check, doc: str, *, default: Any = None, always: bool = False) -> Any:
    """A schema field: how a reader checks it, what it means (``docs/records.md``), and whether
    it is written when None (``always``: the keys every record carries)."""
    return attrs.field(default=default, metadata={"check": check, "doc": doc, "always": always})


def unknown_field() -> Any:
    """The ``unknown`` field: what a reader did not know, written back as it was."""
    return attrs.field(factory=dict, eq=False, repr=False, metadata={"unknown": True})


def decode(cls: type[T], value: Any, prefix: str = "", *, skip: frozenset[str] = frozenset()) -> T:
    """``value`` as ``cls``: each known field checked, the rest (but ``skip``) kept in ``unknown``.

    Raises:
        RecordError: ``value`` is not an object, or a field's check refuses it.
    """
    if not isinstance(value, Mapping):
        raise RecordError(f"{prefix.rstrip('.') or 'it'} is {brief(value)}, not a JSON object")
    known: dict[str, Any] = {}
    names = set()
    for item in attrs.fields(cls):  # type: ignore[arg-type]
        if item.metadata.get("unknown"):
            continue
        names.add(item.name)
        if item.name in value:
            try:
                checked = item.metadata["check"](f"{prefix}{item.name}", value[item.name])
            except ConfigError as exc:
                raise RecordError(str(exc)) from None
            # A null where the class never holds None (a record's status, a schema version) reads
            # as a missing key: the field keeps its default, so no reader meets None there.
            if checked is not None or item.default is None:
                known[item.name] = checked
    unknown = {k: v for k, v in value.items() if k not in names and k not in skip}
    return cls(**known, unknown=unknown)  # type: ignore[call-arg]


def _plain(value: Any) -> Any:
    if attrs.has(type(value)):
        return to_json(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def to_json(obj: Any) -> dict[str, Any]:
    """A schema object as the JSON object profdsl writes: a record's ``kind``, the ``always``
    keys, the other fields that are set, then the unknown ones it was read with."""
    kind = getattr(type(obj), "kind", None)
    out: dict[str, Any] = {"kind": kind} if isinstance(kind, str) else {}
    for item in attrs.fields(type(obj)):
        value = getattr(obj, item.name)
        if item.metadata.get("unknown") or (value is None and not item.metadata.get("always")):
            continue
        out[item.name] = _plain(value)
    for key, value in obj.unknown.items():
        out.setdefault(key, value)
    return out
