"""Calling ``start_profile`` / ``stop_profile`` on many engines at once, each bounded.

An engine is a plain object, an object with ``async`` methods, or a Ray actor handle (whose
methods are called with ``.remote()`` and return an ObjectRef). Every call's outcome becomes an
:class:`Outcome`, whatever the engine raised, except what belongs to the caller (:func:`_callers`),
which propagates unchanged: docs/rollout.md's "What lands where" says which is which.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs

from profdsl.core._log import described

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


def _thread_affine(engine: Any) -> bool:
    """Engines that profile the calling thread (an in-process torch sampler) must be started
    and stopped on the caller's thread, not on a helper thread."""
    return bool(getattr(engine, "profdsl_thread_affine", False))


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


def _callers(exc: BaseException, own_thread: bool) -> bool:
    """Whether ``exc``, raised where an engine was called, belongs to the caller: an interrupt
    or exit on the caller's own thread, or its own task's cancellation."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return own_thread
    if not own_thread or not isinstance(exc, asyncio.CancelledError):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop on this thread: no task of the caller's to cancel
        return False
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return task is not None and (cancelling is None or cancelling() > 0)


def _invoke_here(engine: Any, method: str, kwargs: Mapping[str, Any]) -> tuple[Any, BaseException | None]:
    """``_invoke`` on a helper thread: what it raised there comes back as a value."""
    try:
        return _invoke(engine, method, kwargs), None
    except BaseException as exc:  # its own thread's: never the caller's
        return None, exc


def call_all(
    engines: Mapping[int, Any], method: str, kwargs: Mapping[int, Mapping[str, Any]], timeout: float
) -> list[Outcome]:
    """Call ``method`` on every engine concurrently, each on its own daemon thread (a hung engine
    must not keep the interpreter alive), waiting at most ``timeout`` seconds in all."""
    results: dict[int, Outcome] = {}
    lock = threading.Lock()
    try:
        asyncio.get_running_loop()
        in_loop = True
    except RuntimeError:
        in_loop = False

    def run(replica: int, engine: Any, own_thread: bool = False) -> None:
        try:
            value = _invoke(engine, method, kwargs.get(replica, {}))
            if in_loop and inspect.isawaitable(value) and not _object_ref(value):
                close = getattr(value, "close", None)
                if callable(close):
                    close()
                raise RuntimeError(
                    "an async engine method inside a running event loop: use `async with rollout_window(...)`"
                )
            _resolve(value, timeout)
            outcome = Outcome(replica, "ok")
        except BaseException as exc:
            if _callers(exc, own_thread):
                raise
            outcome = Outcome(replica, "failed", described(exc))
        with lock:
            results[replica] = outcome

    threads = [
        threading.Thread(target=run, args=(r, e), daemon=True, name=f"profdsl-{method}-{r}")
        for r, e in engines.items()
        if not _thread_affine(e)
    ]
    for replica, engine in engines.items():
        if _thread_affine(engine):  # it profiles this thread: start and stop it here
            run(replica, engine, own_thread=True)
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return [results.get(r, Outcome(r, "timeout", f"{method} took over {timeout:g}s")) for r in engines]


def in_daemon_thread(fn: Any, *args: Any) -> asyncio.Future[Any]:
    """Run ``fn(*args)`` on a daemon thread; an awaitable for its result. Unlike
    ``asyncio.to_thread``, a call that never returns cannot hold up ``asyncio.run``'s shutdown
    or the interpreter's exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # the caller gave up (timeout) meanwhile
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    def run() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as exc:
            value, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    threading.Thread(target=run, daemon=True, name="profdsl-engine-call").start()
    return future


async def call_all_async(
    engines: Mapping[int, Any], method: str, kwargs: Mapping[int, Mapping[str, Any]], timeout: float
) -> list[Outcome]:
    """``call_all`` for an event loop: plain methods run in threads, coroutines and ObjectRefs
    are awaited here."""

    async def run(replica: int, engine: Any) -> Outcome:
        try:
            if _thread_affine(engine):  # it profiles this thread: call it here
                value = _invoke(engine, method, kwargs.get(replica, {}))
            else:
                value, error = await in_daemon_thread(_invoke_here, engine, method, kwargs.get(replica, {}))
                if error is not None:
                    return Outcome(replica, "failed", described(error))
            if _object_ref(value) or inspect.isawaitable(value):
                await value
            return Outcome(replica, "ok")
        except BaseException as exc:
            if _callers(exc, own_thread=True):
                raise
            return Outcome(replica, "failed", described(exc))

    async def bounded(replica: int, engine: Any) -> Outcome:
        try:
            return await asyncio.wait_for(run(replica, engine), timeout)
        except asyncio.TimeoutError:
            return Outcome(replica, "timeout", f"{method} took over {timeout:g}s")

    return list(await asyncio.gather(*(bounded(r, engine) for r, engine in engines.items())))
