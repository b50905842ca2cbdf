"""Where the operator's own outbound requests may go (notification URLs written by tenants). The I/O side is
one function, ``connection``: it resolves once and returns a connection pinned to the checked address.

A notification URL is written by whoever may create an AgentRun, and the operator POSTs to it from inside the
cluster: without a guard that is a request forgery into the cluster (the API server, cluster-internal
Services, a cloud's link-local metadata endpoint). Rules:

* **Internal addresses are refused unless the operator allows them.** Every address that is not globally
  routable (``ipaddress``'s ``is_global``: loopback, link-local, private, shared address space, unique-local
  and site-local IPv6, unspecified, reserved) and multicast are refused; IPv4-mapped IPv6 addresses and
  IPv4 addresses embedded in NAT64 (64:ff9b::/96) and 6to4 (2002::/16) are judged by their IPv4 address.
  ``AGENTRUN_NOTIFY_ALLOWED_NETWORKS`` lets chosen networks through (a receiver inside the cluster, the dev
  cluster's loopback receivers); ``AGENTRUN_NOTIFY_DENIED_NETWORKS`` refuses more (a Service or Pod CIDR in
  public address space) and wins over the allowlist. ``AGENTRUN_NOTIFY_ALLOWED_HOSTS`` limits the URL's host
  names (default: any).
* **Resolved once, connected to what was checked.** The name is resolved here, every address it resolves to
  must pass, and the connection goes to those addresses, never to a second resolution (DNS rebinding). The
  request keeps the name: ``Host`` header and TLS server name (certificates are verified against it).
* **No redirects, no proxies.** ``http.client`` follows none and reads no proxy variables.
* **No probing through the answer.** ``Refused`` carries a message for the run that names no address, no
  category and no status; the details are for the operator's log.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import http.client
import ipaddress
import socket
import ssl
import urllib.parse
from collections.abc import Sequence

from agent_operator import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
PUBLIC_MESSAGE = (
    "the operator's outbound policy refuses this notification URL (loopback, link-local, private and "
    "cluster-internal addresses, and hosts outside the operator's allowlist, are not contacted): ask the "
    "operator's administrator (AGENTRUN_NOTIFY_ALLOWED_NETWORKS, AGENTRUN_NOTIFY_ALLOWED_HOSTS)"
)


class Refused(Exception):
    """The policy forbids the target. ``str()`` is safe to show the run's author, ``detail`` only the log."""

    def __init__(self, detail: str) -> None:
        super().__init__(PUBLIC_MESSAGE)
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class Policy:
    allowed_networks: tuple[Network, ...] = ()
    denied_networks: tuple[Network, ...] = ()
    allowed_hosts: tuple[str, ...] = ("*",)  # fnmatch patterns on the lower-cased host

    @classmethod
    def from_settings(cls, notify: settings.NotifySettings) -> Policy:
        return cls(
            allowed_networks=tuple(ipaddress.ip_network(n, strict=False) for n in notify.allowed_networks),
            denied_networks=tuple(ipaddress.ip_network(n, strict=False) for n in notify.denied_networks),
            allowed_hosts=tuple(h.lower() for h in notify.allowed_hosts),
        )

    def host_allowed(self, host: str) -> bool:
        return any(fnmatch.fnmatchcase(host.lower(), pattern) for pattern in self.allowed_hosts)


def _embedded(address: Address) -> list[Address]:
    """The address and any IPv4 address it carries (IPv4-mapped, NAT64, 6to4)."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address in NAT64:
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _within(address: Address, networks: Sequence[Network]) -> bool:
    return any(address.version == n.version and address in n for n in networks)


def forbidden(address: Address, policy: Policy) -> str | None:
    """Why ``address`` may not be contacted (for the log), or None."""
    seen = _embedded(address)
    for one in seen:
        if _within(one, policy.denied_networks):
            return f"{one} is in AGENTRUN_NOTIFY_DENIED_NETWORKS"
    if any(_within(one, policy.allowed_networks) for one in seen):
        return None
    for one in seen:
        if one.is_multicast or not one.is_global:
            return f"{one} is not a public address (not in AGENTRUN_NOTIFY_ALLOWED_NETWORKS)"
    return None


def resolve(host: str, port: int, policy: Policy) -> list[str]:
    """The checked addresses of ``host`` (resolved once). Refused when the host or ANY address is forbidden:
    a name with one internal answer is not trusted with the others."""
    if not policy.host_allowed(host):
        raise Refused(f"host {host} is not in AGENTRUN_NOTIFY_ALLOWED_HOSTS")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)  # socket.gaierror: not reachable
    addresses: list[str] = []
    for info in infos:
        text = str(info[4][0]).split("%", 1)[0]  # an IPv6 zone id is not part of the address
        why = forbidden(ipaddress.ip_address(text), policy)
        if why is not None:
            raise Refused(f"host {host} resolves to {why}")
        if text not in addresses:
            addresses.append(text)
    return addresses


def _connect(addresses: Sequence[str], port: int, timeout: float) -> socket.socket:
    """The first of the checked addresses that accepts (no new resolution: they are literals)."""
    last: OSError | None = None
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout)
        except OSError as exc:
            last = exc
    assert last is not None  # getaddrinfo never answers an empty list
    raise last


class _Pinned(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, timeout: float, addresses: Sequence[str]) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses, self.seconds = list(addresses), timeout

    def connect(self) -> None:
        self.sock = _connect(self.addresses, self.port, self.seconds)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedTLS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, timeout: float, addresses: Sequence[str]) -> None:
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.addresses, self.seconds = list(addresses), timeout

    def connect(self) -> None:
        raw = _connect(self.addresses, self.port, self.seconds)
        self.sock = self.tls.wrap_socket(raw, server_hostname=self.host)  # verified against the name


def connection(url: str, policy: Policy, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """(an unconnected connection pinned to the checked addresses, the request target). Raises ``Refused``,
    ``socket.gaierror`` (the name does not resolve), ``ValueError`` (not an absolute http(s) URL)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an absolute http:// or https:// URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = resolve(parts.hostname, port, policy)
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    kind = _PinnedTLS if parts.scheme == "https" else _Pinned
    return kind(parts.hostname, port, timeout, addresses), target
