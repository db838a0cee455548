"""linkgrad's library: the algorithms of its papers as pure functions, importable from a notebook.

- `linkgrad.spectral`: the link-gradient estimator (thesis ch. 2-4) from a web log and an
  injection record, and the square wave's planning;
- `linkgrad.weblog`: nginx, Apache and CSV logs read as request start and response times;
- `linkgrad.prediction`, `placement`, `routing`, `graph`, `linearity`: what-if maths on gradients;
- `linkgrad.snap`: SNAP's per-connection TCP classification and correlation (Yu et al.);
- `linkgrad.paths`: WAP5's causal paths from message traces (Reynolds et al.);
- `linkgrad.protocol`: the daemons' typed JSON-lines protocol and the injection record;
- `linkgrad.errors`: the error tree and its exit codes; `linkgrad.reading`: strict file reading.

Layer: the bottom. numpy, scipy, pydantic and the standard library only: no SSH, no command line,
no processes started, no I/O beyond reading the files and streams given to it. Everything else
(`injector`, `sniffer`, `testbed`, `coordinator`) imports it downwards.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """`__version__` looked up when asked: importlib.metadata costs ~50 ms of every daemon's
    start, which fifty hosts sharing a machine's cores pay fifty times."""
    if name != "__version__":
        raise AttributeError(f"module 'linkgrad' has no attribute {name!r}")
    import importlib.metadata

    try:
        return importlib.metadata.version("linkgrad")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"
