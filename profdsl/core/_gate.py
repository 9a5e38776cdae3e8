"""Who may ask the metrics endpoint for a capture (``POST /profile``): the one rule, pure.

A web page the user opens on the training machine can send requests to a port on
``127.0.0.1``: a cross-site ``fetch(..., {mode: "no-cors"})`` carries ``Content-Type:
text/plain`` and its own ``Origin`` (and, from a browser, ``Sec-Fetch-Site: cross-site``); a
DNS-rebinding page reaches the port under its own name, in ``Host``. So a request is taken only
when its body is declared JSON (a page cannot send that without asking first, which this
endpoint never answers), no ``Origin`` (scheme, name and port) or ``Sec-Fetch-Site`` says it
came from another site,
its ``Host`` is the bound address, a loopback name or a configured name (``OnDemand.hosts``),
and, when ``OnDemand.token`` is set, it carries the token (``X-Profdsl-Token``).
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Mapping

__all__ = ["LOOPBACK_NAMES", "TOKEN_HEADER", "admit"]

#: The header that carries ``OnDemand.token``.
TOKEN_HEADER = "X-Profdsl-Token"
#: Names that always mean this machine.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
_SITES_TAKEN = frozenset({"same-origin", "none"})


def _host_name(host: str) -> str:
    """``Host``'s name without its port (an IPv6 literal keeps its brackets)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _origin_port(scheme: str, rest: str) -> int | None:
    """The port an ``Origin``'s ``host[:port]`` names (the scheme's default without one)."""
    authority = rest.split("/", 1)[0]
    tail = authority[authority.rfind("]") + 1 :] if authority.startswith("[") else authority
    if ":" not in tail:
        return 443 if scheme == "https" else 80
    digits = tail.rsplit(":", 1)[1]
    return int(digits) if digits.isdigit() and len(digits) <= 5 else None


def admit(
    headers: Mapping[str, str],
    *,
    bound: str,
    port: int | None = None,
    hosts: Collection[str] = (),
    tokens: Collection[str] = (),
) -> tuple[int, str] | None:
    """Why a ``POST /profile`` with these ``headers`` (names in any case) is refused, as an HTTP
    status and a sentence, or None when it is taken. ``bound``: the address the endpoint
    listens on, ``port`` its port (an ``Origin`` must name it: another port of this machine is
    another site, a notebook server's page say); ``hosts``: other names it may be reached by;
    ``tokens``: the tokens any of which it takes (none: no token needed).

    Examples:
        >>> admit({"Content-Type": "application/json", "Host": "127.0.0.1:9090"}, bound="127.0.0.1")
        >>> admit({"Content-Type": "text/plain"}, bound="127.0.0.1")[0]
        415
        >>> admit({"Content-Type": "application/json", "Host": "evil.example"}, bound="127.0.0.1")[0]
        403
        >>> page = {"Content-Type": "application/json", "Origin": "http://localhost:8888"}
        >>> admit(page, bound="127.0.0.1", port=9090)[0]
        403
    """
    got = {name.lower(): value for name, value in headers.items()}
    kind = got.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        return 415, "the body must be sent as Content-Type: application/json"
    site = got.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in _SITES_TAKEN:
        return 403, "a request a web page of another site sent (Sec-Fetch-Site) is not taken"
    names = {name.lower() for name in (*LOOPBACK_NAMES, *hosts)}
    if bound not in ("0.0.0.0", "::", ""):
        names.add(bound.lower() if ":" not in bound else f"[{bound.lower()}]")
    host = got.get("host")
    if host is not None and _host_name(host) not in names:
        return 403, "Host names neither the endpoint's address nor a name in OnDemand.hosts"
    origin = got.get("origin")
    if origin is not None:
        scheme, _, rest = origin.strip().lower().partition("://")
        if (
            scheme not in ("http", "https")
            or _host_name(rest.split("/", 1)[0]) not in names
            or (port is not None and _origin_port(scheme, rest) != port)
        ):
            return 403, "a request from a web page (Origin) of another site is not taken"
    if tokens:
        given = got.get(TOKEN_HEADER.lower(), "").encode()
        if not any(hmac.compare_digest(given, token.encode()) for token in tokens):
            return 401, f"this endpoint takes requests with its token only ({TOKEN_HEADER})"
    return None
