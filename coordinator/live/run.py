"""`linkgrad run experiment.yaml`: the measurement algorithm of thesis §3.2 on live hosts.

Its phases, each a function of its own:
1. `open_session`: connect (SSH, verified keys), start a sniffer on every host, follow the web log.
2. `train`: the sniffers' reports make the communication graph; the requests of the passive
   phase give the baseline and the square wave (`plan_measurement`: period from the quietest
   frequency, delay for the wanted interval).
3. `measure_all`: for every link (each direction), an adaptive cycle to rescale the delay by a
   rough gradient, then the measurement; the injector's actual mean delay and our estimator
   give every transaction's gradient. Throughput and errors are watched throughout: a limit
   crossed aborts.
4. `finish`: every lease ends (the daemons stop injecting and remove their rules), the log is
   saved and the journal written, whatever happened before.

Everything measured is written as it is measured; Ctrl-C or SIGTERM ends the run through
`finish` and keeps what was measured. A run can be resumed, skipping finished links.
"""

from __future__ import annotations

from pathlib import Path

from coordinator.config.coordinator_process import this_coordinator
from coordinator.config.experiment import Experiment
from coordinator.config.run_dir import RunDir, read_record
from coordinator.config.run_records import RunJournal
from coordinator.live import passive, probes
from coordinator.live.clock import SYSTEM, Clock
from coordinator.live.measure import measure_all
from coordinator.live.session import Connect, Say, Session, sigterm_interrupts, ssh_connect
from coordinator.live.ssh import Endpoint
from coordinator.live.training import plan_measurement, train
from linkgrad.errors import InputError, Problem
from linkgrad.protocol.snap import Profile
from linkgrad.watch import Aborted

SAME_ON_RESUME = ("name", "hosts", "transactions", "web_log")


def _same_experiment(experiment: Experiment, path: Path) -> None:
    """InputError unless `path` (a run directory's experiment.json) is the same experiment as
    to what it measures: resuming with another would overwrite it and mix two runs' links."""
    if not path.exists():
        return
    before = RunDir(path.parent).read("experiment.json")
    now = experiment.model_dump(mode="json")
    differ = [key for key in SAME_ON_RESUME
              if isinstance(before, dict) and before.get(key) != now.get(key)]
    if not isinstance(before, dict) or differ:
        raise InputError(Problem(
            "this run directory holds another experiment's run (differs in "
            f"{', '.join(differ) or 'everything'} from {experiment.source or 'the experiment'}"
            "): resume it with the experiment file it was started with", str(path),
            field=differ[0] if differ else None))


def _finished(run_dir: Path) -> RunJournal | None:
    """The journal of a run that completed every link it planned, else None."""
    path = run_dir / "run.json"
    if not path.exists():
        return None
    journal = read_record(path, RunJournal, "how the run went")
    complete = (journal.status == "completed" and journal.links_planned is not None
                and journal.links_done >= journal.links_planned)
    return journal if complete else None


def run_experiment(experiment: Experiment, run_dir: Path, say: Say, resume: bool = False,
                   connect: Connect = ssh_connect, clock: Clock = SYSTEM,
                   endpoints: dict[str, Endpoint] | None = None) -> RunJournal:
    """The whole run; its journal (also `run_dir/run.json`). Raises only what is not the
    run's own outcome (a bug, a failure to reach a host is `failed` and re-raised).
    `endpoints`: the hosts' as the command checked them (`check_local_files`), not looked up
    again."""
    out = RunDir(run_dir)
    if resume and (finished := _finished(run_dir)) is not None:
        say(f"the run completed all {finished.links_planned} links: nothing to resume")
        return finished  # its files stay as they are: no host is touched
    if resume:
        _same_experiment(experiment, run_dir / "experiment.json")
    out.write("experiment.json", experiment.model_dump(mode="json"))
    done = {m.key: m for m in out.measurements()} if resume else {}
    # who is running it: a coordinator killed outright leaves `running`, and this tells
    journal = RunJournal(status="running", started=clock.time(), links_done=len(done),
                         links_resumed=len(done), coordinator=this_coordinator())
    out.write("run.json", journal)
    session = Session(experiment, connect, clock, endpoints=endpoints)
    with sigterm_interrupts():
        try:
            journal = journal.model_copy(update={"warnings": open_session(session, say)})
            training = train(session, out, say)
            base, plan, links = plan_measurement(session, out, training, say)
            planned = len(links) * max(1, len(experiment.parameters.magnitudes_ms))
            journal = journal.model_copy(update={"links_planned": planned})
            out.write("run.json", journal)
            measure_all(session, out, links, plan, base, done, say)
            journal = journal.model_copy(update={"status": "completed"})
        except Aborted as e:
            journal = journal.model_copy(update={"status": "aborted", "reason": str(e)})
        except KeyboardInterrupt:
            journal = journal.model_copy(update={"status": "interrupted"})
        except Exception as e:
            journal = journal.model_copy(update={"status": "failed", "reason": str(e)})
            raise
        finally:
            journal = finish(session, out, journal, say)
    return journal


def open_session(session: Session, say: Say) -> list[str]:
    """Phase 1: connect, start the sniffers, their SNAP profiling (for the whole run) and host
    probes (the passive phase's context), follow the log; what a daemon cannot do."""
    session.open()
    snap = session.experiment.snap
    if snap.enabled:
        session.warnings += session.start_profiling(Profile(
            report_interval_s=snap.report_interval_s, table_interval_s=snap.table_interval_s,
            cpu_lower_pct=snap.cpu_lower_pct, cpu_upper_pct=snap.cpu_upper_pct,
            max_queuing_delay_s=snap.max_queuing_delay_ms / 1e3,
            delayed_ack_timeout_s=snap.delayed_ack_timeout_ms / 1e3,
            socket_calls=snap.socket_calls))
    session.warnings += probes.open_phase(session, "passive")
    for warning in session.warnings:
        say(f"[yellow]{warning}")
    return session.warnings


def finish(session: Session, out: RunDir, journal: RunJournal, say: Say) -> RunJournal:
    """Phase 4, whatever happened: every lease ends (no injection survives the run), the log
    is kept, the journal written."""
    # what the daemons could not do, from the start on (a probe that failed mid-run too)
    journal = journal.model_copy(update={"warnings": list(session.warnings) or None})
    try:  # SNAP's evidence is no reason to skip the cleanup below
        if unprofiled := session.stop_profiling():  # each host's last SNAP report, before
            journal = journal.model_copy(update={  # its sniffer goes
                "warnings": [*(journal.warnings or []), *unprofiled]})
            say("[yellow]" + "; ".join(unprofiled))
        if kept_aside := passive.save(
                out, session.experiment.name, session.profiling, session.snap_reports,
                {**session.addresses, **session.ipv6_addresses},
                session.experiment.snap.max_queuing_delay_ms * 1e3):
            journal = journal.model_copy(update={
                "warnings": [*(journal.warnings or []), *kept_aside]})
            say("[yellow]" + "; ".join(kept_aside))
    except Exception as e:  # reported in run.json; the leases must still end
        journal = journal.model_copy(update={
            "warnings": [*(journal.warnings or []), f"SNAP's profile not saved: {e}"]})
        say(f"[yellow]SNAP's profile not saved: {e}")
    try:  # nor are the hosts' series
        if said := [*probes.stop(session), *probes.save(session, out)]:
            journal = journal.model_copy(update={
                "warnings": [*(journal.warnings or []), *said]})
            say("[yellow]" + "; ".join(said))
    except Exception as e:
        journal = journal.model_copy(update={
            "warnings": [*(journal.warnings or []), f"the host probes' series not saved: {e}"]})
        say(f"[yellow]the host probes' series not saved: {e}")
    # after SNAP's last reports (stop_profiling), which may carry losses of their own
    if lost := session.loss_warnings():
        journal = journal.model_copy(update={"warnings": [*(journal.warnings or []), *lost]})
        say("[yellow]" + "; ".join(lost))
    if problems := session.close():
        journal = journal.model_copy(update={"cleanup_problems": problems})
        say("[red]cleanup: " + "; ".join(problems))
    if session.log is not None:
        session.log.save(out.path / "weblog.log")
    done = len(out.measurements())
    journal = journal.model_copy(update={"ended": session.clock.time(), "links_done": done})
    out.write("run.json", journal)
    return journal
