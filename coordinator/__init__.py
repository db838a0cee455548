"""The coordinator: the `linkgrad` command and everything it computes and drives, in layers
(each sub-package's docstring says what it may import; tests/test_layers.py holds them):

- `config`: the user's files and the run directory, validated at the boundary;
- `live`: SSH, the daemons over their leases, the phases of a run and of `--validate`;
- `regress`: the nightly regression's comparison;
- `cli`: the command line, tables and the HTML report.

Layer: the top of the product, over the pure library `linkgrad` (the algorithms); it may import
`testbed`, and `injector` in its CLI only (`linkgrad inject`); it talks to the daemons only by
their protocol.
"""
