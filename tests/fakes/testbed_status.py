"""A `linkgrad testbed status` of a testbed that is up, for tests that fake the testbed."""

from __future__ import annotations

from pathlib import Path

from testbed import nginx
from testbed.description import DescribedHost, DescribedTestbed, DescribedWebLog, StatusReport


def up_status(directory: Path, addresses: dict[str, str], web_host: str = "web",
              frontend_url: str = "http://10.9.0.1/") -> StatusReport:
    """Testbed `tb` up with hosts `addresses` (name -> address), its SSH files and web log
    under `directory`."""
    hosts = tuple(DescribedHost(name=name, namespace=f"lgtb-tb-{name}", address=address,
                                ssh_port=22, roles=()) for name, address in addresses.items())
    info = DescribedTestbed(
        tag="tb", app="rubis", directory=directory, subnet="10.9.0.0/24",
        recovered_stale=False, hosts=hosts, frontend_url=frontend_url,
        web_log=DescribedWebLog(host=web_host, path=Path("/l"), format="nginx",
                                log_format=nginx.LOG_FORMAT),
        ssh_config=directory / "ssh_config", known_hosts=directory / "known_hosts",
        transactions=(), network="netns")
    return StatusReport(tag="tb", up=True, services={}, info=info)
