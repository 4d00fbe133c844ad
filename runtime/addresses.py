"""Which addresses stay on this machine, and which are the outside: for listeners, for fetches
kept to loopback, and for the one way out of a desktop (the browser's gateway).

`is_public` is the rule a connection made on an untrusted party's behalf must pass: the
address is globally routable, and no form of it (an IPv4 address inside IPv6: mapped,
compatible, 6to4, Teredo, NAT64) names loopback, a private or link-local network, a
multicast group or an address of this host's own interfaces.

`listen_address` is the rule for where a service listens: 127.0.0.1 unless a deploy names
the one interface it serves on (docs/deploy.md, "Hosts apart"), never every interface.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct

__all__ = [
    "IPAddress",
    "host_addresses",
    "is_loopback",
    "is_public",
    "listen_address",
    "parse_address",
    "LOOPBACK_NAMES",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
LOOPBACK_NAMES = frozenset(
    {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "localhost6"}
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def is_loopback(host: str) -> bool:
    """Return whether `host` (an address, `localhost` or a `.localhost` name) is loopback."""
    name = host.lower().rstrip(".").strip("[]")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse_address(text: str) -> IPAddress | None:
    """The address `text` spells (brackets and an IPv6 zone dropped), or None for a name."""
    try:
        return ipaddress.ip_address(text.strip("[]").split("%")[0])
    except ValueError:
        return None


def listen_address(text: str) -> str:
    """`text` as the one address a service may listen on; ValueError if it is not one.

    One interface's IP address (loopback or the address a deploy gives a host), written
    plainly: not a host name, not 0.0.0.0 or :: (every interface), not multicast.
    """
    address = parse_address(text.strip())
    if address is None or "%" in text:
        raise ValueError(f"{text!r} is not a plain IP address (listen on one interface's address)")
    if address.is_unspecified:
        raise ValueError(f"{text} means every interface: name the one interface to listen on")
    if address.is_multicast:
        raise ValueError(f"{text} is a multicast group, not an interface's address")
    return str(address)


def _embedded(address: IPAddress) -> list[IPAddress]:
    """`address` and every IPv4 address an IPv6 form of it carries."""
    found: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        packed = address.packed
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if packed[:12] == bytes(12):  # IPv4-compatible (deprecated, still routed by some stacks)
            found.append(ipaddress.IPv4Address(packed[12:]))
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found.extend(address.teredo)
        if address in _NAT64 or address in _NAT64_LOCAL:
            found.append(ipaddress.IPv4Address(packed[12:]))
    return found


def is_public(address: IPAddress, own: frozenset[IPAddress] | None = None) -> bool:
    """Whether `address` is the outside: globally routable in every form, not this host's."""
    own = host_addresses() if own is None else own
    for form in _embedded(address):
        if not form.is_global or form.is_multicast or form in own:
            return False
        if isinstance(form, ipaddress.IPv6Address) and form in _NAT64_LOCAL:
            return False
    return True


def host_addresses() -> frozenset[IPAddress]:
    """The addresses of this host's network interfaces (in the caller's network namespace)."""
    found: set[IPAddress] = set()
    for name in _interface_names():
        with contextlib.suppress(OSError):  # an interface without an IPv4 address
            found.add(ipaddress.IPv4Address(_ipv4_of(name)))
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as f:  # no IPv6: no table
        for line in f:
            found.add(ipaddress.IPv6Address(bytes.fromhex(line.split()[0])))
    return frozenset(found)


def _interface_names() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def _ipv4_of(name: str) -> bytes:
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("256s", name.encode()[:15])
        return fcntl.ioctl(sock.fileno(), siocgifaddr, request)[20:24]
