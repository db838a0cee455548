"""The sniffer daemon: which links carry traffic and how many messages (thesis §3.1.1)."""
