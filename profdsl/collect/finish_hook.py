"""The finish hook's command: what it sees, how it runs, how its outcome is recorded.

When it runs (once per process and save_path, after the last role of the process is done) is
the runtime's business (:mod:`profdsl.runtime.writer.rounds`). Plan then apply:
:func:`hook_environment` is pure (what the command sees);
:func:`run_command` runs it in its own session (process group) with a deadline for the whole
group, streams its output line by line with the rank in front, and never blocks on a background
child that keeps the output pipe open. Nothing here raises into training: every outcome becomes a
:class:`HookResult`, logged once and recorded in the manifest. The command's process group never
outlives the wait for it: a timeout, an interrupt (Ctrl-C, ``SystemExit``) or an interpreter exit
kills it, and the run is recorded (``timeout`` or ``interrupted``, with the reason).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from profdsl.collect.manifest import MANIFEST_NAME, append_record
from profdsl.core.log import logger, once
from profdsl.records.schema import HookRecord

__all__ = ["SHELL", "Abort", "BackgroundHook", "HookResult", "hook_environment", "record", "run_and_record",
           "run_command"]

#: The shell that runs hook commands (a module attribute so tests can point it elsewhere).
SHELL = "/bin/sh"
#: After SIGTERM, how long the process group has before SIGKILL.
KILL_GRACE_S = 5.0
#: After the shell exits, how long to keep draining output a background child may still write.
DRAIN_GRACE_S = 1.0
#: How often a hook run on a background thread checks whether it was asked to stop.
ABORT_POLL_S = 0.1
#: Beyond its timeout, how long a hook may take to be killed, drained and recorded.
STOP_BOUND_S = 2 * KILL_GRACE_S + DRAIN_GRACE_S + ABORT_POLL_S + 5


@attrs.frozen
class HookResult:
    """How a hook run ended: ``status`` is ``ok``, ``failed``, ``timeout``, ``interrupted`` or
    ``skipped``."""

    status: str
    exit_code: int | None = None
    duration_s: float = 0.0
    error: str | None = None


def hook_environment(base: Mapping[str, str], *, save_path: str, tool: str, role: str, rank: int,
                     world_size: int, steps: Iterable[int], host: str, pid: int) -> dict[str, str]:
    """The command's environment: ``base`` plus the ``PROFDSL_*`` variables of the contract."""
    absolute = os.path.abspath(save_path)
    env = dict(base)
    env.update(
        PROFDSL_SAVE_PATH=absolute,
        PROFDSL_MANIFEST=os.path.join(absolute, MANIFEST_NAME),
        PROFDSL_TOOL=tool,
        PROFDSL_ROLE=role,
        PROFDSL_RANK=str(rank),
        PROFDSL_WORLD_SIZE=str(world_size),
        PROFDSL_STEPS=",".join(str(s) for s in sorted(steps)),
        PROFDSL_HOST=host,
        PROFDSL_PID=str(pid),
    )
    return env


def _stream(pipe: object, rank: int) -> None:
    for raw in iter(pipe.readline, b""):  # type: ignore[attr-defined]
        logger.info("[profdsl rank %s] %s", rank, raw.decode(errors="replace").rstrip("\n"))


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_quietly(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group, then SIGKILL what is left of it (an interrupt that
    cuts the grace short still gets the SIGKILL out)."""
    try:
        _signal_group(proc, signal.SIGTERM)
        _wait_quietly(proc)
    finally:
        _signal_group(proc, signal.SIGKILL)  # children that ignored SIGTERM or outlived the shell
    _wait_quietly(proc)


class Abort:
    """Asks a hook command running on another thread to stop: set ``reason`` and its process
    group is killed (within :data:`ABORT_POLL_S`), the run ending ``interrupted``."""

    def __init__(self) -> None:
        self.reason: str | None = None


class _AbortedError(Exception):
    """Raised inside :func:`run_command` when its :class:`Abort` is set."""


def _wait(proc: subprocess.Popen[bytes], deadline: float, abort: Abort | None) -> int:
    """The command's exit code; TimeoutExpired past ``deadline``, _AbortedError once ``abort`` is set."""
    while True:
        remaining = deadline - time.monotonic()
        if abort is not None and abort.reason is not None:
            raise _AbortedError(abort.reason)
        if remaining <= 0:
            raise subprocess.TimeoutExpired(proc.args, 0)
        step = remaining if abort is None else min(remaining, ABORT_POLL_S)
        try:
            return proc.wait(timeout=step)
        except subprocess.TimeoutExpired:
            continue


def _watch(proc: subprocess.Popen[bytes], started: float, timeout_s: float, rank: int,
           abort: Abort | None) -> HookResult:
    # A daemon reader: a background child holding the pipe open must not hold the caller.
    reader = threading.Thread(target=_stream, args=(proc.stdout, rank), daemon=True,
                              name=f"profdsl-hook-output-{rank}")
    reader.start()
    try:
        code = _wait(proc, started + timeout_s, abort)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return HookResult("timeout", proc.returncode, time.monotonic() - started,
                          f"timed out after {timeout_s:g}s; process group killed")
    except _AbortedError as stop:
        _kill_group(proc)
        return HookResult("interrupted", proc.returncode, time.monotonic() - started,
                          f"{stop}; process group killed")
    reader.join(DRAIN_GRACE_S)
    status = "ok" if code == 0 else "failed"
    error = None if code == 0 else f"exit code {code}"
    return HookResult(status, code, time.monotonic() - started, error)


def run_command(cmd: str, env: Mapping[str, str], *, timeout_s: float, rank: int,
                abort: Abort | None = None,
                on_interrupt: Callable[[HookResult], object] | None = None) -> HookResult:
    """Run ``cmd`` with ``SHELL -c`` in a new session, bounded by ``timeout_s``.

    Never raises an ``Exception``. An interrupt while it runs (``KeyboardInterrupt``,
    ``SystemExit``, any ``BaseException``) kills its process group, is handed to ``on_interrupt``
    as an ``interrupted`` result, and propagates. ``abort`` (set from another thread) ends the run
    the same way without raising.
    """
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [SHELL, "-c", cmd], env=dict(env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
    except Exception as exc:  # a missing shell, a bad environment, out of processes
        return HookResult("failed", None, time.monotonic() - started, f"{type(exc).__name__}: {exc}")
    try:
        return _watch(proc, started, timeout_s, rank, abort)
    except Exception as exc:  # it cannot be watched (no thread for its output): it must not run on
        _kill_group(proc)
        return HookResult("failed", proc.returncode, time.monotonic() - started,
                          f"{type(exc).__name__}: {exc}; process group killed")
    except BaseException as exc:  # Ctrl-C, sys.exit from a signal handler: the group goes first
        _kill_group(proc)
        if on_interrupt is not None:
            on_interrupt(HookResult("interrupted", proc.returncode, time.monotonic() - started,
                                    f"{type(exc).__name__} while the hook ran; process group killed"))
        raise


def run_and_record(save_path: str, cmd: str, env: Mapping[str, str], *, timeout_s: float, rank: int,
                   fields: Mapping[str, object], abort: Abort | None = None) -> HookResult:
    """Run the hook command (:func:`run_command`) and record its outcome, an interrupted run
    included (recorded before the interrupt propagates)."""
    result = run_command(cmd, env, timeout_s=timeout_s, rank=rank, abort=abort,
                         on_interrupt=lambda interrupted: record(save_path, interrupted, **fields))
    record(save_path, result, **fields)
    return result


class BackgroundHook:
    """A hook run on a daemon thread (``background=True``) that never outlives the process.

    :meth:`wait` waits for it, bounded by its timeout; an interrupt while waiting (Ctrl-C in
    ``close()``) aborts it, then propagates. Until waited for, it is waited for at interpreter
    exit too, and aborted at once when the interpreter exits on an uncaught ``KeyboardInterrupt``.
    Aborting kills its process group and records the run ``interrupted``.
    """

    def __init__(self, run: Callable[[Abort], object], *, timeout_s: float) -> None:
        self._run, self._abort, self._done = run, Abort(), threading.Event()
        self._bound_s, self._pid = timeout_s + STOP_BOUND_S, os.getpid()
        # An Event, not Thread.join: a join cut short by Ctrl-C marks a live thread as stopped.
        self._thread = threading.Thread(target=self._main, daemon=True, name="profdsl-finish-hook")

    def _main(self) -> None:
        try:
            self._run(self._abort)
        finally:
            self._done.set()

    def start(self) -> None:
        """Start the thread (and the interpreter-exit guard)."""
        atexit.register(self._at_exit)
        self._thread.start()

    def wait(self) -> None:
        """Wait for the hook, up to its timeout plus the time to kill it."""
        try:
            self._done.wait(self._bound_s)
        except BaseException as exc:
            self.abort(f"{type(exc).__name__} while waiting for the background hook")
            raise
        finally:
            atexit.unregister(self._at_exit)

    def abort(self, reason: str) -> None:
        """Kill the hook's process group and wait (bounded) until its run is recorded."""
        self._abort.reason = reason
        self._done.wait(STOP_BOUND_S)

    def _at_exit(self) -> None:
        if os.getpid() != self._pid:  # a forked child: the thread and the command are not its own
            return
        if isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):  # the script died on Ctrl-C
            atexit.unregister(self._at_exit)
            self.abort("KeyboardInterrupt: the interpreter exited while the hook ran")
        else:
            self.wait()


def record(save_path: str, result: HookResult, **fields: object) -> None:
    """Log a failed run once and append the hook record (``fields``: more of its fields) to the
    manifest."""
    more: dict[str, Any] = dict(fields)
    entry = attrs.evolve(HookRecord(status=result.status, exit_code=result.exit_code,
                                    duration_s=round(result.duration_s, 3), error=result.error), **more)
    if entry.lost:
        once(f"hook:{os.path.realpath(save_path)}", logging.ERROR,
             "[profdsl rank %s] finish hook %s: %s", entry.rank, result.status, result.error)
    append_record(save_path, entry)
