"""The records a run writes, typed: the run journal (`run.json`), each link's measurement
(`gradients.json`), the plan (`plan.json`), and the parts of the other files that are read back
(the baseline, the graph, the experiment as run). Read back strictly: a file cut short, edited
by hand or from another tool is refused field by field."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Annotated, Literal, NamedTuple

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)

from coordinator.config import bounds
from coordinator.config.experiment import DAY_S, MAX_DELAY_MS
from coordinator.config.fields import Float, Int, Str, compile_regex, is_none
from linkgrad.graph import GraphLink
from linkgrad.hostprobe.load import HostLoad
from linkgrad.protocol.record import InjectionRecord
from linkgrad.snap.evidence import LinkKey
from linkgrad.spectral.result import GradientResult
from linkgrad.spectral.wave_plan import Precision, WavePlan
from linkgrad.watch import ResponseBaseline

Pair = tuple[str, str]
Status = Literal["running", "completed", "aborted", "interrupted", "failed"]
MAX_CYCLES = 1_000_000  # a record's cycles: 0.1 s periods for a day, far beyond any run
MAX_BINS = 2**20


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _ReadBack(BaseModel):
    """A record read only for some of its fields: those are checked, the rest left alone."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class Coordinator(_Record):
    """The process that runs a run, so that a `running` journal whose process is gone is
    known to be interrupted: SIGKILL leaves no chance to write it. A pid is only unique
    within a boot and while its process lives, so the boot and the process's start go with
    it."""

    pid: Int = Field(ge=1)
    host: Str  # the machine's name (a run directory may be read elsewhere)
    boot_id: Str | None = None  # /proc/sys/kernel/random/boot_id
    start_ticks: Int | None = None  # the process's start, /proc/PID/stat field 22


class RunJournal(_Record):
    """`run.json`: how the run went (after chaostoolkit's journal)."""

    status: Status
    started: Float = Field(ge=0, lt=bounds.MAX_UNIX_S)  # unix s
    links_done: Int = Field(ge=0)  # measurements in gradients.json (this and resumed ones)
    links_resumed: Int = Field(0, ge=0)  # of them, already there when the run was resumed
    links_planned: Int | None = Field(None, ge=0)  # measurements the run set out to make
    warnings: list[Str] | None = None  # what a daemon could not do
    reason: Str | None = None  # why it was aborted or failed
    cleanup_problems: list[Str] | None = None  # daemons that did not confirm they stopped
    ended: Float | None = Field(None, ge=0, lt=bounds.MAX_UNIX_S)
    coordinator: Coordinator | None = None  # while running: who writes it

    @property
    def succeeded(self) -> bool:
        return self.status == "completed" and not self.cleanup_problems


def _nan_as_none(value: object) -> object:
    """A mean over no request is NaN when computed; on disk and back it is null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value
Measured = Annotated[Float | None, BeforeValidator(_nan_as_none)]


class Perturbation(_Record):
    """What the wave did to the application: its on half-periods against its off ones, at the
    same offered load and interleaved with them (thesis Tables 5.1 and 5.2: throughput and
    response time with and without injection). Throughput counts requests by their start;
    under an open-loop load it falls only when requests are lost, under a closed one (a fixed
    number of users) by about the added response time."""

    throughput_per_s: Measured  # while on
    throughput_change: Measured  # on / off - 1 (none without requests while off)
    mean_response_ms: Measured  # while on (none without requests)
    mean_response_change_ms: Measured  # on - off
    throughput_off_per_s: Measured = None
    mean_response_off_ms: Measured = None
    throughput_change_se: Measured = None  # Poisson counts: sqrt(1/n_on + 1/n_off)

    @model_validator(mode="after")
    def _sane(self, info: ValidationInfo) -> Perturbation:
        if bounds.reading_back(info) and (problems := bounds.perturbation_problems(self)):
            raise ValueError("; ".join(problems))
        return self



class RunInjection(InjectionRecord):
    """The injection record as `gradients.json` has always kept it: no null fields."""

    absent_when_none = ("n_bins", "link")


def _sane_record(record: RunInjection) -> RunInjection:
    """What the arithmetic on a record read back can take (a bin array per cycle, a delay
    divided by): the limits a run's own records are far within."""
    checks = [(record.cycles <= MAX_CYCLES, f"cycles {record.cycles} is above {MAX_CYCLES}"),
              (record.period_s <= DAY_S, f"period_s {record.period_s:g} is above {DAY_S:g}"),
              (record.magnitude_ms <= MAX_DELAY_MS,
               f"magnitude_ms {record.magnitude_ms:g} is above {MAX_DELAY_MS:g}"),
              (record.n_bins is None or record.n_bins <= MAX_BINS,
               f"n_bins {record.n_bins} is above {MAX_BINS}"),
              (record.start < 1e10, f"start {record.start:g} is no unix time (after 2286)")]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)
    return record


def _transaction(entry: GradientResult, info: ValidationInfo) -> GradientResult:
    """A result read back from a file: within what a measurement can give."""
    if bounds.reading_back(info) and (problems := bounds.transaction_problems(entry)):
        raise ValueError("; ".join(problems))
    return entry
TransactionEstimate = Annotated[GradientResult, AfterValidator(_transaction)]


class WaveEstimate(_Record):
    """One square wave on one link and every transaction's gradient from it."""

    # the injection record (docs/offline.md), at the delay actually applied
    record: Annotated[RunInjection, AfterValidator(_sane_record)]
    requested_ms: Float = Field(ge=0, le=MAX_DELAY_MS)
    packets_delayed: Int = Field(ge=0, le=bounds.MAX_COUNT)
    perturbation: Perturbation
    transactions: dict[str, TransactionEstimate]


class MeasuredLink(_Record):
    """The link a measurement was on, as the run's graph had it (`of` a `GraphLink`); what an
    older or hand-made file leaves out is None."""

    proto: Str | None = None
    src_host: Str
    src_addr: Str | None = None
    src_port: Int | None = None
    dst_host: Str
    dst_addr: Str | None = None
    dst_port: Int | None = None
    messages: Int | None = None
    src_process: Str | None = None
    dst_process: Str | None = None
    label: Str

    @classmethod
    def of(cls, link: GraphLink) -> MeasuredLink:
        return cls(**asdict(link), label=link.label)

    @property
    def paths_key(self) -> str:
        """Its host pair as the causal paths count crossings: "src->dst"."""
        return f"{self.src_host}->{self.dst_host}"

    def snap_key(self) -> LinkKey | None:
        """The link's ends for SNAP's evidence; None when a file left its ports out (a port
        of 0 would match every connection between the two hosts)."""
        if self.src_port is None or self.dst_port is None:
            return None
        return LinkKey(self.src_host, self.src_port, self.dst_host, self.dst_port)


class MeasurementKey(NamedTuple):
    """What a finished measurement is known by (for --resume): its link, and the delay of
    `magnitudes_ms` it was measured at (None: the planned delay)."""

    label: str
    planned_ms: float | None = None


class LinkMeasurement(WaveEstimate):
    """An entry of `gradients.json`: a link's measurement, the files that reproduce it."""

    link: MeasuredLink
    adaptive: WaveEstimate | None = None  # the adaptive cycle before it, if one ran
    concurrent_with: Int = Field(0, ge=0, le=bounds.MAX_COUNT)  # other links measured with it
    # the delay of magnitudes_ms this measurement was at; absent: the planned delay
    planned_ms: Float | None = Field(None, gt=0, le=MAX_DELAY_MS, exclude_if=is_none)
    injection: Str | None = None  # injections/NNN.json
    concurrent_injections: list[Str] = Field(default_factory=list)
    recompute_argv: list[Str] = Field(default_factory=list)
    # SNAP's Table 2 classes on the link: phase ("passive", "measurement") -> class -> seconds
    snap: dict[Str, dict[Str, Float]] | None = Field(None, exclude_if=is_none)
    # each host's load while the link was measured (its probe's reports over the cycles)
    hosts: dict[Str, HostLoad] | None = Field(None, exclude_if=is_none)

    @property
    def pair(self) -> Pair:
        """The hosts the link goes between (a latency is per host pair)."""
        return self.link.src_host, self.link.dst_host

    @property
    def key(self) -> MeasurementKey:
        return MeasurementKey(self.link.label, self.planned_ms)

    @property
    def window(self) -> tuple[float, float]:
        """The square wave's cycles, Unix s."""
        return self.record.start, self.record.start + self.record.period_s * self.record.cycles



class TransactionBaseline(_ReadBack):
    requests: Int = Field(ge=1, le=bounds.MAX_COUNT)  # the run writes no mean of fewer than 2
    mean_ms: Float = Field(ge=0, le=bounds.MAX_RESPONSE_MS)  # a mean of a web log's response times
    se_ms: Float = Field(ge=0, le=bounds.MAX_RESPONSE_MS)
    sd_ms: Float | None = Field(None, ge=0, le=bounds.MAX_RESPONSE_MS)


class BaselineFile(_ReadBack):
    """`baseline.json`: each transaction's response times in the passive phase."""

    training: tuple[Float, Float] | None = None  # the passive phase, unix s
    transactions: dict[Str, TransactionBaseline]

    @classmethod
    def of(cls, baselines: dict[str, ResponseBaseline], start: float, end: float
           ) -> BaselineFile:
        return cls(training=(start, end), transactions={
            name: TransactionBaseline(**asdict(b)) for name, b in baselines.items()})


class GradientAnswerAsRead(_ReadBack):
    """`linkgrad gradient --json`, as far as a prediction reads it."""

    injection: Annotated[RunInjection, AfterValidator(_sane_record)]
    transactions: dict[str, TransactionEstimate]
    baseline: BaselineFile | None = None  # None: printed by a linkgrad before it had one


class GraphEntry(_ReadBack):
    """An entry of `graph.json` (written as `MeasuredLink`), as far as it is read."""

    src_host: Str
    dst_host: Str
    proto: Str
    src_addr: Str | None = None
    dst_addr: Str | None = None


class HostAsRun(_ReadBack):
    name: Str
    address: Str | None = None  # as the experiment gave it (None: its SSH endpoint's)


class WebLogAsRun(_ReadBack):
    path: Str
    format: Literal["nginx", "apache", "csv"] = "nginx"
    log_format: Str | None = None


class PathsAsRun(_ReadBack):
    """How the run linked its causal paths (`experiment.paths`), to link its trace again."""

    linker: Literal["context", "wap5", "fcfs"] = "context"
    window_s: Float = Field(2.0, ge=0.001, le=3600)
    budget: Float = Field(0.1, gt=0, le=100)


def _regexes(transactions: dict[str, str]) -> dict[str, str]:
    for name, pattern in transactions.items():
        compile_regex(pattern, f"transaction {name!r}")
    return transactions


class ExperimentAsRun(_ReadBack):
    """`experiment.json`, as far as a prediction or a report reads it."""

    @property
    def app(self) -> str:
        """The application it measured, as the explanation's calibration groups runs."""
        return self.application or self.name

    name: Str = "run"
    application: Str | None = None  # None: an older run's, or the name stands for it
    hosts: list[HostAsRun] = Field(default_factory=list)
    web_log: WebLogAsRun | None = None
    transactions: Annotated[dict[Str, Str], AfterValidator(_regexes)] = Field(
        default_factory=dict)
    paths: PathsAsRun = Field(default_factory=PathsAsRun)


class PlanFile(_ReadBack):
    """`plan.json`, and what `linkgrad plan` prints: the square wave planned from training
    requests (`wave_plan.plan_wave`) and why."""

    period_s: Float = Field(gt=0, le=DAY_S)
    cycles: Int = Field(ge=1, le=MAX_CYCLES)
    magnitude_ms: Float = Field(ge=0, le=MAX_DELAY_MS)  # the first delay, or the fixed one
    n_bins: Int = Field(ge=1, le=MAX_BINS)
    notes: list[Str] = Field(default_factory=list)
    training: tuple[Float, Float] | None = None  # the passive phase, unix s
    half_width: Str | None = None  # the precision planned for: '10%' or gradient units
    # per transaction: the 95% noise on a wave's effect, and the effect's cap (its spread)
    effect_noise_ms: dict[Str, Float] = Field(default_factory=dict)
    effect_cap_ms: dict[Str, Float] = Field(default_factory=dict)
    training_requests_per_s: Float | None = None
    training_failed_fraction: Float | None = None  # None: the log has no HTTP status

    @classmethod
    def of(cls, wave: WavePlan, half_width: Precision, training: tuple[float, float] | None,
           requests_per_s: float | None = None, failed_fraction: float | None = None
           ) -> PlanFile:
        def ms(values: dict[str, float]) -> dict[str, float]:
            return {n: v * 1e3 for n, v in values.items() if math.isfinite(v)}

        def finite(x: float | None) -> float | None:
            return x if x is not None and math.isfinite(x) else None

        return cls(period_s=wave.period_s, cycles=wave.cycles,
                   magnitude_ms=wave.magnitude_s * 1e3, n_bins=wave.n_bins,
                   notes=list(wave.notes), training=training, half_width=str(half_width),
                   effect_noise_ms=ms(wave.noise_s), effect_cap_ms=ms(wave.effect_cap_s),
                   training_requests_per_s=finite(requests_per_s),
                   training_failed_fraction=finite(failed_fraction))
