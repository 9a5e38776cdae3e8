"""Fakes of the rollout engines' profiling APIs, following their documentation (vLLM 0.33,
SGLang 0.5; see ../shared/reference/engine-apis.md): method names and arguments, where files are
written and how they are named. The real engines need GPUs."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: vLLM 0.33 ``vllm.config.profiler.ProfilerConfig`` fields.
VLLM_PROFILER_CONFIG_FIELDS = {
    "profiler", "torch_profiler_dir", "torch_profiler_activities", "torch_profiler_with_stack",
    "torch_profiler_with_flops", "torch_profiler_use_gzip", "torch_profiler_dump_cuda_time_total",
    "torch_profiler_record_shapes", "torch_profiler_with_memory", "capture_torch_profiler",
    "detailed_trace_annotation", "ignore_frontend", "delay_iterations", "max_iterations",
    "warmup_iterations", "active_iterations", "wait_iterations",
}
#: SGLang 0.5 ``ProfileReq`` fields.
SGLANG_PROFILE_REQ_FIELDS = {
    "output_dir", "start_step", "num_steps", "activities", "profile_by_stage", "with_stack",
    "record_shapes", "profile_id", "merge_profiles", "profile_prefix", "profile_stages",
    "detailed_annotations",
}


def write_trace(path: str, name: str = "engine_step") -> None:
    """A tiny but real gzipped Chrome trace."""
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": [{"ph": "X", "name": name, "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}, f)


class FakeVllmLLM:
    """``vllm.LLM``'s profiling surface: launched with ``profiler_config``; ``start_profile``
    raises when profiling was not configured; on stop each of ``tp`` workers writes
    ``{prefix}_dp0_pp0_tp{t}_dcp0_ep0_rank{t}.{time_ns}.pt.trace.json.gz``."""

    def __init__(self, profiler_config: dict[str, Any] | None = None, *, tp: int = 1,
                 stop_delay_s: float = 0.0, fail_start: bool = False) -> None:
        if profiler_config is not None:
            unknown = set(profiler_config) - VLLM_PROFILER_CONFIG_FIELDS
            assert not unknown, f"vLLM has no profiler_config field(s) {unknown}"
            assert os.path.isabs(profiler_config["torch_profiler_dir"])
        self.profiler_config, self.tp = profiler_config, tp
        self.stop_delay_s, self.fail_start = stop_delay_s, fail_start
        self.calls: list[tuple[str, Any]] = []
        self._prefix: str | None = None

    def start_profile(self, profile_prefix: str | None = None, *, delay_iterations: int | None = None,
                      max_iterations: int | None = None, profiler_kwargs: dict[str, Any] | None = None) -> None:
        self.calls.append(("start", profile_prefix))
        if self.fail_start:
            raise RuntimeError("engine crashed")
        if self.profiler_config is None:
            raise RuntimeError("Profiler is not enabled.")
        self._prefix = profile_prefix

    def stop_profile(self) -> None:
        self.calls.append(("stop", None))
        time.sleep(self.stop_delay_s)
        assert self.profiler_config is not None
        folder = self.profiler_config["torch_profiler_dir"]
        os.makedirs(folder, exist_ok=True)
        head = f"{self._prefix}_" if self._prefix else ""
        for t in range(self.tp):
            write_trace(os.path.join(folder, f"{head}dp0_pp0_tp{t}_dcp0_ep0_rank{t}.{time.time_ns()}.pt.trace.json.gz"))


class FakeAsyncLLM(FakeVllmLLM):
    """``AsyncLLM``: the same methods, as coroutines."""

    async def start_profile(self, profile_prefix: str | None = None, **kwargs: Any) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        FakeVllmLLM.start_profile(self, profile_prefix, **kwargs)

    async def stop_profile(self) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        FakeVllmLLM.stop_profile(self)


#: What SGLang's ``Engine`` raises (``RuntimeError``, from the scheduler's ``ProfileReqOutput``).
SGLANG_ALREADY_IN_PROGRESS = "Profiling is already in progress. Call /stop_profile first."
SGLANG_NOT_IN_PROGRESS = "Profiling is not in progress. Call /start_profile first."


class FakeSGLangEngine:
    """``sglang.Engine``'s profiler, by the rules of SGLang 0.5's scheduler (its profiler mixin):

    - ``start_profile(**ProfileReq)`` raises ``RuntimeError(SGLANG_ALREADY_IN_PROGRESS)`` while a
      profile is in progress; otherwise it starts at once, or arms for forward count
      ``max(start_step, count + 1)`` when ``start_step`` is given.
    - With ``num_steps`` the engine stops by itself: ``num_steps`` engine steps are recorded, and
      the step after them stops the profile and writes the files. A rollout of fewer steps leaves
      it in progress.
    - ``stop_profile()`` raises ``RuntimeError(SGLANG_NOT_IN_PROGRESS)`` when no profile is in
      progress (never started, or already stopped by itself); otherwise it writes the files.

    Files: ``{output_dir}/[{profile_prefix}-]{profile_id}-TP-{tp}.trace.json.gz``, ``profile_id``
    being the start time. ``generate(steps)`` runs engine steps (scheduler batches)."""

    def __init__(self, tp: int = 1) -> None:
        self.tp = tp
        self.request: dict[str, Any] | None = None
        self.calls: list[str] = []
        self.in_progress = False
        self.forward_ct = 0
        self._profile_id = ""
        self._start_ct: int | None = None
        self._target_ct: int | None = None

    def start_profile(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - SGLANG_PROFILE_REQ_FIELDS
        assert not unknown, f"SGLang ProfileReq has no field(s) {unknown}"
        self.calls.append("start")
        if self.in_progress:
            raise RuntimeError(SGLANG_ALREADY_IN_PROGRESS)
        self.request, self._profile_id = kwargs, str(time.time())
        start_step, num_steps = kwargs.get("start_step"), kwargs.get("num_steps")
        self._start_ct = max(start_step, self.forward_ct + 1) if start_step else None
        if not num_steps:
            self._target_ct = None
        elif self._start_ct is not None:
            self._target_ct = self._start_ct + num_steps
        else:
            self._target_ct = self.forward_ct + num_steps + 1
        self.in_progress = not start_step

    def generate(self, steps: int = 1) -> None:
        """Run ``steps`` engine steps; before each, the profiler stops or starts if it is due."""
        for _ in range(steps):
            self.forward_ct += 1
            if self._target_ct is not None and self._target_ct <= self.forward_ct and self.in_progress:
                self._flush()
            if self._start_ct is not None and self._start_ct == self.forward_ct:
                self.in_progress = True

    def stop_profile(self) -> None:
        self.calls.append("stop")
        if not self.in_progress:
            raise RuntimeError(SGLANG_NOT_IN_PROGRESS)
        self._flush()

    def _flush(self) -> None:
        assert self.request is not None
        folder = self.request["output_dir"]
        os.makedirs(folder, exist_ok=True)
        head = f"{self.request['profile_prefix']}-" if self.request.get("profile_prefix") else ""
        for t in range(self.tp):
            write_trace(os.path.join(folder, f"{head}{self._profile_id}-TP-{t}.trace.json.gz"))
        self.in_progress, self._start_ct = False, None


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
