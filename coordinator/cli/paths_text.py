"""A path pattern as lines for an 80-column terminal: each hop indented by the call it is
made in (not by its causal depth, which grows with every sequential call), and a run of the
same call repeated (MediaWiki's 42 queries) said once with how many more times.

A request's depth is one below the request it was made for: the one that came into its
sender, through any replies to the sender's earlier calls (the causal parent of a second
query is the first one's reply). A reply sits one below its request.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

from linkgrad.paths.result import HopResult, PatternResult

__all__ = ["WIDTH", "display_depths", "pattern_lines"]

WIDTH = 80
_REPLY = re.compile(r"^(?P<src>.+):(?P<port>\d+)->(?P<dst>.+)$")
_REQUEST = re.compile(r"^(?P<src>.+)->(?P<dst>.+):(?P<port>\d+)$")
MIN_RUN = 3  # repeats of one call collapsed from this many on


def _ends(hop: HopResult) -> tuple[str, str, str, bool]:
    """Sender, receiver, server port, and whether it is a reply: from the label, whose
    "host:port" side is the server's (an IPv6 address's colons aside, hence the hop's own
    word on which way it went, where it has one)."""
    label = hop.label
    forms = (_REPLY, _REQUEST) if hop.reply is None else \
        ((_REPLY,) if hop.reply else (_REQUEST,))
    for form in forms:
        got = form.match(label)
        if got:
            return got["src"], got["dst"], got["port"], form is _REPLY
    return label, label, "", bool(hop.reply)


def display_depths(hops: Sequence[HopResult]) -> list[int]:
    """Each hop's indentation level (hops in pre-order, parents first)."""
    ends = [_ends(h) for h in hops]
    depth: list[int] = []

    def request_of(i: int) -> int | None:
        """The request a reply answers: up its ancestors, the call from its receiver."""
        src, dst, port, _ = ends[i]
        j = hops[i].parent
        while j >= 0:
            if ends[j] == (dst, src, port, False):
                return j
            j = hops[j].parent
        return None

    for i, hop in enumerate(hops):
        src, _, _, reply = ends[i]
        p = hop.parent
        if p < 0:
            depth.append(0)
        elif reply:
            r = request_of(i)
            depth.append(depth[r if r is not None else p] + 1)
        elif ends[p][3] and ends[p][1] == src:  # after a reply to the sender: its next call
            r = request_of(p)  # at its earlier call's level (the greeting's, if none)
            depth.append(depth[r] if r is not None else depth[p])
        else:
            depth.append(depth[p] + 1)
    return depth


def _hop_text(hop: HopResult) -> str:
    node = "" if hop.node_delay_s is None else f"node {1e3 * hop.node_delay_s:.3f}"
    net = "" if hop.network_delay_s is None else f"net {1e3 * hop.network_delay_s:.3f}"
    delays = " ".join(x for x in (node, net) if x)
    return f"{hop.label}  {delays} ms" if delays else hop.label


def _units(depths: list[int]) -> list[range]:
    """Hop ranges: each hop with the deeper hops after it (a call and what it led to)."""
    units, i = [], 0
    while i < len(depths):
        j = i + 1
        while j < len(depths) and depths[j] > depths[i]:
            j += 1
        units.append(range(i, j))
        i = j
    return units


def pattern_lines(p: PatternResult, width: int = WIDTH) -> list[str]:
    """The pattern's heading, crossings and hops, each line at most `width` where a label
    allows (a label is never cut)."""
    response = "" if p.response_s is None else f", {1e3 * p.response_s:.2f} ms"
    lines = [f"{p.count} × (score {p.score:.1f}{response})"]
    crossings = ", ".join(f"{k} {v:g}" for k, v in p.crossings.items())
    lines += textwrap.wrap(f"crossings {crossings}", width, subsequent_indent="  ",
                           break_on_hyphens=False, break_long_words=False)
    depths = display_depths(p.hops)
    lines += _hop_lines(p.hops, depths, range(len(p.hops)), width)
    return lines


def _hop_lines(hops: Sequence[HopResult], depths: list[int], span: range,
               width: int) -> list[str]:
    out: list[str] = []
    units = _units([depths[i] for i in span])
    k = 0
    while k < len(units):
        unit = [span[i] for i in units[k]]
        labels = [hops[i].label for i in unit]
        same = k + 1
        while same < len(units) and [hops[span[i]].label for i in units[same]] == labels:
            same += 1
        first = unit[0]
        indent = "  " * (depths[first] + 1)
        out.append(f"{indent}{_hop_text(hops[first])}")
        out += _hop_lines(hops, depths, range(first + 1, unit[-1] + 1), width)
        repeats = same - k - 1
        if repeats + 1 >= MIN_RUN:
            calls = [hops[span[units[u][0]]] for u in range(k, same)]
            node = [h.node_delay_s for h in calls if h.node_delay_s is not None]
            spread = f", node {1e3 * min(node):.3f}-{1e3 * max(node):.3f} ms" if node else ""
            out += textwrap.wrap(f"... the same {repeats} more times{spread}", width,
                                 initial_indent=indent, subsequent_indent=indent + "  ")
            k = same
        else:
            k += 1
    return out
