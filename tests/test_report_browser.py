"""report.html in a real browser: headless Chromium draws the testbed's report, a screenshot is
taken, and a script in the page measures every SVG text's box against every other text and
every data mark (arrows, bars, lines) in the application's graph and the timelines, writing
what overlaps into the DOM, read back with --dump-dom."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from coordinator.cli.report import write_report
from tests.test_report_layout import TRANSACTIONS, report_run

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Runs on load: each checked SVG's texts (per line: each <tspan>'s extent) against each other
# and against the marks; a line or path is walked a pixel at a time, so a diagonal arrow is
# not taken for its bounding box. Stroke half-widths are allowed for by 1.5 px.
MEASURE = """
<script>
window.addEventListener('load', () => {
  const hit = (a, b, m) => a.x - m < b.x + b.width && b.x < a.x + a.width + m &&
                           a.y - m < b.y + b.height && b.y < a.y + a.height + m;
  const inside = (p, b, m) => p.x > b.x - m && p.x < b.x + b.width + m &&
                              p.y > b.y - m && p.y < b.y + b.height + m;
  const found = [], seen = {svgs: 0, texts: 0, marks: 0};
  document.querySelectorAll('svg.checked').forEach((svg, k) => {
    const name = svg.getAttribute('class') + ' ' + k;
    const size = {width: svg.width.baseVal.value, height: svg.height.baseVal.value};
    const texts = [];
    svg.querySelectorAll('text').forEach(t => {
      const spans = t.querySelectorAll('tspan');
      (spans.length ? [...spans] : [t]).forEach(s => texts.push({t, s, b: s.getBBox()}));
    });
    const marks = [...svg.querySelectorAll('[data-mark], rect')];
    seen.svgs += 1; seen.texts += texts.length; seen.marks += marks.length;
    texts.forEach((a, i) => {
      const what = name + ': "' + a.s.textContent + '"';
      if (a.b.x < 0 || a.b.y < 0 || a.b.x + a.b.width > size.width ||
          a.b.y + a.b.height > size.height) found.push(what + ' outside the drawing');
      texts.slice(i + 1).forEach(b => {
        if (hit(a.b, b.b, 0)) found.push(what + ' on "' + b.s.textContent + '"');
      });
      marks.forEach(m => {
        if (m.tagName === 'rect') {
          if (a.t.dataset.in && a.t.dataset.in === m.dataset.node) return;
          if (hit(a.b, m.getBBox(), 0)) found.push(what + ' on a rect');
          return;
        }
        const length = m.getTotalLength();
        for (let d = 0; d <= length; d += 1) {
          if (inside(m.getPointAtLength(d), a.b, 1.5)) {
            found.push(what + ' on a ' + m.tagName + ' (' + m.dataset.mark + ')');
            break;
          }
        }
      });
    });
  });
  const pre = document.createElement('pre');
  pre.id = 'overlaps';
  pre.textContent = JSON.stringify({seen, found});
  document.body.appendChild(pre);
});
</script>
"""


# A drawing that overlaps on purpose: the measuring script must find it.
CONTROL = ("<svg xmlns='http://www.w3.org/2000/svg' class='checked control' width='200' "
           "height='60'><line x1='0' y1='30' x2='200' y2='30' stroke='#000' data-mark='x'/>"
           "<text x='10' y='34' font-size='12'>on the line</text>"
           "<text x='20' y='36' font-size='12'>on the text</text></svg>")


def _chromium() -> Path:
    if not CHROMIUM.exists():
        if os.geteuid() != 0:
            pytest.skip("chromium not installed: bash scripts/setup installs it")
        pytest.fail("chromium not installed though running as root: bash scripts/setup "
                    "installs it")
    return CHROMIUM


def _browse(tmp_path: Path, page: Path, *args: str) -> str:
    done = subprocess.run(
        [str(_chromium()), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args,
         page.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_chromium_draws_the_report_with_no_label_over_another_or_over_a_mark(tmp_path):
    report = write_report(report_run(tmp_path))
    shot = tmp_path / "report.png"
    _browse(tmp_path, report, f"--screenshot={shot}", "--window-size=1280,4000")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000
    shutil.copy(shot, tmp_path / "kept.png")  # for a person to look at when it fails
    measured = tmp_path / "measured.html"
    measured.write_text(report.read_text().replace("</body>", CONTROL + MEASURE + "</body>"))
    dom = _browse(tmp_path, measured, "--virtual-time-budget=5000", "--dump-dom")
    got = re.search(r"<pre id=\"overlaps\">(.*?)</pre>", dom, re.S)
    assert got is not None, dom[-2000:]
    result = json.loads(got.group(1).replace("&quot;", '"').replace("&amp;", "&")
                        .replace("&lt;", "<").replace("&gt;", ">"))
    assert result["seen"]["svgs"] == len(TRANSACTIONS) + 2  # the timelines, the graph, CONTROL
    assert result["seen"]["texts"] > 100
    assert result["seen"]["marks"] > 50
    control = [f for f in result["found"] if f.startswith("checked control")]
    assert len(control) == 3, control  # a text on the other, and each on the line
    assert [f for f in result["found"] if f not in control] == []
