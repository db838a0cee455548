"""iptables rules that send one link's packets to its NFQUEUE: built as argument lists (pure),
applied by a thin executor that registers every undo before it acts.

All rules live in a chain of the daemon's own, `LINKGRAD-Q<base queue>`, reached by a jump
inserted first in OUTPUT (locally sent), FORWARD (routed through) and INPUT (received from
another host: `! -i lo`, so a packet to one's own address is held once, at OUTPUT). A daemon
on the receiving host delays a link as a network would: held at the sender, a packet stays
charged to its socket, and TCP autocorking then keeps the socket's next small write back until
it is released, so a response written in two pieces (headers, body) pays the delay twice.
`--queue-bypass` lets
packets through when no process listens on the queue, so a dead daemon never black-holes a
link. Cleanup is by ownership: only that chain and the jumps to it are ever removed. IPv6
links' rules are the same, through ip6tables, in a chain of the same name.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from injector.link import Link
from linkgrad.errors import RuntimeFailure

JUMPS = (("OUTPUT",), ("FORWARD",), ("INPUT", "!", "-i", "lo"))  # hook, then its match


def chain_name(queue_base: int) -> str:
    return f"LINKGRAD-Q{queue_base}"


def match_args(link: Link) -> list[str]:
    """iptables (or, for IPv6, ip6tables) match for the link; port 0 matches any port."""
    args = ["-p", "ipv6-icmp" if link.proto == "icmp" and link.version == 6 else link.proto]
    if link.src.address:
        args += ["-s", link.src.address]
    if link.dst.address:
        args += ["-d", link.dst.address]
    if link.src.port:
        args += ["--sport", str(link.src.port)]
    if link.dst.port:
        args += ["--dport", str(link.dst.port)]
    return args


def queue_rule(chain: str, link: Link, queue_num: int) -> list[str]:
    """The rule spec (after -A/-D CHAIN) sending the link to its queue."""
    return [*match_args(link), "-j", "NFQUEUE", "--queue-num", str(queue_num), "--queue-bypass"]


class Firewall:
    """Applies rules in one chain; every change has its undo registered before it is made."""

    def __init__(self, chain: str, iptables: str = "iptables", timeout_s: float = 10.0) -> None:
        if shutil.which(iptables) is None:
            raise RuntimeFailure(f"{iptables} not found: install Debian's iptables package")
        self.chain = chain
        self.iptables = iptables
        self.timeout_s = timeout_s
        self._undo: list[list[str]] = []

    def _run(self, args: Sequence[str], check: bool = True) -> bool:
        cmd = [self.iptables, "-w", "5", *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired as e:
            raise RuntimeFailure(f"{' '.join(cmd)} timed out after {self.timeout_s} s") from e
        if check and done.returncode != 0:
            raise RuntimeFailure(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
        return done.returncode == 0

    def remove_stale(self) -> bool:
        """Remove this chain and the jumps to it, left by a killed daemon; True if any was."""
        if not self._run(["-S", self.chain], check=False):
            return False
        for jump in JUMPS:
            while self._run(["-C", *jump, "-j", self.chain], check=False):
                self._run(["-D", *jump, "-j", self.chain])
        self._run(["-F", self.chain])
        self._run(["-X", self.chain])
        return True

    def _do(self, make: list[str], undo: list[str]) -> None:
        """Register `undo`, then make the change; a change that failed leaves no undo."""
        self._undo.append(undo)
        try:
            self._run(make)
        except RuntimeFailure:
            self._undo.pop()
            raise

    def create(self) -> None:
        self._do(["-N", self.chain], ["-X", self.chain])
        self._undo.append(["-F", self.chain])  # flushing an existing chain cannot fail
        for hook, *match in JUMPS:
            self._do(["-I", hook, "1", *match, "-j", self.chain],
                     ["-D", hook, *match, "-j", self.chain])

    def add(self, spec: list[str]) -> None:
        self._do(["-A", self.chain, *spec], ["-D", self.chain, *spec])

    def remove(self, spec: list[str]) -> None:
        undo = ["-D", self.chain, *spec]
        if undo in self._undo:
            self._undo.remove(undo)
        self._run(undo)

    def forget(self) -> None:
        """Drop every undo: someone else (the watchdog) removed the chain already."""
        self._undo.clear()

    def teardown(self) -> None:
        """Undo everything in reverse order; run every undo, then raise the first error."""
        first: RuntimeFailure | None = None
        while self._undo:
            args = self._undo.pop()
            try:
                self._run(args)
            except RuntimeFailure as e:
                first = first or e
        if first is not None:
            raise first
