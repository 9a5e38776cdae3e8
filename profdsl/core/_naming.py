"""Trace file names: the :class:`TraceName` grammar (the public face is :mod:`profdsl.naming`)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import PurePath
from typing import Any, Final

import attrs

from profdsl.config._checks import MAX_WIDE_INDEX, int_in, is_int, named, require_int
from profdsl.config._parallel import known_coords
from profdsl.core._name_reader import EPOCH, MAX_NAME_BYTES, NotANameError, fields_of
from profdsl.errors import ConfigError

__all__ = [
    "ARTIFACT_SUFFIXES",
    "TEMP_PREFIX",
    "ENGINE_TRACE_EXTS",
    "EXT_MAX_LEN",
    "HOST_MAX_LEN",
    "JSON_TRACE_SUFFIXES",
    "MAX_INDEX",
    "MAX_NAME_BYTES",
    "MAX_PID",
    "MAX_TIME_MS",
    "MAX_WIDE_INDEX",
    "NSYS_EXT",
    "PLACEHOLDER_LABEL",
    "PLAIN_TRACE_EXT",
    "ROLE_MAX_LEN",
    "STAGE_MAX_LEN",
    "TRACE_EXT",
    "TraceName",
    "is_json_trace",
    "is_relative",
    "sanitize_label",
]

# The caps below are chosen so that a name with every field at its maximum (indices at MAX_INDEX)
# is exactly MAX_NAME_BYTES long; tests/test_naming.py checks that sum. Indices up to
# MAX_WIDE_INDEX widen the name; TraceName refuses the rare combination that would not fit.
MAX_INDEX: Final = 999_999
"""Largest step, rank, world size, parallel coordinate, replica, mini-batch index or part written
in the padded width (a step has six digits), in any combination of fields. Larger ones, up to
:data:`MAX_WIDE_INDEX`, take more digits."""
MAX_PID: Final = 2**32 - 1
"""Largest process id."""
MAX_TIME_MS: Final = 253_402_300_799_999
"""``9999-12-31T23:59:59.999Z`` in Unix epoch milliseconds."""
ROLE_MAX_LEN: Final = 24
"""Longest role label after sanitizing."""
STAGE_MAX_LEN: Final = 28
"""Longest stage label after sanitizing."""
HOST_MAX_LEN: Final = 28
"""Longest host label after sanitizing."""
EXT_MAX_LEN: Final = 22
"""Longest file extension, leading dot included."""
PLACEHOLDER_LABEL: Final = "x"
"""What a label that sanitizes to nothing becomes."""

TRACE_EXT: Final = ".pt.trace.json.gz"
"""The extension of the traces profdsl writes (gzipped Chrome JSON, as torch names them)."""
PLAIN_TRACE_EXT: Final = ".pt.trace.json"
"""The extension of the traces profdsl writes uncompressed (``TorchOptions.compress_level=0``)."""
NSYS_EXT: Final = ".nsys-rep"
"""The extension of Nsight Systems reports."""
JSON_TRACE_SUFFIXES: Final = (".json", ".json.gz")
"""File endings read as Chrome JSON traces, plain or gzipped (profdsl's and engines' traces)."""
ARTIFACT_SUFFIXES: Final = (*JSON_TRACE_SUFFIXES, NSYS_EXT)
"""File endings of every artifact a profiles folder may hold."""
ENGINE_TRACE_EXTS: Final = (TRACE_EXT, PLAIN_TRACE_EXT, ".trace.json.gz", ".trace.json", ".json.gz", ".json")
"""The endings an engine's trace keeps when it moves into a profiles folder, longest first."""
TEMP_PREFIX: Final = ".profdsl-tmp-"
"""How the hidden files profdsl writes in a profiles folder begin: ``TEMP_PREFIX{pid}-{id}``
plus ``.json`` for a trace's events before they are finished, nothing for a file being moved."""


def is_relative(path: str) -> bool:
    """True for a path inside a profiles folder: not empty, not absolute, no ``..``, no NUL.

    Examples:
        >>> is_relative("a.pt.trace.json.gz"), is_relative("../a.json"), is_relative("/tmp/a.json")
        (True, False, False)
    """
    return bool(path) and "\0" not in path and not os.path.isabs(path) and ".." not in PurePath(path).parts


def is_json_trace(name: str) -> bool:
    """Whether a file name (or path) is a Chrome JSON trace by its ending.

    Examples:
        >>> is_json_trace("actor_step000001.pt.trace.json.gz"), is_json_trace("r.nsys-rep")
        (True, False)
    """
    return name.endswith(JSON_TRACE_SUFFIXES)


_UNSAFE_RUN = re.compile(r"[^a-z0-9]+")
_HASH_LEN = 8
_EXT = re.compile(r"(?:\.[A-Za-z0-9][A-Za-z0-9-]*)+", re.ASCII)


def sanitize_label(text: str, *, max_len: int = HOST_MAX_LEN) -> str:
    """Turns free text into a label that is safe inside a trace name.

    The text is lower-cased, every run of characters outside ``[a-z0-9]`` becomes one ``-``, and
    leading and trailing ``-`` are stripped. A result longer than ``max_len`` is cut, and when
    ``max_len`` is over 16 its last 8 characters become a hash of the whole label so that long
    labels sharing a prefix stay distinct. An empty result becomes `PLACEHOLDER_LABEL`.
    The function is idempotent.

    Args:
        text: Any text, e.g. ``"actor_rollout_ref"`` or a host name.
        max_len: The longest label to return, at least 1.

    Returns:
        A non-empty label matching ``[a-z0-9]+(-[a-z0-9]+)*`` of at most ``max_len`` characters.

    Raises:
        ConfigError: ``text`` is not a str, or ``max_len`` is not an integer >= 1.
    """
    if not isinstance(text, str):
        raise ConfigError(f"sanitize_label text must be a str, got {text!r}")
    require_int("sanitize_label max_len", max_len, 1)
    # Lower-cased so that names stay distinct on case-insensitive file systems.
    label = _UNSAFE_RUN.sub("-", text.lower()).strip("-")
    if len(label) > max_len:
        if max_len > 2 * _HASH_LEN:
            digest = hashlib.sha256(label.encode()).hexdigest()[:_HASH_LEN]
            label = f"{label[: max_len - _HASH_LEN - 1].rstrip('-')}-{digest}"
        else:
            label = label[:max_len].rstrip("-")
    return label or PLACEHOLDER_LABEL


def _label(where: str, value: object, max_len: int, *, optional: bool = False) -> str:
    if optional and value is None:
        return value  # type: ignore[return-value]
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a str, got {value!r}")
    return sanitize_label(value, max_len=max_len)


def _window(value: Sequence[int] | None) -> tuple[int, int] | None:
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ConfigError(f"TraceName.window must be a (first, last) pair, got {value!r}")
    first, last = value
    if not all(is_int(v) and 0 <= v <= MAX_WIDE_INDEX for v in (first, last)):
        raise ConfigError(f"TraceName.window must hold integers in 0..{MAX_WIDE_INDEX}, got {value!r}")
    if first > last:
        raise ConfigError(f"TraceName.window must have first <= last, got {value!r}")
    return (first, last)


_INDEX: Final = int_in(0, MAX_WIDE_INDEX, optional=True)


def _check_ext(_instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or len(value) > EXT_MAX_LEN or not _EXT.fullmatch(value):
        raise ConfigError(
            "TraceName.ext must be one or more '.<letters, digits or dashes>' pieces of at most "
            f"{EXT_MAX_LEN} characters in all, got {value!r}"
        )


def _format_time(time_ms: int) -> str:
    # timedelta arithmetic on integers is exact, unlike going through a float timestamp.
    moment = EPOCH + timedelta(milliseconds=time_ms)
    return f"{moment:%Y%m%dT%H%M%S}{time_ms % 1000:03d}"


def _quote(name: str) -> str:
    return repr(name) if len(name) <= 2 * MAX_NAME_BYTES else f"{name[: 2 * MAX_NAME_BYTES]!r}..."


@attrs.frozen(kw_only=True)
class TraceName:
    """The parts of one trace file's name.

    Labels (``role``, ``stage``, ``host``) are sanitized with `sanitize_label` on construction;
    every other field is validated. ``format`` and ``parse`` are exact inverses. Indices range
    over ``0..MAX_WIDE_INDEX``; a step up to `MAX_INDEX` is zero-padded to six digits, a larger one
    takes as many digits as it needs.

    Attributes:
        role: Worker role, e.g. ``"actor_rollout_ref"`` (stored sanitized).
        stage: Profiled stage, e.g. ``"update_actor"``; None for a whole-step trace.
        step: RL training step.
        rank: Global rank; None when it cannot be told.
        world_size: Number of ranks, >= 1 and > ``rank``.
        tp: Tensor-parallel coordinate.
        pp: Pipeline-parallel coordinate.
        dp: Data-parallel coordinate.
        cp: Context-parallel coordinate.
        ep: Expert-parallel coordinate.
        replica: Rollout engine replica index.
        window: Inclusive mini-batch window ``(first, last)``; a list is accepted.
        part: Running index that keeps names unique (and numbers continuous-mode parts).
        host: Host name (stored sanitized).
        pid: Process id.
        time_ms: Unix epoch milliseconds, written as a UTC time.
        ext: File extension, e.g. ``".pt.trace.json.gz"``.

    Raises:
        ConfigError: A field has the wrong type or is out of range; the message names both. Or
            the name would be longer than `MAX_NAME_BYTES` (possible only with several indices
            past `MAX_INDEX`; the names profdsl writes fit whatever their indices).

    Example:
        >>> name = TraceName(role="actor", stage="update_actor", step=5, rank=3,
        ...                  host="node-1", pid=1234, time_ms=1_795_947_835_123)
        >>> name.format()
        'actor.update-actor_step000005_rank3_node-1_pid1234_20261129T102355123.pt.trace.json.gz'
        >>> TraceName.parse(name.format()) == name
        True
    """

    role: str = attrs.field(converter=named(_label, ROLE_MAX_LEN))  # type: ignore[misc]
    stage: str | None = attrs.field(default=None, converter=named(_label, STAGE_MAX_LEN, optional=True))  # type: ignore[misc]
    step: int | None = attrs.field(default=None, validator=_INDEX)
    rank: int | None = attrs.field(default=None, validator=_INDEX)
    world_size: int | None = attrs.field(default=None, validator=int_in(1, MAX_WIDE_INDEX, optional=True))
    tp: int | None = attrs.field(default=None, validator=_INDEX)
    pp: int | None = attrs.field(default=None, validator=_INDEX)
    dp: int | None = attrs.field(default=None, validator=_INDEX)
    cp: int | None = attrs.field(default=None, validator=_INDEX)
    ep: int | None = attrs.field(default=None, validator=_INDEX)
    replica: int | None = attrs.field(default=None, validator=_INDEX)
    window: tuple[int, int] | None = attrs.field(default=None, converter=_window)
    part: int | None = attrs.field(default=None, validator=_INDEX)
    host: str = attrs.field(converter=named(_label, HOST_MAX_LEN))  # type: ignore[misc]
    pid: int = attrs.field(validator=int_in(0, MAX_PID))
    time_ms: int = attrs.field(validator=int_in(0, MAX_TIME_MS))
    ext: str = attrs.field(default=TRACE_EXT, validator=_check_ext)

    def __attrs_post_init__(self) -> None:
        if self.rank is not None and self.world_size is not None and self.rank >= self.world_size:
            raise ConfigError(f"TraceName.rank must be < world_size ({self.world_size}), got {self.rank!r}")
        length = len(self.format())
        if length > MAX_NAME_BYTES:  # only with several indices past MAX_INDEX at once
            raise ConfigError(
                f"TraceName would be {length} bytes long, over the {MAX_NAME_BYTES}-byte limit of a file name: {self!r}"
            )

    def format(self) -> str:
        """Builds the file name.

        Returns:
            A bare file name of at most `MAX_NAME_BYTES` ASCII characters.
        """
        segments = [self.role if self.stage is None else f"{self.role}.{self.stage}"]
        if self.step is not None:
            segments.append(f"step{self.step:06d}")
        if self.rank is not None:
            of = "" if self.world_size is None else f"-of-{self.world_size}"
            segments.append(f"rank{self.rank}{of}")
        elif self.world_size is not None:
            segments.append(f"world{self.world_size}")
        coords = [f"{dim}{v}" for dim, v in known_coords(self)]
        if coords:
            segments.append("-".join(coords))
        if self.replica is not None:
            segments.append(f"replica{self.replica}")
        if self.window is not None:
            first, last = self.window
            segments.append(f"mb{first}" if first == last else f"mb{first}-{last}")
        if self.part is not None:
            segments.append(f"part{self.part}")
        segments += [self.host, f"pid{self.pid}", _format_time(self.time_ms) + self.ext]
        return "_".join(segments)

    @classmethod
    def parse(cls, name: str) -> TraceName:
        """Reads a file name made by `format` back.

        Args:
            name: A bare file name, not a path.

        Returns:
            The TraceName whose ``format()`` is exactly ``name``.

        Raises:
            ConfigError: ``name`` is not a profdsl trace name; the message quotes it.
        """
        if not isinstance(name, str):
            raise ConfigError(f"TraceName.parse needs a str, got {name!r}")
        try:
            fields = fields_of(name)
            parsed = cls(**fields)
        except (NotANameError, ConfigError) as exc:
            raise ConfigError(f"{_quote(name)} is not a profdsl trace name: {exc}") from exc
        # Only the canonical spelling is accepted, so that parse and format are exact inverses.
        if parsed.format() != name:
            raise ConfigError(
                f"{_quote(name)} is not a profdsl trace name: not in canonical form (expected {parsed.format()!r})"
            )
        return parsed

    @classmethod
    def try_parse(cls, name: str) -> TraceName | None:
        """Like `parse`, but returns None for anything that is not a profdsl trace name.

        Args:
            name: A bare file name.

        Returns:
            The parsed TraceName, or None.
        """
        try:
            return cls.parse(name)
        except ConfigError:
            return None
