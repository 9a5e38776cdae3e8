"""The last lines of a finish hook command's output, kept to say why it failed.

:class:`OutputTail` is fed the command's output as it is read (whole lines, or pieces of a line
longer than a read) and keeps, bounded whatever the command writes, its last
:data:`OUTPUT_MAX_LINES` lines and at most :data:`OUTPUT_MAX_CHARS` characters of them, each
line's control characters escaped (:func:`~profdsl.core._log.printable`): what goes into the
failure's log line and its manifest record (``output``).
"""

from __future__ import annotations

import collections
import threading

from profdsl.core._log import printable

__all__ = ["OUTPUT_MAX_CHARS", "OUTPUT_MAX_LINES", "OutputTail"]

#: The most lines kept.
OUTPUT_MAX_LINES = 20
#: The most characters kept, all lines together (a longer last line keeps its end).
OUTPUT_MAX_CHARS = 4096


class OutputTail:
    """The end of a command's output. Thread-safe: the reader feeds it while the caller reads it.

    Examples:
        >>> tail = OutputTail(most_lines=2)
        >>> for piece in ["one\\n", "two\\n", "thr", "ee \\x1b[1m\\n", "part"]:
        ...     tail.add(piece)
        >>> tail.lines()
        ('three \\\\x1b[1m', 'part')
    """

    def __init__(self, most_lines: int = OUTPUT_MAX_LINES, most_chars: int = OUTPUT_MAX_CHARS) -> None:
        self._most_lines, self._most_chars = most_lines, most_chars
        self._done: collections.deque[str] = collections.deque(maxlen=most_lines)
        self._open = ""  # the line being read (its last most_chars characters)
        self._lock = threading.Lock()

    def add(self, piece: str) -> None:
        """One read of the output: a line with its newline, or a piece of a longer line."""
        with self._lock:
            text = self._open + piece
            if text.endswith("\n"):
                self._done.append(printable(text[:-1])[-self._most_chars :])
                self._open = ""
            else:
                self._open = text[-self._most_chars :]

    def lines(self) -> tuple[str, ...]:
        """The last lines (an unfinished last line too), oldest first, within the bounds."""
        with self._lock:
            lines = [*self._done, *([printable(self._open)[-self._most_chars :]] if self._open else [])]
        kept: list[str] = []
        used = 0
        for line in reversed(lines[-self._most_lines :]):
            used += len(line)
            if kept and used > self._most_chars:
                break
            kept.append(line)
        return tuple(reversed(kept))
