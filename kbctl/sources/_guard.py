"""SSRF guard for URL fetching: refuse non-public addresses, and connect only to the address that was checked.

Every TCP connection httpx opens goes through `GuardedBackend.connect_tcp`, which resolves the host once,
refuses the whole host if ANY of its addresses is forbidden, then connects to the checked IP itself (the Host
header, TLS SNI and certificate still use the hostname). `Guard.refusal` decides what an operator opened:
exact (address, port) pairs and addresses; networks and host names; every non-public address (`allow_private`).
Link-local and cloud metadata addresses are opened only by exact address.

Design: docs/architecture.md#url-sources-and-refresh ("SSRF guard", "How the guard connects").
"""

from __future__ import annotations

import asyncio
import errno as errno_codes
import functools
import ipaddress
import os
import socket
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpcore
import httpx

from kbctl.errors import SourceError
from kbctl.userconfig import ALLOW_NETWORKS_ENV, ALLOW_PRIVATE_ENV, network_entry

__all__ = [
    "ALLOW_ENV",
    "METADATA_ADDRESSES",
    "NETWORKS_ENV",
    "Guard",
    "GuardedBackend",
    "Resolver",
    "check_ip",
    "guarded_transport",
]

ALLOW_ENV = ALLOW_PRIVATE_ENV
NETWORKS_ENV = ALLOW_NETWORKS_ENV
_HINT = f"set {ALLOW_ENV}=1 to allow private networks"
_EXACT_HINT = f"link-local and cloud metadata addresses are allowed only by exact address in {NETWORKS_ENV}"
_SCHEMES = frozenset({"http", "https"})

Resolver = Callable[[str, int], list[str]]
_IP = ipaddress.IPv4Address | ipaddress.IPv6Address

_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # RFC 6598 carrier-grade NAT; neither private nor global
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix, IPv4 in the last 32 bits
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated IPv4-compatible form ::a.b.c.d
# Instance metadata services: AWS/GCP/Azure/OCI/DigitalOcean..., AWS over IPv6, Alibaba Cloud.
METADATA_ADDRESSES: frozenset[_IP] = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 address stands for, with the name of the form, if any."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip in _COMPATIBLE and int(ip) > 1:  # not :: or ::1, which are judged as IPv6
        return "IPv4-compatible", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    if ip in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _kind(ip: _IP) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            form, v4 = embedded
            kind = _kind(v4)
            return None if kind is None else f"{form} {kind} {v4}"
    if ip.is_unspecified:
        return "unspecified address"
    if ip.is_loopback:
        return "loopback address"
    if ip.is_link_local:
        return "link-local address"
    if ip.is_multicast:
        return "multicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "shared address space"
    if ip.is_reserved:
        return "reserved address"
    if ip.is_private:
        return "private address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local address"
    if not ip.is_global:
        return "non-public address"
    return None


def check_ip(ip: str) -> str | None:
    """Why connecting to `ip` is refused ("loopback address", "private address", ...), or None if it is public.

    IPv6 forms that carry an IPv4 address (mapped, compatible, 6to4, NAT64) are judged by that IPv4 address.
    Raises ValueError when `ip` is not an IP address.
    """
    return _kind(ipaddress.ip_address(ip))


def _normalize(ip: str) -> str:
    return str(ipaddress.ip_address(ip))


def _forms(ip: str) -> tuple[_IP, ...]:
    """The address without its IPv6 zone, and the IPv4 address it carries (mapped, 6to4, NAT64...), if any."""
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return address, embedded[1]
    return (address,)


def _exact_only(forms: tuple[_IP, ...]) -> bool:
    """Whether only an exact address may open this one: link-local or cloud metadata, in any of its forms."""
    return any(a.is_link_local or a in METADATA_ADDRESSES for a in forms)


def _ip_literal(host: str) -> str | None:
    try:
        return _normalize(host.strip("[]"))
    except ValueError:
        return None


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


@dataclass(frozen=True)
class Guard:
    """The SSRF policy: which addresses may be connected to, and how host names are resolved.

    `allow_private` opens every non-public address except link-local and cloud metadata ones;
    `allowed_networks` lists IP addresses, CIDR networks and host names (see `kbctl.userconfig.network_entry`;
    a ValueError names a bad entry); `allowed_addresses` lists exact (ip, port) pairs. See the module's text.
    """

    allow_private: bool = False
    allowed_addresses: frozenset[tuple[str, int]] = frozenset()
    resolver: Resolver | None = None
    allowed_networks: tuple[str, ...] = ()
    _exact: frozenset[_IP] = field(init=False, repr=False, compare=False, default=frozenset())
    _networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(
        init=False, repr=False, compare=False, default=()
    )
    _hosts: frozenset[str] = field(init=False, repr=False, compare=False, default=frozenset())

    def __post_init__(self) -> None:
        normalized = frozenset((_normalize(ip), port) for ip, port in self.allowed_addresses)
        object.__setattr__(self, "allowed_addresses", normalized)
        entries = [network_entry(e) for e in self.allowed_networks]
        object.__setattr__(self, "_exact", frozenset(e for e in entries if isinstance(e, _IP)))
        object.__setattr__(
            self, "_networks", tuple(e for e in entries if isinstance(e, ipaddress.IPv4Network | ipaddress.IPv6Network))
        )
        object.__setattr__(self, "_hosts", frozenset(e for e in entries if isinstance(e, str)))

    def _opened(self, host: str, ip: str, port: int) -> bool:
        """Whether an allowance opens the non-public address `ip` (resolved from `host`) on `port`."""
        forms = _forms(ip)
        if (ip, port) in self.allowed_addresses or any(a in self._exact for a in forms):
            return True
        if _exact_only(forms):
            return False
        if self.allow_private or any(a in n for a in forms for n in self._networks):
            return True
        return host.rstrip(".").lower() in self._hosts

    def refusal(self, host: str, ip: str, port: int) -> str | None:
        """The one-line refusal for connecting to `ip` (resolved from `host`) on `port`, or None if allowed."""
        ip = _normalize(ip)
        kind = check_ip(ip)  # every link-local and cloud metadata address is non-public too
        if kind is None or self._opened(host, ip, port):
            return None
        who = f"{host} ({kind})" if _ip_literal(host) == ip else f"{host} ({ip}, {kind})"
        return f"refused to connect to {who}; {_EXACT_HINT if _exact_only(_forms(ip)) else _HINT}"

    def check_url(self, url: httpx.URL) -> str | None:
        """Refuse a URL before any connection: a scheme other than http(s), or an IP literal that is forbidden."""
        if url.scheme not in _SCHEMES:
            shown = url.scheme or "(none)"
            return f"unsupported URL scheme '{shown}' (only http and https URLs are fetched)"
        if not url.host:
            return f"URL has no host: {url}"
        literal = _ip_literal(url.host)
        if literal is None:
            return None
        return self.refusal(url.host, literal, url.port or _default_port(url.scheme))

    async def resolve(self, host: str, port: int) -> list[str]:
        """The host's addresses, in resolver order without duplicates; SourceError when it cannot be resolved."""
        literal = _ip_literal(host)
        if literal is not None:
            return [literal]
        try:
            if self.resolver is not None:
                found = await asyncio.to_thread(self.resolver, host, port)
            else:
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
                found = [str(info[4][0]) for info in infos]
        except (OSError, UnicodeError) as exc:
            raise SourceError(f"cannot resolve host '{host}'") from exc
        addresses: list[str] = []
        for raw in found:
            try:
                ip = _normalize(raw)
            except ValueError as exc:
                raise SourceError(f"cannot resolve host '{host}': resolver returned {raw!r}") from exc
            if ip not in addresses:
                addresses.append(ip)
        if not addresses:
            raise SourceError(f"cannot resolve host '{host}'")
        return addresses


def _os_reason(exc: BaseException) -> str:
    """A short reason for a failed connect ("connection refused"), from the OSError deepest in the chain."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    reason = ""
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None and current.errno in errno_codes.errorcode:
            return os.strerror(current.errno).lower()
        if not reason and str(current):
            reason = str(current)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return reason or type(exc).__name__


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that resolves, checks and connects to the checked IP (never re-resolving)."""

    def __init__(self, guard: Guard, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._guard = guard
        self._inner = inner if inner is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._guard.resolve(host, port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        for ip in addresses:
            refusal = self._guard.refusal(host, ip, port)
            if refusal is not None:
                raise SourceError(refusal)
        last: httpcore.ConnectError | None = None
        for ip in addresses:
            try:
                return await self._inner.connect_tcp(
                    ip, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as exc:
                last = exc
        assert last is not None  # addresses is never empty
        raise httpcore.ConnectError(_os_reason(last)) from last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise SourceError("refused to connect to a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context (certifi CAs), built once: loading the CA bundle takes ~50 ms."""
    return httpx.create_ssl_context(trust_env=False)


def guarded_transport(
    guard: Guard, *, limits: httpx.Limits, http2: bool, ssl_context: ssl.SSLContext | None = None
) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose every connection (first request, redirects, reconnects) goes through the guard.

    httpx 0.28 has no public parameter to give `AsyncHTTPTransport` an httpcore network backend, so this
    replaces the transport's private connection pool (`_pool`) with one built the same way through httpcore's
    public API, plus `network_backend`. This is the only private attribute kbctl touches; if a future httpx
    renames it, the check below fails loudly instead of silently fetching without the guard.
    """
    context = ssl_context if ssl_context is not None else _default_ssl_context()
    transport = httpx.AsyncHTTPTransport(verify=context, limits=limits, http2=http2, trust_env=False)
    if not isinstance(getattr(transport, "_pool", None), httpcore.AsyncConnectionPool):
        raise RuntimeError("this httpx version has no AsyncHTTPTransport._pool; the SSRF guard cannot be installed")
    pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=http2,
        network_backend=GuardedBackend(guard),
    )
    transport._pool = pool
    return transport
