"""WAP5's causal-path analysis (Reynolds et al., WWW 2006): reconciled message traces (§4),
message linking (§5.1) and the structural linkers that beat it, path instances and patterns,
node and network delays and clock offsets (§5.2).

Pure code over numpy arrays, runnable offline on saved traces; it imports only numpy, the
standard library and itself.
"""
