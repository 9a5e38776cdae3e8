"""``profile_stage``: a named stage of training."""

from __future__ import annotations

from typing import TYPE_CHECKING

from profdsl._dsl.base import Annotation
from profdsl.config._checks import require_choice, to_color
from profdsl.core._kinds import STAGE_KINDS
from profdsl.errors import ConfigError

if TYPE_CHECKING:
    from profdsl._runtime.context import Entry
    from profdsl._runtime.handles import Handle
    from profdsl._runtime.profiler import Profiler
    from profdsl._runtime.recorder import NullRecorder, Recorder

__all__ = ["check_binding", "check_name", "profile_stage"]


def check_name(kind: str, name: object) -> str:
    """A DSL name: a non-empty string (a ConfigError naming ``kind`` otherwise)."""
    if name.__class__ is not str or not name:
        raise ConfigError(f"{kind} name must be a non-empty string, got {name!r}")
    return name


def check_binding(kind: str, role: object, profiler: object) -> None:
    """A DSL word's ``role`` (None or a non-empty string) and ``profiler`` (None or a
    :class:`~profdsl._runtime.profiler.Profiler`): a ConfigError naming ``kind`` otherwise. A
    stage bound to what no profiler can match would record nothing, without a word."""
    if role is not None and (not isinstance(role, str) or not role):
        raise ConfigError(f"{kind} role must be a non-empty string, got {role!r}")
    if profiler is not None:
        from profdsl._runtime.profiler import Profiler  # loaded already: the caller made one

        if not isinstance(profiler, Profiler):
            raise ConfigError(
                f"{kind} profiler must be a Profiler, got {type(profiler).__name__} {profiler!r}"
                + (" (to pick a profiler by its role, pass role=)" if isinstance(profiler, str) else "")
            )


class profile_stage(Annotation):
    """Mark a named stage of training: a ``record_function`` region (and an NVTX range).

    In discrete mode the outermost stage of a profiled step writes its own trace; with
    ``scheduled=True`` it runs the configured schedule, one trace per recorded mini-batch window.
    One object may be entered from several threads or tasks at once, and re-entered: each entry
    keeps its own state. With ``Metrics(enabled=True)`` every entry is also timed, on every step
    and rank (``timing_s/<name>``; ``docs/metrics.md``).

    Args:
        name: the stage's name, e.g. ``"update_actor"``.
        scheduled: in discrete mode, follow the ``Schedule`` over this stage's mini-batches.
        role: which started profiler to use when several roles share a process.
        profiler: an explicit profiler (otherwise the one started for ``role``).
        color: the NVTX range's colour: an ARGB integer, ``"#RRGGBB"``, ``"#AARRGGBB"`` or an
            NVTX colour name such as ``"green"`` (default: the role's colour).
        kind: the kind of work the stage is, for the step ledger (``docs/ledger.md``): one of
            ``generation``, ``inference``, ``update``, ``weight_sync``, ``reward``, ``data``,
            ``other``. Default: by its name (``update_actor`` is ``update``, ``compute_log_prob``
            ``inference``; :mod:`profdsl.core._kinds`).

    Raises:
        ConfigError: an empty or non-string name or ``role``, a ``profiler`` that is not a
            :class:`~profdsl._runtime.profiler.Profiler`, a colour that is none of the above, or
            a ``kind`` that is not one of the kinds above.

    Examples:
        >>> with profile_stage("compute_values"):
        ...     pass
        >>> @profile_stage("update_actor", scheduled=True, color="green")
        ... def update_actor(batch):
        ...     return len(batch)
        >>> update_actor([1, 2])
        2
        >>> with profile_stage("score_with_judge", kind="reward"):
        ...     pass
    """

    __slots__ = ("color", "kind", "name", "scheduled")

    def __init__(
        self,
        name: str,
        *,
        scheduled: bool = False,
        role: str | None = None,
        profiler: Profiler | None = None,
        color: int | str | None = None,
        kind: str | None = None,
    ) -> None:
        # Kept flat (no helper call on the common path): this runs for every `with` block.
        if name.__class__ is not str or not name:
            check_name("profile_stage", name)
        if role is not None or profiler is not None:
            check_binding("profile_stage", role, profiler)
        self.name = name
        self.scheduled = scheduled
        self.role = role
        self.profiler = profiler
        self.color = None if color is None else to_color("profile_stage color", color)
        self.kind = None if kind is None else require_choice("profile_stage kind", kind, STAGE_KINDS)

    def _open(self, recorder: Recorder | NullRecorder, top: Entry | None) -> Handle | None:
        return recorder.stage(self.name, self.scheduled, self.color, top, self.kind)
