"""The trend page of a suite's nights (`trend.html`, rewritten after every night from the
history): every gradient over the nights with its 95% interval, the baseline's interval it was
compared with as a band, regressions in red, failed nights as grey lines; and a table of the
nights. Self-contained (figures embedded as PNG)."""

from __future__ import annotations

import datetime as dt
import html
import itertools
from collections.abc import Sequence
from pathlib import Path

from coordinator.cli.figures import png_img, pyplot
from coordinator.regress.files import CheckRecord, NightRecord, write_whole
from coordinator.regress.values import GradientValues

MAX_NIGHTS = 90  # the page shows the latest nights only: a year of figures is unreadable
GradientKey = tuple[str, str, str]  # experiment, transaction, link


def trend_html(suite: str, nights: Sequence[NightRecord]) -> str:
    nights = list(nights)[-MAX_NIGHTS:]
    keys = sorted({(g.experiment, g.transaction, g.link) for n in nights for g in n.gradients})
    figures = "\n".join(f"<figure>{_figure(key, nights)}<figcaption>{html.escape(key[1])} on "
                        f"{html.escape(key[2])} ({html.escape(key[0])})</figcaption></figure>"
                        for key in keys)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>linkgrad regress {html.escape(suite)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} figure{{display:inline-block;margin:.5em}}
table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:.2em .5em}}
.regression{{color:#b00}} .failed{{color:#666}}</style></head><body>
<h1>Suite {html.escape(suite)}: {len(nights)} night(s)</h1>
<p>Each gradient over the nights: its 95% interval (bars), the baseline it was compared with
(band: the baseline's interval), a regression in red, a failed night a grey line.</p>
{figures or "<p>No gradient measured yet.</p>"}
<h2>Nights</h2>
{_nights_table(nights)}
</body></html>
"""


def _when(n: NightRecord) -> dt.datetime:
    return dt.datetime.fromtimestamp(n.started_unix, dt.UTC)


def _verdicts(n: NightRecord) -> dict[GradientKey, CheckRecord]:
    return {(c.experiment, c.transaction or "", c.link or ""): c
            for c in n.checks if c.kind == "gradient"}


def _figure(key: GradientKey, nights: list[NightRecord]) -> str:
    fig, ax = pyplot().subplots(figsize=(4.2, 2.6))
    half = _half_spacing(nights)
    for n in nights:
        when = _when(n)
        if n.status == "failed":
            ax.axvline(when, color="#bbb", lw=1)
        check = _verdicts(n).get(key)
        was = check.baseline if check is not None else None
        base = was.ci95 if isinstance(was, GradientValues) else None
        if base:  # the baseline's interval this night was compared with, across its slot
            ax.fill_between([when - half, when + half], base[0], base[1], color="#9c9",
                            alpha=0.35, lw=0)
        for g in n.gradients:
            if (g.experiment, g.transaction, g.link) != key or g.gradient is None:
                continue
            red = check is not None and check.verdict == "regression"
            lo, hi = g.ci95 or (g.gradient, g.gradient)
            ax.errorbar([when], [g.gradient], yerr=[[g.gradient - lo], [hi - g.gradient]],
                        fmt="o", ms=4, color="#c00" if red else "#225", capsize=2)
    ax.set_ylabel("gradient")
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.autofmt_xdate()
    return png_img(fig)


def _half_spacing(nights: list[NightRecord]) -> dt.timedelta:
    """Half the least gap between nights (a night's slot on the time axis); 6 h alone."""
    times = sorted(n.started_unix for n in nights)
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    return dt.timedelta(seconds=min(gaps) / 2 if gaps else 6 * 3600)


def _nights_table(nights: list[NightRecord]) -> str:
    rows = []
    for n in reversed(nights):
        regressions = [c.name for c in n.checks if c.verdict == "regression"]
        what = n.reason or "; ".join(regressions[:5]) + (" …" if len(regressions) > 5 else "")
        rows.append(f"<tr class='{html.escape(n.status.replace(' ', '-'))}'>"
                    f"<td>{_when(n):%Y-%m-%d %H:%M} UTC</td><td>{html.escape(n.night)}</td>"
                    f"<td>{html.escape(n.status)}</td><td>{len(regressions)}</td>"
                    f"<td>{html.escape(what)}</td></tr>")
    return ("<table><tr><th>started</th><th>night</th><th>status</th><th>regressions</th>"
            "<th>what</th></tr>" + "".join(rows) + "</table>")


def write_trend(path: Path, suite: str, nights: Sequence[NightRecord]) -> None:
    write_whole(path, trend_html(suite, nights))
    pyplot().close("all")
