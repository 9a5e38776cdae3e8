"""SGLang: the profile request for ``Engine.start_profile`` / ``POST /start_profile``, and
engine handles over an in-process ``sglang.Engine`` or a server's HTTP endpoints.

SGLang stops by itself once ``num_steps`` engine steps (``RolloutOptions.max_iterations``) are
recorded, but a rollout of fewer steps leaves its profile running and its traces unwritten. So the
handles always stop the profile at the end of the window; when SGLang already ended it by itself
(or, with ``start_step``, never began it), its refusal ("Profiling is not in progress") means there
is nothing left to stop. They never start while a profile of theirs may still run, and never leave
a pending ``start_step`` armed (:mod:`profdsl.rollout._sglang_handle`).
SGLang cannot profile memory: a ``memory`` content is dropped with a warning.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

from profdsl.config import ProfilerConfig
from profdsl.config._checks import require_int
from profdsl.core._log import once
from profdsl.core._selection import Selection
from profdsl.rollout import rollout_trace_dir
from profdsl.rollout._sglang_handle import SGLangHandle

__all__ = ["SGLangEngine", "SGLangHttpEngine", "sglang_profile_request"]

#: How SGLang's scheduler refuses to stop a profile that is not running, and to start one
#: (with ``start_step``) while one runs.
_REFUSALS = {"stop": "not in progress", "start": "already in progress"}


def sglang_profile_request(
    config: ProfilerConfig, replica: int, *, replica_world_size: int = 1, num_replicas: int = 1
) -> dict[str, Any] | None:
    """The ``ProfileReq`` fields for replica ``replica``, or None when it is not profiled.

    Examples:
        >>> from profdsl import ProfilerConfig, TorchOptions
        >>> cfg = ProfilerConfig(enable=True, save_path="/p", torch=TorchOptions(contents=["cpu"]))
        >>> request = sglang_profile_request(cfg, 0)
        >>> request["output_dir"], request["activities"], request["num_steps"]
        ('/p/rollout_replica_0', ['CPU'], 64)
    """
    width = require_int("replica_world_size", replica_world_size, 1)
    if replica not in Selection.of(config).replicas(width, require_int("num_replicas", num_replicas, 0)):
        return None
    options = config.torch
    if "memory" in options.contents:
        once(
            "sglang-memory",
            logging.WARNING,
            "profdsl: SGLang does not support memory profiling; 'memory' is ignored for it",
        )
    rollout = config.rollout
    return {
        "output_dir": rollout_trace_dir(config.save_path, replica),
        "activities": ["CPU", "GPU"] if options.cuda else ["CPU"],
        "with_stack": "stack" in options.contents,
        "record_shapes": "shapes" in options.contents,
        "start_step": rollout.delay_iterations or None,
        "num_steps": rollout.max_iterations or None,
    }


class SGLangEngine(SGLangHandle):
    """A ``rollout_window`` engine over an in-process ``sglang.Engine`` (see
    :mod:`profdsl.rollout._sglang_handle` for how it starts and stops SGLang's profiler)."""

    def __init__(self, engine: Any, request: dict[str, Any]) -> None:
        super().__init__(request)
        self.engine = engine

    def _send_start(self, fields: dict[str, Any]) -> Any:
        return self.engine.start_profile(**fields)

    def _send_stop(self) -> Any:
        return self.engine.stop_profile()

    def _refused(self, exc: Exception, call: str) -> bool:
        return _REFUSALS[call] in str(exc)


class SGLangHttpEngine(SGLangHandle):
    """A ``rollout_window`` engine over a running SGLang server (``/start_profile``,
    ``/stop_profile``); each call is bounded by ``timeout_s``.

    SGLang's server answers the scheduler's refusals with a bare ``500 Internal Server Error``,
    without the reason: a 500 to a stop is read as "not in progress", to a start as "already in
    progress" (logged once at INFO).
    """

    def __init__(self, base_url: str, request: dict[str, Any], *, timeout_s: float = 60.0) -> None:
        super().__init__(request)
        self.base_url, self.timeout_s = base_url.rstrip("/"), timeout_s

    def _post(self, path: str, body: dict[str, Any] | None) -> str:
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(
            f"{self.base_url}{path}", data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
            return str(response.read().decode(errors="replace"))

    def _send_start(self, fields: dict[str, Any]) -> str:
        return self._post("/start_profile", fields)

    def _send_stop(self) -> str:
        return self._post("/stop_profile", None)

    def _refused(self, exc: Exception, call: str) -> bool:
        if not isinstance(exc, urllib.error.HTTPError):
            return False
        try:
            body = exc.read().decode(errors="replace")
        except Exception:
            body = ""
        if _REFUSALS[call] in body:
            return True
        if exc.code != 500:
            return False
        once(
            f"sglang-http-refused-{call}",
            logging.INFO,
            "profdsl: an SGLang server answered HTTP 500 to /%s_profile; taken as SGLang refusing it (a profile %s)",
            call,
            _REFUSALS[call],
        )
        return True
