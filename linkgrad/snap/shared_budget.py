"""SNAP's CPU budget (§7) where several hosts share one kernel: a testbed's namespaces, or
containers on one machine. The operator's bounds say what profiling may take of a machine's
core; hosts that share the machine share them, or fifty namespaces at 2-5% each take the whole
of a 2-core machine (measured: 1.5 cores of sniffers at 51 hosts). Hosts are grouped by the
kernel's boot_id, which every namespace and container of one boot sees alike; VMs on one
hypervisor have kernels of their own and are not grouped (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SharedBudget", "shared_budgets"]


@dataclass(frozen=True)
class SharedBudget:
    """One host's bounds, percent of one core, and how many profiled hosts share its kernel."""

    cpu_lower_pct: float
    cpu_upper_pct: float
    sharing: int


def shared_budgets(kernel_of: Mapping[str, str | None], cpu_lower_pct: float,
                   cpu_upper_pct: float) -> tuple[dict[str, SharedBudget], str | None]:
    """Each host's share of the bounds (a host whose kernel is unknown keeps them whole), and
    a sentence saying the split where there is one."""
    counts = Counter(k for k in kernel_of.values() if k is not None)
    out = {}
    for host, kernel in kernel_of.items():
        n = counts[kernel] if kernel is not None else 1
        out[host] = SharedBudget(cpu_lower_pct / n, cpu_upper_pct / n, n)
    widest = max(counts.values(), default=1)
    if widest < 2:
        return out, None
    machines = sum(1 for n in counts.values() if n > 1)
    share = next(b for b in out.values() if b.sharing == widest)
    where = "one kernel" if machines == 1 else f"a kernel ({machines} machines)"
    return out, (f"SNAP's CPU budget ({cpu_lower_pct:g}-{cpu_upper_pct:g}% of a core) is a "
                 f"machine's: up to {widest} hosts share {where}, so each polls within "
                 f"{share.cpu_lower_pct:.2g}-{share.cpu_upper_pct:.2g}% (slower table reads "
                 "where its own cost is above that)")
