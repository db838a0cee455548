"""The delay daemon: holds the packets of chosen links for a scheduled time (thesis §3.1.2).

One module per kernel feature (rules, nfq, netem), the schedule and the holding line pure,
the daemon a thin shell serving `linkgrad.protocol.injector` over `linkgrad.protocol.jsonlines`.

Layer: above `linkgrad`, beside `sniffer`. Imports only `linkgrad` of ours: it runs on every
host of an experiment, and the coordinator drives it by argv and the protocol. The coordinator's
CLI imports its engine for `linkgrad inject` (`coordinator.cli.inject`).
"""
