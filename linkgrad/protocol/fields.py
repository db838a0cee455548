"""The field types the daemons' requests share, checked where both sides read them.

Numbers are finite (every message forbids NaN and infinities), of their own JSON type (`true`
is no count, `"5"` no delay) and inside absolute limits that no cap can lift: past them a value
is a mistake, not an experiment. An endpoint is `IP[:PORT]` or `NET/PREFIX[:PORT]` with ASCII
digits (Python's int() also reads Arabic-Indic and other digits), IPv4 or IPv6 (`[IPV6]:PORT`);
an IPv4-mapped IPv6 address is its IPv4 address.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, PlainValidator, StrictFloat, StrictInt
from pydantic_core import PydanticCustomError

__all__ = [
    "LIMIT_CYCLES",
    "LIMIT_DURATION_S",
    "LIMIT_MAGNITUDE_MS",
    "LIMIT_UNIX_S",
    "MAPPED",
    "MAX_ID",
    "MAX_TEXT",
    "MIN_PERIOD_S",
    "MIN_PREFIX",
    "Count",
    "LinkId",
    "RequestId",
    "UnixTime",
    "family",
    "parse_endpoint_text",
    "valid_id",
]

LIMIT_MAGNITUDE_MS = 10_000.0  # 10 s: beyond it TCP gives up, whatever the experiment wanted
LIMIT_DURATION_S = 86_400.0  # a day per schedule
LIMIT_CYCLES = 1_000_000
LIMIT_UNIX_S = 1e10  # year 2286: a later "unix time" is a unit mistake
MIN_PERIOD_S = 1e-3
MIN_PREFIX = 8  # a shorter prefix matches most of the Internet: not a link between hosts
MAX_ID = 2**63 - 1
MAX_TEXT = 128  # characters of an endpoint or a request id

Count = Annotated[StrictInt, Field(ge=0, le=MAX_ID)]
LinkId = Annotated[StrictInt, Field(ge=0, le=MAX_ID)]
UnixTime = Annotated[StrictFloat, Field(gt=0, lt=LIMIT_UNIX_S)]


def valid_id(value: object) -> bool:
    """Whether `value` may be echoed as a request's id (an int or short string, or none)."""
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) <= MAX_ID
    return isinstance(value, str) and len(value) <= MAX_TEXT


def _request_id(value: object) -> int | str | None:
    if not valid_id(value):
        raise PydanticCustomError("request_id", f"an id is an integer or a string of at most "
                                  f"{MAX_TEXT} characters (or none)")
    return value  # type: ignore[return-value]


RequestId = Annotated[int | str | None, PlainValidator(_request_id)]

MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def _split(text: str) -> tuple[str, str | None]:
    """(address part, port text or None): `[IPV6]:PORT` and `[IPV6]` in brackets, a bare IPv6
    address or network (two colons or more) without a port, `IPV4[:PORT]` otherwise."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: an IPv6 address with a port is written [ADDRESS]:PORT")
        return host, rest[1:] if rest else None
    if text.count(":") > 1:
        return text, None
    host, sep, port_text = text.partition(":")
    return host, port_text if sep else None


def _network(host: str, text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The host or network `host` names; an IPv4-mapped IPv6 address as its IPv4 address (what
    a server listening on [::] sees of an IPv4 client: its packets are IPv4 on the wire)."""
    if "%" in host:
        raise ValueError(f"{host!r}: a zone (%...) cannot be matched by a rule: give the "
                         "address without it")
    try:
        network = ipaddress.ip_network(host, strict=False)
    except ValueError as e:
        hint = (" (an IPv4-mapped address with a port is written [::ffff:a.b.c.d]:PORT)"
                if "::ffff:" in text.lower() else "")
        raise ValueError(f"{host!r} is not an IPv4 or IPv6 address or network: {e}{hint}") \
            from e
    if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(MAPPED):
        if network.prefixlen < 128:  # an ip6tables rule on it would never see a packet
            raise ValueError(f"{host!r} is an IPv4-mapped network: give the IPv4 network")
        return ipaddress.IPv4Network(network.network_address.ipv4_mapped)
    return network


def parse_endpoint_text(text: str) -> tuple[str, int]:
    """(address or network, port) of `IP[:PORT]`, `NET/PREFIX[:PORT]` (IPv4), `IPV6`,
    `IPV6/PREFIX`, `[IPV6]:PORT` or `[IPV6/PREFIX]:PORT` (port 0: any). An IPv4-mapped address
    (`::ffff:a.b.c.d`, `[::ffff:a.b.c.d]:PORT`) is its IPv4 address; an IPv6 address is
    written compressed (`fd00::3`), as the sniffer writes it.

    ValueError with the reason: a port that is not 0-65535 in ASCII digits, an address that is
    not one host or network, a network of nearly everything, the unspecified address.
    """
    host, port_text = _split(text)
    port = 0
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
            raise ValueError(f"port {port_text!r} in {text!r} is not a number 0-65535")
        port = int(port_text)
        if port > 65535:
            raise ValueError(f"port {port} in {text!r} is outside 0-65535")
    network = _network(host, text)
    if network.prefixlen < MIN_PREFIX:
        raise ValueError(f"{host!r} matches {network.num_addresses} addresses: a link is "
                         f"between hosts (give a prefix of /{MIN_PREFIX} or longer)")
    if network.network_address.is_unspecified:
        raise ValueError(f"{host!r} is the unspecified address ({network.network_address}), "
                         "not a host")
    whole = network.prefixlen == network.max_prefixlen
    return (str(network.network_address) if whole else str(network)), port


def family(address: str) -> int:
    """4 or 6: the IP version of an address or network `parse_endpoint_text` returned."""
    return ipaddress.ip_network(address, strict=False).version
