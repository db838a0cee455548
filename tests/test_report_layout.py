"""report.html reads top-down (summary, verdicts, annotated timelines, the application's graph,
then the detail), and its drawings keep every label off every other label and off the marks:
checked here on the geometry the layout computes and on the SVG it writes, without a browser
(tests/test_report_browser.py measures the same in Chromium)."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from coordinator.cli.app_graph import link_labels, read_graph
from coordinator.cli.app_graph_layout import collisions, layout
from coordinator.cli.report import write_report
from coordinator.cli.report_svg import CHAR_EM, Box, segment_hits_box
from coordinator.config.run_records import MeasuredLink
from coordinator.explain.run import explain_run

DATA = Path(__file__).parent / "data"
HOSTS = ("client", "web", "app1", "app2", "db", "cache")
TRANSACTIONS = {"single": "^/pattern/single", "sequential": "^/pattern/sequential",
                "ViewItem": "^/rubis/ViewItem", "async": "^/pattern/async"}


def report_run(tmp_path: Path, passive: bool = True) -> Path:
    """The testbed's quick run (gradients, paths, graph and plan as it wrote them), with the
    experiment and journal written here; `passive=False`: an older run, gradients only."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DATA / "runs" / "testbed-quick" / "gradients.json", run)
    shutil.copy(DATA / "report" / "plan.json", run)
    if passive:
        shutil.copy(DATA / "runs" / "testbed-quick" / "paths.json", run)
        shutil.copy(DATA / "report" / "graph.json", run)
    (run / "experiment.json").write_text(json.dumps({
        "name": "testbed-quick", "hosts": [{"name": h} for h in HOSTS],
        "transactions": TRANSACTIONS}))
    (run / "run.json").write_text(json.dumps({"status": "completed", "started": 1795931079.0,
                                              "ended": 1795931175.1, "links_done": 2}))
    return run


def _link(src: str, dst: str, server_port: int = 80, forward: bool = True) -> MeasuredLink:
    """A link of a connection from `src` (ephemeral port) to `dst`'s server port, or its
    reverse direction."""
    if forward:
        return MeasuredLink(src_host=src, src_port=0, dst_host=dst, dst_port=server_port,
                            label=f"tcp {src}:0 -> {dst}:{server_port}")
    return MeasuredLink(src_host=dst, src_port=server_port, dst_host=src, dst_port=0,
                        label=f"tcp {dst}:{server_port} -> {src}:0")


def _both(src: str, dst: str, port: int = 80) -> list[MeasuredLink]:
    return [_link(src, dst, port), _link(src, dst, port, forward=False)]


def _labels(links: list[MeasuredLink], lines: int = 4) -> dict[str, tuple[list[str], bool]]:
    return {lk.label: ([f"txn{i} 1.23 [0.91, 1.55] passive" for i in range(lines)], False)
            for lk in links}


def test_the_testbeds_graph_has_every_host_and_link_and_nothing_overlaps(tmp_path) -> None:
    run = report_run(tmp_path)
    rows = explain_run(run).rows
    graph = read_graph(run)
    g = layout(HOSTS, graph, link_labels(rows))
    assert collisions(g) == []
    assert set(g.hosts) == set(HOSTS)
    assert sorted(a.link for a in g.arrows) == sorted(lk.label for lk in graph)
    assert all(a.label is not None for a in g.arrows)
    assert not g.footnotes
    measured = {a.link for a in g.arrows if a.measured}
    assert measured == {"tcp app1:0 -> db:5432", "tcp db:5432 -> app1:0"}
    passive = [a for a in g.arrows if a.link not in measured]
    assert all(line.endswith(" passive") for a in passive for line in a.lines)


def test_a_pairs_two_directions_are_parallel_arrows_labelled_on_either_side() -> None:
    links = _both("web", "db", 5432)
    g = layout(["web", "db"], links, _labels(links))
    (a, b) = g.arrows
    assert collisions(g) == []
    (_, ay0), (_, ay1) = a.line
    (_, by0), (_, by1) = b.line
    assert ay0 == ay1
    assert by0 == by1
    assert ay0 != by0
    assert a.label is not None
    assert b.label is not None
    above, below = sorted((a, b), key=lambda x: x.line[0][1])
    assert above.label.y + above.label.h < above.line[0][1]  # each on its own side
    assert below.label.y > below.line[0][1]


def test_skipping_links_busy_hosts_and_hosts_without_links_still_read_clean() -> None:
    links = (_both("client", "web") + _both("web", "app1", 8000) + _both("web", "app2", 8000)
             + _both("app1", "db", 5432) + _both("app2", "db", 5432)
             + _both("web", "db", 5432) + _both("app1", "cache", 11211)
             + _both("app1", "db", 6432))  # a second connection of one pair
    hosts = [*HOSTS, "idle"]
    g = layout(hosts, links, _labels(links))
    assert collisions(g) == []
    assert set(g.hosts) == set(hosts)
    assert len(g.arrows) == len(links)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=9),
       st.integers(1, 5))
def test_any_graph_is_laid_out_with_no_label_on_anything(pairs, lines) -> None:
    names = [f"h{i}" for i in range(6)]
    links = list({lk.label: lk for a, b in pairs if a != b
                  for lk in _both(names[a], names[b])}.values())
    g = layout(names, links, _labels(links, lines))
    assert collisions(g) == []
    assert all(a.label is not None for a in g.arrows)


# -- the SVG as written, measured as a browser would (monospace text boxes) --

def _text_boxes(text: ET.Element) -> list[Box]:
    size = float(text.get("font-size", "10"))
    out = []
    spans = list(text.iter("{http://www.w3.org/2000/svg}tspan")) or [text]
    for span in spans:
        x, y = float(span.get("x", "0")), float(span.get("y", "0"))
        out.append(Box(x, y - 0.93 * size, len(span.text or "") * size * 0.602,
                       1.17 * size))
    return out


def _marks(svg: ET.Element) -> tuple[list[tuple[Box, str | None]], list[tuple]]:
    ns = "{http://www.w3.org/2000/svg}"
    rects = [(Box(*(float(r.get(k, "0")) for k in ("x", "y", "width", "height"))),
              r.get("data-node")) for r in svg.iter(f"{ns}rect")]
    segments = [((float(ln.get("x1")), float(ln.get("y1"))),
                 (float(ln.get("x2")), float(ln.get("y2")))) for ln in svg.iter(f"{ns}line")]
    for p in svg.iter(f"{ns}path"):
        pts = [(float(x), float(y)) for x, y in re.findall(r"([-\d.]+),([-\d.]+)", p.get("d"))]
        segments += list(zip(pts, pts[1:] + pts[:1], strict=True))
    return rects, segments


def svg_overlaps(svg_text: str) -> list[str]:
    """Text on text, text on a rect it does not name (data-in), text on a line or path."""
    svg = ET.fromstring(svg_text)
    texts = [(t, b) for t in svg.iter("{http://www.w3.org/2000/svg}text")
             for b in _text_boxes(t)]
    rects, segments = _marks(svg)
    out = []
    for i, (t, b) in enumerate(texts):
        out += [f"{b} on {c}" for _, c in texts[i + 1:] if b.overlaps(c)]
        out += [f"{b} on rect {r}" for r, node in rects
                if b.overlaps(r) and (node is None or node != t.get("data-in"))]
        out += [f"{b} on line {s}" for s in segments if segment_hits_box(s, b.grown(1.5))]
    return out


def test_the_reports_drawings_put_no_text_on_text_or_on_a_mark(tmp_path) -> None:
    assert CHAR_EM >= 0.602  # the layout's glyphs are no narrower than DejaVu Sans Mono's
    page = write_report(report_run(tmp_path)).read_text()
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert sum("class='checked timeline'" in s for s in svgs) == len(TRANSACTIONS)
    assert sum("class='checked app-graph'" in s for s in svgs) == 1
    for s in svgs:
        assert svg_overlaps(s) == [], s[:200]
    graph = next(s for s in svgs if "app-graph" in s)
    x1, y1 = re.search(r"<line x1='([\d.]+)' y1='([\d.]+)'", graph).groups()
    spoilt = graph.replace("</svg>", f"<text x='{x1}' y='{y1}' font-size='10'>on it</text></svg>")
    assert any("on line" in o for o in svg_overlaps(spoilt))  # the check sees one


def test_the_report_reads_summary_verdicts_timelines_graph_then_detail(tmp_path) -> None:
    run = report_run(tmp_path)
    page = write_report(run).read_text()
    heads = re.findall(r"<h2>(.*?)</h2>", page)
    order = ["Summary", "Verdicts", "Causal paths (WAP5)", "The application's graph",
             "Gradients"]
    assert [h for h in heads if h in order] == order
    summary = page[page.index("<h2>Summary</h2>"):page.index("<h2>Verdicts</h2>")]
    for said in ("2026-11-29T05:44:39+00:00", "(96 s)", "client, web, app1, app2, db, cache",
                 "2 of the graph's 6", "Next step:", "Findings"):
        assert said in summary, said
    e = explain_run(run)
    verdicts = page[page.index("<h2>Verdicts</h2>"):page.index("<h2>Causal paths")]
    for r in e.rows:  # every note and cause of every row, on the page
        for note in r.notes:
            assert note.replace("'", "&#x27;") in verdicts, note
        for c in r.causes:
            assert c.text in verdicts
    assert verdicts.count("<tr class='v-") == len(e.rows)
    # the answer to use, labelled by where it came from
    assert verdicts.count("both halves</small>") == sum(r.combined is not None for r in e.rows)
    assert verdicts.count("passive, calibrated</small>") == sum(
        r.gradient is None and r.passive_gradient is not None for r in e.rows)
    assert "Crossings on the dominant path" not in page
    assert "disagree" not in page
    timelines = page[page.index("<h2>Causal paths"):page.index("<h2>The application")]
    assert "ms from the request" in timelines
    assert " measured</tspan>" in timelines
    assert " passive</tspan>" in timelines


def test_an_older_run_without_passive_files_still_reports(tmp_path) -> None:
    page = write_report(report_run(tmp_path, passive=False)).read_text()
    assert "<h2>Summary</h2>" in page
    assert "no paths.json" in page
    assert "<h2>Gradients</h2>" in page
    assert "class='checked app-graph'" in page  # the measured links alone
    (tmp_path / "run" / "graph.json").write_text("[{")
    page = write_report(tmp_path / "run").read_text()
    assert "graph.json cannot be read" in page


def test_a_run_that_cannot_be_explained_still_reports_its_measurements(tmp_path,
                                                                        monkeypatch) -> None:
    def broken(run_dir: Path, interrupted: str | None = None) -> None:
        raise ValueError("a calibration file of another version")

    monkeypatch.setattr("coordinator.cli.report.explain_run", broken)
    page = write_report(report_run(tmp_path)).read_text()
    assert "the run cannot be explained: a calibration file of another version" in page
    assert "status: <b>completed</b>" in page
    assert "class='checked timeline'" in page  # unannotated
    assert "class='checked app-graph'" in page
    assert "<h2>Gradients</h2>" in page
