# mypy: disable-error-code="misc"
# (the attrs mypy plugin does not read attrs.Converter objects, which name their own field)
"""The configuration classes (re-exported by :mod:`profdsl.config` and :mod:`profdsl`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from profdsl.config._checks import (
    MAX_SECONDS,
    MAX_WIDE_INDEX,
    boolean,
    check_keys,
    int_in,
    named,
    number_in,
    positive_finite,
    refuse,
    require_number,
    text_without_nul,
    to_int_set,
    to_name_set,
    to_nested,
    valid,
)
from profdsl.errors import ConfigError

__all__ = [
    "CONTENTS",
    "EXPORTERS",
    "TOOLS",
    "AutoCapture",
    "FinishHook",
    "Metrics",
    "OnDemand",
    "RolloutOptions",
    "Schedule",
    "Stragglers",
    "TorchOptions",
]

#: The torch profiler contents a user may ask for.
CONTENTS = frozenset({"cpu", "cuda", "memory", "shapes", "stack"})
#: The profiling tools (backends) profdsl drives.
TOOLS = ("torch", "nsys")
#: The exporters the always-on stage metrics can be sent to (besides ``on_step`` callbacks).
EXPORTERS = ("prometheus", "otel")


class _Mappable:
    """``from_mapping`` / ``to_mapping`` for an attrs class whose nested fields know theirs."""

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], *, _path: str | None = None) -> Any:
        """Build from a nested plain mapping; unknown keys raise ``ConfigError``."""
        check_keys(_path or cls.__name__, mapping, cls)
        return cls(**mapping)

    def to_mapping(self) -> dict[str, Any]:
        """Plain dicts, lists, strings and numbers (JSON and YAML safe) that rebuild ``self``."""
        return attrs.asdict(self, value_serializer=_plain)  # type: ignore[arg-type]


def _plain(_inst: object, _field: object, value: object) -> object:
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    return value


@attrs.frozen(kw_only=True)
class Schedule(_Mappable):
    """A ``torch.profiler.schedule`` over update mini-batches.

    Each cycle is ``wait`` idle, ``warmup`` traced-but-discarded and ``active`` recorded
    mini-batches, after ``skip_first`` mini-batches skipped once; ``repeat`` cycles (0: unbounded).
    """

    skip_first: int = attrs.field(default=0, validator=int_in(0))
    wait: int = attrs.field(default=0, validator=int_in(0))
    warmup: int = attrs.field(default=0, validator=int_in(0))
    active: int = attrs.field(default=1, validator=int_in(1))
    repeat: int = attrs.field(default=0, validator=int_in(0))

    @property
    def cycle_len(self) -> int:
        """Mini-batches in one cycle: ``wait + warmup + active``."""
        return self.wait + self.warmup + self.active


#: The smallest trace-size bound, in MB: one byte (a trace is bytes; a bound under one byte would
#: be none at all, and showed as 0).
MIN_TRACE_MB = 1e-6
_TRACE_MB = valid(
    require_number, MIN_TRACE_MB, 1e9, optional=True, what=f"a number of MB >= {MIN_TRACE_MB:g} (one byte) and <= 1e+09"
)


@attrs.frozen(kw_only=True)
class TorchOptions(_Mappable):
    """Options of the torch profiler backend.

    CPU activity is always recorded (stage markers are CPU events); CUDA is recorded when
    ``contents`` is empty or names ``"cuda"``; ``"stack"``, ``"shapes"`` and ``"memory"`` switch on
    ``with_stack``, ``record_shapes`` and ``profile_memory``.

    A session records the thread that owns it (docs/architecture.md): the thread that starts it,
    or, for a continuous step begun on a pool thread or a role seen working on other threads,
    every thread (torch's ``profile_all_threads``, torch >= 2.7, on profdsl's session thread).
    ``all_threads=True`` makes every session record every thread.

    ``compress_level`` is the gzip level of the traces written (1 fastest .. 9 smallest), or 0
    for plain JSON (``.pt.trace.json`` instead of ``.pt.trace.json.gz``); the default 1 is
    2-9x faster than 6 or 9 for 20-40% more bytes (docs/configuration.md).

    Traces are finished (compressed, checked, recorded) in the background: at most
    ``exports_in_flight`` at a time (the next one waits for a slot; each holds one events file
    on disk, not in memory), and ``close()``, the last profiled step and interpreter exit wait up
    to ``export_timeout_s`` for them before the finish hook runs (a trace still pending then is
    recorded ``incomplete``, its events kept).

    ``max_trace_mb`` bounds a trace's size as plain JSON (what a viewer loads; None: no bound), in
    MB of at least one byte (``1e-06``: a trace is bytes, and a smaller bound would be 0).
    Once a trace of a role and stage was measured, the next is estimated before it starts
    (warned once past the bound) and, while it records, ended early at the mini-batch where its
    estimate passes the bound: collection pauses for the rest of the window, and the trace is
    recorded ``truncated`` with the reason and its size (docs/configuration.md, "Trace size").
    """

    contents: frozenset[str] = attrs.field(factory=frozenset, converter=named(to_name_set, CONTENTS))
    schedule: Schedule | None = attrs.field(default=None, converter=named(to_nested, Schedule, optional=True))
    all_threads: bool = attrs.field(default=False, validator=boolean)
    compress_level: int = attrs.field(default=1, validator=int_in(0, 9))
    exports_in_flight: int = attrs.field(default=2, validator=int_in(1, 16))
    export_timeout_s: float = attrs.field(default=900.0, validator=positive_finite)
    max_trace_mb: float | None = attrs.field(default=500.0, validator=_TRACE_MB)

    @property
    def cuda(self) -> bool:
        """Whether CUDA activity is recorded."""
        return not self.contents or "cuda" in self.contents


@attrs.frozen(kw_only=True)
class RolloutOptions(_Mappable):
    """How rollout engines are profiled (``rollout_window`` and the engine adapters).

    ``max_iterations`` engine iterations are recorded after ``delay_iterations`` (0: until
    ``stop_profile``); a finite default keeps engine traces small and flushes short. Calls to
    the engines are bounded by ``start_timeout_s`` and ``stop_timeout_s`` (flushing a long window
    can take minutes); after stopping, traces get ``flush_wait_s`` to be complete.
    """

    max_iterations: int = attrs.field(default=64, validator=int_in(0))
    delay_iterations: int = attrs.field(default=0, validator=int_in(0))
    start_timeout_s: float = attrs.field(default=60.0, validator=positive_finite)
    stop_timeout_s: float = attrs.field(default=900.0, validator=positive_finite)
    flush_wait_s: float = attrs.field(default=300.0, validator=positive_finite)


def _names_of(where: str, value: object) -> frozenset[str]:
    """A list of stage names or paths (None: empty) as a frozenset."""
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        refuse(where, "a list of stage names or paths", value)
    names = list(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where} must hold non-empty strings, got {name!r} in {value!r}")
    return frozenset(names)


@attrs.frozen(kw_only=True)
class Stragglers(_Mappable):
    """Straggler alerts of a Ray trainer's driver (``docs/on-demand.md``): a rank whose stage took
    more than ``factor`` times the ranks' median in ``consecutive`` steps in a row is logged once
    per episode and exported. Only stages whose slow time reaches ``min_seconds`` count (short
    stages jitter); ``stages`` limits the watch to those names or paths (empty: every stage).

    Examples:
        >>> Stragglers(factor=2.0, consecutive=3).enabled
        True
    """

    enabled: bool = attrs.field(default=True, validator=boolean)
    factor: float = attrs.field(default=1.5, validator=number_in(1.0, 1e6, above=True))
    consecutive: int = attrs.field(default=3, validator=int_in(1, 1_000_000))
    stages: frozenset[str] = attrs.field(factory=frozenset, converter=named(_names_of))
    min_seconds: float = attrs.field(default=0.01, validator=number_in(0.0, MAX_SECONDS))


def _exporters(where: str, value: object) -> tuple[str, ...]:
    return tuple(sorted(to_name_set(where, value, frozenset(EXPORTERS))))


@attrs.frozen(kw_only=True)
class Metrics(_Mappable):
    """Always-on stage timings (``docs/metrics.md``): every ``profile_stage``,
    ``mini_batch_window`` and ``rollout_window`` entry of every step on every rank, whatever
    ``enable``, ``steps`` and ``ranks`` say, timed with a monotonic clock.

    ``stages`` lists the stage names (or nested paths such as ``"update_actor/mini_batch"``)
    reported; empty reports every stage. At most ``max_stages`` distinct stage paths are kept per
    role (entries of any further one are counted as overflow). ``exporters`` names where each
    step's timings also go (:data:`EXPORTERS`); the Prometheus exporter listens on ``address`` and
    ``port`` plus the process's local rank (``port=0``: a free port), with a ``rank`` label when
    ``rank_label``. ``device_time`` adds each stage's CUDA time on a machine with CUDA. ``log``
    appends every step's timings to a JSONL file in ``save_path`` (at most ``log_max_mb`` MB per
    process); ``stragglers`` says when a Ray trainer's driver calls a rank a straggler.

    Examples:
        >>> Metrics(enabled=True, exporters=["prometheus"], port=0).exporters
        ('prometheus',)
    """

    enabled: bool = attrs.field(default=False, validator=boolean)
    stages: frozenset[str] = attrs.field(factory=frozenset, converter=named(_names_of))
    max_stages: int = attrs.field(default=256, validator=int_in(1, 100_000))
    exporters: tuple[str, ...] = attrs.field(default=(), converter=named(_exporters))
    address: str = attrs.field(default="127.0.0.1", validator=valid(text_without_nul, blank=False))
    port: int = attrs.field(default=9464, validator=int_in(0, 65535))
    rank_label: bool = attrs.field(default=False, validator=boolean)
    device_time: bool = attrs.field(default=True, validator=boolean)
    log: bool = attrs.field(default=False, validator=boolean)
    log_max_mb: float = attrs.field(default=256.0, validator=number_in(0.0, 1e7, above=True))
    stragglers: Stragglers = attrs.field(factory=Stragglers, converter=named(to_nested, Stragglers))


@attrs.frozen(kw_only=True)
class FinishHook(_Mappable):
    """A shell command run once, after the last profiled step, to ship the traces somewhere.

    It runs via ``/bin/sh -c`` on ``ranks`` (every rank with ``all_ranks``; the profiled ranks when
    neither is set), bounded by ``timeout_s``. A blank ``cmd`` means no hook. With ``background``
    it runs on a thread and ``Profiler.close()`` waits for it (up to its timeout).
    """

    cmd: str | None = attrs.field(default=None, validator=valid(text_without_nul, optional=True))
    ranks: tuple[int, ...] = attrs.field(default=(), converter=named(to_int_set, maximum=MAX_WIDE_INDEX - 1))
    all_ranks: bool = attrs.field(default=False, validator=boolean)
    timeout_s: float = attrs.field(default=1800.0, validator=positive_finite)
    background: bool = attrs.field(default=False, validator=boolean)

    def __attrs_post_init__(self) -> None:
        if self.cmd is not None and not self.cmd.strip():
            object.__setattr__(self, "cmd", None)


_TOKEN = re.compile(r"[\x21-\x7e]{8,256}")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})?|\[[0-9A-Fa-f:.]{2,45}\]")


def _token(label: str, value: object) -> None:
    if value is not None and not (isinstance(value, str) and _TOKEN.fullmatch(value)):
        raise ConfigError(
            f"{label} must be None or 8 to 256 printable characters without spaces, "
            f"got {'a ' + type(value).__name__ if not isinstance(value, str) else f'{len(value)} characters'}"
        )  # the value itself is a secret: never in a message


def _hosts(label: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, frozenset, set)):
        refuse(label, "a list of host names", value)
    for host in value:
        if not (isinstance(host, str) and _HOST.fullmatch(host)):
            raise ConfigError(f"{label} must hold host names or [IPv6] addresses, got {host!r}")
    return tuple(sorted({h.lower() for h in value}))


@attrs.frozen(kw_only=True)
class OnDemand(_Mappable):
    """Captures asked for while the job runs (``docs/on-demand.md``): ``profdsl trigger``,
    ``RayStepProfiler.request``, ``POST /profile``. With ``enabled`` (and ``enable``), each
    profiler looks for request files in ``save_path`` at its step boundaries (one ``stat``) and
    takes requests from the driver and the metrics endpoint. A request traces at most
    ``max_steps`` steps; at most ``max_requests`` requests are taken per role and run (0: none).
    ``POST /profile`` is refused to web pages (docs/on-demand.md, "Security"); ``token``, when
    set, must come with each request (header ``X-Profdsl-Token``), and ``hosts`` names the
    endpoint may be reached by besides its address and loopback (binding ``0.0.0.0``).

    Examples:
        >>> OnDemand().max_steps
        10
    """

    enabled: bool = attrs.field(default=True, validator=boolean)
    max_steps: int = attrs.field(default=10, validator=int_in(1, 10_000))
    max_requests: int = attrs.field(default=10, validator=int_in(0, 10_000))
    #: A shared secret ``POST /profile`` must carry (header ``X-Profdsl-Token``); None: none.
    token: str | None = attrs.field(default=None, validator=valid(_token), repr=False)
    #: Names besides the bound address and loopback by which the endpoint may be reached.
    hosts: tuple[str, ...] = attrs.field(default=(), converter=named(_hosts))


@attrs.frozen(kw_only=True)
class AutoCapture(_Mappable):
    """Slow steps catch themselves (``docs/on-demand.md``): after each step, each watched stage's
    always-on time is compared with the median of the same rank's previous ``baseline_steps``
    untraced steps; when it took more than ``slower_than`` times that (and at least
    ``min_seconds``), the next step of that rank is traced, the reason in its record. At most
    ``max_captures`` such captures per role, and none for ``cooldown_steps`` steps after one.
    ``stages`` names the stages (or paths) watched; empty: every stage. On Ray the driver also
    compares the ranks of each step the same way and traces the next step of the slow rank and
    of a typical one.

    Examples:
        >>> AutoCapture(stages=["update_actor"], slower_than=2.0).baseline_steps
        20
    """

    stages: frozenset[str] = attrs.field(factory=frozenset, converter=named(_names_of))
    slower_than: float = attrs.field(default=2.0, validator=number_in(1.0, 1e6, above=True))
    baseline_steps: int = attrs.field(default=20, validator=int_in(1, 100_000))
    max_captures: int = attrs.field(default=3, validator=int_in(0, 10_000))
    cooldown_steps: int = attrs.field(default=50, validator=int_in(0, MAX_WIDE_INDEX))
    min_seconds: float = attrs.field(default=0.0, validator=number_in(0.0, MAX_SECONDS))
