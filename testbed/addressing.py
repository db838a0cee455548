"""Choosing the testbed's private /24 so it collides with nothing the machine already uses."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterable

from linkgrad.errors import RuntimeFailure

CANDIDATES = [ipaddress.IPv4Network(f"10.201.{i}.0/24") for i in range(256)]


def free_subnet(in_use: Iterable[ipaddress.IPv4Network],
                candidates: Iterable[ipaddress.IPv4Network] = CANDIDATES) -> ipaddress.IPv4Network:
    """The first candidate that overlaps none of the networks in use."""
    used = list(in_use)
    for net in candidates:
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeFailure("no free /24 in 10.201.0.0/16 for the testbed; give `subnet:`")


def networks_in_use() -> list[ipaddress.IPv4Network]:
    """Routes and interface networks of the root namespace (`ip -j`)."""
    nets = []
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route", "show", "table", "all"],
                                       capture_output=True, text=True, check=True,
                                       timeout=10).stdout or "[]")
    for r in routes:
        dst = r.get("dst", "")
        if dst and dst != "default":
            nets.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    addrs = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True,
                                      check=True, timeout=10).stdout or "[]")
    for link in addrs:
        for a in link.get("addr_info", []):
            nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return nets
