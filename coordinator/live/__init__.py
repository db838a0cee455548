"""The live run: SSH to the hosts, the daemons spoken to over their channels (the lease), the
followed web log, and the phases of `linkgrad run` and `predict --validate`.

Layer: above config. May import `linkgrad`, `coordinator.config`, `testbed`, paramiko.
Never `coordinator.cli` (no argparse, rich or matplotlib). Talks to the daemons only through
`linkgrad.protocol`, never by importing `injector` or `sniffer`.
"""
