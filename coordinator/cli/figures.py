"""Figures for report.html: matplotlib without a display, each figure an inline PNG."""

from __future__ import annotations

import base64
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: a report is written on servers and in CI
import matplotlib.pyplot as plt

__all__ = ["plt", "png_img"]


def png_img(fig: Any) -> str:
    """The figure as an <img> with the PNG inline (closed after)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'
