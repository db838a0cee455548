"""`linkgrad regress`: what a night measured, read from its run directories (`measures`), the
baseline and history files (`files`), and the comparison with the baseline (`compare` for the
gradients and predictions, `evidence_checks` for the passive evidence, `check` for what a
check is and how its verdict is reached, over `stats`).

Layer: above config (it reads run directories through `coordinator.config`), below live and
cli: no SSH, no daemons, no testbed, no presentation. May import `linkgrad`,
`coordinator.config`, numpy, scipy, pydantic.
"""
