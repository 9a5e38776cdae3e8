"""The OpenTelemetry exporter: each step's stage seconds and its step ledger recorded on
``opentelemetry-api`` histograms (the ``otel`` extra).

It records through the meter provider the application set up (``metrics.set_meter_provider``),
which decides where the figures go (OTLP, a Prometheus reader, ...); without one, the API's
default provider drops them.

The ledger (``docs/ledger.md``) is recorded once per step and bucket, on histograms where
Prometheus shows the last step's on gauges: every step counts (an export interval spanning
several steps keeps them all), and a bucket's sum over steps divided by the sum of
``profdsl.step.duration`` over the same steps is its share of the time. A step without a ledger
records none.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from profdsl.metrics._prometheus import LEDGER_HELP, label_value
from profdsl.metrics._timings import StepTimings

__all__ = ["OtelExporter"]


class OtelExporter:
    """A role's exporter to OpenTelemetry, in seconds, with attributes ``role`` (and ``rank``
    with ``Metrics.rank_label``): histograms ``profdsl.stage.duration`` (and ``stage``),
    ``profdsl.step.duration``, and the step ledger's ``profdsl.step.ledger`` (and ``bucket``: a
    kind of work, ``overhead`` or ``outside``), ``profdsl.step.ledger.concurrent``, and with
    device time on CUDA ``profdsl.step.ledger.device`` (and ``bucket``: a kind of work or
    ``outside``)."""

    name = "otel"

    def __init__(self, rank_label: bool, provider: Any = None) -> None:
        from opentelemetry import metrics

        meter = (provider or metrics.get_meter_provider()).get_meter("profdsl")
        self.rank_label = rank_label
        histogram = functools.partial(meter.create_histogram, unit="s")
        self.stage = histogram(
            "profdsl.stage.duration",
            description="Seconds inside a stage in one training step (all its entries)",
        )
        self.step = histogram("profdsl.step.duration", description="Wall time of a training step")
        wall, beside, device = LEDGER_HELP
        self.ledger = histogram("profdsl.step.ledger", description=f"A step's {wall}")
        self.concurrent = histogram("profdsl.step.ledger.concurrent", description=f"A step's {beside}")
        self.device = histogram(
            "profdsl.step.ledger.device", description=f"With device time on CUDA, a step's {device}"
        )

    def export(self, timings: StepTimings) -> None:
        base: dict[str, str | int] = {"role": label_value(timings.role)}
        if self.rank_label:
            base["rank"] = timings.rank
        for path, timing in timings.stages.items():
            self.stage.record(timing.total_s, attributes={**base, "stage": label_value(path)})
        self.step.record(timings.wall_s, attributes=base)
        if timings.ledger is not None:
            _buckets(self.ledger, base, timings.ledger)
            self.concurrent.record(timings.concurrent_s or 0.0, attributes=base)
        if timings.ledger_device is not None:
            _buckets(self.device, base, timings.ledger_device)


def _buckets(histogram: Any, base: Mapping[str, str | int], buckets: Mapping[str, float]) -> None:
    for bucket, seconds in buckets.items():
        histogram.record(seconds, attributes={**base, "bucket": label_value(bucket)})
