"""Field checks: the one home of profdsl's input checks (validators, converters and the
plain functions behind them).

Each check is a plain function ``require_*(label, value, ...)`` that returns the value or raises
:class:`~profdsl.errors.ConfigError` with one message, ``<label> must be <what>[ or None], got
<value>`` (:func:`refuse`), naming the field (``Class.field``, a record's key, a verl key) so a
bad value is found without a traceback dive. :func:`valid` and :func:`named` put one on an attrs
field; the record reader (:mod:`profdsl.records.fields`) and the verl mapping call them too.
:func:`require_int` is the only integer check in profdsl: config fields, trace name fields,
schedule indices, ranks and record fields all go through it; numbers that arrive at run time
(step numbers) go through :func:`to_index`, the same check after ``operator.index``.
"""

from __future__ import annotations

import contextlib
import difflib
import operator
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NoReturn, TypeGuard, TypeVar

import attrs

from profdsl.errors import ConfigError

T = TypeVar("T")
Validator = Callable[[object, "attrs.Attribute[Any]", object], None]

MAX_WIDE_INDEX: Final = 999_999_999_999
"""Largest step, rank, world size or other index profdsl accepts: twelve digits, what a trace name
holds (:mod:`profdsl.naming`). Config fields and run-time numbers beyond it are refused."""
MAX_SECONDS: Final = 7 * 24 * 3600
"""Longest timeout or wait profdsl accepts, in seconds (a week): longer ones are refused, since
waits on threads and processes overflow on absurd values."""


def _where(inst: object, attribute: attrs.Attribute[Any]) -> str:
    return f"{type(inst).__name__}.{attribute.name}"


def brief(value: object) -> str:
    """``repr(value)`` cut to 40 characters: how every check quotes the value it refuses."""
    shown = repr(value)
    return shown if len(shown) <= 40 else f"{shown[:37]}..."


def refuse(label: str, what: str, value: object, *, optional: bool = False, tail: str = "") -> NoReturn:
    """Raise the one message of every check: ``<label> must be <what>[ or None], got <value>``."""
    raise ConfigError(f"{label} must be {what}{' or None' if optional else ''}, got {brief(value)}{tail}")


def named(check: Callable[..., T], *args: Any, **kwargs: Any) -> attrs.Converter[Any, T]:
    """An attrs converter: ``check(label, value, *args, **kwargs)``, where ``label`` is the field
    as ``Class.field``, so a converter names its own field.

    Examples:
        >>> @attrs.frozen
        ... class Job:
        ...     ranks: tuple[int, ...] = attrs.field(converter=named(to_int_set))
        >>> Job([3, 1, 3]).ranks
        (1, 3)
    """

    def convert(value: object, inst: object, attribute: attrs.Attribute[Any]) -> T:
        return check(_where(inst, attribute), value, *args, **kwargs)

    return attrs.Converter(convert, takes_self=True, takes_field=True)


def valid(check: Callable[..., object], *args: Any, **kwargs: Any) -> Validator:
    """An attrs validator: ``check(label, value, *args, **kwargs)`` on the field, as :func:`named`.

    Examples:
        >>> @attrs.frozen
        ... class Job:
        ...     retries: int = attrs.field(validator=valid(require_int, 0, 9))
        >>> Job(10)
        Traceback (most recent call last):
        ...
        profdsl.errors.ConfigError: Job.retries must be an integer in 0..9, got 10
    """

    def validate(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check(_where(inst, attribute), value, *args, **kwargs)

    return validate


def is_int(value: object) -> TypeGuard[int]:
    """True for a real integer; ``bool`` is excluded although it subclasses ``int``."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int_in_range(value: object, minimum: int | None, maximum: int | None) -> bool:
    return is_int(value) and (minimum is None or minimum <= value) and (maximum is None or value <= maximum)


def require_int(
    label: str, value: object, minimum: int | None = 0, maximum: int | None = None, *, optional: bool = False
) -> int:
    """Return ``value`` if it is an integer in ``minimum..maximum`` (no bound where None).

    Args:
        label: how the message names the value, e.g. ``"Schedule.wait"`` or ``"argument rank"``.
        value: the value to check; ``bool`` is refused although it subclasses ``int``.
        minimum: the smallest allowed value, or None.
        maximum: the largest allowed value, or None.
        optional: None is allowed too (and returned as is).

    Raises:
        ConfigError: ``"<label> must be an integer >= <minimum>, got <value>"`` (``in
            <minimum>..<maximum>`` with a maximum, ``or None`` when optional).

    Examples:
        >>> require_int("Schedule.wait", 2)
        2
        >>> require_int("TraceName.step", -1, 0, 9)
        Traceback (most recent call last):
        ...
        profdsl.errors.ConfigError: TraceName.step must be an integer in 0..9, got -1
    """
    if optional and value is None:
        return value  # type: ignore[return-value]
    if not _int_in_range(value, minimum, maximum):
        refuse(label, f"an integer{_bound(minimum, maximum)}", value, optional=optional)
    return value  # type: ignore[return-value]


def _bound(minimum: int | None, maximum: int | None) -> str:
    if minimum is None:
        return "" if maximum is None else f" <= {maximum}"
    return f" >= {minimum}" if maximum is None else f" in {minimum}..{maximum}"


def int_in(minimum: int, maximum: int | None = None, *, optional: bool = False) -> Validator:
    """An attrs validator: :func:`require_int` on the field."""
    return valid(require_int, minimum, maximum, optional=optional)


def require_bool(label: str, value: object, *, optional: bool = False) -> bool:
    """Return ``value`` if it is exactly ``True`` or ``False`` (YAML ``"yes"`` is not a bool)."""
    if (optional and value is None) or isinstance(value, bool):
        return value  # type: ignore[return-value]
    refuse(label, "true, false" if optional else "true or false", value, optional=optional)


boolean: Final = valid(require_bool)
"""An attrs validator: :func:`require_bool` on the field."""


def require_number(
    label: str,
    value: object,
    minimum: float,
    maximum: float,
    *,
    above: bool = False,
    optional: bool = False,
    what: str | None = None,
    tail: str = "",
) -> float:
    """Return ``value`` as a float if it is a number (not a bool) in ``minimum..maximum``
    (``above``: strictly greater than ``minimum``). NaN, infinities and integers too large for a
    float are refused whatever the bounds. ``what``: how the message names the kind of number.

    Examples:
        >>> require_number("Stragglers.factor", 2, 1.0, 1e6, above=True)
        2.0
        >>> require_number("blocked_ms", float("nan"), 0, 1e300, what="a finite number >= 0")
        Traceback (most recent call last):
        ...
        profdsl.errors.ConfigError: blocked_ms must be a finite number >= 0, got nan
    """
    if optional and value is None:
        return value  # type: ignore[return-value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low_ok = value > minimum if above else value >= minimum
        if low_ok and value <= min(maximum, sys.float_info.max):  # also refuses NaN and inf
            return float(value)
    low = f"> {minimum:g}" if above else f">= {minimum:g}"
    refuse(label, what or f"a number {low} and <= {maximum:g}", value, optional=optional, tail=tail)


def number_in(minimum: float, maximum: float, *, above: bool = False) -> Validator:
    """An attrs validator: :func:`require_number` on the field."""
    return valid(require_number, minimum, maximum, above=above)


positive_finite: Final = valid(
    require_number,
    0,
    MAX_SECONDS,
    above=True,
    what="a finite number of seconds > 0",
    tail=f" (at most {MAX_SECONDS}, a week)",
)
"""An attrs validator: a finite number of seconds > 0, at most :data:`MAX_SECONDS`."""


def require_text(
    label: str, value: object, *, optional: bool = False, blank: bool = True, longest: int | None = None
) -> str:
    """Return ``value`` if it is a ``str`` (``blank``: empty or all-space text allowed;
    ``longest``: at most that many characters)."""
    if optional and value is None:
        return value  # type: ignore[return-value]
    if not isinstance(value, str) or (not blank and not value.strip()):
        refuse(label, "a string" if blank else "a non-empty string", value, optional=optional)
    if longest is not None and len(value) > longest:
        raise ConfigError(f"{label} must be at most {longest} characters, got {len(value)}")
    return value


def require_list(
    label: str, value: object, item: Callable[[object], bool], what: str, *, optional: bool = False
) -> tuple[Any, ...]:
    """Return ``value`` as a tuple if it is a list (or tuple) whose every item passes ``item``;
    ``what`` names such a list in the message (``"a list of strings"``)."""
    if optional and value is None:
        return value  # type: ignore[return-value]
    if isinstance(value, (list, tuple)) and all(item(v) for v in value):
        return tuple(value)
    refuse(label, what, value, optional=optional)


def require_mapping(label: str, value: object, *, optional: bool = False) -> dict[str, Any]:
    """Return ``value`` as a dict if it is a mapping (a JSON object)."""
    if optional and value is None:
        return value  # type: ignore[return-value]
    if isinstance(value, Mapping):
        return dict(value)
    refuse(label, "an object", value, optional=optional)


def to_index(label: str, value: object, minimum: int = 0, maximum: int | None = MAX_WIDE_INDEX) -> int:
    """:func:`require_int` for a number computed at run time: any integral type that
    ``operator.index`` takes (``numpy.int64``, a one-element integer tensor) becomes a plain int.

    Booleans, boolean arrays and tensors, floats and strings are still refused.

    Raises:
        ConfigError: as :func:`require_int`, quoting the value as given.

    Examples:
        >>> to_index("step", 3)
        3
        >>> to_index("step", 1.0)
        Traceback (most recent call last):
        ...
        profdsl.errors.ConfigError: step must be an integer in 0..999999999999, got 1.0
    """
    number = value
    if not isinstance(value, bool) and "bool" not in str(getattr(value, "dtype", "")):
        with contextlib.suppress(TypeError):
            number = operator.index(value)  # type: ignore[arg-type]
    if not _int_in_range(number, minimum, maximum):
        refuse(label, f"an integer{_bound(minimum, maximum)}", value)
    return number  # type: ignore[return-value]


def text_without_nul(label: str, value: object, *, optional: bool = False, blank: bool = True) -> str:
    """Return ``value`` if it is a ``str`` without NUL characters (which no path, command,
    environment value or file name can hold). ``optional``: None is allowed too; ``blank``:
    empty or all-space text is allowed.

    Raises:
        ConfigError: naming ``label`` and the value.
    """
    text = require_text(label, value, optional=optional, blank=blank)
    if text is not None and "\x00" in text:
        raise ConfigError(f"{label} must not contain NUL characters, got {brief(text)}")
    return text


def require_choice(label: str, value: object, choices: Iterable[str], *, optional: bool = False) -> str:
    """Return ``value`` if it is one of ``choices`` (as the plain string: a ``str`` subclass, an
    enum's member, is compared and returned by its text, and a value that only claims equality
    is refused), suggesting the closest one on a typo."""
    allowed = tuple(choices)
    if optional and value is None:
        return value  # type: ignore[return-value]
    if isinstance(value, str) and str.__str__(value) in allowed:
        return str.__str__(value)
    refuse(label, f"one of {', '.join(map(repr, allowed))}", value, optional=optional, tail=suggest(value, allowed))


def suggest(value: object, choices: Iterable[str]) -> str:
    """A ``"; did you mean 'x'?"`` tail for an error message, or ``""``."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


#: Colour names NVTX knows without matplotlib, as RGB.
COLOR_NAMES = {
    "blue": 0x0000FF,
    "cyan": 0x00FFFF,
    "darkgreen": 0x006400,
    "green": 0x008000,
    "orange": 0xFFA500,
    "purple": 0x800080,
    "rapids": 0x7400FF,
    "red": 0xFF0000,
    "white": 0xFFFFFF,
    "yellow": 0xFFFF00,
}
_HEX_COLOR = re.compile(r"#(?:[0-9a-fA-F]{6}|[0-9a-fA-F]{8})")


def to_color(where: str, value: object) -> int | None:
    """An NVTX colour as an ARGB integer: an integer ``0..0xFFFFFFFF``, ``"#RRGGBB"``,
    ``"#AARRGGBB"`` or one of :data:`COLOR_NAMES`; None stays None.

    Examples:
        >>> hex(to_color("color", "#336699")), hex(to_color("color", "red"))
        ('0xff336699', '0xffff0000')
    """
    if value is None:
        return None
    if is_int(value):
        return require_int(where, value, 0, 0xFFFFFFFF)
    if isinstance(value, str):
        if value in COLOR_NAMES:
            return 0xFF000000 | COLOR_NAMES[value]
        if _HEX_COLOR.fullmatch(value):
            argb = int(value[1:], 16)
            return argb if len(value) == 9 else 0xFF000000 | argb
    refuse(
        where,
        f"an ARGB integer, '#RRGGBB', '#AARRGGBB' or one of {', '.join(sorted(COLOR_NAMES))}",
        value,
        tail=suggest(value, COLOR_NAMES),
    )


def to_int_set(where: str, value: object, *, minimum: int = 0, maximum: int | None = None) -> tuple[int, ...]:
    """Convert any iterable of integers in ``minimum..maximum`` to a sorted tuple without
    duplicates.

    ``None`` means empty. A string is refused explicitly: ``"0,1"`` iterates as characters.
    """
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        refuse(where, "a list of integers", value)
    items = list(value)
    for item in items:
        if not _int_in_range(item, minimum, None):
            raise ConfigError(f"{where} must contain integers >= {minimum}, got {item!r} in {value!r}")
        if maximum is not None and item > maximum:
            raise ConfigError(f"{where} must contain integers <= {maximum}, got {item!r} in {value!r}")
    return tuple(sorted(set(items)))


def to_name_set(where: str, value: object, allowed: frozenset[str]) -> frozenset[str]:
    """Convert an iterable of names from ``allowed`` to a frozenset."""
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        refuse(where, f"a list of names from {sorted(allowed)}", value)
    listed = list(value)
    for item in listed:
        if not isinstance(item, str):  # a nested list or mapping is not even hashable
            raise ConfigError(f"{where} must be a list of names from {sorted(allowed)}, got {item!r} in {value!r}")
    items = frozenset(listed)
    for item in sorted(items, key=repr):
        if item not in allowed:
            raise ConfigError(
                f"{where} has unknown item {item!r}; allowed: {', '.join(sorted(allowed))}{suggest(item, allowed)}"
            )
    return items


def to_nested(where: str, value: object, cls: type[T], *, optional: bool = False) -> T:
    """Convert a plain mapping (YAML/JSON input) to ``cls`` via its ``from_mapping``
    (``optional``: None stays None)."""
    if optional and value is None:
        return value  # type: ignore[return-value]
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return cls.from_mapping(value, _path=where)  # type: ignore[attr-defined, no-any-return]
    refuse(where, f"a {cls.__name__} or a mapping", value)


def check_keys(path: str, mapping: Mapping[str, Any], cls: type) -> None:
    """Refuse keys of ``mapping`` that are not fields of ``cls``, with a close-match hint."""
    if not isinstance(mapping, Mapping):
        refuse(path, "a mapping", mapping)
    names = [a.name for a in attrs.fields(cls)]
    for key in mapping:
        if key not in names:
            raise ConfigError(f"unknown key {key!r} in {path}{suggest(key, names)} (known keys: {', '.join(names)})")
