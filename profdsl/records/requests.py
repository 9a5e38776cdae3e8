"""Capture requests: what may ask a running job for a capture the plan did not name (a request
file of ``profdsl trigger``, ``POST /profile``, a Ray trainer's driver, ``Profiler.request``, a
slow step), and the note a capture's records carry about it.

Examples:
    >>> parse_request({"id": "r1", "steps": 2, "ranks": "rank in {3, 1}"}).ranks
    'rank in {1, 3}'
    >>> capture_request(2, ranks=range(2), source="api", request_id="api-1").ranks
    (0, 1)
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from profdsl.config._checks import MAX_WIDE_INDEX, refuse, require_choice, require_int, require_number, require_text
from profdsl.config.selector import parse_selector
from profdsl.core._log import described
from profdsl.records.fields import (
    SCHEMA_VERSION,
    TEXTS,
    WINDOW,
    RecordError,
    count,
    decode,
    field,
    nullable,
    unknown_field,
)

__all__ = ["MAX_REQUEST_STEPS", "SOURCES", "CaptureNote", "CaptureRequest", "capture_request", "parse_request"]

#: What may ask for a capture the plan did not name: a request file (``profdsl trigger``), a Ray
#: trainer's driver, the metrics endpoint's ``POST /profile``, ``Profiler.request`` in the
#: process itself, or a slow step (``ProfilerConfig.auto``).
SOURCES: Final = ("file", "ray", "http", "api", "auto")
#: The most steps one capture request may ask for, whatever the config allows.
MAX_REQUEST_STEPS: Final = 10_000
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,79}")

_short_text = nullable(require_text, longest=1000)
_source = nullable(require_choice, SOURCES)
_when = nullable(require_number, 0, 1e11, what="seconds since 1970")


def _request_id(key: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and _ID.fullmatch(value)):
        return value
    refuse(key, "1-80 letters, digits, '.', '_', ':' or '-' (not first)", value, optional=True)


def _rank_choice(key: str, value: Any) -> tuple[int, ...] | str | None:
    """``"all"``, a rank selector (its canonical spelling) or a non-empty list of ranks."""
    if value is None or value == "all":
        return value  # type: ignore[no-any-return]
    if isinstance(value, str):
        return parse_selector(value, where=key).format()
    if isinstance(value, (list, tuple)) and value:
        for i, rank in enumerate(value):
            require_int(f"{key}[{i}]", rank, 0, MAX_WIDE_INDEX - 1)
        return tuple(sorted(set(value)))
    refuse(key, "'all', a rank selector or a non-empty list of ranks", value, optional=True)


def _role_names(key: str, value: Any) -> tuple[str, ...] | None:
    names: tuple[str, ...] | None = TEXTS(key, value)
    if names is not None and (not names or not all(names)):
        refuse(key, "a non-empty list of role names", value, optional=True)
    return names


@attrs.frozen(kw_only=True)
class CaptureNote:
    """Why a trace was captured (or a hook ran) when the plan did not name its step: a capture
    request or a slow step (a trace record's, hook record's and metadata's ``capture``)."""

    source: str | None = field(
        _source,
        "what asked: `file` (`profdsl trigger`), `ray` (the driver's "
        "`request()`), `http` (`POST /profile`), `api` (`Profiler.request`) or "
        "`auto` (a slow step)",
        always=True,
    )
    request: str | None = field(_request_id, "the request's id (one hook run per request)", always=True)
    steps: tuple[int, int] | None = field(WINDOW, "`[first, last]`: the steps it traces on this rank", always=True)
    reason: str | None = field(
        _short_text, "what the asker said, or why a step was slow (`update_actor took 2.3x the median of steps 80-99`)"
    )
    unknown: Mapping[str, Any] = unknown_field()


@attrs.frozen(kw_only=True)
class CaptureRequest:
    """A request to trace the next ``steps`` steps of a running job: a request file
    (``profdsl trigger``, in ``save_path/profdsl-requests/``), the body of ``POST /profile``, or
    what a Ray trainer's driver sends its workers. ``id`` and ``steps`` are required
    (:func:`parse_request`)."""

    id: str | None = field(_request_id, "the request's id: a request seen twice is taken once", always=True)
    steps: int | None = field(count(1, MAX_REQUEST_STEPS), "how many steps to trace", always=True)
    ranks: tuple[int, ...] | str | None = field(
        _rank_choice, "which ranks: a list, `all`, or a rank selector (`tp == 0`); null: the config's ranks"
    )
    roles: tuple[str, ...] | None = field(
        _role_names, "which roles (`rollout`: the engines, through the driver); null: every role"
    )
    at_step: int | None = field(
        count(0, MAX_WIDE_INDEX),
        "the first step to trace, when it is not yet reached; null: the next step each process begins",
    )
    reason: str | None = field(_short_text, "why it was asked (written into the capture's records)")
    source: str | None = field(_source, "what asked (set by the receiver)")
    created: float | None = field(
        _when, "when it was made, seconds since 1970: a request file older than the process that finds it is not taken"
    )
    schema: int = field(count(0), "the schema version that wrote it", default=SCHEMA_VERSION, always=True)
    unknown: Mapping[str, Any] = unknown_field()

    def note(self, first: int, last: int) -> CaptureNote:
        """The capture note of the steps ``first``..``last`` it traces."""
        return CaptureNote(source=self.source, request=self.id, steps=(first, last), reason=self.reason)


def parse_request(value: object, *, default_id: str | None = None, source: str | None = None) -> CaptureRequest:
    """A capture request from its JSON object (``default_id``: the id of one that names none;
    ``source``: what carried it, replacing what it says).

    Raises:
        RecordError: it is not an object, ``id`` or ``steps`` is missing, or a field has the
            wrong type or value (the message names it).

    Examples:
        >>> parse_request({"id": "r1", "steps": 0})
        Traceback (most recent call last):
        ...
        profdsl.records.fields.RecordError: steps must be an integer in 1..10000 or None, got 0
    """
    request = decode(CaptureRequest, value)
    if request.id is None and default_id is not None:
        request = attrs.evolve(request, id=default_id)
    if source is not None:
        request = attrs.evolve(request, source=source)
    for name in ("id", "steps"):
        if getattr(request, name) is None:
            raise RecordError(f"{name} is required")
    return request


def capture_request(
    steps: object,
    *,
    ranks: object = None,
    roles: object = None,
    at_step: object = None,
    reason: object = None,
    source: str,
    request_id: str,
) -> CaptureRequest:
    """A capture request from Python arguments (``Profiler.request``, ``RayStepProfiler.request``),
    checked as a request file is.

    Raises:
        RecordError: an argument has the wrong type or value (the message names it), or reading
            it raised (the callers promise never to raise).
    """
    try:
        asked = {
            "steps": _as_plain(steps),
            "ranks": _as_plain(ranks, many=True),
            "roles": _as_plain(roles, many=True),
            "at_step": _as_plain(at_step),
            "reason": reason,
        }
        return parse_request(asked, default_id=request_id, source=source)
    except RecordError:
        raise
    except Exception as exc:  # the caller's own object raised (an array's truth value, ...)
        raise RecordError(f"an argument cannot be read: {described(exc)}") from exc


#: The most items taken from a sequence argument before the schema judges it (it refuses far
#: fewer): an endless iterator cannot hang the caller.
_MOST_ITEMS = 100_001


def _as_plain(value: object, many: bool = False) -> object:
    """A Python argument as a request file would carry it: an integer of any type that
    ``start()`` takes (``np.int64``: it has ``__index__``, and is not a bool) becomes an ``int``;
    with ``many``, a sequence that is not text (a tuple, a range, a NumPy array) becomes a list
    of such. Anything else is left for the schema to refuse by name."""
    if value is None or isinstance(value, (str, bytes, bool, float)):
        return value
    if many and isinstance(value, Iterable) and not isinstance(value, Mapping):
        if getattr(value, "ndim", 1) != 1:
            tolist = getattr(value, "tolist", None)
            return tolist() if callable(tolist) else value  # nested lists: refused by name
        return [_as_plain(item) for item in itertools.islice(value, _MOST_ITEMS)]
    if hasattr(type(value), "__index__"):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:  # np.bool_ and arrays of one item claim it and refuse
            return value
    return value
