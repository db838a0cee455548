"""Testbeds with known answers: the namespace/Mininet testbed running a real multi-tier
application (`lifecycle`, `build`, `netns`, the servers), seeded synthetic workloads
(`synthetic`), and small namespace pairs for the daemons' tests (`pairs`).

Layer: above `common`, `injector` and `sniffer`; below `coordinator`, which drives it (the
`linkgrad testbed` command, an experiment's `testbed:` tag). Never imports `coordinator`.
"""
