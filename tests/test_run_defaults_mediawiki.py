"""A run with default parameters on an application nobody here wrote (root): MediaWiki on
Apache + mod_php and MariaDB, 36 queries a page. Nothing is given but the link pair, the
transactions and a duration cap: training, period, cycles and delay are the run's own choice,
the delay starts small, and both directions of web<->db are measured to about ±10% (or the
run says why not). The gradients must hold the truth measured independently by
`benchmarks/mediawiki_truth.py` (slopes under a constant 2 ms delay alternated with none;
RESULTS.md "MediaWiki: the truth per page type")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linkgrad.spectral.wave_plan import FIRST_DELAY_S, MIN_DELAY_S
from testbed.topology import MEDIAWIKI
from tests.marks import NETNS, needs_tool
from tests.netns_tools.testbeds import linkgrad_run, private_testbed, unique_tag, wait_until_gone

pytestmark = [*NETNS, needs_tool("apache2"), needs_tool("mariadbd"),
              pytest.mark.skipif(not Path("/usr/share/mediawiki/index.php").exists(),
                                 reason="Debian's mediawiki is not installed (scripts/setup)")]

MIX = ("/index.php?title=Topic_7=2,/index.php?title=Hub=1,"
       "/api.php?action=query&prop=links&titles=Hub&pllimit=max&format=json=1")
EXPERIMENT = """
name: {name}
testbed: {tag}
workload: {{host: client, rate_per_s: 12, mix: '{mix}'}}
transactions:
  article: title=Topic_7$
  hub: title=Hub$
  api: ^/api\\.php
parameters:
  include: ['web->db', 'db->web']
  concurrent: 2          # both directions at once: half the time; not a precision setting
  max_duration_s: 300    # CI's time: the cycles are still the run's own choice within it
output: {output}
"""
# (slope, its standard error) per page and direction, idle, from benchmarks/mediawiki_truth.py
TRUTH = {("article", "web->db"): (45.1, 1.3), ("article", "db->web"): (44.1, 0.5),
         ("hub", "web->db"): (43.2, 1.3), ("hub", "db->web"): (45.1, 0.7),
         ("api", "web->db"): (8.2, 0.5), ("api", "db->web"): (8.8, 0.2)}

# crossings per page each way, counted in a packet capture (benchmarks/mediawiki_truth.py)
CROSSINGS = {"article": 42.0, "hub": 42.1, "api": 8.1}


@pytest.fixture(scope="module")
def mediawiki():
    tag = unique_tag("d")
    with private_testbed(tag, MEDIAWIKI) as (_, root):
        yield root, tag


def test_a_default_run_completes_and_holds_the_truth(mediawiki, tmp_path):
    root, tag = mediawiki
    experiment = tmp_path / "mw.yaml"
    experiment.write_text(EXPERIMENT.format(name="mwdefault", tag=tag, mix=MIX,
                                            output=tmp_path / "runs"))
    result = linkgrad_run(experiment, root, timeout_s=1800)
    assert result["status"] == "completed"
    wait_until_gone(tag)
    run_dir = Path(result["run_dir"])
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["half_width"] == "10%"
    links = json.loads((run_dir / "gradients.json").read_text())["links"]
    assert len(links) == 2
    for link in links:
        label = f"{link['link']['src_host']}->{link['link']['dst_host']}"
        asked = link["adaptive"]["requested_ms"]
        assert asked <= 4.0 + 1e-9  # 1 ms, grown ×4 at most once
        # the delay applied, measured: what was asked plus a busy machine's wake-ups (4.55
        # for 4 in one CI run), and not a unit off
        applied = link["adaptive"]["record"]["magnitude_ms"]
        assert asked - 0.5 <= applied < asked + 2, (label, asked, applied)
        # the delay held under every page's effect cap (its training spread, wider on a busy
        # machine: CI's allowed 2.3 ms where a quiet one allows about 1); on a machine so
        # quiet that no delay the injector applies (MIN_DELAY_S) could (a spread of 10 ms,
        # a page waiting 44 ms per ms), the delay must not have grown past the first. The
        # delay is sized by the adaptive cycle's rough gradient, whose interval from one short
        # cycle now and then sits below the final one (CI: an effect of 22.1 ms for a cap of
        # 20.9), so the final effect is held to the cap within a factor 1.5
        for name, t in link["transactions"].items():
            effect = link["record"]["magnitude_ms"] * t["ci95"][0]
            cap = plan["effect_cap_ms"][name]
            if MIN_DELAY_S * 1e3 * t["ci95"][0] > cap:
                assert asked <= FIRST_DELAY_S * 1e3 + 1e-9, (label, name, asked, cap, plan)
            else:
                assert effect <= 1.5 * cap, (label, name, effect, t["ci95"], plan)
        for name in ("article", "hub", "api"):
            t = link["transactions"][name]
            truth, se = TRUTH[(name, label)]
            lo, hi = t["ci95"]
            # the interval (widened from 95% to ~99.9%: six cells must not fail one run in
            # four by chance) holds the truth, allowing for the truth's own error
            half = (hi - lo) / 2 * 1.7 + 2 * se
            assert abs(t["gradient"] - truth) <= half, (label, name, t, truth)
        article = link["transactions"]["article"]
        # about the ±10% asked for (the cap on the effect and CI's 300 s cap may leave it
        # wider, on a busy machine much wider: then the run must say so)
        half = (article["ci95"][1] - article["ci95"][0]) / 2
        said = any(n.startswith("wider than wanted") for n in article["notes"])
        assert half < 0.2 * article["gradient"] or said, (label, article)
        # however wide on a busy machine, it must tell that the page waits on the link (a
        # busy CI machine has read ±85% in the 300 s: a bound on the width tests the machine)
        assert article["ci95"][0] > 0, (label, article)
    # the passive phase's paths, linked within its budget: each page's dominant path crosses
    # web<->db as often as a packet capture counts (set-ups included), within one
    paths = json.loads((run_dir / "paths.json").read_text())
    for name, truth in CROSSINGS.items():
        top = paths["transactions"][name][0]
        for way in ("web->db", "db->web"):
            assert top["crossings"][way] == pytest.approx(truth, abs=1), (name, top)
