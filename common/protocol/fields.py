"""The field types the daemons' requests share, checked where both sides read them.

Numbers are finite (every message forbids NaN and infinities), of their own JSON type (`true`
is no count, `"5"` no delay) and inside absolute limits that no cap can lift: past them a value
is a mistake, not an experiment. An endpoint is `IP[:PORT]` or `NET/PREFIX[:PORT]`, IPv4 with
ASCII digits (Python's int() also reads Arabic-Indic and other digits), or an IPv4-mapped
IPv6 address, which is its IPv4 address; other IPv6 addresses are refused with the reason.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, PlainValidator, StrictFloat, StrictInt
from pydantic_core import PydanticCustomError

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

IPV6_LATER = ("IPv6 is not supported yet (the sniffer reports IPv6 links, the injector delays "
              "IPv4 links only; IPv6 is a later step): give an IPv4 address")


def _ipv4_mapped(text: str) -> str | None:
    """`a.b.c.d[:PORT]` for `::ffff:a.b.c.d` or `[::ffff:a.b.c.d]:PORT` (an IPv4-mapped address,
    what a server listening on [::] sees of an IPv4 client: its packets are IPv4 on the wire,
    so it is that IPv4 endpoint); None for any other text."""
    host, rest = text, ""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
    try:
        mapped = ipaddress.IPv6Address(host).ipv4_mapped
    except ValueError:
        return None
    return f"{mapped}{rest}" if mapped is not None else None


def parse_endpoint_text(text: str) -> tuple[str, int]:
    """(address or network, port) of `IP[:PORT]` or `NET/PREFIX[:PORT]` (IPv4; port 0: any).
    An IPv4-mapped address (`::ffff:a.b.c.d`, `[::ffff:a.b.c.d]:PORT`) is its IPv4 address.

    ValueError with the reason: an IPv6 address, a port that is not 0-65535 in ASCII digits,
    an address that is not one host or network, a network of nearly everything.
    """
    body = text
    if text.count(":") > 1 or text.startswith("["):
        if (ipv4 := _ipv4_mapped(text)) is None:
            hint = (" (an IPv4-mapped address with a port is written [::ffff:a.b.c.d]:PORT)"
                    if "::ffff:" in text.lower() else "")
            raise ValueError(f"{text!r}: {IPV6_LATER}{hint}")
        body = ipv4
    host, sep, port_text = body.partition(":")
    port = 0
    if sep:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
            raise ValueError(f"port {port_text!r} in {text!r} is not a number 0-65535")
        port = int(port_text)
        if port > 65535:
            raise ValueError(f"port {port} in {text!r} is outside 0-65535")
    try:
        network = ipaddress.IPv4Network(host, strict=False)
    except ValueError as e:
        raise ValueError(f"{host!r} is not an IPv4 address or network: {e}") from e
    if network.prefixlen < MIN_PREFIX:
        raise ValueError(f"{host!r} matches {network.num_addresses} addresses: a link is "
                         f"between hosts (give a prefix of /{MIN_PREFIX} or longer)")
    if network.network_address.is_unspecified:
        raise ValueError(f"{host!r} is the unspecified address (0.0.0.0), not a host")
    address = str(network.network_address) if network.prefixlen == 32 else str(network)
    return address, port
