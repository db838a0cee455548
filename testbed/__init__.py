"""Testbeds with known answers: the namespace/Mininet testbed running a real multi-tier
application (`lifecycle`, `build`, `netns`, the servers), seeded synthetic workloads
(`synthetic`), and small namespace pairs for the daemons' tests (`pairs`).

Layer: above `linkgrad`, `injector` and `sniffer`; below `coordinator`, which drives it (the
`linkgrad testbed` command, `coordinator.cli.testbed`; an experiment's `testbed:` tag). Never
imports `coordinator`.
"""
