"""The finish hook's command: what it sees, how it runs, how its outcome is recorded.

When it runs (once per process and save_path, after the last role of the process is done) is
the runtime's business (:mod:`profdsl._runtime.writer.rounds`). Plan then apply:
:func:`hook_environment` is pure (what the command sees);
:func:`run_command` runs it in its own session (process group) with a deadline for the whole
group, streams its output line by line with the rank in front (at INFO, control characters
escaped), keeps its last lines (:mod:`profdsl.collect._hook_output`: a run that did not end ``ok``
logs and records them), and never blocks on a background child that keeps the output pipe
open. Nothing here raises into training: every outcome becomes a
:class:`HookResult`, logged once and made a record (:func:`hook_record`). The command's process
group never outlives the wait for it: a timeout, an interrupt (Ctrl-C, ``SystemExit``) or an
:class:`Abort` from another thread kills it, and the run ends ``timeout`` or ``interrupted``, with
the reason.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from profdsl.collect._hook_output import OutputTail
from profdsl.collect._manifest import MANIFEST_NAME
from profdsl.core._log import described, logger, once, printable
from profdsl.core._units import runs
from profdsl.records.manifest import HookRecord

__all__ = [
    "SHELL",
    "STEPS_MAX_CHARS",
    "Abort",
    "HookResult",
    "hook_environment",
    "hook_record",
    "run_command",
    "steps_file",
    "steps_text",
]

#: The shell that runs hook commands (a module attribute so tests can point it elsewhere).
SHELL = "/bin/sh"
#: After SIGTERM, how long the process group has before SIGKILL.
KILL_GRACE_S = 5.0
#: After the shell exits, how long to keep draining output a background child may still write.
DRAIN_GRACE_S = 1.0
#: How often a hook run on a background thread checks whether it was asked to stop.
ABORT_POLL_S = 0.1
#: The most bytes of one read of the command's output (a longer line is read in pieces).
READ_BYTES = 65_536
#: Beyond its timeout, how long a hook may take to be killed, drained and recorded.
STOP_BOUND_S = 2 * KILL_GRACE_S + DRAIN_GRACE_S + ABORT_POLL_S + 5


#: The most characters of ``PROFDSL_STEPS``: far under Linux's limit on one environment string
#: (128 KiB, past which the command cannot start: E2BIG), with room for the user's own variables.
STEPS_MAX_CHARS = 16_384
_CUT = ",..."


def steps_text(steps: Iterable[int], most: int = STEPS_MAX_CHARS) -> str:
    """``PROFDSL_STEPS``: the steps in order, comma-separated. A list longer than ``most``
    characters is written with each run of consecutive steps as ``first-last`` (``1-25000``);
    one still longer is cut after the last whole item that fits and ends with ``,...`` (every
    step is in ``PROFDSL_STEPS_FILE``).

    Examples:
        >>> steps_text([3, 1, 2])
        '1,2,3'
        >>> steps_text(range(1, 25001))
        '1-25000'
    """
    ordered = sorted(set(steps))
    plain = ",".join(map(str, ordered))
    if len(plain) <= most:
        return plain
    items = runs(ordered)
    text = ",".join(items)
    if len(text) <= most:
        return text
    ends = itertools.accumulate(len(item) + 1 for item in items)  # where each item's comma would end
    return ",".join(item for item, end in zip(items, ends) if end - 1 + len(_CUT) <= most) + _CUT


@contextlib.contextmanager
def steps_file(steps: Iterable[int]) -> Iterator[str | None]:
    """A file listing ``steps``, one per line, for one hook run (``PROFDSL_STEPS_FILE``), in the
    system's temporary folder (never in save_path: the upload need not carry it), removed after
    the block. None when it cannot be written (logged once; the hook still runs)."""
    with contextlib.ExitStack() as stack:
        path: str | None = None
        try:
            handle, made = tempfile.mkstemp(prefix="profdsl-steps-", suffix=".txt")
            stack.callback(_unlink, made)
            with os.fdopen(handle, "w") as out:
                out.write("".join(f"{step}\n" for step in sorted(set(steps))))
            path = made
        except OSError as exc:
            once("hook-steps-file", logging.WARNING, "profdsl: no PROFDSL_STEPS_FILE for the finish hook: %s", exc)
            stack.close()  # what was made is removed now
        yield path


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


@attrs.frozen
class HookResult:
    """How a hook run ended: ``status`` is ``ok``, ``failed``, ``timeout``, ``interrupted`` or
    ``skipped``; ``output``: the last lines the command wrote (:class:`OutputTail`)."""

    status: str
    exit_code: int | None = None
    duration_s: float = 0.0
    error: str | None = None
    output: tuple[str, ...] = ()


def hook_environment(
    base: Mapping[str, str],
    *,
    save_path: str,
    tool: str,
    role: str,
    rank: int,
    world_size: int,
    steps: Iterable[int],
    host: str,
    pid: int,
    steps_file: str | None = None,
) -> dict[str, str]:
    """The command's environment: ``base`` plus the ``PROFDSL_*`` variables of the contract
    (``PROFDSL_STEPS``: :func:`steps_text`; ``PROFDSL_STEPS_FILE``: ``steps_file``, or empty)."""
    absolute = os.path.abspath(save_path)
    return dict(
        base,
        PROFDSL_SAVE_PATH=absolute,
        PROFDSL_MANIFEST=os.path.join(absolute, MANIFEST_NAME),
        PROFDSL_TOOL=tool,
        PROFDSL_ROLE=role,
        PROFDSL_RANK=str(rank),
        PROFDSL_WORLD_SIZE=str(world_size),
        PROFDSL_STEPS=steps_text(steps),
        PROFDSL_STEPS_FILE=steps_file or "",
        PROFDSL_HOST=host,
        PROFDSL_PID=str(pid),
    )


def _stream(pipe: object, rank: int, tail: OutputTail) -> None:
    for raw in iter(lambda: pipe.readline(READ_BYTES), b""):  # type: ignore[attr-defined]
        text = raw.decode(errors="replace")
        tail.add(text)
        logger.info("[profdsl rank %s] %s", rank, printable(text.rstrip("\n")))


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _wait_quietly(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)


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
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=step)


def _watch(
    proc: subprocess.Popen[bytes], started: float, timeout_s: float, rank: int, abort: Abort | None
) -> HookResult:
    # A daemon reader: a background child holding the pipe open must not hold the caller.
    tail = OutputTail()
    reader = threading.Thread(
        target=_stream, args=(proc.stdout, rank, tail), daemon=True, name=f"profdsl-hook-output-{rank}"
    )
    reader.start()
    try:
        code = _wait(proc, started + timeout_s, abort)
        status, error = ("ok", None) if code == 0 else ("failed", f"exit code {code}")
    except (subprocess.TimeoutExpired, _AbortedError) as stop:
        _kill_group(proc)
        timed_out = isinstance(stop, subprocess.TimeoutExpired)
        status, code = ("timeout" if timed_out else "interrupted"), proc.returncode
        why = f"timed out after {timeout_s:g}s" if timed_out else str(stop)
        error = f"{why}; process group killed"
    reader.join(DRAIN_GRACE_S)
    return HookResult(status, code, time.monotonic() - started, error, tail.lines())


def run_command(
    cmd: str,
    env: Mapping[str, str],
    *,
    timeout_s: float,
    rank: int,
    abort: Abort | None = None,
) -> HookResult:
    """Run ``cmd`` with ``SHELL -c`` in a new session, bounded by ``timeout_s``.

    Never raises an ``Exception``. An interrupt while it runs (``KeyboardInterrupt``,
    ``SystemExit``, any ``BaseException``) kills its process group and propagates. ``abort`` (set
    from another thread) ends the run the same way without raising: ``interrupted``.
    """
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [SHELL, "-c", cmd],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except Exception as exc:  # a missing shell, a bad environment, out of processes
        return HookResult("failed", None, time.monotonic() - started, described(exc))
    try:
        return _watch(proc, started, timeout_s, rank, abort)
    except Exception as exc:  # it cannot be watched (no thread for its output): it must not run on
        _kill_group(proc)
        return HookResult(
            "failed", proc.returncode, time.monotonic() - started, f"{described(exc)}; process group killed"
        )
    except BaseException:  # Ctrl-C, sys.exit from a signal handler: the group goes first
        _kill_group(proc)
        raise


def hook_record(save_path: str, result: HookResult, **fields: Any) -> HookRecord:
    """The record of a hook run (``fields``: more of its fields). A run that did not end ``ok``
    keeps the last lines of its output (``output``) and is logged once, with them."""
    entry = HookRecord(
        status=result.status,
        exit_code=result.exit_code,
        duration_s=round(result.duration_s, 3),
        error=result.error,
        **fields,
    )
    if entry.lost:
        entry = attrs.evolve(entry, output=result.output or None)
        once(
            f"hook:{os.path.realpath(save_path)}",
            logging.ERROR,
            "[profdsl rank %s] finish hook %s: %s%s%s",
            entry.rank,
            result.status,
            result.error,
            "; its last output:" if entry.output else "",
            "".join(f"\n    {line}" for line in entry.output or ()),
        )
    return entry
