"""What every other package may import, and which imports none of ours: the error tree (exit
codes), the YAML loader that reports file:line:field, the square wave, and the daemons' typed
protocol with its one JSON-lines server and client.

Layer: bottom. Imports only the standard library, numpy, pydantic and yaml.
"""
