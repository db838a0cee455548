"""What every other package may import, and which imports none of ours: the error tree (exit
codes), the YAML loader that reports file:line:field, the square wave, a subcommand described
as data (`command`: every package's CLI registers the same way), and the daemons' typed
protocol (`protocol/`) with its one JSON-lines server and client (`jsonlines`).

Layer: bottom. Imports only the standard library, numpy, pydantic and yaml (no argparse,
rich, matplotlib or paramiko).
"""
