"""Each link measurement as a pScheduler archive record, the document perfSONAR 5's Logstash
takes on its `http` input (pScheduler's `http` archiver PUTs the same): what the common
pipeline reads is there (`test.type` and `test.spec` with `source` and `dest`, `tool`,
`participants`, `run.start-time`/`end-time`/`added`, `task.detail.duration`, `task.schedule`,
`task.href` ending `/tasks/<uuid>` and `run.href` ending `/runs/<uuid>` for its dissect
filter), and `result.succeeded`.

The test type is `linkgrad`, so the archive indexes the records as `pscheduler_linkgrad`
(alias `pscheduler`). The result keeps a few indexed fields (each transaction's gradient and
interval, SNAP's seconds) and the whole measurement under `json`, a name the archive's index
template stores without indexing. Identifiers are UUIDs derived from the experiment, link
and wave, so exporting a run twice gives the same records. Pure.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from coordinator.config.run_records import LinkMeasurement
from coordinator.export.source import RunExport

__all__ = ["TEST_TYPE", "ArchiveRecord", "endpoints", "iso_duration", "iso_time", "record",
           "records"]

TEST_TYPE = "linkgrad"
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/linkgrad/linkgrad")


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True,
                              validate_by_name=True)


class Test(_Doc):
    type: str = TEST_TYPE
    spec: dict[str, object]


class Tool(_Doc):
    name: str = "linkgrad"
    version: str


class TaskSchedule(_Doc):
    start: str  # ISO 8601


class Schedule(TaskSchedule):
    duration: str  # ISO 8601


class RunPart(_Doc):
    start_time: str = Field(alias="start-time")
    end_time: str = Field(alias="end-time")
    duration: str
    added: str
    state: str = "finished"
    state_display: str = Field("Finished", alias="state-display")
    href: str
    task_href: str = Field(alias="task-href")


class TaskDetail(_Doc):
    duration: str
    runs: int = 1
    added: str
    enabled: bool = True


class TaskPart(_Doc):
    schema_: int = Field(1, alias="schema")
    test: Test
    tool: str = "linkgrad"
    schedule: TaskSchedule  # the pipeline moves it to the record's schedule
    detail: TaskDetail
    href: str


class ArchiveRecord(_Doc):
    """One pScheduler run's record as the archiver daemon builds it (`json['result']`)."""

    id: str
    schedule: Schedule
    test: Test
    tool: Tool
    run: RunPart
    task: TaskPart
    participants: list[str]
    result: dict[str, object]
    reference: dict[str, str]


def iso_time(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).isoformat()


def iso_duration(seconds: float) -> str:
    """'PT32S', 'PT0.5S': the form Logstash's duration filter reads (no exponent)."""
    text = f"{round(seconds, 3):.3f}".rstrip("0").rstrip(".")
    return f"PT{text}S"


def endpoints(run: RunExport, m: LinkMeasurement) -> tuple[str, str]:
    """The link's source and destination as the archive resolves them: the address the
    run's graph saw, else experiment.json's, else the host's name."""
    link = m.link
    return (link.src_addr or run.addresses.get(link.src_host, link.src_host),
            link.dst_addr or run.addresses.get(link.dst_host, link.dst_host))


def _result(m: LinkMeasurement) -> dict[str, object]:
    transactions = [{"name": name, "gradient": t.gradient,
                     "ci95-low": t.ci95[0] if t.ci95 else None,
                     "ci95-high": t.ci95[1] if t.ci95 else None,
                     "thesis-gradient": t.thesis_gradient, "requests": t.requests}
                    for name, t in sorted(m.transactions.items())]
    return {"schema": 1, "succeeded": True, "link": m.link.label,
            "magnitude-ms": m.record.magnitude_ms, "transactions": transactions,
            "snap-seconds": m.snap or {}, "json": m.model_dump(mode="json")}


def record(run: RunExport, m: LinkMeasurement, observer: str, version: str) -> ArchiveRecord:
    """The record of one measurement, its hrefs on `observer` (the host that scheduled it)."""
    source, dest = endpoints(run, m)
    task_id = uuid.uuid5(_NAMESPACE, f"{run.experiment}\n{m.link.label}")
    run_id = uuid.uuid5(task_id, f"{m.record.start!r}\n{m.planned_ms!r}")
    task_href = f"https://{observer}/pscheduler/tasks/{task_id}"
    duration_s = m.record.period_s * m.record.cycles
    start, end = m.record.start, m.record.start + duration_s
    added = iso_time(run.journal.started if run.journal else start)
    test = Test(spec={"schema": 1, "source": source, "dest": dest, "link": m.link.label,
                      "protocol": m.link.proto or "tcp", "period": iso_duration(m.record.period_s),
                      "cycles": m.record.cycles, "magnitude-ms": m.record.magnitude_ms,
                      "requested-ms": m.requested_ms})
    duration = iso_duration(duration_s)
    return ArchiveRecord(
        id=str(run_id), schedule=Schedule(start=iso_time(start), duration=duration), test=test,
        tool=Tool(version=version),
        run=RunPart(start_time=iso_time(start), end_time=iso_time(end), duration=duration,
                    added=added, href=f"{task_href}/runs/{run_id}", task_href=task_href),
        task=TaskPart(test=test, schedule=TaskSchedule(start=iso_time(start)),
                      detail=TaskDetail(duration=duration, added=added), href=task_href),
        participants=[source, dest], result=_result(m),
        reference={"experiment": run.experiment, "run": run.run})


def records(run: RunExport, observer: str, version: str) -> list[ArchiveRecord]:
    """Every measurement of the run (each delay of a link measured at several), in order."""
    return [record(run, m, observer, version) for m in run.links]
