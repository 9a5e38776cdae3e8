"""Where a command may write: never over, into or as one of its inputs.

``merge``, ``plot`` and ``export --hta`` read a folder and write a file (or a folder). An output
inside the input folder would overwrite one of its traces, or be read as one the next time;
:func:`check_output` refuses it, whichever way the path gets there (a relative path, ``..``, a
symlink to the folder or into it, a hard link to one of its files).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["OutputError", "check_output"]


class OutputError(ValueError):
    """An output that is, or resolves to, an input (the message names both)."""


def check_output(output: str | os.PathLike[str], folder: str | os.PathLike[str], *, is_folder: bool = False) -> None:
    """Refuse to write ``output`` when it is the input ``folder``, lies inside it, or is one of its
    files under another name (a hard link); an output folder (``is_folder``) must not hold the
    input folder either.

    Raises:
        OutputError: the message names the output, the input, and what to do.
    """
    out, into = Path(os.path.realpath(output)), Path(os.path.realpath(folder))
    where = f"{os.fspath(output)}"
    if out == into:
        raise OutputError(f"{where} is the input folder {os.fspath(folder)}: write the output elsewhere")
    if into in out.parents:
        raise OutputError(
            f"{where} is inside the input folder {os.fspath(folder)} (it would overwrite "
            "an input, or be read as one): write the output elsewhere"
        )
    if is_folder and out in into.parents:
        raise OutputError(f"{where} holds the input folder {os.fspath(folder)}: write the output elsewhere")
    twin = _same_file(output, into)
    if twin is not None:
        raise OutputError(f"{where} is the input {twin} under another name (a hard link): write the output elsewhere")


def _same_file(output: str | os.PathLike[str], folder: Path) -> Path | None:
    """The file of ``folder`` that ``output`` is (the same inode), if any."""
    try:
        mine = os.stat(output)
    except OSError:  # not there yet: no file of the folder can be it
        return None
    if not stat.S_ISREG(mine.st_mode) or mine.st_nlink < 2:
        return None
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    for name in names:
        try:
            if os.path.samestat(mine, os.stat(folder / name)):
                return folder / name
        except OSError:
            continue
    return None
