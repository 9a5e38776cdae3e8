"""Opening a file that reaches profdsl from outside the process (a trace, the manifest, a metrics
log, a capture request in ``save_path``): only a regular file, without blocking, within a bound.

A file in ``save_path`` is untrusted: whoever can write there can put a FIFO (an open for
reading would wait for a writer forever), a device (``/dev/zero`` never ends) or a link (to a file
elsewhere, which profdsl would then read, and quote in its messages, with the reader's rights) in
place of a file profdsl wrote. profdsl itself writes only regular files there, never a link, so
:func:`open_regular` opens the name itself (``O_NOFOLLOW``: a link is refused unfollowed),
non-blocking (``O_NONBLOCK``: a FIFO or device is opened at once), then refuses all but a regular
file (``fstat``) and one larger than the caller's bound, before anything is read. A file may grow
after that check (a writer appending): :func:`read_within` bounds the read itself.

The write side is the same rule: :func:`open_append` (the manifest, the metrics logs) opens the
name itself, never a file a link points at (which profdsl would append to with the job's rights),
and refuses a FIFO or device without blocking. Every other file profdsl writes there is new,
made with ``O_EXCL`` (``open(..., "x")``), which fails on any name already there, a link included.

Examples:
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "a.json")
    ...     with open(path, "w") as file:
    ...         _ = file.write("{}")
    ...     with open_regular(path, limit=2) as file:
    ...         file.read()
    ...     os.symlink(path, os.path.join(folder, "link.json"))
    ...     try:
    ...         open_regular(os.path.join(folder, "link.json"))
    ...     except OSError as exc:
    ...         exc.strerror
    b'{}'
    'a link, not a regular file'
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

__all__ = [
    "append_lines",
    "LINK",
    "ends_a_line",
    "file_kind",
    "open_append",
    "open_regular",
    "read_regular",
    "read_within",
]

#: Why a link is not read (the ``strerror`` of the ``OSError``).
LINK = "a link, not a regular file"
_SAFE = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
_FLAGS = os.O_RDONLY | _SAFE
_APPEND = os.O_APPEND | os.O_CREAT | _SAFE
#: The most bytes one read asks for past the size a file had when opened (it grew since).
_PIECE = 1024 * 1024


def open_regular(path: str | os.PathLike[str], *, limit: int | None = None, holds: str = "such a file") -> BinaryIO:
    """``path`` opened for reading (blocking again once checked), when it is a regular file of at
    most ``limit`` bytes (None: any size); ``holds`` names what such a file holds, for the message
    of one too large (``a request``).

    Raises:
        OSError: it cannot be opened (``FileNotFoundError`` when missing), or ``errno.ELOOP``: it
            is a link (:data:`LINK`); ``errno.EINVAL``: it is not a regular file (``not a regular
            file (a FIFO)``); ``errno.EFBIG``: it is larger than ``limit``.
    """
    fd = _open_file(path, _FLAGS)
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise OSError(errno.EFBIG, f"{size} bytes, more than {holds} holds ({limit})")
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_within(file: BinaryIO, *, limit: int, holds: str) -> bytes:
    """All of ``file`` (opened by :func:`open_regular` with the same ``limit``), reading at most
    ``limit + 1`` bytes: a file that grew past ``limit`` after it was opened is refused as one
    found too large then. What it held when opened is read at once (a regular file's size was
    checked: ``read(limit)`` would reserve all of the bound); what it grew by, in pieces.

    Raises:
        OSError: it cannot be read, or ``errno.EFBIG``: it grew past ``limit`` while read.
    """
    left = limit + 1
    parts = []
    want = min(os.fstat(file.fileno()).st_size, limit) + 1
    while left > 0:
        part = file.read(min(want, left))
        if not part:
            break
        parts.append(part)
        left -= len(part)
        want = _PIECE
    if left <= 0:
        raise OSError(errno.EFBIG, f"more than {limit} bytes (it grew while read), more than {holds} holds ({limit})")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_regular(path: str | os.PathLike[str], *, limit: int, holds: str) -> bytes:
    """All of ``path`` when it is a regular file of at most ``limit`` bytes, when opened and as
    read: :func:`open_regular`, then :func:`read_within` (and raises as they do)."""
    with open_regular(path, limit=limit, holds=holds) as file:
        return read_within(file, limit=limit, holds=holds)


def open_append(path: str | os.PathLike[str], *, read: bool = False) -> int:
    """A file descriptor of ``path`` opened for appending (made, ``0o644``, when missing; also for
    reading when ``read``), when it is a regular file: the write side of :func:`open_regular`.
    A link planted in its place is refused unfollowed (``O_NOFOLLOW``: never an append to the
    file it points at), a FIFO or device without blocking (``O_NONBLOCK``, then ``fstat``).

    Raises:
        OSError: it cannot be opened, or ``errno.ELOOP``: it is a link (:data:`LINK`);
            ``errno.EINVAL``: it is not a regular file (``not a regular file (a FIFO)``).
    """
    return _open_file(path, _APPEND | (os.O_RDWR if read else os.O_WRONLY))


def _open_file(path: str | os.PathLike[str], flags: int) -> int:
    """``path`` opened with ``flags`` (which hold ``O_NOFOLLOW`` and ``O_NONBLOCK``: never through
    a link, never blocked by a FIFO or device), then blocking again, when it is a regular file:
    the one check both sides make. Raises as :func:`open_append` says."""
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the name is a link (O_NOFOLLOW), or a loop of them
            raise OSError(errno.ELOOP, LINK) from None
        if exc.errno == errno.ENXIO:  # write-only, non-blocking: a FIFO without a reader
            raise OSError(errno.EINVAL, f"not a regular file ({_kind_of(path)})") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({file_kind(info.st_mode)})")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def ends_a_line(fd: int) -> bool:
    """Whether the file open as ``fd`` (for reading too) is empty or ends with a newline: an
    appender that finds it does not (a write cut short by a full disk, a writer that died
    mid-line) starts its line behind a newline, so that the half line cannot swallow it."""
    size = os.fstat(fd).st_size
    return size == 0 or os.pread(fd, 1, size - 1) == b"\n"


def append_lines(fd: int, data: bytes) -> None:
    """Write ``data`` (whole lines) to the end of the file open as ``fd`` (by :func:`open_append`,
    for reading too), all of it: behind a newline when the file ends in a torn line
    (:func:`ends_a_line`), and a write that makes no progress is an error, never a short line.

    Raises:
        OSError: a write failed (``errno.ENOSPC`` for one that wrote nothing).
    """
    if not ends_a_line(fd):
        data = b"\n" + data
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # no progress: as short as a write gets
            raise OSError(errno.ENOSPC, "short write: no bytes written")
        view = view[written:]


def _kind_of(path: str | os.PathLike[str]) -> str:
    """What kind of file ``path`` is, in words (``a FIFO`` when it cannot be told)."""
    try:
        return file_kind(os.lstat(path).st_mode)
    except OSError:
        return "a FIFO"


def file_kind(mode: int) -> str:
    """What kind of file a ``st_mode`` says it is, in words (``a FIFO``, ``a folder``, ...)."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"
