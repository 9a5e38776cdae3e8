"""Two runs side by side (``profdsl diff RUN_A RUN_B``): per role and stage path, what each took
per step and rank, the change and its ratio, and whether the change is within the noise the
runs' own step-to-step variation shows.

The samples of a (role, stage) are its seconds in each (step, rank) that ran it: from the
metrics logs when both runs have one (every step; traced steps are left out when a run has
untraced ones, since profiling slows them down), else from the traces (the stage-time model:
profiled steps only). For each run: ``n`` samples, their mean (per step and rank), the run's
total, the mean self time and entries, and the spread across ranks (the slowest rank's mean
less the fastest's). The noise is :data:`METHOD`: twice the standard error of the difference of
the two means (Welch), an approximate 95% interval; a change within it is ``unchanged``. With
fewer than two samples in a run, the noise cannot be measured (``noise unknown``).

Rows are sorted by the absolute change, largest first. Everything here is arithmetic over the
samples (:func:`compare`), apart from reading them (:func:`load_samples`).
"""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

import attrs

from profdsl.collect.metrics_log import log_files, read_log_lines
from profdsl.config._checks import MAX_SECONDS
from profdsl.core._units import ms_text
from profdsl.metrics.aggregate import over_ranks

__all__ = [
    "FROM_LOGS",
    "FROM_TRACES",
    "METHOD",
    "Comparison",
    "Row",
    "Sample",
    "Side",
    "compare",
    "describe_noise",
    "load_samples",
    "side",
]

#: How the noise is measured (printed with every diff).
METHOD = "2 x the standard error of the difference of the means (Welch), from the per-step samples"
#: Where a comparison's samples come from (its ``source``).
FROM_LOGS, FROM_TRACES = "the metrics logs (every step)", "the traces (profiled steps)"
#: The verdicts of a row.
SLOWER, FASTER, UNCHANGED, UNKNOWN, ONLY_A, ONLY_B = (
    "slower",
    "faster",
    "unchanged",
    "noise unknown",
    "only in A",
    "only in B",
)


@attrs.frozen
class Sample:
    """A stage's seconds in one step on one rank."""

    step: int | None
    rank: int | None
    total_s: float
    self_s: float
    count: int


@attrs.frozen
class Side:
    """One run's figures for one (role, stage)."""

    n: int
    mean_s: float
    total_s: float
    self_s: float
    count: float
    sd_s: float | None
    spread_s: float
    slowest_rank: int | None


@attrs.frozen
class Row:
    """One (role, stage) of the diff (seconds; ``a``/``b`` None where the stage did not run)."""

    role: str
    stage: str
    a: Side | None
    b: Side | None
    change_s: float
    ratio: float | None
    noise_s: float | None
    verdict: str


@attrs.frozen
class Comparison:
    """A whole diff: where the samples came from, the noise method, the runs and the rows."""

    source: str
    method: str
    run_a: str
    run_b: str
    rows: tuple[Row, ...]
    skipped: tuple[str, ...] = ()


def side(samples: Sequence[Sample]) -> Side:
    """One run's figures from its samples of one stage (at least one)."""
    totals = [s.total_s for s in samples]
    per_rank: dict[int | None, list[float]] = defaultdict(list)
    for s in samples:
        per_rank[s.rank].append(s.total_s)
    across = over_ranks((rank, statistics.fmean(values)) for rank, values in per_rank.items())
    return Side(
        n=len(samples),
        mean_s=statistics.fmean(totals),
        total_s=math.fsum(totals),
        self_s=statistics.fmean(s.self_s for s in samples),
        count=statistics.fmean(s.count for s in samples),
        sd_s=statistics.stdev(totals) if len(totals) > 1 else None,
        spread_s=across.most - across.least,
        slowest_rank=across.slowest,
    )


def _row(role: str, stage: str, a: Sequence[Sample], b: Sequence[Sample]) -> Row:
    if not a or not b:  # only in one run (compare never passes two empty)
        only = side(a or b)
        if b:
            return Row(role, stage, None, only, only.mean_s, None, None, ONLY_B)
        return Row(role, stage, only, None, -only.mean_s, None, None, ONLY_A)
    first, second = side(a), side(b)
    change = second.mean_s - first.mean_s
    ratio = second.mean_s / first.mean_s if first.mean_s > 0 else None
    if first.sd_s is None or second.sd_s is None:
        return Row(role, stage, first, second, change, ratio, None, UNKNOWN)
    noise = 2 * math.sqrt(first.sd_s**2 / first.n + second.sd_s**2 / second.n)
    verdict = UNCHANGED if abs(change) <= noise else (SLOWER if change > 0 else FASTER)
    return Row(role, stage, first, second, change, ratio, noise, verdict)


def compare(
    a: Mapping[tuple[str, str], Sequence[Sample]],
    b: Mapping[tuple[str, str], Sequence[Sample]],
    *,
    source: str = "samples",
    run_a: str = "A",
    run_b: str = "B",
) -> Comparison:
    """The diff of two runs' samples per (role, stage), sorted by the absolute change (then role
    and stage)."""
    rows = [_row(role, stage, a.get((role, stage), ()), b.get((role, stage), ())) for role, stage in set(a) | set(b)]
    rows.sort(key=lambda r: (-abs(r.change_s), r.role, r.stage))
    return Comparison(source=source, method=METHOD, run_a=run_a, run_b=run_b, rows=tuple(rows))


# -- reading a run ------------------------------------------------------------------------------

Samples = dict[tuple[str, str], list[Sample]]


def _from_log(folder: str) -> tuple[Samples, list[str]]:
    """A run's samples from its metrics logs: untraced steps when it has any. A stage without
    ``total_s`` is missing, not 0 s, and one over :data:`MAX_SECONDS` in a step is not a
    time: each is left out, named by file and line."""
    found, problems = read_log_lines(folder)
    untraced = [item for item in found if not item[2].traced]
    samples: Samples = defaultdict(list)
    for path, number, line in untraced or found:
        for stage_path, stage in (line.stages or {}).items():
            where = f"{path} line {number}: {line.role} {stage_path}"
            if stage.total_s is None:
                problems.append(f"{where}: no total_s: left out")
                continue
            if stage.total_s > MAX_SECONDS or (stage.self_s or 0.0) > MAX_SECONDS:
                problems.append(f"{where}: {stage.total_s:g} s in one step is not a time: left out")
                continue
            samples[(str(line.role), stage_path)].append(
                Sample(line.step, line.rank, stage.total_s, stage.self_s or 0.0, stage.count or 0)
            )
    return samples, problems


def _common_ranks(a: Samples, b: Samples, problems: list[str]) -> tuple[Samples, Samples]:
    """Each (role, stage) compared on the ranks both runs have samples of (a rank traced in
    every step of one run has no untraced sample there); what is left out is said."""
    out_a: Samples = defaultdict(list)
    out_b: Samples = defaultdict(list)
    for key in set(a) | set(b):
        ranks_a, ranks_b = {s.rank for s in a.get(key, ())}, {s.rank for s in b.get(key, ())}
        both = ranks_a & ranks_b
        if not both:  # only in one run: a row of its own ("only in A/B")
            out_a[key], out_b[key] = list(a.get(key, ())), list(b.get(key, ()))
            continue
        for rank in sorted(ranks_a ^ ranks_b, key=lambda r: -1 if r is None else r):
            run = "A" if rank in ranks_a else "B"
            problems.append(f"{key[0]} {key[1]}: rank {rank} has samples in run {run} only: left out of both")
        out_a[key] = [s for s in a.get(key, ()) if s.rank in both]
        out_b[key] = [s for s in b.get(key, ()) if s.rank in both]
    return out_a, out_b


def _from_traces(folder: str) -> tuple[Samples, list[str]]:
    """A run's samples from its traces (the stage-time model); what is left out is named: the
    manifest's bad lines, unreadable traces, and the metrics logs' bad lines from the model's
    one read of them."""
    from profdsl.analysis._catalog import catalog
    from profdsl.analysis._load import load_model
    from profdsl.analysis._walls import read_walls

    found = catalog(folder)
    skipped: list[str] = list(found.problems)
    log = read_walls(folder)
    model = load_model(folder, found.artifacts, skipped, log)
    skipped += log.problems
    samples: Samples = defaultdict(list)
    for node in model.nodes:
        samples[(node.role, node.metric_path)].append(
            Sample(node.step, node.rank, node.total_us / 1e6, node.self_us / 1e6, node.count)
        )
    return samples, skipped


def load_samples(run_a: str | os.PathLike[str], run_b: str | os.PathLike[str], *, source: str = "auto") -> Comparison:
    """Read both runs and compare them: from the metrics logs (``source="log"``, or ``"auto"``
    when both runs have one), else from the traces (``"traces"``).

    Raises:
        FolderError: a run is missing, or (traces) holds no trace.
        ValueError: ``source="log"`` and a run has no metrics log.
    """
    from profdsl.analysis._catalog import FolderError

    a, b = os.fspath(run_a), os.fspath(run_b)
    for folder in (a, b):
        if not os.path.isdir(folder):
            raise FolderError(f"{folder}: no such folder")
    logs = bool(log_files(a)) and bool(log_files(b))
    if source == "log" and not logs:
        missing = a if not log_files(a) else b
        raise ValueError(f"{missing} has no metrics log (Metrics(log=True) writes one)")
    use_log = logs if source == "auto" else source == "log"
    read = _from_log if use_log else _from_traces
    (samples_a, skipped_a), (samples_b, skipped_b) = read(a), read(b)
    left_out: list[str] = []
    samples_a, samples_b = _common_ranks(samples_a, samples_b, left_out)
    what = FROM_LOGS if use_log else FROM_TRACES
    result = compare(samples_a, samples_b, source=what, run_a=a, run_b=b)
    return attrs.evolve(result, skipped=tuple(skipped_a + skipped_b + left_out))


def describe_noise(row: Row) -> str:
    """The noise column: ``±1.234 (n 20/20)``, or why there is none."""
    n = f"n {row.a.n if row.a else 0}/{row.b.n if row.b else 0}"
    if row.noise_s is None:
        return f"- ({n})"
    return f"±{ms_text(row.noise_s * 1e3)} ({n})"
