"""Capture request files: ``save_path/profdsl-requests/<id>.json``, one JSON object each
(:class:`~profdsl.records.requests.CaptureRequest`).

``profdsl trigger`` writes one (:func:`write_request`: to a hidden name first, then renamed, so
that a reader never sees half a request). A running job's processes look for them at their step
boundaries through a :class:`RequestFolder`: one ``stat`` of the folder per check, and a listing
only when the folder changed (its modification time moved, or it changed too recently for its
timestamp to be trusted). Each new file is read once, bounded (:data:`MAX_REQUEST_BYTES`, a
regular file opened without blocking or following a link), and parsed; a file that is not a
valid request is reported once (its name, size and time), never raised.
"""

from __future__ import annotations

import errno
import json
import os
import time
import uuid
from collections.abc import Iterator

import attrs

from profdsl.core._files import read_regular
from profdsl.records.fields import RecordError, to_json
from profdsl.records.requests import CaptureRequest, parse_request

__all__ = ["MAX_REQUEST_BYTES", "REQUESTS_DIR", "RequestFolder", "Scanned", "new_id", "read_request", "write_request"]

#: The folder of request files, inside save_path.
REQUESTS_DIR = "profdsl-requests"
#: The largest request file read (a request is a few hundred bytes).
MAX_REQUEST_BYTES = 64 * 1024
#: A folder changed less than this long ago may change again within its timestamp's granularity:
#: it is listed again at the next check (coarse timestamps, such as some network filesystems').
SETTLE_NS = 2_000_000_000
#: The most request files one folder is read for (later ones are left unread, reported once).
MAX_FILES = 10_000


def new_id(prefix: str) -> str:
    """A fresh request id: ``prefix``, the time and a random part (``trigger-20270101T120000-3f2a9c1d``)."""
    return f"{prefix}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def write_request(save_path: str, request: CaptureRequest) -> str:
    """Write ``request`` into ``save_path``'s request folder (made when missing); its path.

    Raises:
        OSError: the folder cannot be made or written, or a request of that id exists.
    """
    folder = os.path.join(save_path, REQUESTS_DIR)
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, f"{request.id}.json")
    if os.path.lexists(target):
        raise OSError(errno.EEXIST, f"a request named {request.id!r} exists already", target)
    temporary = os.path.join(folder, f".{request.id}.{os.getpid()}.tmp")
    with open(temporary, "x", encoding="utf-8") as file:  # O_EXCL: never through a planted link
        json.dump(to_json(request), file, sort_keys=True)
        file.write("\n")
    os.replace(temporary, target)
    return target


def read_request(path: str) -> CaptureRequest:
    """The request a file holds.

    Raises:
        OSError: it cannot be read, is a link or not a regular file, or is larger than
            :data:`MAX_REQUEST_BYTES` (when opened, or it grew past it while read).
        RecordError: it is not a valid request (not JSON, a field wrong or missing).
    """
    # a link is not followed: it could make the job read (and quote) a file elsewhere
    data = read_regular(path, limit=MAX_REQUEST_BYTES, holds="a request")
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise RecordError(f"not JSON ({exc})") from None
    return parse_request(value)


@attrs.frozen
class Scanned:
    """One new file of the folder: its request, or why it is none (``error``), and its
    modification time (seconds since 1970)."""

    name: str
    request: CaptureRequest | None
    error: str | None
    mtime: float


def _young(age_ns: int) -> bool:
    """Whether a file or folder this many nanoseconds old may still be being written (read it
    again at the next check). One dated further in the future than that (a clock ahead,
    ``touch -d``) is not: it would be young forever, every step boundary reading it again."""
    return -SETTLE_NS <= age_ns <= SETTLE_NS


class RequestFolder:
    """The request folder of one save_path, as one process watches it (see the module
    docstring). Not thread-safe: its owner serializes :meth:`scan`."""

    def __init__(self, save_path: str) -> None:
        self.path = os.path.join(save_path, REQUESTS_DIR)
        self.began = time.time()  # requests made before this are not this process's
        self._mtime: int | None = None
        self._settled = False
        self._read: dict[str, int] = {}  # each file seen: its mtime when read (one replaced is read again)

    def changed(self) -> bool:
        """Whether the folder may hold files not scanned yet: one ``stat``."""
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            return False
        if mtime == self._mtime and self._settled:
            return False
        self._mtime = mtime
        self._settled = not _young(time.time_ns() - mtime)
        return True

    def scan(self) -> Iterator[Scanned]:
        """The files not seen before, each read and parsed once, in name order."""
        try:
            names = sorted(os.listdir(self.path))
        except OSError:
            return
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            path = os.path.join(self.path, name)
            try:
                info = os.stat(path)
            except OSError:
                continue  # gone meanwhile
            if self._read.get(name) == info.st_mtime_ns:
                continue
            self._read.pop(name, None)  # replaced since it was read (a corrected request)
            if len(self._read) >= MAX_FILES:
                yield Scanned(name, None, f"more than {MAX_FILES} request files: the rest are not read", 0.0)
                return
            mtime = info.st_mtime
            self._read[name] = info.st_mtime_ns
            try:
                yield Scanned(name, read_request(path), None, mtime)
            except (OSError, RecordError) as exc:
                if isinstance(exc, RecordError) and _young(time.time_ns() - int(mtime * 1e9)):
                    del self._read[name]  # written by hand, maybe not whole yet: read again
                    self._settled = False  # at the next check
                    continue
                yield Scanned(
                    name,
                    None,
                    str(exc) if isinstance(exc, RecordError) else f"cannot read: {exc.strerror or exc}",
                    mtime,
                )
