"""Whether a written trace holds what its capture was asked for: the rules that name a lost or a
cut window (pure), ``incomplete`` and ``truncated``, as docs/configuration.md ("Lost windows")
tabulates them.

Examples:
    >>> judge(Expect(device="cuda"), Seen(events=True, regions=True, device=False, json_bytes=10))[0]
    'incomplete'
    >>> judge(Expect(), Seen(events=True, regions=True, device=False, json_bytes=10))
    ('ok', None)
    >>> judge(Expect(regions=True), Seen(events=False, regions=False, device=False, json_bytes=10))[0]
    'incomplete'
    >>> judge(Expect(), Seen(events=False, regions=False, device=False, json_bytes=10))[0]  # nothing ran
    'ok'

"""

from __future__ import annotations

import attrs

__all__ = ["Expect", "Seen", "judge"]


@attrs.frozen
class Expect:
    """What a capture knew of one of its traces when it was handed over.

    Attributes:
        device: the device whose activity was asked for and is present here (``"cuda"``), or
            None (not asked, or no such device on this machine).
        stopped: why torch stopped collecting device activity before the window ended, or None.
        truncated: why profdsl ended the window early, or None.
        regions: profdsl opened regions in the window while it recorded (its stage, recorded
            mini-batches): a trace without any event has lost them.
        missed: work of the window ran where the capture cannot see it, and that loss has a
            record of its own already (an empty trace is not reported a second time).
    """

    device: str | None = None
    stopped: str | None = None
    truncated: str | None = None
    regions: bool = False
    missed: bool = False


@attrs.frozen
class Seen:
    """What a trace's events hold, seen while it was finished: any event (kineto's own span
    aside), any profdsl region (a user annotation), any device activity (kernels, copies,
    memsets, runtime and driver calls); its size as plain JSON, its metadata included."""

    events: bool
    regions: bool
    device: bool
    json_bytes: int


def judge(expect: Expect | None, seen: Seen) -> tuple[str, str | None]:
    """The status of a written trace and why: ``("ok", None)``, ``("truncated", why)`` or
    ``("incomplete", why)`` (a lost window outranks a cut one; both reasons are given).
    ``expect`` None: no capture said what the trace should hold (events handed to the writer
    by other code): ``ok``."""
    if expect is None:
        return "ok", None
    lost: list[str] = []
    if expect.stopped:
        lost.append(f"torch stopped collecting {expect.device or 'device'} activity early: {expect.stopped}")
    if not seen.events and expect.regions and not expect.missed:
        lost.append("the trace holds no event at all, not even the regions profdsl opened in its window")
    elif expect.device and seen.regions and not seen.device and not expect.stopped:
        lost.append(
            f"the trace holds profdsl's regions but no {expect.device} activity, which was asked for and "
            f"is present on this machine: either no {expect.device} work ran in the window or torch's "
            "device collection failed (a CUPTI buffer overflow)"
        )
    if lost:
        return "incomplete", "; ".join([*lost, *([expect.truncated] if expect.truncated else [])])
    if expect.truncated:
        return "truncated", expect.truncated
    return "ok", None
