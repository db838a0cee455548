"""The sniffer daemon: which links carry traffic and how many messages (thesis §3.1.1), read
from the kernel's sock_diag, SNAP's poller and the message tracer; served as
`linkgrad.protocol.sniffer` over `linkgrad.protocol.jsonlines`.

Layer: above `linkgrad`, beside `injector`. Imports only `linkgrad` of ours (the protocol, and
SNAP's classifier and the trace format of `linkgrad.snap` and `linkgrad.paths`): it runs on
every host, driven by argv and the protocol.
"""
