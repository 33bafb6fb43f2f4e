"""Which network addresses a server-side fetch or send may reach: public ones only.

One rule for every URL this service fetches or sends to on someone's say-so (OAuth client metadata
documents, webhook receivers): an address that is private, loopback, link-local, multicast or
otherwise not global is refused, and loopback is allowed only where a setting says so (tests and
development). IPv6 forms that carry an IPv4 address are judged as that address.
"""

from __future__ import annotations

import ipaddress

# IPv6 prefixes whose addresses carry an IPv4 address in their last 32 bits: NAT64's well-known
# prefix (RFC 6052) and the deprecated IPv4-compatible form. A translator or an old stack turns them
# into that IPv4 address, so they are judged as it. RFC 8215's local-use NAT64 prefix places the
# IPv4 address where the operator's prefix length says: never public, it is refused whole.
_EMBEDS_IPV4 = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "::/96"))
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")


def _as_connected(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64, IPv4-compatible), or itself."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in network for network in _EMBEDS_IPV4) and int(ip) > 1:  # :: and ::1 are themselves
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_refused(address: str, allow_loopback: bool) -> bool:
    """True when ``address`` (an IP literal, maybe with an IPv6 zone) is no public address."""
    given = ipaddress.ip_address(address.split("%", 1)[0])
    if given in _LOCAL_NAT64:
        return True
    ip = _as_connected(given)
    if ip.is_loopback:
        return not allow_loopback
    return not ip.is_global or ip.is_multicast


# An IPv6 client is counted by its /64: one subscriber or host commonly holds a whole /64 (SLAAC,
# privacy addresses), and could otherwise take a fresh address, and a fresh budget, per request.
COUNTED_IPV6_PREFIX = 64


def counted_as(address: str) -> str:
    """The key a client address is counted under by per-address limits: an IPv4 address (also one
    written as IPv6, ``::ffff:203.0.113.7``) itself, an IPv6 address its /64 network; anything that
    is no address (``unknown``) as it is."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{COUNTED_IPV6_PREFIX}", strict=False))
    return str(ip)
