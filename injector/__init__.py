"""The delay daemon: holds the packets of chosen links for a scheduled time (thesis §3.1.2).

One module per kernel feature (rules, nfq, netem), the schedule and the holding line pure,
the daemon a thin shell serving `common.protocol.injector` over `common.jsonlines`.

Layer: above `common`, beside `sniffer`. Imports only `common` of ours: it runs on every host
of an experiment, and the coordinator drives it by argv and the protocol, never by import.
(`injector.cli` is the `linkgrad inject` command, registered by the coordinator's CLI.)
"""
