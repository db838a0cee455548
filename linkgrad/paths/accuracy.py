"""How well inferred paths match known ones: the fraction of requests whose inferred tree is
exactly the true one (the metric of TraceWeaver and of our benchmark).

A request's inferred tree is the most probable instance built from its true root message; it
is right when it holds exactly the request's messages, each with its true parent. A root
that no tree starts from (the linker gave it a parent) is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linkgrad.paths.instances import PathInstance

__all__ = ["best_instances", "tree_accuracy"]


def best_instances(per_root: Sequence[Sequence[PathInstance]]) -> dict[int, PathInstance]:
    """root message -> its most probable instance."""
    return {inst[0].root: inst[0] for inst in per_root if inst}


def tree_accuracy(best: dict[int, PathInstance], true_parent: np.ndarray,
                  request: np.ndarray) -> tuple[int, int]:
    """(requests whose best instance from their true root is their true tree, requests)."""
    roots = np.flatnonzero(true_parent < 0)
    members: dict[int, list[int]] = {}
    for msg, req in enumerate(request.tolist()):
        members.setdefault(req, []).append(msg)
    right = 0
    for root in roots.tolist():
        inst = best.get(root)
        if inst is None:
            continue
        truth = members[int(request[root])]
        if list(inst.messages) != truth:
            continue
        parents = np.asarray(inst.parents)
        expected = true_parent[np.asarray(inst.messages)]
        right += bool(np.all(parents == expected))
    return right, len(roots)
