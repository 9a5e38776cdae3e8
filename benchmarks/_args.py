"""What the benchmarks' command lines share: a count argument of at least 1.

A benchmark is run as a script (``python benchmarks/bench_x.py``), so this folder is on its
``sys.path`` and it imports ``from _args import count``; the tests put it there too
(``pythonpath`` in setup.cfg).
"""

from __future__ import annotations

import argparse

__all__ = ["count"]


def count(text: str) -> int:
    """A whole number of at least 1 (argparse names the argument and the value it refuses)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text!r}")
    return value
