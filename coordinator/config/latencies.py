"""Sites, one-way latencies and placements (YAML), and the latency change each host pair sees
when components move (thesis §5.3). Parsing at the edge; `latency_changes` is pure.

A latencies file says where each component (an experiment host) is now and the one-way latency
between sites; without `sites`, every host is a site of its own. A placement says which
components move to which site.

    sites: {web: here, app1: here, db: here}
    latency_ms:                     # "a->b" one way, "a<->b" both ways
      here<->here: 0.05
      here<->east: {mean: 10.0, se: 0.2}   # se: standard error of the mean (default 0)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, PrivateAttr, field_validator

from coordinator.config.fields import Float, InputModel, Str
from coordinator.config.yamlconf import line_of, load_yaml
from linkgrad.errors import InputError, Problem
from linkgrad.prediction import Estimate

_PAIR = re.compile(r"^\s*([^\s<>-][^<>]*?)\s*(->|<->)\s*([^\s<>-][^<>]*?)\s*$")


MAX_LATENCY_MS = 60_000.0  # one way; a minute is no network's latency


def check_site(name: str) -> str:
    """A site a latency pair can name: `_PAIR` strips spaces and stops at '<', '>', '-'."""
    if not _PAIR.match(f"{name}->{name}") or name != name.strip():
        raise ValueError(f"{name!r} is no site name a latency ('a->b') could give: no spaces "
                         "around it, no '<' or '>', not starting with '-'")
    return name


Site = Annotated[Str, AfterValidator(check_site)]


class Latency(InputModel):
    mean: Float = Field(ge=0, le=MAX_LATENCY_MS)
    se: Float = Field(0.0, ge=0, le=MAX_LATENCY_MS)


class Latencies(InputModel):
    sites: dict[Str, Site] = Field(default_factory=dict)  # host -> site (default: its own)
    latency_ms: dict[Str, Annotated[Float, Field(ge=0, le=MAX_LATENCY_MS)] | Latency] = Field(
        min_length=1)
    # None: every host pair needs a latency. Set by `only_for` (never by a file): latencies
    # from the paths know the hosts that talked, and a prediction needs no others
    _needed: frozenset[tuple[str, str]] | None = PrivateAttr(None)

    def only_for(self, pairs: Iterable[tuple[str, str]]) -> Latencies:
        """These latencies, asked only for the host pairs `pairs` (both ways)."""
        out, given = self.model_copy(), list(pairs)
        out._needed = frozenset({*given, *((b, a) for a, b in given)})
        return out

    @field_validator("latency_ms")
    @classmethod
    def _pairs(cls, latencies: dict[str, float | Latency]) -> dict[str, float | Latency]:
        for key in latencies:
            if not _PAIR.match(key):
                raise ValueError(f"{key!r} is not 'a->b' or 'a<->b'")
        return latencies


class Placement(InputModel):
    move: dict[Str, Site] = Field(min_length=1)  # host -> the site it moves to


def one_way(latencies: Latencies) -> dict[tuple[str, str], Estimate]:
    """(site, site) -> one-way latency; "a<->b" fills both directions, "a->b" overrides."""
    out: dict[tuple[str, str], Estimate] = {}
    for both in (True, False):
        for key, value in latencies.latency_ms.items():
            m = _PAIR.match(key)
            assert m is not None  # validated
            a, arrow, b = m.groups()
            if (arrow == "<->") != both:
                continue
            e = Estimate(value.mean, value.se) if isinstance(value, Latency) else Estimate(value)
            out[(a, b)] = e
            if both:
                out[(b, a)] = e
    return out


def latency_sites(latencies: Latencies, hosts: Iterable[str] = ()) -> set[str]:
    """Every site `latencies` knows: in `sites`, at an end of a latency pair, or where one of
    `hosts` is now (its own site by default)."""
    ends = {site for pair in one_way(latencies) for site in pair}
    return ends | set(latencies.sites.values()) | {latencies.sites.get(h, h) for h in hosts}


def unknown_site(site: str, known: set[str], latencies_file: str) -> str | None:
    """Why `site`, given in another file or an option, has no place in the latencies file
    (a typo there or here: the sentence names that file and what it has), or None. `known`:
    `latency_sites`, computed once per command (rebuilding it per site took ms each)."""
    if site in known:
        return None
    listed = sorted(known)
    more = f", ... ({len(listed)} in all)" if len(listed) > 12 else ""
    return (f"site {site!r} is not in {latencies_file} (sites there: "
            f"{', '.join(listed[:12])}{more})")


def placement_site_problems(placement: Placement, placement_file: Path | None,
                            known: set[str], latencies_file: str) -> list[Problem]:
    """A problem at the placement's line for every site it moves to that the latencies file
    does not know (`known`: its `latency_sites`), else the error would be a missing latency,
    at the latencies file only."""
    out = []
    for host, site in placement.move.items():
        if (why := unknown_site(site, known, latencies_file)) is not None:
            out.append(Problem(why, str(placement_file) if placement_file else None,
                               line_of(placement_file, ("move", host)) if placement_file
                               else None, f"move.{host}"))
    return out


def latency_changes(hosts: list[str], latencies: Latencies, placement: Placement,
                    latencies_file: str = "<latencies>",
                    placement_file: Path | None = None) -> dict[tuple[str, str], Estimate]:
    """Δl (ms) for every ordered pair of distinct hosts whose latency changes (of those
    `latencies` are asked for, see `only_for`).

    A pair that keeps its sites changes by exactly 0; otherwise the new and the old latency are
    independent measurements and their variances add. InputError names every unknown host and
    every site pair the latencies file lacks.
    """
    site = {h: latencies.sites.get(h, h) for h in hosts}
    unknown = [h for h in placement.move if h not in site]
    if unknown:
        raise InputError([Problem(
            f"{h!r} is not a host of the experiment ({', '.join(hosts)})",
            str(placement_file) if placement_file else None,
            line_of(placement_file, ("move", h)) if placement_file else None, f"move.{h}")
            for h in unknown])
    new = {**site, **placement.move}
    table = one_way(latencies)
    changes, missing = {}, set()
    for a in hosts:
        for b in hosts:
            before, after = (site[a], site[b]), (new[a], new[b])
            if a == b or before == after or (
                    latencies._needed is not None and (a, b) not in latencies._needed):
                continue
            for pair in (before, after):
                if pair not in table:
                    missing.add(pair)
            if before in table and after in table:
                old, now = table[before], table[after]
                changes[(a, b)] = Estimate(now.mean - old.mean,
                                           (old.variance + now.variance) ** 0.5)
    if missing:
        from_paths = latencies._needed is not None
        raise InputError([Problem(
            f"no latency for {a}->{b} ("
            + (f"the causal paths have none: give --latencies FILE with '{a}<->{b}'"
               if from_paths else f"give '{a}->{b}' or '{a}<->{b}'") + ")",
            latencies_file, field="latency_ms") for a, b in sorted(missing)])
    return changes


def load_latencies(path: str | Path) -> Latencies:
    return load_yaml(path, Latencies)


def load_placement(path: str | Path) -> Placement:
    return load_yaml(path, Placement)
