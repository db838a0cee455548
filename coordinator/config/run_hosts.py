"""A run directory's files agree on its hosts: every host `gradients.json` and `graph.json`
name is one of `experiment.json`'s. Files of two runs (or one edited) would give a prediction
about nobody; the error says which file most likely holds the mistake, once per host."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from linkgrad.errors import InputError, Problem

# (the file, its field) where a host is named
Mention = tuple[Path, str]


def check_run_hosts(mentions: Iterable[tuple[str, Mention]], hosts: list[str],
                    experiment_file: Path) -> None:
    """InputError when a mentioned host is not in `hosts` (experiment.json's). When the
    experiment has none of the mentioned hosts (or none at all), experiment.json is the odd
    one out: one problem at its field 'hosts'. Otherwise one problem per stray host, at the
    first field naming it."""
    named: dict[str, list[Mention]] = {}
    for host, where in mentions:
        named.setdefault(host, []).append(where)
    stray = {h: where for h, where in named.items() if h not in hosts}
    if not stray:
        return
    if len(stray) == len(named):
        listing = ", ".join(f"{h} (first at {f.name} field {field!r})"
                            for h, [(f, field), *_] in sorted(stray.items()))
        files = " and ".join(sorted({f.name for where in stray.values() for f, _ in where}))
        have = f"({', '.join(hosts)}) has none of the hosts {files} name" if hosts else \
            f"is empty, but {files} name hosts"
        raise InputError(Problem(f"{have}: {listing} (files of two runs, or one edited?)",
                                 str(experiment_file), field="hosts"))
    known = f"the hosts of {experiment_file}: {', '.join(sorted(hosts))}"
    raise InputError([Problem(f"host {h!r} is not one of {known}"
                              + (f" (the first of {len(where)} fields naming it)"
                                 if len(where) > 1 else ""), str(where[0][0]),
                              field=where[0][1])
                      for h, where in sorted(stray.items())])
