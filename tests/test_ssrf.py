"""Tests of the SSRF guard: non-public addresses are refused before any connection, on every redirect hop."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kbctl.errors import KbctlError, SourceError
from kbctl.sources._guard import Guard, check_ip, guarded_transport
from kbctl.sources.url import FetchPolicy, FetchRequest, FetchResult, fetch_urls
from tests.support.httpserver import HTTPTestServer, loopback_only, serve
from tests.support.tls import certificates as tls_certificates

HINT = "; set KBCTL_ALLOW_PRIVATE_NETWORKS=1 to allow private networks"
# Link-local and cloud metadata addresses: KBCTL_ALLOW_PRIVATE_NETWORKS=1 does not open them, so it is not the hint.
EXACT_HINT = "; link-local and cloud metadata addresses are allowed only by exact address in KBCTL_ALLOW_NETWORKS"


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Log of TCP connects; any connect to a non-loopback address fails the test instead of leaving the machine."""
    monkeypatch.delenv("KBCTL_ALLOW_PRIVATE_NETWORKS", raising=False)
    monkeypatch.delenv("KBCTL_ALLOW_NETWORKS", raising=False)
    return loopback_only(monkeypatch)


@pytest.fixture
def srv() -> Iterator[HTTPTestServer]:
    """A test server on 127.0.0.1 that answers every page."""
    with serve() as server:
        server.route("/", body="loopback secret", content_type="text/plain")
        server.route("/latest/meta-data/", body="instance secret", content_type="text/plain")
        yield server


@pytest.fixture
def srv6() -> Iterator[HTTPTestServer]:
    """A test server on ::1 (skipped where IPv6 loopback is unavailable)."""
    try:
        server = HTTPTestServer("::1")
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback: {exc}")
    server.start()
    try:
        server.route("/", body="ipv6 loopback secret", content_type="text/plain")
        yield server
    finally:
        server.close()


def guarded(**overrides: object) -> FetchPolicy:
    """The default guard (no private networks), no retries."""
    return FetchPolicy(retries=0, backoff_base=0.01, **overrides)  # type: ignore[arg-type]


def fetch_one(url: str, policy: FetchPolicy) -> FetchResult | SourceError:
    """Fetch one URL and return its outcome."""
    return fetch_urls([FetchRequest("k", url)], policy)["k"]


def refused(outcome: FetchResult | SourceError) -> str:
    """The message of an outcome that must be a failure."""
    assert isinstance(outcome, SourceError), f"expected a refusal, got: {outcome}"
    return str(outcome)


def test_loopback_urls_are_refused_before_connecting(
    srv: HTTPTestServer, srv6: HTTPTestServer, connections: list[tuple[str, int]]
) -> None:
    """127.0.0.1, [::1], localhost and ::ffff:127.0.0.1 are refused and the servers see no request."""
    cases = {
        f"http://127.0.0.1:{srv.port}/": "refused to connect to 127.0.0.1 (loopback address)" + HINT,
        f"http://[::1]:{srv6.port}/": "refused to connect to ::1 (loopback address)" + HINT,
        f"http://localhost:{srv.port}/": "refused to connect to localhost (127.0.0.1, loopback address)" + HINT,
        f"http://[::ffff:127.0.0.1]:{srv.port}/": (
            "refused to connect to ::ffff:127.0.0.1 (IPv4-mapped loopback address 127.0.0.1)" + HINT
        ),
        f"https://127.0.0.1:{srv.port}/": "refused to connect to 127.0.0.1 (loopback address)" + HINT,
    }
    results = fetch_urls([FetchRequest(url, url) for url in cases], guarded())
    for url, message in cases.items():
        assert refused(results[url]) == message
    assert srv.total_hits == 0 and srv6.total_hits == 0
    assert connections == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.0.0.1/", "refused to connect to 10.0.0.1 (private address)" + HINT),
        ("http://192.168.1.20:8080/admin", "refused to connect to 192.168.1.20 (private address)" + HINT),
        ("http://172.16.5.4/", "refused to connect to 172.16.5.4 (private address)" + HINT),
        (
            "http://169.254.169.254/latest/meta-data/",
            "refused to connect to 169.254.169.254 (link-local address)" + EXACT_HINT,
        ),
        ("http://[fe80::1]/", "refused to connect to fe80::1 (link-local address)" + EXACT_HINT),
        ("http://[fd00::1]/", "refused to connect to fd00::1 (private address)" + HINT),
        ("http://100.64.1.1/", "refused to connect to 100.64.1.1 (shared address space)" + HINT),
        ("http://0.0.0.0/", "refused to connect to 0.0.0.0 (unspecified address)" + HINT),
        ("http://[::]/", "refused to connect to :: (unspecified address)" + HINT),
        ("http://224.0.0.1/", "refused to connect to 224.0.0.1 (multicast address)" + HINT),
        ("http://240.0.0.1/", "refused to connect to 240.0.0.1 (reserved address)" + HINT),
        ("ftp://example.test/file.txt", "unsupported URL scheme 'ftp' (only http and https URLs are fetched)"),
        ("file:///etc/passwd", "unsupported URL scheme 'file' (only http and https URLs are fetched)"),
    ],
)
def test_forbidden_addresses_and_schemes_are_refused(
    url: str, message: str, connections: list[tuple[str, int]]
) -> None:
    """Private, link-local (cloud metadata), shared, unspecified, multicast, reserved IPs and non-http schemes."""
    assert refused(fetch_one(url, guarded())) == message
    assert connections == []


def test_host_names_resolving_to_forbidden_addresses_are_refused(connections: list[tuple[str, int]]) -> None:
    """A name is refused when any of its addresses is forbidden, even when another one is public."""
    table = {
        "intranet.example.test": ["10.1.2.3"],
        "metadata.example.test": ["169.254.169.254"],
        "mixed.example.test": ["93.184.216.34", "127.0.0.1"],
    }
    policy = guarded(resolver=lambda host, port: table[host])
    results = fetch_urls([FetchRequest(host, f"http://{host}/") for host in table], policy)
    assert refused(results["intranet.example.test"]) == (
        "refused to connect to intranet.example.test (10.1.2.3, private address)" + HINT
    )
    assert refused(results["metadata.example.test"]) == (
        "refused to connect to metadata.example.test (169.254.169.254, link-local address)" + EXACT_HINT
    )
    assert refused(results["mixed.example.test"]) == (
        "refused to connect to mixed.example.test (127.0.0.1, loopback address)" + HINT
    )
    assert connections == []


def test_redirect_to_loopback_is_refused(connections: list[tuple[str, int]]) -> None:
    """A public-looking, allowed host redirecting to another loopback server is refused; that server sees nothing."""
    with serve() as a, serve() as b:
        b.route("/", body="internal admin page", content_type="text/plain")
        a.redirect("/go", b.url("/"))
        a.redirect("/meta", "http://169.254.169.254/latest/meta-data/")
        a.redirect("/scheme", "file:///etc/passwd")
        policy = guarded(
            resolver=lambda host, port: {"public.example.test": ["127.0.0.1"]}[host],
            allowed_addresses=frozenset({("127.0.0.1", a.port)}),
        )
        base = f"http://public.example.test:{a.port}"
        results = fetch_urls([FetchRequest(p, base + p) for p in ("/go", "/meta", "/scheme")], policy)
        assert refused(results["/go"]) == (
            f"redirected to {b.url('/')}: refused to connect to 127.0.0.1 (loopback address)" + HINT
        )
        assert refused(results["/meta"]) == (
            "redirected to http://169.254.169.254/latest/meta-data/: "
            "refused to connect to 169.254.169.254 (link-local address)" + EXACT_HINT
        )
        assert refused(results["/scheme"]) == (
            "redirected to file:/etc/passwd: unsupported URL scheme 'file' (only http and https URLs are fetched)"
        )
        assert b.total_hits == 0
        assert [a.hits[p] for p in ("/go", "/meta", "/scheme")] == [1, 1, 1]
        assert {c for c in connections} == {("127.0.0.1", a.port)}


def test_redirect_to_a_name_resolving_to_a_private_address_is_refused(connections: list[tuple[str, int]]) -> None:
    """The redirect target's host name is resolved and checked by the guard like the first hop's."""
    with serve() as a:
        a.redirect("/go", "http://internal.example.test/secret")
        table = {"public.example.test": ["127.0.0.1"], "internal.example.test": ["10.9.8.7"]}
        policy = guarded(resolver=lambda host, port: table[host], allowed_addresses=frozenset({("127.0.0.1", a.port)}))
        message = refused(fetch_one(f"http://public.example.test:{a.port}/go", policy))
        assert message == (
            "redirected to http://internal.example.test/secret: "
            "refused to connect to internal.example.test (10.9.8.7, private address)" + HINT
        )
        assert connections == [("127.0.0.1", a.port)]


def test_allowed_addresses_are_exact_ip_and_port(srv: HTTPTestServer) -> None:
    """An allowed (ip, port) pair does not open other ports or other loopback spellings' ports."""
    with serve() as other:
        other.route("/", body="other", content_type="text/plain")
        policy = guarded(allowed_addresses=frozenset({("127.0.0.1", srv.port)}))
        assert isinstance(fetch_one(srv.url("/"), policy), FetchResult)
        assert refused(fetch_one(other.url("/"), policy)).startswith("refused to connect to 127.0.0.1 (loopback")
        assert other.total_hits == 0


def test_allow_private_reaches_loopback(srv: HTTPTestServer, srv6: HTTPTestServer) -> None:
    """With allow_private=True (or KBCTL_ALLOW_PRIVATE_NETWORKS=1) the loopback servers are reachable."""
    urls = [srv.url("/"), f"http://localhost:{srv.port}/", srv6.url("/")]
    results = fetch_urls([FetchRequest(u, u) for u in urls], guarded(allow_private=True))
    texts = [r.document.text for r in results.values() if isinstance(r, FetchResult) and r.document]
    assert texts == ["loopback secret", "loopback secret", "ipv6 loopback secret"]


def test_environment_variable_allows_private_networks(srv: HTTPTestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """FetchPolicy.from_env() reads KBCTL_ALLOW_PRIVATE_NETWORKS=1."""
    monkeypatch.setenv("KBCTL_ALLOW_PRIVATE_NETWORKS", "1")
    outcome = fetch_one(srv.url("/"), FetchPolicy.from_env(retries=0))
    assert isinstance(outcome, FetchResult) and srv.hits["/"] == 1


# ---------------------------------------------------------------------------------------------------------
# Allowances: networks, addresses and host names; link-local and cloud metadata only by exact address
# ---------------------------------------------------------------------------------------------------------

METADATA_URLS = {
    "http://169.254.169.254/latest/meta-data/": "169.254.169.254 (link-local address)",
    "http://169.254.170.2/v2/credentials": "169.254.170.2 (link-local address)",
    "http://[fe80::1]/": "fe80::1 (link-local address)",
    "http://[fd00:ec2::254]/latest/meta-data/": "fd00:ec2::254 (private address)",
    "http://100.100.100.200/latest/meta-data/": "100.100.100.200 (shared address space)",
    "http://[::ffff:169.254.169.254]/": "::ffff:169.254.169.254 (IPv4-mapped link-local address 169.254.169.254)",
    "http://[64:ff9b::a9fe:a9fe]/": "64:ff9b::a9fe:a9fe (NAT64 link-local address 169.254.169.254)",
}


def test_allow_private_no_longer_opens_link_local_or_metadata(
    connections: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """allow_private (KBCTL_ALLOW_PRIVATE_NETWORKS=1) keeps refusing link-local and cloud metadata addresses, by
    IP literal or by a host name resolving to one, with a hint that names the only way to open them."""
    monkeypatch.setenv("KBCTL_ALLOW_PRIVATE_NETWORKS", "1")
    table = {"metadata.google.internal": ["169.254.169.254"], "imds6.example.test": ["fd00:ec2::254"]}
    for policy in (guarded(allow_private=True, resolver=lambda h, p: table[h]), FetchPolicy.from_env(retries=0)):
        assert policy.allow_private is True
        results = fetch_urls([FetchRequest(url, url) for url in METADATA_URLS], policy)
        for url, who in METADATA_URLS.items():
            assert refused(results[url]) == f"refused to connect to {who}" + EXACT_HINT
    by_name = fetch_urls(
        [FetchRequest(h, f"http://{h}/") for h in table], guarded(allow_private=True, resolver=lambda h, p: table[h])
    )
    assert refused(by_name["metadata.google.internal"]) == (
        "refused to connect to metadata.google.internal (169.254.169.254, link-local address)" + EXACT_HINT
    )
    assert refused(by_name["imds6.example.test"]) == (
        "refused to connect to imds6.example.test (fd00:ec2::254, private address)" + EXACT_HINT
    )
    assert connections == []


def test_networks_and_host_names_never_open_link_local_or_metadata(connections: list[tuple[str, int]]) -> None:
    """A CIDR covering them (even everything) or an allowed host name resolving to them does not open them."""
    table = {"wiki.internal": ["169.254.169.254"]}
    policy = guarded(
        allowed_networks=("0.0.0.0/0", "::/0", "169.254.0.0/16", "fe80::/10", "100.64.0.0/10", "wiki.internal"),
        resolver=lambda host, port: table[host],
    )
    results = fetch_urls([FetchRequest(url, url) for url in METADATA_URLS], policy)
    for url, who in METADATA_URLS.items():
        assert refused(results[url]) == f"refused to connect to {who}" + EXACT_HINT
    assert refused(fetch_one("http://wiki.internal/", policy)) == (
        "refused to connect to wiki.internal (169.254.169.254, link-local address)" + EXACT_HINT
    )
    assert connections == []


@pytest.mark.parametrize(
    ("allowed", "host", "ip", "port", "opened"),
    [
        # exact addresses open even link-local and metadata, on any port, in any form that carries them
        (("169.254.169.254",), "169.254.169.254", "169.254.169.254", 80, True),
        (("169.254.169.254/32",), "169.254.169.254", "169.254.169.254", 8080, True),
        (("169.254.169.254",), "metadata.google.internal", "169.254.169.254", 80, True),
        (("169.254.169.254",), "::ffff:169.254.169.254", "::ffff:169.254.169.254", 80, True),
        (("169.254.169.254",), "169.254.169.253", "169.254.169.253", 80, False),
        (("169.254.169.254",), "169.254.170.2", "169.254.170.2", 80, False),
        (("fd00:ec2::254",), "fd00:ec2::254", "fd00:ec2::254", 80, True),
        (("[fd00:ec2::254]",), "fd00:ec2::254", "fd00:ec2::254", 80, True),
        (("fd00::/8",), "fd00:ec2::254", "fd00:ec2::254", 80, False),
        (("fd00::/8",), "fd00::1", "fd00::1", 80, True),
        (("100.100.100.200",), "100.100.100.200", "100.100.100.200", 80, True),
        (("100.64.0.0/10",), "100.100.100.200", "100.100.100.200", 80, False),
        (("100.64.0.0/10",), "100.64.1.1", "100.64.1.1", 80, True),
        (("fe80::1",), "fe80::1", "fe80::1%eth0", 80, True),
        (("fe80::/10",), "fe80::1", "fe80::1%eth0", 80, False),
        # networks
        (("10.0.0.0/8",), "10.20.30.40", "10.20.30.40", 443, True),
        (("10.0.0.0/8",), "10.20.30.40", "::ffff:10.20.30.40", 443, True),
        (("10.0.0.0/8",), "192.168.1.5", "192.168.1.5", 443, False),
        (("10.0.0.1/8",), "10.9.9.9", "10.9.9.9", 80, True),  # host bits ignored
        (("192.168.1.5",), "192.168.1.5", "192.168.1.5", 8443, True),
        (("192.168.1.5",), "192.168.1.6", "192.168.1.6", 80, False),
        (("fd12::/16",), "fd12::7", "fd12::7", 80, True),
        # host names: whatever the name resolves to, except link-local and metadata; only that name
        (("wiki.internal",), "wiki.internal", "10.1.2.3", 80, True),
        (("wiki.internal",), "WIKI.internal.", "10.1.2.3", 80, True),
        (("Wiki.Internal.",), "wiki.internal", "fd12::7", 80, True),
        (("wiki.internal",), "docs.wiki.internal", "10.1.2.3", 80, False),
        (("wiki.internal",), "10.1.2.3", "10.1.2.3", 80, False),
        (("wiki.internal",), "wiki.internal", "fe80::1", 80, False),
        (("wiki.internal",), "wiki.internal", "100.100.100.200", 80, False),
        ((), "wiki.internal", "10.1.2.3", 80, False),
    ],
)
def test_allowed_networks(allowed: tuple[str, ...], host: str, ip: str, port: int, opened: bool) -> None:
    """Which allowance opens which address (checked by the guard's decision, without any connection)."""
    refusal = Guard(allowed_networks=allowed).refusal(host, ip, port)
    assert (refusal is None) is opened, refusal
    if not opened:
        assert refusal is not None and refusal.startswith(f"refused to connect to {host} (")


def test_public_addresses_need_no_allowance() -> None:
    """An allowance only adds: public addresses stay reachable whatever is listed."""
    assert Guard(allowed_networks=("10.0.0.0/8",)).refusal("example.com", "93.184.216.34", 443) is None


def test_allowed_networks_reach_the_loopback_server(srv: HTTPTestServer, connections: list[tuple[str, int]]) -> None:
    """A CIDR, an exact address and a host name each open the loopback test server, and only what they name."""
    table = {"wiki.internal": ["127.0.0.1"], "other.internal": ["127.0.0.1"]}
    for allowed in (("127.0.0.0/8",), ("127.0.0.1",), ("wiki.internal",)):
        policy = guarded(allowed_networks=allowed, resolver=lambda host, port: table[host])
        outcome = fetch_one(f"http://wiki.internal:{srv.port}/", policy)
        assert isinstance(outcome, FetchResult) and outcome.document is not None
        assert outcome.document.text == "loopback secret"
    policy = guarded(allowed_networks=("wiki.internal", "10.0.0.0/8"), resolver=lambda host, port: table[host])
    assert refused(fetch_one(f"http://other.internal:{srv.port}/", policy)) == (
        "refused to connect to other.internal (127.0.0.1, loopback address)" + HINT
    )
    assert refused(fetch_one(srv.url("/"), policy)) == "refused to connect to 127.0.0.1 (loopback address)" + HINT
    assert srv.hits["/"] == 3
    assert set(connections) == {("127.0.0.1", srv.port)}


def test_allowed_host_redirecting_elsewhere_is_refused(connections: list[tuple[str, int]]) -> None:
    """A host name allowance is for that name only: its redirect to another private host is refused."""
    with serve() as wiki, serve() as other:
        other.route("/", body="not allowed", content_type="text/plain")
        wiki.redirect("/go", f"http://admin.internal:{other.port}/")
        table = {"wiki.internal": ["127.0.0.1"], "admin.internal": ["127.0.0.1"]}
        policy = guarded(allowed_networks=("wiki.internal",), resolver=lambda host, port: table[host])
        assert refused(fetch_one(f"http://wiki.internal:{wiki.port}/go", policy)) == (
            f"redirected to http://admin.internal:{other.port}/: "
            "refused to connect to admin.internal (127.0.0.1, loopback address)" + HINT
        )
        assert other.total_hits == 0 and connections == [("127.0.0.1", wiki.port)]


def test_environment_variable_allows_networks(srv: HTTPTestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """FetchPolicy.from_env() reads KBCTL_ALLOW_NETWORKS (commas or spaces), normalized; a bad entry is an error."""
    monkeypatch.setenv("KBCTL_ALLOW_NETWORKS", " 10.0.0.1/8, 192.168.1.5  Wiki.Internal.,127.0.0.1 ")
    policy = FetchPolicy.from_env(retries=0)
    assert policy.allowed_networks == ("10.0.0.0/8", "192.168.1.5", "wiki.internal", "127.0.0.1")
    assert policy.allow_private is False
    outcome = fetch_one(srv.url("/"), policy)
    assert isinstance(outcome, FetchResult) and srv.hits["/"] == 1
    assert refused(fetch_one("http://169.254.169.254/", policy)).endswith(EXACT_HINT)
    monkeypatch.setenv("KBCTL_ALLOW_NETWORKS", "10.0.0.0/8,not/a/network")
    with pytest.raises(KbctlError, match=r"^KBCTL_ALLOW_NETWORKS: 'not/a/network' is not an IP address"):
        FetchPolicy.from_env()


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "wiki internal", "*.internal", "http://wiki.internal", "10.1", "-x"])
def test_invalid_allowed_networks_are_value_errors(entry: str) -> None:
    """The Python API refuses an entry that is not an address, a network or a host name, and a bare string."""
    with pytest.raises(ValueError, match="is not an IP address, a network"):
        FetchPolicy(allowed_networks=(entry,))
    with pytest.raises(ValueError, match="is not an IP address, a network"):
        Guard(allowed_networks=(entry,))
    with pytest.raises(ValueError, match="not one string"):
        FetchPolicy(allowed_networks="10.0.0.0/8")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ip", "expected"),
    [
        ("127.0.0.1", "loopback address"),
        ("127.8.9.10", "loopback address"),
        ("10.0.0.1", "private address"),
        ("172.16.0.1", "private address"),
        ("172.31.255.254", "private address"),
        ("192.168.0.1", "private address"),
        ("169.254.169.254", "link-local address"),
        ("100.64.0.1", "shared address space"),
        ("0.0.0.0", "unspecified address"),
        ("224.0.0.251", "multicast address"),
        ("240.0.0.1", "reserved address"),
        ("255.255.255.255", "reserved address"),
        ("192.0.2.1", "private address"),  # documentation range
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("172.32.0.1", None),
        ("::1", "loopback address"),
        ("::", "unspecified address"),
        ("fe80::1", "link-local address"),
        ("fe80::1%eth0", "link-local address"),
        ("fc00::1", "private address"),
        ("fd12:3456:789a::1", "private address"),
        ("ff02::1", "multicast address"),
        ("fec0::1", "site-local address"),
        ("2001:db8::1", "private address"),
        ("2606:4700:4700::1111", None),
        ("2a00:1450:4001:81c::200e", None),
        ("::ffff:127.0.0.1", "IPv4-mapped loopback address 127.0.0.1"),
        ("::ffff:10.1.2.3", "IPv4-mapped private address 10.1.2.3"),
        ("::ffff:169.254.169.254", "IPv4-mapped link-local address 169.254.169.254"),
        ("::ffff:8.8.8.8", None),
        ("::127.0.0.1", "IPv4-compatible loopback address 127.0.0.1"),
        ("2002:7f00:1::", "6to4 loopback address 127.0.0.1"),
        ("2002:a00:1::1", "6to4 private address 10.0.0.1"),
        ("2002:808:808::", None),
        ("64:ff9b::a9fe:a9fe", "NAT64 link-local address 169.254.169.254"),
        ("64:ff9b::808:808", None),
    ],
)
def test_check_ip(ip: str, expected: str | None) -> None:
    """check_ip names the kind of every non-public address and passes public ones."""
    assert check_ip(ip) == expected


def test_check_ip_rejects_non_addresses() -> None:
    """check_ip is for IP addresses only: a host name is a ValueError."""
    with pytest.raises(ValueError):
        check_ip("localhost")


# ---------------------------------------------------------------------------------------------------------
# TLS: the socket goes to the checked IP, SNI and certificate checks use the URL's host name
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for secure.example.test."""
    return tls_certificates(tmp_path_factory.mktemp("tls"), "DNS:secure.example.test", "secure.example.test")


def test_tls_uses_the_host_name_while_connecting_to_the_checked_ip(
    certificates: tuple[Path, Path, Path], connections: list[tuple[str, int]]
) -> None:
    """Over HTTPS the guard connects to 127.0.0.1, yet SNI, certificate verification and Host use the name."""
    ca, cert, key = certificates
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    sni: list[str | None] = []
    server_context.sni_callback = lambda _sock, name, _ctx: sni.append(name)  # type: ignore[func-returns-value]
    with serve(tls=server_context) as srv:
        srv.route("/", body="over tls", content_type="text/plain")
        names = {"secure.example.test": ["127.0.0.1"], "other.example.test": ["127.0.0.1"]}
        guard = Guard(allowed_addresses=frozenset({("127.0.0.1", srv.port)}), resolver=lambda host, port: names[host])

        async def get(url: str) -> httpx.Response:
            transport = guarded_transport(
                guard, limits=httpx.Limits(), http2=False, ssl_context=ssl.create_default_context(cafile=str(ca))
            )
            async with httpx.AsyncClient(transport=transport) as client:
                return await client.get(url)

        response = asyncio.run(get(f"https://secure.example.test:{srv.port}/"))
        assert response.text == "over tls"
        assert srv.requests_for("/")[0].headers["host"] == f"secure.example.test:{srv.port}"
        assert sni == ["secure.example.test"]
        assert connections == [("127.0.0.1", srv.port)]
        with pytest.raises(httpx.ConnectError, match="certificate"):
            asyncio.run(get(f"https://other.example.test:{srv.port}/"))
        assert srv.hits["/"] == 1


def test_tls_failures_are_reported_and_not_retried(srv: HTTPTestServer, connections: list[tuple[str, int]]) -> None:
    """An https:// URL answered by a plain HTTP server fails once with a TLS handshake message."""
    policy = FetchPolicy(allowed_addresses=frozenset({("127.0.0.1", srv.port)}), retries=2, backoff_base=0.01)
    message = refused(fetch_one(f"https://127.0.0.1:{srv.port}/", policy))
    assert message.startswith(f"TLS handshake with 127.0.0.1:{srv.port} failed: ")
    assert srv.total_hits == 0  # the TLS hello is not an HTTP request the server could route
    assert connections == [("127.0.0.1", srv.port)]  # one attempt only
