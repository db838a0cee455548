"""The `linkgrad` command line and what a person sees: argument parsing, tables, the HTML
report. One module per command, each registering itself the same way.

Layer: top of `coordinator`. May import every other layer, `testbed` (`linkgrad testbed`)
and `injector`'s engine (`linkgrad inject`).
"""
