"""The Prometheus exporter: each step's stage seconds as a histogram, served over HTTP.

``prometheus_client`` (the ``prometheus`` extra) is imported only when an exporter starts. Each
endpoint (address and port) is one HTTP server with its own ``CollectorRegistry`` (never the
client's global one, which the training script may use for its own metrics), shared by every
role of the process that exports there. Servers are process-wide state: they live in
:class:`Servers`, owned by ``PROCESS`` (closed by ``profdsl.testing.reset()``, forgotten by a
forked child).

Label values are what the client escapes in its exposition (``\\``, ``"`` and newlines), made
valid UTF-8 first and cut to :data:`MAX_LABEL` characters (a digest of the rest keeps cut values
apart); the stage label's distinct values are bounded by ``Metrics.max_stages`` per role.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from profdsl.core.log import logger
from profdsl.metrics.timings import StepTimings

__all__ = ["BUCKETS", "MAX_LABEL", "PrometheusExporter", "Server", "Servers", "host_port", "label_value"]

#: Histogram buckets, in seconds: training stages last from milliseconds to many minutes.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0,
           50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, float("inf"))
#: The longest label value exported, in characters.
MAX_LABEL = 200


def label_value(text: str) -> str:
    """``text`` as a label value: valid UTF-8 (a lone surrogate would fail every scrape) and at
    most :data:`MAX_LABEL` characters."""
    clean = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(clean) <= MAX_LABEL:
        return clean
    digest = hashlib.sha256(clean.encode()).hexdigest()[:12]
    return f"{clean[:MAX_LABEL - 13]}~{digest}"


def host_port(address: str, port: int) -> str:
    """``address:port`` as a URL writes it: an IPv6 address in brackets (``[::]:9090``).

    Examples:
        >>> host_port("::", 9090), host_port("0.0.0.0", 9090)
        ('[::]:9090', '0.0.0.0:9090')
    """
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class Server:
    """One endpoint: a registry with profdsl's metrics, served on a daemon thread."""

    def __init__(self, address: str, port: int, rank_label: bool) -> None:
        import prometheus_client as client

        self.rank_label = rank_label
        self.registry = client.CollectorRegistry(auto_describe=True)
        extra = ("rank",) if rank_label else ()
        self.stage_seconds = client.Histogram(
            "profdsl_stage_seconds", "Seconds inside a stage in one training step (all its "
            "entries), one observation per stage and step", ("role", "stage", *extra),
            registry=self.registry, buckets=BUCKETS)
        self.stage_entries = client.Counter(
            "profdsl_stage_entries", "Entries of a stage", ("role", "stage", *extra),
            registry=self.registry)
        self.step_seconds = client.Histogram(
            "profdsl_step_seconds", "Wall time of a training step, start() to stop()",
            ("role", *extra), registry=self.registry, buckets=BUCKETS)
        self.overflow = client.Counter(
            "profdsl_stage_overflow", "Entries of stage paths beyond Metrics.max_stages",
            ("role", *extra), registry=self.registry)
        self.http, self.thread = client.start_http_server(port, addr=address, registry=self.registry)
        self.address, self.port = address, int(self.http.server_port)

    def observe(self, timings: StepTimings) -> None:
        """Add one step of one role."""
        extra = (str(timings.rank),) if self.rank_label else ()
        role = label_value(timings.role)
        for path, timing in timings.stages.items():
            labels = (role, label_value(path), *extra)
            self.stage_seconds.labels(*labels).observe(timing.total_s)
            self.stage_entries.labels(*labels).inc(timing.count)
        self.step_seconds.labels(role, *extra).observe(timings.wall_s)
        if timings.overflow:
            self.overflow.labels(role, *extra).inc(timings.overflow)

    def close(self) -> None:
        """Stop serving and release the port."""
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=5)

    def forget(self) -> None:
        """In a forked child: close the inherited socket (the parent's stays open), serve nothing."""
        try:
            self.http.socket.close()
        except OSError:
            pass


class Servers:
    """The process's Prometheus endpoints, by (address, port)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[tuple[str, int], Server] = {}

    def get(self, address: str, port: int, rank_label: bool) -> Server:
        """The endpoint on ``address:port``, started on first use (``port=0``: one free port for
        the process). Raises ImportError without prometheus_client, OSError when it cannot bind."""
        with self._lock:
            server = self._servers.get((address, port))
            if server is None:
                server = self._servers[(address, port)] = Server(address, port, rank_label)
                logger.info("profdsl: Prometheus metrics on http://%s/metrics", host_port(address, server.port))
            elif server.rank_label != rank_label:
                logger.warning("profdsl: the Prometheus endpoint %s was started %s a rank label; "
                               "a role asking otherwise shares it as it is", host_port(address, server.port),
                               "with" if server.rank_label else "without")
            return server

    def all(self) -> list[Server]:
        with self._lock:
            return list(self._servers.values())

    def close(self) -> None:
        """Stop every endpoint (tests' reset)."""
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            try:
                server.close()
            except Exception as exc:  # a reset must go on
                logger.log(logging.WARNING, "profdsl: closing a Prometheus endpoint failed: %r", exc)

    def after_fork(self) -> None:
        """A forked child serves nothing of its parent's."""
        self._lock = threading.Lock()
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.forget()


class PrometheusExporter:
    """A role's exporter to one endpoint."""

    name = "prometheus"

    def __init__(self, server: Server) -> None:
        self.server = server

    def export(self, timings: StepTimings) -> None:
        self.server.observe(timings)

    def __repr__(self) -> str:
        return f"PrometheusExporter({host_port(self.server.address, self.server.port)})"


