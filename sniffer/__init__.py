"""The sniffer daemon: which links carry traffic and how many messages (thesis §3.1.1), read
from the kernel's sock_diag; served as `common.protocol.sniffer` over `common.jsonlines`.

Layer: above `common`, beside `injector`. Imports only `common` of ours: it runs on every
host, driven by argv and the protocol.
"""
