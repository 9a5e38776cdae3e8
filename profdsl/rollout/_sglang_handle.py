"""The lifecycle of SGLang's profiler as profdsl drives it, whatever the transport: how a handle
settles, disarms and marks stray what SGLang 0.5's scheduler leaves behind is docs/rollout.md's
"What SGLang does not refuse".
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from typing import Any

from profdsl.core._engine_names import STRAY_MARK
from profdsl.core._log import described, once

__all__ = ["NEVER_STEP", "SCRATCH_DIR", "SGLangHandle", "UnsettledProfileError"]

#: A ``start_step`` no engine reaches: arming it replaces a pending start without starting.
NEVER_STEP = 2**62
#: Where the handle's own disarming profile writes (hidden: relocation never reads it).
SCRATCH_DIR = ".profdsl-disarm"


class UnsettledProfileError(RuntimeError):
    """A handle refused to start: a profile it began earlier may still run and could not be
    ended (starting now would replace it, or be refused)."""


def _ends_by_itself(request: dict[str, Any]) -> bool:
    """Whether SGLang can have ended the profile on its own (after ``num_steps``) or not begun
    it yet (before ``start_step``): then a stop refused as "not in progress" is no failure."""
    return bool(request.get("num_steps") or request.get("start_step"))


class SGLangHandle:
    """A ``rollout_window`` engine over SGLang's profiler; subclasses supply the transport
    (:meth:`_send_start`, :meth:`_send_stop`) and read refusals (:meth:`_refused`)."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.request = dict(request)
        self._settled = True  # no profile of ours runs or is armed in the engine
        self._prefix: str | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (a Ray task or actor may receive a handle): the lock is not shipped."""
        return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- transport ----------------------------------------------------------------------------
    def _send_start(self, fields: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _send_stop(self) -> Any:
        raise NotImplementedError

    def _refused(self, exc: Exception, call: str) -> bool:
        """Whether ``exc`` is SGLang refusing the call: a ``"stop"`` as "not in progress", a
        ``"start"`` (with ``start_step``) as "already in progress"; not any other failure."""
        raise NotImplementedError

    # -- the engine's methods -------------------------------------------------------------------
    def start_profile(self, profile_prefix: str | None = None) -> Any:
        """Start profiling with the request, naming files with ``profile_prefix``; first settle
        a profile of an earlier window that may still run (:class:`UnsettledProfileError` if not)."""
        with self._lock:
            if not self._settled:
                self._settle()
            fields = {k: v for k, v in self.request.items() if v is not None}
            if profile_prefix is not None:
                fields["profile_prefix"] = profile_prefix
            self._settled, self._prefix = False, profile_prefix
            return self._send_start(fields)

    def stop_profile(self) -> Any:
        """End the engine's profile: stop it, unless SGLang already ended it by itself (or never
        began it); never leaves a pending start armed."""
        with self._lock:
            result, refusal = self._stop()
            if refusal is not None and not _ends_by_itself(self.request):
                raise refusal  # nothing could have ended it but someone else's stop: a failure
            return result

    # -- settling -------------------------------------------------------------------------------
    def _stop(self) -> tuple[Any, Exception | None]:
        """Stop the engine's profile: its answer, or SGLang's refusal as "not in progress" (then
        nothing runs, and a start with ``start_step`` that may still be armed is disarmed).
        Settled either way; any other failure is raised."""
        try:
            result, refusal = self._send_stop(), None
        except Exception as exc:
            if not self._refused(exc, "stop"):
                raise
            if self.request.get("start_step"):
                self._disarm()
            result, refusal = None, exc
        self._settled = True  # a successful stop also clears a pending start
        return result, refusal

    def _settle(self) -> None:
        """End whatever profile of an earlier window may still run or be armed; its files are
        stray. Raises :class:`UnsettledProfileError` when that cannot be done."""
        try:
            self._stop()
        except Exception as exc:
            raise UnsettledProfileError(
                f"not starting: a profile of an earlier window may still run and could not be ended ({described(exc)})"
            ) from exc
        finally:
            self._mark_stray()

    def _disarm(self) -> None:
        """Clear a pending start (docs/rollout.md); ends a profile it already began."""
        scratch = os.path.join(str(self.request.get("output_dir") or "."), SCRATCH_DIR)
        fields = {
            "output_dir": scratch,
            "activities": ["CPU"],
            "with_stack": False,
            "record_shapes": False,
            "profile_prefix": "profdsl-disarm",
        }
        try:
            self._send_start({**fields, "start_step": NEVER_STEP})
        except Exception as exc:
            if not self._refused(exc, "start"):
                raise
            self._send_stop()  # the pending start fired: end that (stray) profile
            return
        self._send_start(fields)
        self._send_stop()
        shutil.rmtree(scratch, ignore_errors=True)

    def _mark_stray(self) -> None:
        """Rename the files the earlier window's profile wrote after that window ended."""
        folder, prefix = self.request.get("output_dir"), self._prefix
        if not folder or not prefix:
            return
        try:
            names = [n for n in os.listdir(folder) if n.startswith(f"{prefix}-")]
        except OSError:
            return  # another node's folder, or none yet
        for name in names:
            try:
                os.replace(os.path.join(folder, name), os.path.join(folder, STRAY_MARK + name))
            except OSError:
                continue
        if names:
            once(
                f"sglang-stray:{folder}",
                logging.WARNING,
                "profdsl: SGLang wrote %d trace file(s) "
                "after their rollout window (a profile outlived it); recorded as stray",
                len(names),
            )
