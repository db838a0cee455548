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

import importlib.metadata

try:
    __version__ = importlib.metadata.version("linkgrad")
except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
