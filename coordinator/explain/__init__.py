"""`linkgrad explain`'s builders: a run directory in (gradients, causal paths, SNAP, host
probes, the graph), each (transaction, link) explained out, with the run's summary; no SSH,
no presentation. Imports `coordinator.config` and `linkgrad`."""

__all__: list[str] = []
