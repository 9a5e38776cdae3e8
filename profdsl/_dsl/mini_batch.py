"""``mini_batch_window``: one update mini-batch, the unit a schedule advances by."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from profdsl._dsl.base import Annotation, registry_of
from profdsl._dsl.stage import check_binding, check_name

if TYPE_CHECKING:
    from profdsl._runtime.context import Entry
    from profdsl._runtime.handles import Handle
    from profdsl._runtime.profiler import Profiler
    from profdsl._runtime.recorder import NullRecorder, Recorder

__all__ = ["mini_batch_window"]

T = TypeVar("T")


class mini_batch_window(Annotation):
    """One update mini-batch: a region ``f"{name}{i}"``, and one tick of the schedule.

    Iterate it over the mini-batches, or use it as a ``with`` block around one mini-batch, or as a
    decorator of a per-mini-batch function. ``i`` counts the mini-batches of the enclosing
    discrete stage, or of the role's step in continuous mode. With ``Metrics(enabled=True)``
    each mini-batch is also timed, on every step and rank (``timing_s/<stage>/<name>``, with its
    count and mean; ``docs/metrics.md``).

    Args:
        iterable: the mini-batches, when iterated.
        name: the regions' base name.
        role: which started profiler to use when several roles share a process.
        profiler: an explicit profiler (otherwise the one started for ``role``).

    Raises:
        ConfigError: an empty or non-string name or ``role``, or a ``profiler`` that is not a
            :class:`~profdsl._runtime.profiler.Profiler`.

    Examples:
        >>> [mb for mb in mini_batch_window([10, 20])]
        [10, 20]
        >>> with mini_batch_window():
        ...     pass
        >>> @mini_batch_window(name="micro_batch")
        ... def train_micro_batch(mb):
        ...     return mb * 2
        >>> train_micro_batch(4)
        8
    """

    __slots__ = ("iterable", "name")

    def __init__(
        self,
        iterable: Iterable[T] | None = None,
        *,
        name: str = "mini_batch",
        role: str | None = None,
        profiler: Profiler | None = None,
    ) -> None:
        self.iterable, self.name = iterable, check_name("mini_batch_window", name)
        if role is not None or profiler is not None:
            check_binding("mini_batch_window", role, profiler)
        self.role, self.profiler = role, profiler

    def _open(self, recorder: Recorder | NullRecorder, top: Entry | None) -> Handle | None:
        return recorder.mini_batch(self.name, top)

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError(
                "mini_batch_window() needs an iterable to be iterated; without one, "
                "use it as a `with` block or a decorator"
            )
        if not registry_of(self.profiler).on:
            return iter(self.iterable)  # decided once: a plain loop costs nothing per item
        return self._iterate(self.iterable)

    def _iterate(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Each item inside its own entry: the loop's body is the mini-batch."""
        for item in iterable:
            entry = self._begin(self.profiler)
            try:
                yield item
            finally:
                self._end(entry)
