"""Helpers shared by the analysis commands: errors and skipped input to stderr, one line each;
tables that fit a terminal; what a figure draws (names from the files, stacked bars)."""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from profdsl.analysis._walls import LogRead, read_walls
from profdsl.core._log import COUNTED_IN_FULL, printable

if TYPE_CHECKING:
    from profdsl.analysis._catalog import Artifact

T = TypeVar("T")

__all__ = ["drawn", "fail", "late_ms_refused", "listed", "load_read", "printable", "say", "skipped", "stack", "table"]


def say(message: str, command: str = "") -> None:
    """Print ``profdsl: message`` (``profdsl COMMAND: message`` with a ``command``) to stderr,
    control characters escaped."""
    print(printable(f"profdsl {command}: {message}" if command else f"profdsl: {message}"), file=sys.stderr)


def fail(message: str, code: int = 2, command: str = "") -> int:
    """:func:`say` ``message`` and return ``code``."""
    say(message, command)
    return code


def fail_pointing(message: str) -> int:
    """:func:`fail` for a message whose later lines point at a token of the first (a rank
    selector's error: the selector, then a caret under its bad token), printed below it: 2."""
    first, *more = message.split("\n")
    fail(first)
    for line in more:
        print(printable(line), file=sys.stderr)
    return 2


def skipped(command: str, reasons: Iterable[str]) -> int:
    """Print ``profdsl COMMAND: skipped REASON`` to stderr for each bad input left out (only the
    first :data:`~profdsl.core._log.COUNTED_IN_FULL`, then how many more: what is read is
    untrusted, and a folder may hold a file of millions of bad lines; each reason escaped and cut
    to :data:`REASON_CHARS` characters); returns 1 when there was any (the exit code it calls
    for), else 0."""
    count = 0
    for reason in reasons:
        if count < COUNTED_IN_FULL:
            say(f"skipped {_bounded(reason)}", command)
        count += 1
    if count > COUNTED_IN_FULL:
        say(f"skipped {count - COUNTED_IN_FULL} more (not named)", command)
    return 1 if count else 0


def load_read(
    command: str,
    folder: str,
    artifacts: list[Artifact],
    bad: list[str],
    load: Callable[[str, list[Artifact], list[str], LogRead], T],
) -> tuple[T, int]:
    """``load(folder, artifacts, bad, log)`` with one read of ``folder``'s metrics logs, then
    :func:`skipped` ``bad`` (manifest lines, traces) and the lines of the logs that are not valid
    from that read: what is shown and what is named cannot disagree. Returns what ``load``
    returned and 1 when any input was named, else 0."""
    log = read_walls(folder)
    found = load(folder, artifacts, bad, log)
    return found, max(skipped(command, bad), skipped(command, log.problems))


#: The most characters of one skipped input's reason printed (escaped): a reason may quote input.
REASON_CHARS = 1000


def _bounded(reason: str) -> str:
    """``reason`` escaped, cut to :data:`REASON_CHARS` characters, saying how long it was."""
    text = printable(reason)
    return text if len(text) <= REASON_CHARS else f"{text[:REASON_CHARS]}... ({len(reason)} characters)"


def listed(text: str, allowed: Sequence[str]) -> tuple[str, ...] | None:
    """The comma-separated names of ``text`` (a ``--by``), or None unless there is one and each
    is one of ``allowed``."""
    names = tuple(k.strip() for k in text.split(",") if k.strip())
    return names if names and all(k in allowed for k in names) else None


def late_ms_refused(late_ms: float) -> str | None:
    """Why a ``--late-ms`` is refused, or None: it must be a finite number of ms >= 0 (NaN is
    not; inf would reach ``--json`` as Infinity)."""
    return None if 0 <= late_ms < math.inf else f"--late-ms must be a finite number of ms >= 0, got {late_ms}"


def drawn(text: str) -> str:
    """``text`` from the files (a role, a stage) as a figure draws it: control characters
    escaped, ``$`` as itself (matplotlib reads ``$...$`` as math, and a math error crashes the
    figure: ``tests/test_hostile_ledger.py``)."""
    return printable(text).replace("$", r"\$")


def stack(
    axes: Any,
    positions: Sequence[float],
    bars: Sequence[Mapping[str, float]],
    order: Sequence[str],
    colour: Callable[[str], Any],
    **style: Any,
) -> list[float]:
    """Stacked bars on matplotlib's ``axes``: one per bar (a height per segment, 0 where it has
    none) at ``positions``, its segments in ``order`` bottom up, each ``colour(segment)``;
    ``style`` for every segment (``label``, a callable: each segment's legend entry). Returns
    each bar's top."""
    label = style.pop("label", None)
    bottoms = [0.0] * len(bars)
    for segment in order:
        heights = [bar.get(segment, 0.0) for bar in bars]
        named = {} if label is None else {"label": label(segment)}
        axes.bar(positions, heights, bottom=bottoms, color=colour(segment), **named, **style)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    return bottoms


#: The fewest characters of a value a left-aligned last column cut to fit a terminal keeps.
CUT_FLOOR = 12


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], left: int | None = None) -> str:
    """A plain aligned table, control characters escaped (headers too); ``left``: only the first
    ``left`` columns (names) are left-aligned, the others (figures) right-aligned; None: every
    column left-aligned. On a terminal a left-aligned last column is cut to its width (a figure
    never is), though never narrower than its header nor :data:`CUT_FLOOR`: every header is
    printed whole; elsewhere (a pipe, a file) every value is whole."""
    headers = [printable(h) for h in headers]  # a column may be named by a file (a kind of work)
    cells = [[("-" if c is None else printable(str(c))) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    names = len(headers) if left is None else left
    if sys.stdout.isatty() and names >= len(headers):
        room = shutil.get_terminal_size((160, 24)).columns - sum(w + 2 for w in widths[:-1])
        widths[-1] = max(CUT_FLOOR, len(headers[-1]), min(widths[-1], room))

    def line(values: Sequence[str]) -> str:
        last = len(values) - 1
        parts = [
            v.rjust(w) if i >= names else v.ljust(w) if i < last else v[:w]
            for i, (v, w) in enumerate(zip(values, widths))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), line(["-" * w for w in widths])] + [line(r) for r in cells])
