"""The pure core: web logs, the spectral estimator, link estimates, the communication graph,
prediction, placement search, routing, the wave plan and the watch limits.

Plain functions over numpy arrays, dataclasses and plain records; no network, no SSH, no
daemons, no configuration files, no presentation. May import: `common`, numpy, scipy, pydantic.
Never: `coordinator.config`, `coordinator.live`, `coordinator.cli`, yaml, rich, argparse,
paramiko, matplotlib, `testbed`, `injector`, `sniffer`.
"""
