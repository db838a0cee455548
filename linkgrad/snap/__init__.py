"""SNAP's analysis (Yu et al., NSDI 2011, §2): per-socket classification of TCP performance
(Table 2) and correlation across connections sharing a host, link or process (§2.3).

Pure code over numpy arrays: `intervals` (the per-interval statistics, by column), `classify`
(Table 2 and the §4.2 delayed-ACK count), `correlate` (performance vectors, ACC, ranking).
Layer: shared by the host-side sniffer and the coordinator, so it may import only numpy, the
standard library and itself — never the rest of `coordinator`, pydantic, yaml, rich, argparse,
and nothing that does I/O.
"""

from linkgrad.snap.classify import (
    CLASS_NAMES,
    PROBLEMS,
    Classes,
    SnapThresholds,
    classify,
    delayed_ack_count,
)
from linkgrad.snap.correlate import (
    PerformanceVectors,
    ResourceScore,
    average_correlation,
    performance_vectors,
    rank_resources,
    shared_resources,
)
from linkgrad.snap.intervals import COLUMNS, IntervalStats

__all__ = [
    "CLASS_NAMES",
    "COLUMNS",
    "PROBLEMS",
    "Classes",
    "IntervalStats",
    "PerformanceVectors",
    "ResourceScore",
    "SnapThresholds",
    "average_correlation",
    "classify",
    "delayed_ack_count",
    "performance_vectors",
    "rank_resources",
    "shared_resources",
]
