"""`linkgrad place`'s candidates file (`candidates: {HOST: [SITE, ...]}`) and its checks
against the other inputs: every host one of the applications', every site one the latencies
file knows. A mistake is reported at the candidates file's line, naming the other file, since
either may hold the typo (else it surfaced as a latency pair missing from the latencies file).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import Field

from coordinator.config.fields import InputModel, Str
from coordinator.config.latencies import Site, unknown_site
from coordinator.config.yamlconf import line_of, load_yaml
from linkgrad.errors import InputError, Problem


class Candidates(InputModel):
    candidates: dict[Str, list[Site]] = Field(min_length=1)  # host -> sites it may move to


def load_candidates(path: str | Path) -> dict[str, list[str]]:
    return load_yaml(path, Candidates).candidates


def check_candidates(candidates: dict[str, list[str]], path: Path, hosts: Iterable[str],
                     known_sites: set[str], latencies_file: str) -> None:
    """InputError at its line for every host no application has and every site the
    latencies file does not know (`known_sites`: its `latency_sites`)."""
    hosts = sorted(set(hosts))
    problems = [Problem(f"{host!r} is not a host of any application ({', '.join(hosts)})",
                        str(path), line_of(path, ("candidates", host)), f"candidates.{host}")
                for host in candidates if host not in hosts]
    for host, sites in candidates.items():
        for i, site in enumerate(sites):
            if (why := unknown_site(site, known_sites, latencies_file)) is not None:
                problems.append(Problem(why, str(path), line_of(path, ("candidates", host, i)),
                                        f"candidates.{host}.{i}"))
    if problems:
        raise InputError(problems)
