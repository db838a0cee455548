"""WAP5's causal-path analysis (Reynolds et al., WWW 2006): reconciled message traces (§4),
message linking (§5.1) and the structural linkers that beat it, path instances and patterns,
node and network delays and clock offsets (§5.2).

Pure code over numpy arrays, runnable offline on saved traces; it imports only numpy, the
standard library and itself.
"""

from linkgrad.paths.analysis import analyse, match_requests
from linkgrad.paths.messages import Connections, Messages, Trace
from linkgrad.paths.patterns import Hop, PathPattern
from linkgrad.paths.result import PathsResult

__all__ = ["Connections", "Hop", "Messages", "PathPattern", "PathsResult", "Trace", "analyse",
           "match_requests"]
