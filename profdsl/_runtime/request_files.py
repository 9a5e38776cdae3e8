"""The request folders a process watches, one per save_path (``docs/on-demand.md``): each is
looked at on a step boundary, one ``stat`` when nothing changed, and its new request files are
handed on for delivery (:meth:`profdsl._runtime.inbox.Inbox.deliver`). A folder's files older than
its watch (an earlier run's) are not taken; a file that is no request is said and ignored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import attrs

from profdsl.collect._requests import RequestFolder
from profdsl.core._log import counted, once, printable
from profdsl.records.requests import CaptureRequest

__all__ = ["RequestFiles"]


class RequestFiles:
    """The watched request folders of one process's inbox, each with its own lock: a thread
    checking a folder another is checking goes on without waiting."""

    def __init__(self) -> None:
        self._folders: dict[str, tuple[RequestFolder, threading.Lock]] = {}

    def watch(self, save_path: str) -> None:
        """Watch ``save_path``'s request folder from now on (under the inbox's lock)."""
        if save_path not in self._folders:
            self._folders[save_path] = (RequestFolder(save_path), threading.Lock())

    def check(self, save_path: str, deliver: Callable[[CaptureRequest], object]) -> None:
        """Look for new request files in ``save_path`` (one ``stat`` when nothing changed) and
        hand them to ``deliver``. Another thread checking the same folder is not waited for."""
        entry = self._folders.get(save_path)
        if entry is None:
            return
        folder, lock = entry
        if not lock.acquire(blocking=False):
            return
        try:
            if not folder.changed():
                return
            for found in folder.scan():
                path = f"{folder.path}/{found.name}"
                if found.request is None:
                    counted(
                        "request files that are no capture request",
                        logging.WARNING,
                        "profdsl: %s is not a capture request (%s): ignored",
                        printable(path),
                        printable(str(found.error)),
                    )
                    continue
                made = found.request.created if found.request.created is not None else found.mtime
                if made < folder.began:
                    once(
                        f"request-old:{path}",
                        logging.INFO,
                        "profdsl: %s was made before this process watched its folder (an earlier run's): not taken",
                        path,
                    )
                    continue
                deliver(attrs.evolve(found.request, source="file"))
        except Exception as exc:  # a request must never reach the training loop as an error
            once(
                f"request-folder:{save_path}",
                logging.ERROR,
                "profdsl: reading capture requests in %s failed: %r",
                save_path,
                exc,
            )
        finally:
            lock.release()
