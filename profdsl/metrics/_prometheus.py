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

The endpoint also takes capture requests: ``POST /profile`` with a JSON body
(``docs/on-demand.md``) is handed to ``on_profile`` (the process's request inbox), on the
server's thread, and answered with its JSON answer. Bodies are bounded (:data:`MAX_BODY`) and a
client that takes longer than :data:`CLIENT_TIMEOUT_S` to send its request is dropped; at most
:data:`MAX_CLIENTS` connections are served at once; nothing here waits for training.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from profdsl.core._gate import admit
from profdsl.core._kinds import STAGE_KINDS
from profdsl.core._log import counted, described, logger, once, printable
from profdsl.metrics._slow import StragglerAlert
from profdsl.metrics._timings import StepTimings

__all__ = [
    "BUCKETS",
    "CLIENT_TIMEOUT_S",
    "LEDGER_HELP",
    "MAX_BODY",
    "MAX_CLIENTS",
    "MAX_LABEL",
    "OnProfile",
    "PrometheusExporter",
    "Server",
    "Servers",
    "host_port",
    "label_value",
]

#: ``POST /profile``: the body (bytes) in, the HTTP status and JSON answer out.
OnProfile = Callable[[bytes, "tuple[int, str] | None"], tuple[int, dict[str, Any]]]
#: The tokens and extra host names ``POST /profile`` is taken with (``Inbox.gate``).
Gate = Callable[[], tuple[tuple[str, ...], tuple[str, ...]]]
#: The largest ``POST /profile`` body read.
MAX_BODY = 64 * 1024
#: How long the endpoint waits for a client that stops sending.
CLIENT_TIMEOUT_S = 10.0
#: The most connections served at once, a thread each; past it a connection is answered 503 and
#: closed without a thread (tests/test_endpoint_idle.py::test_a_flood_of_connections_holds_a_bounded_number_of_threads).
MAX_CLIENTS = 16
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Content-Length: 36\r\n\r\ntoo many clients of this endpoint now"
)

#: The reason phrase of each HTTP status: the standard library's, but RFC 9110's name for 413 and
#: a bare "Error" for 500.
_PHRASES = {status.value: status.phrase for status in HTTPStatus} | {413: "Content Too Large", 500: "Error"}

#: Histogram buckets, in seconds: training stages last from milliseconds to many minutes.
BUCKETS = tuple(
    map(float, "0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 25 50 100 250 500 1000 2500 inf".split())
)
#: The longest label value exported, in characters.
MAX_LABEL = 200
#: What the step ledger's metrics hold, after "The last step's" (Prometheus) or "A step's"
#: (OpenTelemetry): its wall time split, the stage time beside it, its device split.
LEDGER_HELP = (
    f"wall time split into buckets that add up to it: seconds per kind of work ({', '.join(STAGE_KINDS)}), "
    "overhead and outside",
    "stage time that ran beside the stage its instant went to (not in the ledger's sum)",
    "device span of its stages (from the first one's entry to the last one's exit, on the device) split: "
    "seconds per kind of work, and outside (no stage's work)",
)


def label_value(text: str) -> str:
    """``text`` as a label value: valid UTF-8 (a lone surrogate would fail every scrape) and at
    most :data:`MAX_LABEL` characters."""
    clean = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(clean) <= MAX_LABEL:
        return clean
    digest = hashlib.sha256(clean.encode()).hexdigest()[:12]
    return f"{clean[: MAX_LABEL - 13]}~{digest}"


def host_port(address: str, port: int) -> str:
    """``address:port`` as a URL writes it: an IPv6 address in brackets (``[::]:9090``).

    Examples:
        >>> host_port("::", 9090), host_port("0.0.0.0", 9090)
        ('[::]:9090', '0.0.0.0:9090')
    """
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class _Until(io.RawIOBase):
    """A connection read until a deadline: each read waits at most what is left of it, so a
    client sending its request a byte at a time cannot hold its thread longer than one that
    sends nothing (tests/test_endpoint_idle.py::test_a_client_that_trickles_its_request_is_dropped)."""

    def __init__(self, connection: socket.socket, seconds: float) -> None:
        self._connection, self._until = connection, time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took longer than the endpoint waits for one")
        self._connection.settimeout(left)
        return self._connection.recv_into(buffer)


class _Quiet(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT_S  # a client that stops sending, or sends too slowly, frees its thread

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BufferedReader(_Until(self.connection, self.timeout))

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Threading(ThreadingMixIn, WSGIServer):
    """One thread per connection, at most :data:`MAX_CLIENTS` at once: the training process's
    thread limit is not the clients' to spend."""

    daemon_threads = True
    request_queue_size = 4 * MAX_CLIENTS  # a burst waits in the kernel's queue, not for SYN retries

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._clients = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._clients.acquire(blocking=False):
            counted(
                "connections past the metrics endpoint's bound",
                logging.WARNING,
                "profdsl: metrics endpoint: %d clients are being served; a connection from %s is "
                "answered 503 and closed (connections past the bound)",
                MAX_CLIENTS,
                printable(str(client_address)),
            )
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: the slot is free again
            self._clients.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._clients.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went idle (``_Quiet.timeout``) or away is dropped with one DEBUG line;
        anything else is logged once: never socketserver's traceback on the training process's
        stderr."""
        error = sys.exc_info()[1]
        where = printable(str(client_address))
        if isinstance(error, (TimeoutError, ConnectionError)):
            logger.debug("profdsl: metrics endpoint: idle client %s dropped (%s)", where, type(error).__name__)
            return
        once(
            f"endpoint-error:{type(error).__name__}",
            logging.WARNING,
            "profdsl: metrics endpoint: a request from %s failed (%s); the endpoint goes on",
            where,
            printable(described(error)),
        )


def _serve(address: str, port: int, app: Callable[..., Iterable[bytes]]) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``app`` on ``address:port`` (IPv4 or IPv6) from a daemon thread, one thread per
    request."""
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("ProfdslMetricsServer", (_Threading,), {"address_family": family})
    httpd: WSGIServer = make_server(address, port, app, server_class, handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, name="profdsl-metrics-endpoint", daemon=True)
    thread.start()
    return httpd, thread


class LedgerGauges:
    """The step ledger's gauges of one endpoint: the last step's buckets per role (and rank)."""

    def __init__(self, gauge: Callable[..., Any], extra: tuple[str, ...]) -> None:
        wall, beside, device = LEDGER_HELP
        self.seconds = gauge("profdsl_step_ledger_seconds", f"The last step's {wall}", ("role", "bucket", *extra))
        self.concurrent = gauge("profdsl_step_ledger_concurrent_seconds", f"The last step's {beside}", ("role", *extra))
        self.device = gauge(
            "profdsl_step_ledger_device_seconds",
            f"With device time on CUDA, the last step's {device}",
            ("role", "bucket", *extra),
        )
        self._shown: dict[tuple[str, ...], set[str]] = {}  # per (role, rank): the buckets shown
        self._device_shown: dict[tuple[str, ...], set[str]] = {}  # the same, of the device split

    def observe(self, role: str, extra: tuple[str, ...], timings: StepTimings) -> None:
        """One step of ``role``: its buckets; a step without a ledger removes them (an older
        step's figures are not shown as this one's), and one without a device split its
        device buckets."""
        shown = self._shown.setdefault((role, *extra), set())
        _show(self.device, self._device_shown.setdefault((role, *extra), set()), role, extra, timings.ledger_device)
        if timings.ledger is None and shown:
            self.concurrent.remove(role, *extra)
        _show(self.seconds, shown, role, extra, timings.ledger)
        if timings.ledger is not None:
            self.concurrent.labels(role, *extra).set(timings.concurrent_s or 0.0)


def _show(gauge: Any, shown: set[str], role: str, extra: tuple[str, ...], buckets: Mapping[str, float] | None) -> None:
    """Set ``gauge`` per bucket of ``buckets``; None removes the buckets shown before."""
    if buckets is None:
        for bucket in shown:
            gauge.remove(role, bucket, *extra)
        shown.clear()
        return
    for bucket, seconds in buckets.items():
        label = label_value(bucket)
        gauge.labels(role, label, *extra).set(seconds)
        shown.add(label)


class _Families:
    """One endpoint's metric families: stage and step times, the ledger, stragglers."""

    def __init__(self, client: Any, registry: Any, rank_label: bool) -> None:
        self.rank_label = rank_label
        extra = ("rank",) if rank_label else ()
        histogram = functools.partial(client.Histogram, registry=registry, buckets=BUCKETS)
        counter = functools.partial(client.Counter, registry=registry)
        gauge = functools.partial(client.Gauge, registry=registry)
        self.stage_seconds = histogram(
            "profdsl_stage_seconds",
            "Seconds inside a stage in one training step (all its entries), one observation per stage and step",
            ("role", "stage", *extra),
        )
        self.stage_entries = counter("profdsl_stage_entries", "Entries of a stage", ("role", "stage", *extra))
        self.step_seconds = histogram(
            "profdsl_step_seconds", "Wall time of a training step, start() to stop()", ("role", *extra)
        )
        self.overflow = counter(
            "profdsl_stage_overflow", "Entries of stage paths beyond Metrics.max_stages", ("role", *extra)
        )
        self.ledger = LedgerGauges(gauge, extra)
        self.straggler_factor = gauge(
            "profdsl_straggler_factor",
            "A straggling rank's stage time over the other ranks' median, while its straggler episode lasts (0 after)",
            ("role", "stage", "rank"),
        )
        self.straggler_steps = gauge(
            "profdsl_straggler_steps",
            "Consecutive slow steps of a straggling rank's stage (0 after its episode)",
            ("role", "stage", "rank"),
        )

    def observe(self, timings: StepTimings) -> None:
        """Add one step of one role."""
        extra = (str(timings.rank),) if self.rank_label else ()
        role = label_value(timings.role)
        for path, timing in timings.stages.items():
            labels = (role, label_value(path), *extra)
            self.stage_seconds.labels(*labels).observe(timing.total_s)
            self.stage_entries.labels(*labels).inc(timing.count)
        self.step_seconds.labels(role, *extra).observe(timings.wall_s)
        self.ledger.observe(role, extra, timings)
        if timings.overflow:
            self.overflow.labels(role, *extra).inc(timings.overflow)

    def alert(self, alert: StragglerAlert) -> None:
        """A straggler episode of this process's rank began (the gauges show its factor and
        steps) or ended (both back to 0)."""
        labels = (label_value(alert.role), label_value(alert.stage), str(alert.rank))
        self.straggler_factor.labels(*labels).set(alert.factor if alert.active else 0.0)
        self.straggler_steps.labels(*labels).set(alert.count if alert.active else 0)


class Server:
    """One endpoint: a registry with profdsl's metrics, served on a daemon thread, and
    ``POST /profile`` handed to ``on_profile``."""

    def __init__(self, address: str, port: int, rank_label: bool, on_profile: OnProfile, gate: Gate) -> None:
        import prometheus_client as client

        self.gate = gate
        self.registry = client.CollectorRegistry(auto_describe=True)
        self.families = _Families(client, self.registry, rank_label)
        self.on_profile = on_profile
        self._metrics_app = client.make_wsgi_app(self.registry)
        self.address = address
        self.http, self.thread = _serve(address, port, self._app)
        self.port = int(self.http.server_port)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., object]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/profile":
            return self._metrics_app(environ, start_response)  # type: ignore[no-any-return]
        status, answer = self._profile(environ)
        body = (json.dumps(answer, sort_keys=True) + "\n").encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        if status == 405:
            headers.append(("Allow", "POST"))
        start_response(f"{status} {_PHRASES.get(status, 'Error')}", headers)
        return [body]

    def _profile(self, environ: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /profile``: read the body (bounded) and hand it over; never raises."""
        if environ.get("REQUEST_METHOD") != "POST":
            return 405, {"why": ["POST a JSON capture request to /profile"]}
        if (refused := self._admit(environ)) is not None:  # its status and why
            counted(
                "POST /profile requests refused at the door",
                logging.WARNING,
                "profdsl: POST /profile refused (%s): %s",
                *refused,
            )
            return self.on_profile(b"", refused)
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            return 413, {"why": [f"the body must be at most {MAX_BODY} bytes, with a Content-Length"]}
        try:
            body = environ["wsgi.input"].read(length) if length else b""
            return self.on_profile(body, None)
        except Exception as exc:
            once(
                f"post-profile:{type(exc).__name__}", logging.ERROR, "profdsl: answering POST /profile failed: %r", exc
            )
            return 500, {"why": [type(exc).__name__]}

    def _admit(self, environ: dict[str, Any]) -> tuple[int, str] | None:
        """:func:`profdsl.core._gate.admit` for this request's headers (WSGI names them
        ``HTTP_*``, and ``CONTENT_TYPE``)."""
        headers = {key[5:].replace("_", "-"): value for key, value in environ.items() if key.startswith("HTTP_")}
        if "CONTENT_TYPE" in environ:
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        tokens, hosts = self.gate()
        if self.address in ("0.0.0.0", "::", ""):  # reached by this machine's own names too
            hosts = (*hosts, socket.gethostname().lower(), socket.getfqdn().lower())
        return admit(headers, bound=self.address, port=self.port, hosts=hosts, tokens=tokens)

    def close(self) -> None:
        """Stop serving and release the port."""
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=5)

    def forget(self) -> None:
        """In a forked child: close the inherited socket (the parent's stays open), serve nothing."""
        with contextlib.suppress(OSError):
            self.http.socket.close()


class Servers:
    """The process's Prometheus endpoints, by (address, port); ``POST /profile`` on any of them
    goes to ``on_profile``."""

    def __init__(self, on_profile: OnProfile, gate: Gate) -> None:
        self._lock = threading.Lock()
        self._servers: dict[tuple[str, int], Server] = {}
        self._on_profile, self._gate = on_profile, gate

    def get(self, address: str, port: int, rank_label: bool) -> Server:
        """The endpoint on ``address:port``, started on first use (``port=0``: one free port for
        the process). Raises ImportError without prometheus_client, OSError when it cannot bind."""
        with self._lock:
            server = self._servers.get((address, port))
            if server is None:
                server = self._servers[(address, port)] = Server(
                    address, port, rank_label, self._on_profile, self._gate
                )
                logger.info("profdsl: Prometheus metrics on http://%s/metrics", host_port(address, server.port))
            elif server.families.rank_label != rank_label:
                logger.warning(
                    "profdsl: the Prometheus endpoint %s was started %s a rank label; "
                    "a role asking otherwise shares it as it is",
                    host_port(address, server.port),
                    "with" if server.families.rank_label else "without",
                )
            return server

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
        self.server.families.observe(timings)

    def alert(self, alert: StragglerAlert) -> None:
        self.server.families.alert(alert)

    def __repr__(self) -> str:
        return f"PrometheusExporter({host_port(self.server.address, self.server.port)})"
