"""What linkgrad reads from the user's files and writes for later commands to read: the
experiment, latencies and placements, injection records, and the run directory. Validated at
the boundary, every problem named by file, line and field; inside, plain typed data.

Layer: above the library. May import `linkgrad`, pydantic, yaml, and `testbed` (to resolve an
experiment's `testbed:` tag and read a topology file). Never `coordinator.live` or
`coordinator.cli`.
"""
