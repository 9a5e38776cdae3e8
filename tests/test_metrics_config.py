"""``Metrics``: validated at construction, round-tripping through mappings like the others."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profdsl import ConfigError, Metrics, ProfilerConfig
from profdsl.config import EXPORTERS

metrics_options = st.builds(
    Metrics,
    enabled=st.booleans(),
    stages=st.frozensets(st.sampled_from(["gen", "update_actor", "update_actor/mini_batch", "x y"])),
    max_stages=st.integers(1, 100_000),
    exporters=st.lists(st.sampled_from(EXPORTERS), max_size=3),
    address=st.sampled_from(["127.0.0.1", "0.0.0.0", "::1", "localhost"]),
    port=st.integers(0, 65535),
    rank_label=st.booleans(),
    device_time=st.booleans(),
)


@given(metrics_options)
def test_round_trip(metrics: Metrics) -> None:
    """from_mapping(to_mapping()) gives the same config, through JSON too, nested or not."""
    assert Metrics.from_mapping(metrics.to_mapping()) == metrics
    config = ProfilerConfig(metrics=metrics)
    assert ProfilerConfig.from_mapping(json.loads(json.dumps(config.to_mapping()))) == config


def test_defaults() -> None:
    metrics = ProfilerConfig().metrics
    assert metrics == Metrics() and not metrics.enabled
    assert (metrics.address, metrics.port, metrics.exporters, metrics.max_stages) == ("127.0.0.1", 9464, (), 256)


def test_from_a_nested_mapping() -> None:
    config = ProfilerConfig.from_mapping(
        {"metrics": {"enabled": True, "exporters": ["prometheus"], "stages": ["gen"], "port": 0}}
    )
    assert config.metrics == Metrics(enabled=True, exporters=("prometheus",), stages=frozenset({"gen"}), port=0)


def test_exporters_are_sorted_without_duplicates() -> None:
    assert Metrics(exporters=["prometheus", "otel", "prometheus"]).exporters == ("otel", "prometheus")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"exporters": ["prometheus", "statsd"]}, "Metrics.exporters has unknown item 'statsd'"),
        ({"exporters": ["promethus"]}, "did you mean 'prometheus'"),
        ({"exporters": "prometheus"}, "Metrics.exporters must be a list"),
        ({"enabled": "yes"}, "Metrics.enabled must be true or false, got 'yes'"),
        ({"max_stages": 0}, "Metrics.max_stages must be an integer in 1..100000, got 0"),
        ({"max_stages": True}, "Metrics.max_stages must be an integer"),
        ({"port": 70000}, "Metrics.port must be an integer in 0..65535, got 70000"),
        ({"port": "9464"}, "Metrics.port must be an integer"),
        ({"address": ""}, "Metrics.address must be a non-empty string"),
        ({"address": "127.0.0.1\x00"}, "Metrics.address must not contain NUL"),
        ({"address": 127}, "Metrics.address must be a non-empty string, got 127"),
        ({"stages": "gen"}, "Metrics.stages must be a list"),
        ({"stages": ["gen", ""]}, "Metrics.stages must hold non-empty strings, got ''"),
        ({"stages": [["gen"]]}, "Metrics.stages must hold non-empty strings"),
        ({"device_time": 1}, "Metrics.device_time must be true or false"),
    ],
)
def test_bad_values(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Metrics(**kwargs)


def test_unknown_key_in_a_mapping() -> None:
    with pytest.raises(ConfigError, match="unknown key 'enable' in ProfilerConfig.metrics; did you mean 'enabled'"):
        ProfilerConfig.from_mapping({"metrics": {"enable": True}})


def test_metrics_field_must_be_metrics_or_mapping() -> None:
    with pytest.raises(ConfigError, match="ProfilerConfig.metrics must be a Metrics or a mapping, got True"):
        ProfilerConfig(metrics=True)  # type: ignore[arg-type]


def test_merges_keep_the_left_metrics() -> None:
    """union / intersect keep a's metrics (left-biased, like save_path and rollout)."""
    a = ProfilerConfig(enable=True, steps=[1], metrics=Metrics(enabled=True, port=1))
    b = ProfilerConfig(enable=True, steps=[2], metrics=Metrics(enabled=False, port=2))
    assert a.union(b).metrics == a.metrics == a.intersect(b).metrics
    assert b.union(a).metrics == b.metrics
