"""Two traces of the same traffic compared the way a person reads them: their request trees'
patterns. For `paths --pcap` against the sniffer's own trace (benchmarks/pcap_paths.py and
its test): the sniffer's trace is cut to what a capture can know (no processes, no threads)
and the capture to the sniffer's window, then both are linked alike."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from linkgrad.paths.from_hosts import paths_from_hosts
from linkgrad.paths.messages import NO_THREAD
from linkgrad.paths.reconcile import HostTrace
from linkgrad.paths.result import PathsResult

_PROCESS = re.compile(r"/[^:\s]+?(?=->|:|\s|$)")  # a node's "/process" ("web/php-fpm->db")

__all__ = ["TreeAgreement", "as_captured", "pattern_counts", "tree_agreement", "within"]


@dataclass(frozen=True)
class TreeAgreement:
    messages: tuple[int, int]
    trees: tuple[int, int]  # roots linked from each
    same: int  # trees in the same pattern in both (the multisets' overlap)

    @property
    def fraction(self) -> float:
        return self.same / max(self.trees) if max(self.trees) else 1.0


def as_captured(hosts: Sequence[HostTrace]) -> list[HostTrace]:
    """What a packet capture of the same traffic knows: no process, no thread."""
    return [replace(h, records=[replace(r, process="", thread=NO_THREAD) for r in h.records])
            for h in hosts]


def within(hosts: Sequence[HostTrace], start_s: float, end_s: float) -> list[HostTrace]:
    """Only the messages that began within [start_s, end_s]."""
    return [replace(h, records=[r for r in h.records if start_s <= r.first_s <= end_s])
            for h in hosts]


def pattern_counts(result: PathsResult) -> Counter[str]:
    """Each pattern's trees, its nodes' processes taken out of the labels."""
    out: Counter[str] = Counter()
    for p in result.patterns:
        out[_PROCESS.sub("", p.key)] += p.count
    return out


def tree_agreement(a: Sequence[HostTrace], b: Sequence[HostTrace], window_s: float = 2.0
                   ) -> TreeAgreement:
    """How many of two traces' trees fall in the same pattern, each linked by context
    linking without a budget."""
    ra = paths_from_hosts(a, "context", window_s, None)
    rb = paths_from_hosts(b, "context", window_s, None)
    ca, cb = pattern_counts(ra), pattern_counts(rb)
    return TreeAgreement((ra.messages, rb.messages), (sum(ca.values()), sum(cb.values())),
                         sum((ca & cb).values()))
