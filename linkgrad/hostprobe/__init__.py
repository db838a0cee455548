"""Host probes (Kissel et al. §III.C, BLiPP): what a host's CPU, memory, NICs, disks and TCP
stack did, from /proc's text, and calipers over the series (`linkgrad.calipers`). Pure: the
sniffer daemon reads the files on each host and hands their text here."""

__all__: list[str] = []
