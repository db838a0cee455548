"""The coordinator: the `linkgrad` command and everything it computes and drives, in layers
(each sub-package's docstring says what it may import; tests/test_layers.py holds them):

- `core`: pure computation (web logs, the spectral estimator, the graph, prediction,
  placement, routing, the wave plan, the watch limits);
- `config`: the user's files and the run directory, validated at the boundary;
- `live`: SSH, the daemons over their leases, the phases of a run and of `--validate`;
- `cli`: the command line, tables and the HTML report.

Layer: the top of the product; it may import `common`, `testbed`, and `injector.cli` (the
`linkgrad inject` command); it talks to the daemons only by their protocol.
"""
