"""One answer from both halves: each (transaction, link)'s measured gradient beside the
passive gradient its causal paths imply, a verdict on the two, and the cause the passive
evidence (SNAP's classes and traffic, the paths' structure, the host probes) names for a
difference. Pure: plain dataclasses in, plain dataclasses out; the coordinator gathers the
evidence from a run directory."""

__all__: list[str] = []
