"""Spectral link-gradient estimation: pure functions over numpy arrays (thesis ch. 2-4).

From a notebook, on a web log and the record of the injection it saw:

    from linkgrad.weblog import read_log
    from linkgrad.protocol import load_injection_record
    from linkgrad.spectral import gradients

    log = read_log("access.log.gz", log_format=FORMAT)
    for name, g in gradients(log, load_injection_record("injection.json")).items():
        print(name, g.lockin.gradient, g.lockin.ci)

`estimate` holds the estimator (`gradients`, `log_gradients`, `transaction_gradient`),
`wave_plan` the choice of the square wave and its delay; the rest are their parts.
"""

from linkgrad.spectral.estimate import (
    GradientSettings,
    ThesisResult,
    TransactionGradient,
    gradients,
    log_gradients,
    settings_for_log,
    transaction_gradient,
)
from linkgrad.spectral.lockin import LockinEstimate, LockinSettings
from linkgrad.spectral.wave_plan import Precision, WavePlan

__all__ = [
    "GradientSettings",
    "LockinEstimate",
    "LockinSettings",
    "Precision",
    "ThesisResult",
    "TransactionGradient",
    "WavePlan",
    "gradients",
    "log_gradients",
    "settings_for_log",
    "transaction_gradient",
]
