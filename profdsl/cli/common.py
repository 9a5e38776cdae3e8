"""Helpers shared by the analysis commands: errors to stderr, tables that fit a terminal."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence

__all__ = ["fail", "table"]


def fail(message: str, code: int = 2) -> int:
    """Print ``profdsl: message`` to stderr and return ``code``."""
    print(f"profdsl: {message}", file=sys.stderr)
    return code


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned table; the last column is cut to the terminal's width."""
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    room = shutil.get_terminal_size((160, 24)).columns - sum(w + 2 for w in widths[:-1])
    widths[-1] = max(12, min(widths[-1], room))

    def line(values: Sequence[str]) -> str:
        parts = [v.ljust(w) if i < len(values) - 1 else v[:w] for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), line(["-" * w for w in widths])] + [line(r) for r in cells])
