"""The OpenTelemetry exporter: each step's stage seconds recorded on an ``opentelemetry-api``
histogram (the ``otel`` extra).

It records through the meter provider the application set up (``metrics.set_meter_provider``),
which decides where the figures go (OTLP, a Prometheus reader, ...); without one, the API's
default provider drops them.
"""

from __future__ import annotations

from typing import Any

from profdsl.metrics.prometheus import label_value
from profdsl.metrics.timings import StepTimings

__all__ = ["OtelExporter"]


class OtelExporter:
    """A role's exporter to OpenTelemetry: histograms ``profdsl.stage.duration`` (attributes
    ``role``, ``stage``, and ``rank`` with ``Metrics.rank_label``) and ``profdsl.step.duration``,
    in seconds."""

    name = "otel"

    def __init__(self, rank_label: bool, provider: Any = None) -> None:
        from opentelemetry import metrics

        meter = (provider or metrics.get_meter_provider()).get_meter("profdsl")
        self.rank_label = rank_label
        self.stage = meter.create_histogram(
            "profdsl.stage.duration",
            unit="s",
            description="Seconds inside a stage in one training step (all its entries)",
        )
        self.step = meter.create_histogram(
            "profdsl.step.duration", unit="s", description="Wall time of a training step"
        )

    def export(self, timings: StepTimings) -> None:
        base: dict[str, str | int] = {"role": label_value(timings.role)}
        if self.rank_label:
            base["rank"] = timings.rank
        for path, timing in timings.stages.items():
            self.stage.record(timing.total_s, attributes={**base, "stage": label_value(path)})
        self.step.record(timings.wall_s, attributes=base)
