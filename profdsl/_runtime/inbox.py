"""The process's capture requests (``docs/on-demand.md``; their place in the concurrency model:
``docs/architecture.md``).

A request reaches a process in one of four ways: a request file its profilers find at a step
boundary (:meth:`Inbox.check`: one ``stat`` per check; the folders watched are
:mod:`profdsl._runtime.request_files`), the body of ``POST /profile`` on the metrics endpoint
(:meth:`Inbox.from_http`, on the endpoint's thread), a Ray trainer's driver
(``ProfiledWorker.start_profile(step, requests=...)``) or the process itself (``Profiler.request``,
an automatic capture). Each is *delivered* once (:meth:`Inbox.deliver`): a request id seen before
is a duplicate and changes nothing, so a request is idempotent whatever carries it. Delivery
offers it to every role of the process (each says whether it takes it, and why not); it never
waits for a role, a session or the writer: a role notes the request and carries it out at its
next step boundary, on its own thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from profdsl._runtime.request_files import RequestFiles
from profdsl.collect._requests import new_id
from profdsl.core._log import counted, failing_once, logger, printable
from profdsl.records.fields import RecordError
from profdsl.records.requests import CaptureRequest, parse_request

__all__ = ["MAX_SEEN", "Answer", "Inbox", "Member"]

#: The most request ids a process remembers (and so takes); later ones are refused.
MAX_SEEN = 100_000


class Member(Protocol):
    """A role that takes requests (``runtime.demand.Demand``)."""

    role: str
    save_path: str
    #: Its config's ``OnDemand.token`` and ``OnDemand.hosts`` (who may ask over HTTP).
    token: str | None
    hosts: tuple[str, ...]

    def offer(self, request: CaptureRequest) -> str | None:
        """Take ``request`` (None), or say why not."""


@attrs.frozen
class Answer:
    """What became of a request in this process: ``status`` ``accepted`` (by ``roles``),
    ``duplicate`` (seen before), ``refused`` (``why``: each role's reason) or ``malformed``."""

    request: str | None
    status: str
    roles: tuple[str, ...] = ()
    why: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for the log, of a request offered to the roles (taken, or refused)."""
        if self.status == "accepted":
            return f"capture request {self.request} taken by {', '.join(self.roles)}"
        return f"capture request {self.request} not taken: {'; '.join(self.why) or 'no role here'}"


class Inbox:
    """The process's capture requests (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: list[Member] = []
        self._listeners: list[Callable[[CaptureRequest], None]] = []
        self._answers: dict[str, Answer | None] = {}  # None: being delivered
        self._files = RequestFiles()  # the request folders watched

    # -- who takes requests -----------------------------------------------------------------
    def subscribe(self, member: Member, *, watch: bool) -> None:
        """``member`` takes requests from now on; with ``watch`` its save_path's request folder
        is watched (from now on: files older than this are not taken)."""
        with self._lock:
            self._members.append(member)
            if watch:
                self._files.watch(member.save_path)

    def unsubscribe(self, member: Member) -> None:
        """``member`` takes no more requests."""
        with self._lock:
            if member in self._members:
                self._members.remove(member)

    def listen(self, listener: Callable[[CaptureRequest], None]) -> None:
        """``listener(request)`` hears of every request delivered from now on (a Ray driver
        forwards them to its workers); it must not block."""
        with self._lock:
            self._listeners.append(listener)

    def unlisten(self, listener: Callable[[CaptureRequest], None]) -> None:
        """``listener`` hears no more."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    # -- where requests come from -----------------------------------------------------------
    def check(self, save_path: str) -> None:
        """Look for new request files in ``save_path`` (one ``stat`` when nothing changed) and
        deliver them. Another thread checking the same folder is not waited for."""
        self._files.check(save_path, self.deliver)

    def gate(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The tokens (any one will do; none: no token needed) and the extra host names the
        roles taking requests accept over HTTP (:func:`profdsl.core._gate.admit`)."""
        with self._lock:
            members = list(self._members)
        tokens = tuple(sorted({m.token for m in members if m.token is not None}))
        return tokens, tuple(sorted({h for m in members for h in m.hosts}))

    def from_http(self, body: bytes, refused: tuple[int, str] | None = None) -> tuple[int, dict[str, Any]]:
        """``POST /profile``: the body, a JSON request (``id`` may be left out), delivered; the
        answer's HTTP status and JSON object. A malformed body is logged and ignored (400);
        ``refused``: the endpoint's door turned the request away (its status and why: the
        answer says so, nothing is read)."""
        if refused is not None:
            return refused[0], attrs.asdict(Answer(None, "refused", why=(refused[1],)))
        try:
            request = parse_request(json.loads(body or b"{}"), default_id=new_id("http"), source="http")
        except (ValueError, RecursionError) as exc:
            why = str(exc) if isinstance(exc, RecordError) else f"not JSON ({exc})"
            counted(
                "malformed POST /profile bodies",
                logging.WARNING,
                "profdsl: a POST /profile body is not a capture request (%s): ignored",
                printable(why),
            )
            answer = Answer(None, "malformed", why=(why,))
        else:
            answer = self.deliver(request)
        return {"accepted": 202, "duplicate": 200, "refused": 409}.get(answer.status, 400), attrs.asdict(answer)

    def deliver(self, request: CaptureRequest) -> Answer:
        """Offer ``request`` to every role of the process, once per id taken (a request every
        role refused, and no driver passed on, leaves its id free); never raises."""
        request_id = str(request.id)
        with self._lock:
            if request_id in self._answers:
                earlier = self._answers[request_id]
                return Answer(request_id, "duplicate", earlier.roles if earlier is not None else ())
            if len(self._answers) >= MAX_SEEN:
                return Answer(request_id, "refused", why=(f"more than {MAX_SEEN} requests in this process",))
            self._answers[request_id] = None
            members, listeners = list(self._members), list(self._listeners)
        taken, why = [], []
        for member in members:
            try:
                reason = member.offer(request)
            except Exception as exc:
                reason = f"{member.role}: {exc!r}"
            if reason is None:
                taken.append(member.role)
            else:
                why.append(reason)
        answer = Answer(request_id, "accepted" if taken else "refused", tuple(taken), tuple(printable(w) for w in why))
        with self._lock:
            if taken or listeners:
                self._answers[request_id] = answer
            else:  # refused here and passed on nowhere: the corrected request may use the id
                self._answers.pop(request_id, None)
        passed = " (passed on)" if listeners and not taken else ""
        said = (
            "profdsl: %s%s (%s%s)",
            printable(answer.describe()),
            passed,
            request.source,
            f": {printable(request.reason)}" if request.reason else "",
        )
        if taken or listeners:
            logger.info(*said)
        else:  # a refusal: a flood of them costs a few lines
            counted("capture requests refused", logging.WARNING, *said)
        for listener in listeners:
            with failing_once(
                f"request-listener:{id(listener)}", "profdsl: passing on capture request %s failed: %r", request_id
            ):
                listener(request)
        return answer

    def clear(self) -> None:
        """Forget every member, listener, folder and request (tests; a forked child)."""
        self._lock = threading.Lock()
        self._members, self._listeners, self._answers, self._files = [], [], {}, RequestFiles()
