"""The finish hook's command: what it sees, how it runs, how its outcome is recorded.

When it runs (once per process and save_path, after the last role of the process is done) is
the runtime's rendezvous (:mod:`profdsl.runtime.hooks`). Plan then apply:
:func:`hook_environment` is pure (what the command sees);
:func:`run_command` runs it in its own session (process group) with a deadline for the whole
group, streams its output line by line with the rank in front, and never blocks on a background
child that keeps the output pipe open. Nothing here raises into training: every outcome becomes a
:class:`HookResult`, logged once and recorded in the manifest.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping

import attrs

from profdsl.collect.manifest import MANIFEST_NAME, append_record, make_record
from profdsl.core.log import logger, once

__all__ = ["SHELL", "HookResult", "hook_environment", "record", "run_command"]

#: The shell that runs hook commands (a module attribute so tests can point it elsewhere).
SHELL = "/bin/sh"
#: After SIGTERM, how long the process group has before SIGKILL.
KILL_GRACE_S = 5.0
#: After the shell exits, how long to keep draining output a background child may still write.
DRAIN_GRACE_S = 1.0

@attrs.frozen
class HookResult:
    """How a hook run ended: ``status`` is ``ok``, ``failed``, ``timeout`` or ``skipped``."""

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


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group, then SIGKILL what is left of it."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # children that ignored SIGTERM or outlived the shell
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass


def run_command(cmd: str, env: Mapping[str, str], *, timeout_s: float, rank: int) -> HookResult:
    """Run ``cmd`` with ``SHELL -c`` in a new session, bounded by ``timeout_s``; never raises."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [SHELL, "-c", cmd], env=dict(env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
    except Exception as exc:  # a missing shell, a bad environment, out of processes
        return HookResult("failed", None, time.monotonic() - started, f"{type(exc).__name__}: {exc}")
    # A daemon reader: a background child holding the pipe open must not hold the caller.
    reader = threading.Thread(target=_stream, args=(proc.stdout, rank), daemon=True,
                              name=f"profdsl-hook-output-{rank}")
    reader.start()
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return HookResult("timeout", proc.returncode, time.monotonic() - started,
                          f"timed out after {timeout_s:g}s; process group killed")
    reader.join(DRAIN_GRACE_S)
    status = "ok" if code == 0 else "failed"
    error = None if code == 0 else f"exit code {code}"
    return HookResult(status, code, time.monotonic() - started, error)


def record(save_path: str, result: HookResult, **fields: object) -> None:
    """Log a failed run once and append the hook record to the manifest."""
    if result.status in ("failed", "timeout"):
        once(f"hook:{os.path.realpath(save_path)}", logging.ERROR,
             "[profdsl rank %s] finish hook %s: %s", fields.get("rank"), result.status, result.error)
    append_record(save_path, make_record(
        "hook", None, status=result.status, exit_code=result.exit_code,
        duration_s=round(result.duration_s, 3), error=result.error, **fields))
