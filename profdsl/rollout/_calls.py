"""Calling ``start_profile`` / ``stop_profile`` on many engines at once, each bounded.

An engine is a plain object, an object with ``async`` methods, or a Ray actor handle (whose
methods are called with ``.remote()`` and return an ObjectRef). Every call's outcome becomes an
:class:`Outcome`; nothing raises.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["Outcome", "accepts", "call_all", "call_all_async"]


@attrs.frozen
class Outcome:
    """One engine call: ``status`` is ``ok``, ``failed`` or ``timeout``."""

    replica: int
    status: str
    error: str | None = None


def accepts(engine: Any, method: str, parameter: str) -> bool:
    """Whether ``engine.method`` takes a parameter named ``parameter`` (Ray handles included)."""
    signatures = getattr(engine, "_ray_method_signatures", None)
    if isinstance(signatures, Mapping) and method in signatures:
        return any(getattr(p, "name", None) == parameter for p in signatures[method])
    try:
        return parameter in inspect.signature(getattr(engine, method)).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def _invoke(engine: Any, method: str, kwargs: Mapping[str, Any]) -> Any:
    fn = getattr(engine, method)
    remote = getattr(fn, "remote", None)
    return remote(**kwargs) if callable(remote) else fn(**kwargs)


def _object_ref(value: Any) -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and isinstance(value, getattr(ray, "ObjectRef", ()))


def _resolve(value: Any, timeout: float) -> Any:
    if _object_ref(value):
        return sys.modules["ray"].get(value, timeout=timeout)
    if inspect.isawaitable(value):
        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def call_all(engines: Mapping[int, Any], method: str, kwargs: Mapping[int, Mapping[str, Any]],
             timeout: float) -> list[Outcome]:
    """Call ``method`` on every engine concurrently, each on its own daemon thread (a hung engine
    must not keep the interpreter alive), waiting at most ``timeout`` seconds in all."""
    results: dict[int, Outcome] = {}
    lock = threading.Lock()

    def run(replica: int, engine: Any) -> None:
        try:
            _resolve(_invoke(engine, method, kwargs.get(replica, {})), timeout)
            outcome = Outcome(replica, "ok")
        except Exception as exc:
            outcome = Outcome(replica, "failed", _describe(exc))
        with lock:
            results[replica] = outcome

    threads = [threading.Thread(target=run, args=(r, e), daemon=True, name=f"profdsl-{method}-{r}")
               for r, e in engines.items()]
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return [results.get(r, Outcome(r, "timeout", f"{method} took over {timeout:g}s"))
                for r in engines]


async def call_all_async(engines: Mapping[int, Any], method: str,
                         kwargs: Mapping[int, Mapping[str, Any]], timeout: float) -> list[Outcome]:
    """``call_all`` for an event loop: plain methods run in threads, coroutines and ObjectRefs
    are awaited here."""

    async def run(replica: int, engine: Any) -> Outcome:
        try:
            value = await asyncio.to_thread(_invoke, engine, method, kwargs.get(replica, {}))
            if _object_ref(value) or inspect.isawaitable(value):
                await value
            return Outcome(replica, "ok")
        except Exception as exc:
            return Outcome(replica, "failed", _describe(exc))

    async def bounded(replica: int, engine: Any) -> Outcome:
        try:
            return await asyncio.wait_for(run(replica, engine), timeout)
        except asyncio.TimeoutError:
            return Outcome(replica, "timeout", f"{method} took over {timeout:g}s")

    order: Sequence[int] = list(engines)
    return list(await asyncio.gather(*(bounded(r, engines[r]) for r in order)))
