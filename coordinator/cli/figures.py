"""Figures for report.html: matplotlib without a display, each figure an inline PNG."""

from __future__ import annotations

import base64
import io
from typing import Any

__all__ = ["png_img", "pyplot"]


def pyplot() -> Any:
    """matplotlib's pyplot with no display (a report is written on servers and in CI),
    imported at the first figure: a command's --help need not load it (half a second)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_img(fig: Any) -> str:
    """The figure as an <img> with the PNG inline (closed after)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    pyplot().close(fig)
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'
