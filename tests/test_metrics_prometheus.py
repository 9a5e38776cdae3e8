"""The Prometheus exporter, with the real prometheus_client: steps run, the endpoint is scraped
over HTTP on an ephemeral port, and the exposition format is parsed."""

from __future__ import annotations

import logging
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import profdsl.testing
from profdsl import mini_batch_window, profile_stage
from profdsl.metrics._prometheus import MAX_LABEL, PrometheusExporter, label_value

from .metrics_support import FakeClock, fake_clock, metered

client = pytest.importorskip("prometheus_client")
parser = pytest.importorskip("prometheus_client.parser")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    with fake_clock(monkeypatch) as fake:
        yield fake


def endpoint(profiler: Any) -> PrometheusExporter:
    [exporter] = profiler.meter.exporters
    assert isinstance(exporter, PrometheusExporter)
    return exporter


def scrape(port: int) -> dict[str, Any]:
    """The parsed exposition: {metric family name: family}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {family.name: family for family in parser.text_string_to_metric_families(text)}


def samples(family: Any, suffix: str, **labels: str) -> list[Any]:
    return [
        s
        for s in family.samples
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def value(family: Any, suffix: str, **labels: str) -> float:
    [sample] = samples(family, suffix, **labels)
    return float(sample.value)


def test_steps_are_scraped(clock: FakeClock) -> None:
    """Three steps of two roles sharing the process's endpoint: the histogram's counts and sums
    per role and stage, the entry counter and the step histogram, as the client parses them."""
    actor = metered("actor", exporters=["prometheus"], port=0)
    ref = metered("ref", exporters=["prometheus"], port=0)
    port = endpoint(actor).server.port
    assert endpoint(ref).server is endpoint(actor).server and endpoint(actor).server.address == "127.0.0.1"
    for step in range(3):
        actor.start(step)
        ref.start(step)
        with profile_stage("gen", role="actor"):
            clock.advance(1.0 + step)
        with profile_stage("update_actor", role="actor"):
            for _ in mini_batch_window(range(4)):
                clock.advance(0.5)
        with profile_stage("compute_ref_log_prob", role="ref"):
            clock.advance(0.25)
        actor.stop()
        ref.stop()
    families = scrape(port)
    stage = families["profdsl_stage_seconds"]
    assert stage.type == "histogram"
    assert value(stage, "_count", role="actor", stage="gen") == 3
    assert value(stage, "_sum", role="actor", stage="gen") == 1.0 + 2.0 + 3.0
    assert value(stage, "_count", role="actor", stage="update_actor/mini_batch") == 3
    assert value(stage, "_sum", role="actor", stage="update_actor/mini_batch") == 6.0
    assert value(stage, "_count", role="ref", stage="compute_ref_log_prob") == 3
    assert value(stage, "_bucket", role="actor", stage="gen", le="2.5") == 2  # 1 s and 2 s
    assert value(stage, "_bucket", role="actor", stage="gen", le="+Inf") == 3
    assert all("rank" not in s.labels for s in stage.samples)
    entries = families["profdsl_stage_entries"]
    assert value(entries, "_total", role="actor", stage="update_actor/mini_batch") == 12
    steps = families["profdsl_step_seconds"]
    assert value(steps, "_count", role="actor") == 3 and value(steps, "_count", role="ref") == 3
    actor.close()
    ref.close()


def test_rank_label() -> None:
    with metered("actor", rank=3, world_size=4, exporters=["prometheus"], port=0, rank_label=True) as p:
        with p.step(1), profile_stage("gen"):
            pass
        families = scrape(endpoint(p).server.port)
    assert value(families["profdsl_stage_seconds"], "_count", role="actor", stage="gen", rank="3") == 1


HOSTILE = [
    'say "hi"',
    "back\\slash",
    "new\nline",
    "brace}{=,",
    "tab\there",
    "uni✓ 名前",
    "lone \ud800 surrogate",
    "x" * 500,
    "a/b",
    "# HELP fake",
    " ",
    "nul\x00byte",
    "cr\rreturn",
]


def test_hostile_stage_names_cannot_break_the_exposition() -> None:
    """Quotes, backslashes, newlines, braces, non-ASCII, a lone surrogate, a 500-character name:
    the exposition still parses and each label value reads back as exported."""
    with metered('ro"le\n', exporters=["prometheus"], port=0) as profiler:
        with profiler.step(1):
            for name in HOSTILE:
                with profile_stage(name):
                    pass
        families = scrape(endpoint(profiler).server.port)
    stage = families["profdsl_stage_seconds"]
    got = {s.labels["stage"] for s in samples(stage, "_count")}
    expected = {label_value(name.replace("/", "%2F")) for name in HOSTILE}
    assert got == expected and len(got) == len(HOSTILE)
    assert {s.labels["role"] for s in stage.samples} == {'ro"le\n'}
    assert all(len(v) <= MAX_LABEL for v in got)
    assert "lone \\ud800 surrogate" in got


def test_label_values() -> None:
    assert label_value("plain") == "plain"
    assert label_value("\udcff") == "\\udcff"
    long_a, long_b = label_value("a" * 300 + "1"), label_value("a" * 300 + "2")
    assert len(long_a) == MAX_LABEL and long_a != long_b  # cut values stay apart


def test_distinct_stages_are_capped_and_the_overflow_counted() -> None:
    with metered("actor", exporters=["prometheus"], port=0, max_stages=5) as profiler:
        for step in range(2):
            with profiler.step(step):
                for i in range(50):
                    with profile_stage(f"sample-{step}-{i}"):
                        pass
        families = scrape(endpoint(profiler).server.port)
    stage = families["profdsl_stage_seconds"]
    assert len({s.labels["stage"] for s in stage.samples}) == 5
    assert value(families["profdsl_stage_overflow"], "_total", role="actor") == 45 + 50


def test_an_address_in_use_is_an_error_at_start(caplog: pytest.LogCaptureFixture) -> None:
    """A port that cannot be bound: logged at construction; the steps and their metrics go on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR, logger="profdsl"):
            profiler = metered("actor", exporters=["prometheus"], port=port)
        assert "cannot start" in caplog.text and str(port) in caplog.text
        assert profiler.meter.exporters == []
        with profiler, profiler.step(1), profile_stage("gen"):
            pass
        assert "timing_s/gen" in profiler.metrics


@pytest.mark.parametrize("address", ["256.0.0.1", "no-such-host.invalid"])
def test_an_address_that_is_no_address(address: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        profiler = metered("actor", exporters=["prometheus"], address=address, port=0)
    assert "cannot start" in caplog.text and address in caplog.text
    with profiler, profiler.step(1), profile_stage("gen"):
        pass
    assert "timing_s/gen" in profiler.metrics


def test_port_follows_the_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process of a node listens on port + its local rank."""
    monkeypatch.setenv("LOCAL_RANK", "2")
    for _ in range(20):  # a base port whose +2 is free
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + 2 > 65535:
            continue
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", base + 2))
        except OSError:
            continue
        break
    with metered("actor", rank=6, world_size=8, exporters=["prometheus"], port=base) as profiler:
        assert endpoint(profiler).server.port == base + 2


def test_a_failing_exporter_is_logged_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with metered("actor", exporters=["prometheus"], port=0) as profiler:

        def broken(timings: object) -> None:
            raise RuntimeError("collector broke")

        monkeypatch.setattr(endpoint(profiler).server.families, "observe", broken)
        with caplog.at_level(logging.ERROR, logger="profdsl"):
            for step in range(3):
                with profiler.step(step), profile_stage("gen"):
                    pass
        assert caplog.text.count("collector broke") == 1
        assert profiler.meter.timings is not None and profiler.meter.timings.step == 2


def test_without_prometheus_client(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The extra is missing: an error at start naming it; the flat mapping still works."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with caplog.at_level(logging.ERROR, logger="profdsl"):
        profiler = metered("actor", exporters=["prometheus"], port=0)
    assert "profdsl[prometheus]" in caplog.text
    with profiler, profiler.step(1), profile_stage("gen"):
        pass
    assert "timing_s/gen" in profiler.metrics


def test_reset_closes_the_endpoint() -> None:
    profiler = metered("actor", exporters=["prometheus"], port=0)
    port = endpoint(profiler).server.port
    scrape(port)
    profdsl.testing.reset()
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def test_import_profdsl_imports_no_exporter_package() -> None:
    import subprocess

    code = (
        "import profdsl, profdsl.metrics, profdsl.ray, sys; "
        "print([m for m in ('prometheus_client', 'opentelemetry') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_leaves_the_endpoint_to_its_parent() -> None:
    """A child forked while the endpoint serves (a DataLoader worker) closes only its own copy
    of the socket: the parent still answers scrapes."""
    import os

    with metered("actor", exporters=["prometheus"], port=0) as profiler:
        port = endpoint(profiler).server.port
        pid = os.fork()
        if pid == 0:  # the child: profdsl's after-fork rule has run; leave at once
            os._exit(0)
        os.waitpid(pid, 0)
        with profiler.step(1), profile_stage("gen"):
            pass
        assert value(scrape(port)["profdsl_stage_seconds"], "_count", role="actor", stage="gen") == 1


def test_an_ipv6_address_is_logged_as_a_url(caplog: pytest.LogCaptureFixture) -> None:
    """``address="::"`` (every IPv6 interface): the log gives a URL that works, ``http://[::]:PORT``,
    not ``http://:::PORT``."""
    try:
        socket.socket(socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 on this machine")
    with caplog.at_level(logging.INFO, logger="profdsl"):
        profiler = metered("actor", exporters=["prometheus"], address="::", port=0)
    port = endpoint(profiler).server.port
    assert f"http://[::]:{port}/metrics" in caplog.text
    assert ":::" not in caplog.text and repr(endpoint(profiler)) == f"PrometheusExporter([::]:{port})"


def test_the_step_ledger_gauges(clock: FakeClock) -> None:
    """The last step's ledger as gauges per bucket, adding up to its wall time; a step without a
    ledger (more stretches than a step keeps) removes them rather than show the older step's."""
    actor = metered("actor", exporters=["prometheus"], port=0)
    port = endpoint(actor).server.port
    actor.start(1)
    with profile_stage("gen"):
        clock.advance(1.0)
    with profile_stage("update_actor"):
        clock.advance(0.5)
    clock.advance(0.25)
    actor.stop()
    families = scrape(port)
    ledger = families["profdsl_step_ledger_seconds"]
    assert ledger.type == "gauge"
    got = {s.labels["bucket"]: s.value for s in ledger.samples if s.labels["role"] == "actor"}
    assert {k: v for k, v in got.items() if v} == {"generation": 1.0, "update": 0.5, "outside": 0.25}
    assert set(got) == {
        "generation",
        "inference",
        "update",
        "weight_sync",
        "reward",
        "data",
        "other",
        "overhead",
        "outside",
    }
    assert value(families["profdsl_step_ledger_concurrent_seconds"], "", role="actor") == 0.0
    from profdsl.metrics import _tree as tree

    actor.start(2)
    for _ in range(tree.MAX_SPANS + 1):
        with profile_stage("gen"):
            pass
    actor.stop()
    families = scrape(port)
    assert not families["profdsl_step_ledger_seconds"].samples
    assert not families["profdsl_step_ledger_concurrent_seconds"].samples
    actor.close()


def test_the_device_ledger_gauges(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """With device time (a fake CUDA device, ``tests/cuda_fake.py``), the last step's device
    split per bucket; a step without one (no stage ended in it) removes them."""
    pytest.importorskip("torch")  # the meter looks for device time only in a process that uses torch
    from profdsl.metrics import _device as device
    from profdsl.metrics._device import CudaEvents

    from .cuda_fake import FakeCuda

    gpu = FakeCuda(clock)
    monkeypatch.setattr(device, "cuda_source", lambda: CudaEvents(gpu.event, gpu.synchronize))
    actor = metered("actor", exporters=["prometheus"], port=0)
    port = endpoint(actor).server.port
    actor.start(1)
    with profile_stage("update_actor"):
        gpu.launch(2.0)
    clock.advance(0.5)
    with profile_stage("gen"):
        gpu.launch(1.0)
    actor.stop()
    family = scrape(port)["profdsl_step_ledger_device_seconds"]
    assert family.type == "gauge"
    got = {s.labels["bucket"]: s.value for s in family.samples if s.labels["role"] == "actor"}
    assert {k: v for k, v in got.items() if v} == {"update": 2.0, "generation": 1.0}
    assert set(got) == {"generation", "inference", "update", "weight_sync", "reward", "data", "other", "outside"}
    actor.start(2)
    actor.stop()
    assert not scrape(port)["profdsl_step_ledger_device_seconds"].samples
    actor.close()
