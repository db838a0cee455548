"""The run loop end to end against a fake remote (no root, virtual time): a completed run
measures the fake application's known gradients, and every failure path — Ctrl-C, SIGTERM,
an abort, a daemon that cannot start or cannot clean up — ends every lease and keeps what
was measured; `--resume` measures only what is missing; `predict --validate` applies a
placement and measures it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from coordinator.cli.report import write_report
from coordinator.config.experiment import Experiment, Probes, Snap
from coordinator.config.hosts_file import read_hosts
from coordinator.config.run_dir import RunDir
from coordinator.config.run_inputs import load_run
from coordinator.config.snap_file import read_snap
from coordinator.live.run import run_experiment
from coordinator.live.validate import PlacementChanges, validate_placements
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.prediction import Estimate
from sniffer.host_prober import HostProber
from tests.fakes.remote import (
    START_S,
    FakeApplication,
    FakeClock,
    FakeHosts,
    fake_experiment,
)

CROSSINGS = {"/two": 2, "/none": 0}  # app<->db round trips: the gradients on app->db, db->app


def experiment(tmp_path: Path, **parameters: object) -> Experiment:
    return fake_experiment(tmp_path, parameters)


class Fake:
    """A fake application, its hosts and the virtual clock for one run."""

    def __init__(self, **app: object) -> None:
        self.clock = FakeClock()
        self.app = FakeApplication(self.clock, CROSSINGS, **app)  # type: ignore[arg-type]
        self.hosts = FakeHosts(self.app)

    def run(self, exp: Experiment, run_dir: Path, resume: bool = False):
        return run_experiment(exp, run_dir, lambda _: None, resume=resume,
                              connect=self.hosts.connect, clock=self.clock)

    def assert_every_lease_ended(self) -> None:
        engines = [e for es in self.hosts.engines.values() for e in es]
        assert engines, "no injector was started"
        assert all(e.closed and not e.links for e in engines)  # every "rule" removed
        assert self.hosts.daemons_running() == []


def _journal(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def test_a_run_measures_the_applications_known_gradients(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    journal = fake.run(experiment(tmp_path), run_dir)
    assert journal.status == "completed"
    assert journal.succeeded
    assert _journal(run_dir)["status"] == "completed"
    fake.assert_every_lease_ended()
    links = RunDir(run_dir).measurements()
    assert sorted(m.link.label for m in links) == ["tcp app:0 -> db:5432",
                                                     "tcp db:5432 -> app:0"]
    for m in links:
        for name, truth in (("two", 2.0), ("none", 0.0)):  # about 3 standard errors
            assert abs(m.transactions[name].gradient - truth) < 0.3, m.transactions[name]
        assert m.record.magnitude_ms == pytest.approx(10.0)  # the applied delay, measured
        assert m.concurrent_with == 1
        assert len(m.concurrent_injections) == 1
        assert (run_dir / m.injection).exists()
    assert (run_dir / "weblog.log").read_text().count("\n") > 1000
    graph = json.loads((run_dir / "graph.json").read_text())
    assert {g["label"] for g in graph} >= {"tcp web:0 -> app:8000", "tcp app:0 -> db:5432"}
    # SNAP profiled every host for the whole run (the fake hosts' sniffers read this
    # machine's real sockets), and each link carries its classes by phase
    snap = read_snap(run_dir)
    assert snap is not None
    assert set(snap.hosts) == {"web", "app", "db"}
    assert {r.host for r in snap.reports} == {"web", "app", "db"}  # at least the last reports
    assert all(set(m.snap or {}) == {"passive", "measurement"} for m in links)
    # every host probed for the whole run: slow in the passive phase, fast on the measured
    # link's hosts while it is injected; each link carries every host's load meanwhile
    hosts = read_hosts(run_dir)
    assert hosts is not None
    assert [p.context for p in hosts.phases] == ["passive", "measure 1/1"]
    assert hosts.phases[1].fast == ["app", "db"]
    assert hosts.phases[1].links == ["tcp app:0 -> db:5432", "tcp db:5432 -> app:0"]
    assert all(p.end_s is not None and p.end_s >= p.start_s for p in hosts.phases)
    assert set(hosts.hosts) == {"web", "app", "db"}
    for name, series in hosts.hosts.items():
        assert series.probing is not None
        assert {r.context for r in series.reports} == {p.context for p in hosts.phases}, name
    for m in links:
        assert set(m.hosts or {}) == {"web", "app", "db"}
        assert all(load.cpu_busy is not None and load.seconds > 0
                   for load in (m.hosts or {}).values())


def test_snap_off_writes_no_profile_and_asks_no_sniffer_for_one(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    exp = experiment(tmp_path).model_copy(update={"snap": Snap(enabled=False)})
    assert fake.run(exp, run_dir).status == "completed"
    assert not (run_dir / "snap.json").exists()
    assert all("snap" not in m.model_dump(mode="json") for m in RunDir(run_dir).measurements())


def test_the_report_draws_every_hosts_load_over_the_run_and_tables_it_per_link(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    assert fake.run(experiment(tmp_path), run_dir).status == "completed"
    page = write_report(run_dir).read_text()
    assert page.index("<h2>Summary</h2>") < page.index("<h2>Verdicts</h2>") \
        < page.index("<h2>Hosts</h2>")  # the summary first, the detail after
    hosts = page[page.index("<h2>Hosts</h2>"):page.index("<h2>Response series")]
    assert hosts.count("<img") == 1  # CPU, memory, network, disk: one figure
    assert "<td><i>passive phase</i></td>" in hosts
    for label in ("tcp app:0 -&gt; db:5432", "tcp db:5432 -&gt; app:0"):
        row = hosts[hosts.index(f"<td>{label} at 10.0 ms</td>"):].split("</tr>")[0]
        assert row.count("<td>CPU ") == 3, row  # web, app and db, each measured
    (run_dir / "hosts.json").write_text("{")  # the rest of the report stands
    page = write_report(run_dir).read_text()
    assert "hosts.json cannot be read" in page
    assert "<h2>Gradients</h2>" in page


def test_a_host_whose_probe_fails_is_said_once_and_the_run_goes_on(tmp_path, monkeypatch):
    real = HostProber.start

    def start(self, request):
        if request.context.startswith("measure"):  # the hosts' second context fails
            raise InputError(Problem("no /proc/stat here"))
        return real(self, request)

    monkeypatch.setattr(HostProber, "start", start)
    fake, run_dir = Fake(), tmp_path / "run"
    journal = fake.run(experiment(tmp_path, concurrent=1), run_dir)  # two groups
    assert journal.status == "completed"
    said = [w for w in journal.warnings or [] if w.startswith("host probe on")]
    assert sorted(w.split(":")[0] for w in said) == [
        "host probe on app", "host probe on db", "host probe on web"]  # once each
    assert all("no /proc/stat here" in w for w in said)
    hosts = read_hosts(run_dir)
    assert hosts is not None  # the passive phase's series stand
    assert all({r.context for r in s.reports} == {"passive"} for s in hosts.hosts.values())
    fake.assert_every_lease_ended()


def test_probes_off_write_no_series_and_ask_no_sniffer_to_probe(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    exp = experiment(tmp_path).model_copy(update={"probes": Probes(enabled=False)})
    assert fake.run(exp, run_dir).status == "completed"
    assert not (run_dir / "hosts.json").exists()
    assert all("hosts" not in m.model_dump(mode="json") for m in RunDir(run_dir).measurements())


def test_ctrl_c_during_a_measurement_ends_every_lease_and_keeps_the_training(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    fake.clock.interrupt_at = START_S + 40  # training ends at 30: in the first wave
    journal = fake.run(experiment(tmp_path), run_dir)
    assert journal.status == "interrupted"
    assert _journal(run_dir)["status"] == "interrupted"
    fake.assert_every_lease_ended()
    assert (run_dir / "graph.json").exists()
    assert (run_dir / "plan.json").exists()
    assert not (run_dir / "gradients.json").exists()  # nothing finished, nothing claimed


def test_sigterm_ends_the_run_as_ctrl_c_does(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    sent = []

    def terminate(t0: float, _t1: float) -> None:
        if t0 >= START_S + 40 and not sent:
            sent.append(t0)
            os.kill(os.getpid(), signal.SIGTERM)

    fake.clock.steps.append(terminate)
    previous = signal.getsignal(signal.SIGTERM)
    journal = fake.run(experiment(tmp_path), run_dir)
    assert sent
    assert journal.status == "interrupted"
    assert signal.getsignal(signal.SIGTERM) == previous  # the run's handler is gone again
    fake.assert_every_lease_ended()


def test_resume_measures_only_the_links_still_missing(tmp_path):
    exp, run_dir = experiment(tmp_path, concurrent=1), tmp_path / "run"
    first = Fake()
    first.clock.interrupt_at = START_S + 30 + 55  # after the first link, in the second
    seen: list[list[str]] = []  # hosts.json's phases while the second link was measured

    def look(t0: float, _t1: float) -> None:
        if t0 >= START_S + 30 + 50 and not seen and (run_dir / "hosts.json").exists():
            seen.append([p.context for p in read_hosts(run_dir).phases])

    first.clock.steps.append(look)
    assert first.run(exp, run_dir).status == "interrupted"
    # kept at each group's start: a coordinator killed outright leaves the series so far
    assert seen == [["passive", "measure 1/2", "measure 2/2"]]
    kept = RunDir(run_dir).measurements()
    assert len(kept) == 1
    earlier = read_snap(run_dir)
    assert earlier is not None
    earlier_hosts = read_hosts(run_dir)
    assert earlier_hosts is not None
    second = Fake(seed=2)
    journal = second.run(exp, run_dir, resume=True)
    both = read_snap(run_dir)  # the first session's reports kept, the second's after them
    assert both is not None
    assert both.reports[:len(earlier.reports)] == earlier.reports
    assert len(both.reports) > len(earlier.reports)
    series = read_hosts(run_dir)  # the hosts' series too, the earlier phases first
    assert series is not None
    assert series.phases[:len(earlier_hosts.phases)] == earlier_hosts.phases
    assert [p.context for p in series.phases].count("passive") == 2
    assert all(series.hosts[h].reports[:len(s.reports)] == s.reports
               for h, s in earlier_hosts.hosts.items())
    assert journal.status == "completed"
    assert (journal.links_done, journal.links_resumed, journal.links_planned) == (2, 1, 2)
    links = RunDir(run_dir).measurements()
    assert len(links) == 2
    assert links[0] == kept[0]  # the first one untouched
    assert [m.injection for m in links] == ["injections/001.json", "injections/002.json"]
    second.assert_every_lease_ended()


def test_resuming_a_completed_run_touches_no_host_and_keeps_its_journal(tmp_path):
    exp, run_dir = experiment(tmp_path), tmp_path / "run"
    assert Fake().run(exp, run_dir).status == "completed"
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}

    def unreachable(*_: object) -> None:
        raise AssertionError("a completed run's resume connected to a host")

    said: list[str] = []
    journal = run_experiment(exp, run_dir, said.append, resume=True, connect=unreachable)
    assert journal.status == "completed"
    assert journal.links_done == journal.links_planned == 2
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    assert said == ["the run completed all 2 links: nothing to resume"]


def test_a_throughput_collapse_aborts_and_removes_the_delay(tmp_path):
    fake, run_dir = Fake(collapse_when_delayed=True), tmp_path / "run"
    journal = fake.run(experiment(tmp_path), run_dir)
    assert journal.status == "aborted"
    assert "throughput fell below 70%" in (journal.reason or "")
    assert "app:0 -> db:5432" in (journal.reason or "")
    fake.assert_every_lease_ended()


def test_an_injector_that_cannot_clean_up_is_named_and_fails_the_run(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    fake.hosts.failing_injector.add("db")
    journal = fake.run(experiment(tmp_path), run_dir)
    assert journal.status == "completed"
    assert not journal.succeeded
    assert journal.cleanup_problems is not None
    assert len(journal.cleanup_problems) == 1
    assert journal.cleanup_problems[0].startswith("injector on db did not confirm it stopped")
    assert _journal(run_dir)["cleanup_problems"] == journal.cleanup_problems
    assert fake.hosts.daemons_running() == []  # the others were still closed


def test_a_sniffer_that_cannot_start_fails_the_run_and_the_others_are_stopped(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    fake.hosts.broken_sniffer.add("db")
    with pytest.raises(RuntimeFailure, match="sniffer on db did not start"):
        fake.run(experiment(tmp_path), run_dir)
    journal = _journal(run_dir)
    assert journal["status"] == "failed"
    assert "sniffer on db did not start" in journal["reason"]
    assert fake.hosts.daemons_running() == []


@pytest.mark.parametrize(("trouble", "error", "cleanup"), [
    ("refusing_injector", "injector on db did not start: NFQUEUE 4700", None),
    ("dying_injector", "injector on db ended", [
        "injector on db did not confirm it stopped (exit status 1): its watchdog removes its "
        "rules when it dies; check the host (iptables -S | grep LINKGRAD)"]),
])
def test_an_injector_that_cannot_start_or_dies_fails_the_run_and_every_lease_ends(
        tmp_path, trouble, error, cleanup):
    fake, run_dir = Fake(), tmp_path / "run"
    getattr(fake.hosts, trouble).add("db")
    with pytest.raises(RuntimeFailure, match=error):
        fake.run(experiment(tmp_path), run_dir)
    journal = _journal(run_dir)
    assert journal["status"] == "failed"
    assert journal.get("cleanup_problems") == cleanup  # the sniffers stopped as they should
    assert (run_dir / "plan.json").exists()  # the passive phase is kept
    assert fake.hosts.daemons_running() == []


def test_validate_applies_a_placement_and_measures_it_inside_the_prediction(tmp_path):
    exp, run_dir = experiment(tmp_path), tmp_path / "run"
    assert Fake().run(exp, run_dir).status == "completed"
    fake = Fake(seed=3)
    changes = {("app", "db"): Estimate(5.0, 0.0), ("db", "app"): Estimate(5.0, 0.0)}
    [validation] = validate_placements(load_run(run_dir / "gradients.json"),
                                       [PlacementChanges("east.yaml", changes)], 30.0,
                                       lambda _: None, fake.hosts.connect, fake.clock)
    two, none = validation.transactions["two"], validation.transactions["none"]
    assert two.predicted_ms - two.current_ms == pytest.approx(20.0, abs=3.0)  # 2 x 2 x 5 ms
    assert two.inside
    assert none.inside
    assert validation.applied_ms[("app", "db")].mean == pytest.approx(5.0)
    fake.assert_every_lease_ended()


def test_a_run_with_default_parameters_starts_small_grows_and_says_why(tmp_path):
    """No delay, period or training length given: training goes on as long as the spectrum
    needs, the first delay is 1 ms, a link crossed 30 times is measured at a fraction of it,
    one crossed twice at more, and the console says the plan and every change of delay."""
    clock = FakeClock()
    fake = Fake.__new__(Fake)
    fake.clock = clock
    fake.app = FakeApplication(clock, {"/many": 30, "/two": 2})
    fake.hosts = FakeHosts(fake.app)
    exp = Experiment.model_validate({
        **experiment(tmp_path).model_dump(mode="json"),
        "transactions": {"many": "^/many", "two": "^/two"},
        "parameters": {"include": ["app->db"]}})
    said: list[str] = []
    journal = run_experiment(exp, tmp_path / "run", said.append, connect=fake.hosts.connect,
                             clock=clock)
    assert journal.status == "completed", journal.reason
    text = "\n".join(said)
    assert "then as long as the spectrum needs" in text
    assert "plan: period" in text
    assert "plan: ±10% needs an effect of" in text
    assert "adaptive cycle: tcp app:0 -> db:5432 at 1.00 ms" in text
    [m] = RunDir(tmp_path / "run").measurements()
    assert m.adaptive is not None
    assert m.adaptive.record.magnitude_ms == pytest.approx(1.0, rel=0.05)  # never the cap
    assert m.record.magnitude_ms < 1.0  # 30 crossings: a fraction of the first delay
    assert "rough gradients many 3" in text
    assert f"measuring at {m.record.magnitude_ms:.2f} ms" in text
    many = m.transactions["many"]
    assert abs(many.gradient - 30) < 1.5 * many.half_width, many  # about 3 standard errors
    # the effect is kept under the transaction's own spread (plan.json's cap, 13.7 ms): 13.7 /
    # (31 + 4.4) is 0.39 ms, and 0.5 ms is the smallest delay NFQUEUE holds well
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["half_width"] == "10%"
    assert plan["effect_cap_ms"]["many"] == pytest.approx(13.7, abs=0.5)
    assert m.record.magnitude_ms == pytest.approx(0.5)
    assert m.perturbation.throughput_off_per_s is not None


def test_a_gradients_file_naming_a_host_the_run_does_not_have_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    assert Fake().run(experiment(tmp_path), run_dir).status == "completed"
    path = run_dir / "gradients.json"
    data = json.loads(path.read_text())
    data["links"][1]["link"]["src_host"] = "elsewhere"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        load_run(path)
    [problem] = caught.value.problems
    assert problem.file == str(path)
    assert problem.field == "links.1.link.src_host"
    assert f"'elsewhere' is not one of the hosts of {run_dir / 'experiment.json'}" in \
        problem.message


def test_resuming_with_another_experiment_is_refused_and_keeps_the_run(tmp_path):
    exp, run_dir = experiment(tmp_path, concurrent=1), tmp_path / "run"
    first = Fake()
    first.clock.interrupt_at = START_S + 30 + 55  # after the first link
    assert first.run(exp, run_dir).status == "interrupted"
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    other = exp.model_copy(update={"name": "another"})

    def unreachable(*_: object) -> None:
        raise AssertionError("connected although the experiment is another")

    with pytest.raises(InputError) as caught:
        run_experiment(other, run_dir, lambda _: None, resume=True, connect=unreachable)
    [problem] = caught.value.problems
    assert problem.file == str(run_dir / "experiment.json")
    assert problem.field == "name"
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_a_host_that_cannot_be_reached_stops_the_run_before_any_daemon_starts(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    fake.hosts.unreachable.add("db")
    with pytest.raises(RuntimeFailure, match=r"connect: 1 of 3 host\(s\) failed: db: "
                                             r"\(10\.\S+\): timed out \(web, app did not\)"):
        fake.run(experiment(tmp_path), run_dir)
    assert _journal(run_dir)["status"] == "failed"
    assert sorted(fake.hosts.connected) == ["app", "web"]  # tried at once, not stopped at db
    assert fake.hosts.channels == []  # no daemon was started on any host
    assert fake.hosts.daemons_running() == []


def test_an_optional_host_whose_sniffer_cannot_start_is_left_out_and_the_run_goes_on(tmp_path):
    fake, run_dir = Fake(), tmp_path / "run"
    fake.hosts.broken_sniffer.add("db")
    exp = experiment(tmp_path, include=["web->app", "app->web", "app->db", "db->app"])
    exp = exp.model_copy(update={"hosts": tuple(h.model_copy(update={"optional": h.name == "db"})
                                                 for h in exp.hosts)})
    journal = fake.run(exp, run_dir)
    assert journal.status == "completed"
    said = [w for w in journal.warnings or [] if w.startswith("db left out (optional)")]
    assert said, journal.warnings
    assert "could not start the sniffer" in said[0]
    measured = {(m.link.src_host, m.link.dst_host) for m in RunDir(run_dir).measurements()}
    assert measured
    assert all("db" not in pair for pair in measured), measured
    fake.assert_every_lease_ended()
