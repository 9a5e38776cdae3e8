"""Region names as a torch trace can hold them: a reversible percent-encoding of any label.

torch's chrome-trace export writes a ``record_function`` name without escaping it: a ``"`` makes
the file invalid JSON, ``\\`` turns into ``/``, and non-ASCII or control characters turn into
``unknown``. profdsl therefore names its torch regions with :func:`encode`: printable ASCII other
than ``"``, ``\\`` and ``%`` stays as it is (so plain names are unchanged), every other character
becomes the ``%XX`` escapes of its UTF-8 bytes. :func:`decode` reverses it. The trace's
``profdsl`` metadata keeps the labels themselves, as proper JSON.

Examples:
    >>> encode("update_actor"), encode('a"b'), encode("générer"), encode("50%")
    ('update_actor', 'a%22b', 'g%C3%A9n%C3%A9rer', '50%25')
    >>> decode("g%C3%A9n%C3%A9rer")
    'générer'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["decode", "encode", "trace_names"]

_ESCAPED = frozenset('"\\%')
_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def _escape(char: str) -> str:
    if " " <= char <= "~" and char not in _ESCAPED:
        return char
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))


def encode(label: str) -> str:
    """The region name torch is given for ``label``: safe in its trace, and reversible.

    ``encode(base + str(i)) == encode(base) + str(i)``: a mini-batch's index is appended as is.
    """
    # A label that needs no escape (the common case), checked without a Python loop.
    if label.isascii() and label.isprintable() and '"' not in label and "\\" not in label and "%" not in label:
        return label
    return "".join(map(_escape, label))


def _unescape(match: re.Match[str]) -> str:
    run = match[0]
    try:
        return bytes.fromhex(run.replace("%", "")).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # not an escape profdsl wrote: keep it as it is
        return run


def decode(name: str) -> str:
    """The label a region name stands for (names without ``%`` are returned as they are)."""
    if "%" not in name:
        return name
    return _ESCAPES.sub(_unescape, name)


def trace_names(labels: Iterable[str]) -> dict[str, str]:
    """The names under which regions labelled ``labels`` appear in a trace, mapped to the labels.

    Each label is found under its encoded name and, for traces written before names were encoded
    (or an encoding that leaves it unchanged), under itself; an encoded name wins a collision.
    """
    raw = list(labels)
    found = {encode(label): label for label in raw}
    for label in raw:
        found.setdefault(label, label)
    return found
