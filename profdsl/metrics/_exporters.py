"""Where a role's step timings go besides ``Profiler.metrics``: exporters named in
``Metrics.exporters`` and the ``on_step`` callback, each guarded so that a failure is logged once
and training goes on.

An exporter that cannot start (its package is missing, its address cannot be bound) is logged as
an error when the profiler is built, and left out; the other exporters and the flat mapping work
as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from profdsl.config import Metrics
from profdsl.core._log import failing_once, once
from profdsl.metrics._prometheus import PrometheusExporter, Servers
from profdsl.metrics._slow import StragglerAlert
from profdsl.metrics._timings import StepTimings

__all__ = ["Exporter", "OnStep", "call_on_step", "export_alert", "make_exporters", "publish"]

#: The ``on_step`` callback: called as ``on_step(step, metrics)`` with the flat mapping.
OnStep = Callable[[int, dict[str, float]], object]

_EXTRAS = {"prometheus": ("prometheus_client", "prometheus"), "otel": ("opentelemetry-api", "otel")}


class Exporter(Protocol):
    """Takes each finished step of a role."""

    name: str

    def export(self, timings: StepTimings) -> None: ...


def make_exporters(config: Metrics, *, role: str, local_rank: int, servers: Servers) -> list[Exporter]:
    """The exporters ``config`` names that could start (the others are logged as errors).

    The Prometheus endpoint listens on ``config.port + local_rank`` (each process of a node gets
    its own port), or on a free port when ``config.port`` is 0."""
    made: list[Exporter] = []
    for name in config.exporters:
        try:
            if name == "prometheus":
                port = config.port + local_rank if config.port else 0
                if port > 65535:
                    raise OSError(f"port {config.port} + local rank {local_rank} is above 65535")
                made.append(PrometheusExporter(servers.get(config.address, port, config.rank_label)))
            else:  # "otel" (Metrics validated the names)
                from profdsl.metrics._otel import OtelExporter

                made.append(OtelExporter(config.rank_label))
        except ImportError as exc:
            package, extra = _EXTRAS[name]
            once(
                f"metrics-exporter:{name}",
                logging.ERROR,
                "profdsl: %s: the %s metrics exporter needs %s (pip install 'profdsl[%s]'): %s; "
                "its metrics are not exported",
                role,
                name,
                package,
                extra,
                exc,
            )
        except Exception as exc:  # OSError: the address cannot be bound
            once(
                f"metrics-exporter:{name}:{config.address}:{config.port}",
                logging.ERROR,
                "profdsl: %s: the %s metrics exporter cannot start on %s port %s: %s; its metrics are not exported",
                role,
                name,
                config.address,
                config.port,
                exc,
            )
    return made


def publish(timings: StepTimings, exporters: list[Exporter], on_step: OnStep | None) -> dict[str, float]:
    """Send a finished step to each exporter and the callback; returns the flat mapping. A
    failure is logged once per exporter (or callback) and error type, never raised."""
    flat = timings.flat()
    for exporter in exporters:
        with failing_once(
            f"metrics-export:{exporter.name}:{id(exporter)}",
            "profdsl: %s: exporting step %s to %s failed (training goes on): %r",
            timings.role,
            timings.step,
            exporter.name,
            by_kind=True,
        ):
            exporter.export(timings)
    call_on_step(on_step, timings.step, flat, timings.role)
    return flat


def export_alert(exporters: list[Exporter], alert: StragglerAlert) -> None:
    """Send a straggler episode's start or end to each exporter that shows them (Prometheus: the
    ``profdsl_straggler_*`` gauges); a failure is logged once, never raised."""
    for exporter in exporters:
        show = getattr(exporter, "alert", None)
        if show is not None:
            with failing_once(
                f"metrics-alert:{exporter.name}:{id(exporter)}",
                "profdsl: exporting a straggler alert to %s failed (training goes on): %r",
                exporter.name,
                by_kind=True,
            ):
                show(alert)


def call_on_step(on_step: OnStep | None, step: int, flat: dict[str, float], who: str) -> None:
    """Call ``on_step(step, a copy of flat)``; a failure is logged once per callback and error
    type, never raised."""
    if on_step is not None:
        with failing_once(
            f"metrics-on-step:{id(on_step)}",
            "profdsl: %s: the on_step callback failed at step %s (training goes on): %r",
            who,
            step,
            by_kind=True,
        ):
            on_step(step, dict(flat))
