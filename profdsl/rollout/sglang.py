"""SGLang: the profile request for ``Engine.start_profile`` / ``POST /start_profile``, and
engine handles over an in-process ``sglang.Engine`` or a server's HTTP endpoints.

SGLang stops by itself once ``num_steps`` engine steps (``RolloutOptions.max_iterations``) are
recorded, but a rollout of fewer steps leaves its profile running, its traces unwritten, and the
next ``start_profile`` refused ("Profiling is already in progress"). So the handles always stop the
profile at the end of the window; when SGLang already ended it by itself (or, with ``start_step``,
never began it), its refusal ("Profiling is not in progress") means there is nothing left to stop.
SGLang cannot profile memory: a ``memory`` content is dropped with a warning.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

from profdsl.config import ProfilerConfig
from profdsl.core.log import once
from profdsl.rollout import rollout_trace_dir
from profdsl.rollout.select import replica_selected

__all__ = ["SGLangEngine", "SGLangHttpEngine", "sglang_profile_request"]

#: How SGLang's scheduler refuses to stop a profile that is not running.
_NOT_IN_PROGRESS = "not in progress"


def _ends_by_itself(request: dict[str, Any]) -> bool:
    """Whether SGLang can have ended the profile on its own (after ``num_steps``) or not begun
    it yet (before ``start_step``): then a stop refused as "not in progress" is no failure."""
    return bool(request.get("num_steps") or request.get("start_step"))


def _already_ended(request: dict[str, Any], exc: Exception) -> bool:
    """Whether ``exc``, raised by a stop, says the profile had already ended by itself.

    SGLang's HTTP server turns the scheduler's refusal into a bare ``500 Internal Server Error``,
    without the reason; when the request lets SGLang end the profile itself, a 500 is read as that.
    """
    if not _ends_by_itself(request):
        return False
    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read().decode(errors="replace")
        except Exception:
            body = ""
        if exc.code == 500 or _NOT_IN_PROGRESS in body:
            once("sglang-http-stop-ended", logging.INFO, "profdsl: an SGLang server refused /stop_profile "
                 "(HTTP %s); taken as a profile SGLang had already ended by itself", exc.code)
            return True
        return False
    return _NOT_IN_PROGRESS in str(exc)


def sglang_profile_request(config: ProfilerConfig, replica: int, *, replica_world_size: int = 1,
                           num_replicas: int = 1) -> dict[str, Any] | None:
    """The ``ProfileReq`` fields for replica ``replica``, or None when it is not profiled.

    Examples:
        >>> from profdsl import ProfilerConfig, TorchOptions
        >>> cfg = ProfilerConfig(enable=True, save_path="/p", torch=TorchOptions(contents=["cpu"]))
        >>> request = sglang_profile_request(cfg, 0)
        >>> request["output_dir"], request["activities"], request["num_steps"]
        ('/p/rollout_replica_0', ['CPU'], 64)
    """
    if not replica_selected(config, replica, replica_world_size=replica_world_size,
                            num_replicas=num_replicas):
        return None
    options = config.torch
    if "memory" in options.contents:
        once("sglang-memory", logging.WARNING,
             "profdsl: SGLang does not support memory profiling; 'memory' is ignored for it")
    rollout = config.rollout
    return {
        "output_dir": rollout_trace_dir(config.save_path, replica),
        "activities": ["CPU", "GPU"] if options.cuda else ["CPU"],
        "with_stack": "stack" in options.contents,
        "record_shapes": "shapes" in options.contents,
        "start_step": rollout.delay_iterations or None,
        "num_steps": rollout.max_iterations or None,
    }


class SGLangEngine:
    """A ``rollout_window`` engine over an in-process ``sglang.Engine``."""

    def __init__(self, engine: Any, request: dict[str, Any]) -> None:
        self.engine, self.request = engine, dict(request)

    def start_profile(self, profile_prefix: str | None = None) -> Any:
        """Start profiling with the request, naming files with ``profile_prefix``."""
        fields = {k: v for k, v in self.request.items() if v is not None}
        if profile_prefix is not None:
            fields["profile_prefix"] = profile_prefix
        return self.engine.start_profile(**fields)

    def stop_profile(self) -> Any:
        """End the engine's profile: stop it, unless SGLang already ended it by itself."""
        try:
            return self.engine.stop_profile()
        except Exception as exc:
            if _already_ended(self.request, exc):
                return None
            raise


class SGLangHttpEngine:
    """A ``rollout_window`` engine over a running SGLang server (``/start_profile``,
    ``/stop_profile``); each call is bounded by ``timeout_s``."""

    def __init__(self, base_url: str, request: dict[str, Any], *, timeout_s: float = 60.0) -> None:
        self.base_url, self.request, self.timeout_s = base_url.rstrip("/"), dict(request), timeout_s

    def _post(self, path: str, body: dict[str, Any] | None) -> str:
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
            return str(response.read().decode(errors="replace"))

    def start_profile(self, profile_prefix: str | None = None) -> str:
        """POST the request to ``/start_profile``."""
        fields = {k: v for k, v in self.request.items() if v is not None}
        if profile_prefix is not None:
            fields["profile_prefix"] = profile_prefix
        return self._post("/start_profile", fields)

    def stop_profile(self) -> str | None:
        """POST ``/stop_profile``; a refusal is no failure when SGLang already ended the profile
        by itself (see :func:`_already_ended`)."""
        try:
            return self._post("/stop_profile", None)
        except urllib.error.HTTPError as exc:
            if _already_ended(self.request, exc):
                return None
            raise
