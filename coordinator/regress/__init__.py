"""`linkgrad regress`: what a night measured, read from its run directories (`measures`), the
baseline and history files (`files`), and the comparison with the baseline (`compare`, over
`stats`).

Layer: above config (it reads run directories through `coordinator.config`), below live and
cli: no SSH, no daemons, no testbed, no presentation. May import `coordinator.core`,
`coordinator.config`, `coordinator.snap`, `common`, numpy, scipy, pydantic.
"""
