"""Running a coroutine, generator or async generator body in slices, with its region open only
while it runs.

A region held open across an ``await`` would cover whatever other tasks run on the thread
meanwhile, and torch's ranges of interleaved tasks would then overlap without nesting. Instead
the body is driven step by step: the region is suspended before control goes back to the event
loop (or the consumer of a generator) and resumed when the body continues.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Coroutine, Generator
from typing import Any, Protocol

__all__ = ["drive_async_generator", "drive_coroutine", "drive_generator", "time_steps"]


class Suspendable(Protocol):
    def suspend(self) -> None: ...
    def resume(self) -> None: ...


class _Bounce:
    """An awaitable handing one value up to the event loop and the reply back down."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self.value)


async def drive_coroutine(coro: Coroutine[Any, Any, Any], region: Suspendable) -> Any:
    """Await ``coro`` with ``region`` open exactly while ``coro``'s own code runs."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            yielded = coro.send(send) if error is None else coro.throw(error)
        except StopIteration as stop:
            return stop.value
        region.suspend()
        try:
            send, error = await _Bounce(yielded), None
        except GeneratorExit:
            region.resume()
            coro.close()
            raise
        except BaseException as exc:  # cancellation included: the body decides what to do
            send, error = None, exc
        region.resume()


def drive_generator(gen: Generator[Any, Any, Any], region: Suspendable) -> Generator[Any, Any, Any]:
    """Delegate to ``gen`` with ``region`` open exactly while ``gen``'s own code runs."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            value = gen.send(send) if error is None else gen.throw(error)
        except StopIteration as stop:
            return stop.value
        region.suspend()
        try:
            send, error = (yield value), None
        except GeneratorExit:
            region.resume()
            gen.close()
            raise
        except BaseException as exc:
            send, error = None, exc
        region.resume()


async def drive_async_generator(agen: AsyncGenerator[Any, Any],
                                region: Suspendable) -> AsyncGenerator[Any, Any]:
    """Delegate to ``agen`` (``asend``, ``athrow`` and ``aclose`` included) with ``region`` open
    exactly while ``agen``'s own code runs: each step is a coroutine driven in slices, and the
    region is closed while the consumer holds a yielded value."""
    step: Any = agen.__anext__()
    while True:
        try:
            value = await drive_coroutine(step, region)
        except StopAsyncIteration:
            return
        region.suspend()
        try:
            sent = yield value
        except GeneratorExit:
            region.resume()
            await drive_coroutine(agen.aclose(), region)
            raise
        except BaseException as exc:
            region.resume()
            step = agen.athrow(exc)
        else:
            region.resume()
            step = agen.asend(sent)


async def time_steps(agen: AsyncGenerator[Any, Any], region: Suspendable) -> AsyncGenerator[Any, Any]:
    """Delegate to ``agen`` with ``region`` open while each of its steps runs, its awaits
    included, and closed while the consumer holds a yielded value (a metrics span: the time the
    body took to produce each item). ``region`` is open when this starts."""
    step: Any = agen.__anext__()
    while True:
        region.resume()
        try:
            value = await step
        except StopAsyncIteration:
            return
        finally:
            region.suspend()
        try:
            sent = yield value
        except GeneratorExit:
            region.resume()
            try:
                await agen.aclose()
            finally:
                region.suspend()
            raise
        except BaseException as exc:
            step = agen.athrow(exc)
        else:
            step = agen.asend(sent)
