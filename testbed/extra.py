"""The testbed's own application needs `linkgrad[testbed]` (uvicorn, starlette, asyncpg,
aiomcache): a plain `pip install linkgrad` has none of them, and without this check the first
sign would be a server that died inside a namespace. (httpx, which the load generator needs on
any host a run's workload runs on, is a plain dependency.)"""

from __future__ import annotations

import importlib.util

from linkgrad.errors import RuntimeFailure

MODULES = ("uvicorn", "starlette", "asyncpg", "aiomcache")


def missing_modules() -> list[str]:
    return [m for m in MODULES if importlib.util.find_spec(m) is None]


def require_testbed_extra() -> None:
    """RuntimeFailure naming what to install if the testbed's Python packages are missing."""
    if missing := missing_modules():
        raise RuntimeFailure(
            f"the testbed's application needs {', '.join(missing)}, which this install of "
            "linkgrad lacks: pip install 'linkgrad[testbed]' (scripts/setup installs it)")
