"""The experiment file's model (YAML): hosts and how to reach them, the web log, the
transactions, the measurement's parameters and limits (`experiment_file` loads it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainSerializer,
    PrivateAttr,
    Strict,
    field_validator,
    model_validator,
)

from coordinator.config.fields import (
    Bool,
    Float,
    HostAddress,
    InputModel,
    Int,
    Port,
    RunName,
    Str,
    TestbedTag,
    compile_regex,
)
from linkgrad.graph import parse_selector
from linkgrad.protocol.record import MIN_MAGNITUDE_MS
from linkgrad.spectral.wave_plan import Precision


def _precision(value: object) -> Precision:
    if isinstance(value, Precision):
        return value
    if isinstance(value, str):
        precision = Precision.parse(value)
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("a percentage like '10%' or a positive number")
    else:
        precision = Precision(float(value), relative=False)
    if not precision.relative and precision.value > MAX_HALF_WIDTH:
        raise ValueError(f"a half-width of {precision.value:g} is above {MAX_HALF_WIDTH:g}")
    return precision


# YAML `half_width: 10%` or `half_width: 0.2`; written back the same way (experiment.json)
HalfWidth = Annotated[Precision, BeforeValidator(_precision), PlainSerializer(str)]


def _selector(text: str) -> str:
    try:
        parse_selector(text)  # ValueError: what a selector looks like, or the regex's error
    except (OverflowError, RecursionError) as e:  # a repetition count too large for re
        raise ValueError(f"{text!r}: bad regex after 're:': {e}") from None
    return text


# `app1->db`, `*->web`, `db:5432->*` (host names exact) or `re:REGEX` (linkgrad.graph.Selector);
# each checked on its own, so an error names its index (parameters.include.0)
LinkSelector = Annotated[str, Strict(), AfterValidator(_selector)]

# What no experiment means: each cap is far beyond any real use and far below what breaks
# the arithmetic (`period_s: 1e308` overflowed, `cycles: 1e9` allocated 30 GB).
DAY_S = 86_400.0
MAX_DELAY_MS = 10_000.0  # a 10 s delay is an outage, not a perturbation
# and the least is a microsecond (MIN_MAGNITUDE_MS): an injection record holds no less, and a
# run records the delay asked where no packet came while on
MAX_HALF_WIDTH = 100.0
MAX_K = 10_000  # requests per bin
MAX_SCALE_D = 1000.0  # the delay scale factor d
_Strict = InputModel


class Host(_Strict):
    """A host, by its ssh_config entry, or by address, port, user and key (which also
    override that entry)."""

    name: Str  # as in the ssh_config (Host NAME), if there is one
    address: HostAddress | None = None  # default: the ssh_config's HostName
    port: Port | None = None  # SSH port (default: ssh_config's, or 22)
    user: Str | None = None  # default: ssh_config's, or root
    key: Path | None = None  # identity file (default: ssh_config's)
    # a host the run may go on without: one that cannot be reached or whose sniffer does not
    # start is left out, said, and its links are not measured; a host that is not optional
    # and cannot be reached stops the command before any daemon is started
    optional: Bool = False


class Ssh(_Strict):
    config: Path | None = None  # an ssh_config with a Host entry per host (or hosts' fields)
    known_hosts: Path | None = None  # default: the ssh_config's UserKnownHostsFile
    python: Str = "python3"  # on the hosts: a python that has linkgrad's injector and sniffer
    connect_timeout_s: Float = Field(10.0, gt=0, le=600)
    # hosts connected to (and their daemons started and stopped) at once: sshd's MaxStartups
    # refuses more than 10 unauthenticated connections at once by default (behind a bastion
    # every host's connection counts against the bastion's)
    parallel: Int = Field(10, ge=1, le=1000)


class Nodes(_Strict):
    """The application's processes: a link counts when both its ends are one of them."""

    processes: tuple[Str, ...] = ()  # names as /proc/PID/comm gives them (nginx, postgres...)
    ports: tuple[Port, ...] = ()  # or the ports its servers listen on


class WebLog(_Strict):
    host: Str
    path: Str
    format: Literal["nginx", "apache", "csv"] = "nginx"
    log_format: Str | None = None


class Question(_Strict):
    """A placement to be predicted (`linkgrad predict --placement`'s `move:`)."""

    move: dict[Str, Str] = Field(min_length=1, max_length=1000)


class Parameters(_Strict):
    """Thesis §3.2's knobs and linkgrad's safety limits."""

    training_s: Float | None = Field(None, ge=10, le=DAY_S, description="passive phase: graph and "
                                     "baseline. Default: at least min_training_s, then until "
                                     "the spectrum has what it needs (max_training_s at most)")
    min_training_s: Float = Field(60.0, ge=10, le=DAY_S,
                                  description="the graph needs this much at least")
    max_training_s: Float = Field(600.0, ge=10, le=DAY_S,
                                  description="automatic training stops here")
    message_threshold: Int = Field(20, ge=1, le=10**9,
                                   description="messages for a link to count")
    k: Int = Field(8, ge=1, le=MAX_K,
                   description="requests per bin (ΔTs = mean + 3 std of k-spans)")
    n_bins: Int = Field(32, ge=8, le=2**16, description="N, bins per measurement window")
    chunks: Int = Field(9, ge=2, le=1000,
                        description="M, training chunks for the baseline spectrum")
    scale_d: Float = Field(30.0, gt=0, le=MAX_SCALE_D, description="delay scale factor d")
    cycles: Int | None = Field(None, ge=2, le=512, description="square-wave cycles per "
                               "measurement. Default: as many as half_width needs with the "
                               "effect under the response time's spread (6 at least, "
                               "max_duration_s at most)")
    period_s: Float | None = Field(None, ge=0.1, le=3600,
                                   description="fix the period (else training's)")
    magnitude_ms: Float | None = Field(None, ge=MIN_MAGNITUDE_MS, le=MAX_DELAY_MS,
                                       description="fix the delay (else d·σ rule)")
    half_width: HalfWidth = Field(Precision(0.1, relative=True), description="wanted 95% CI "
                                  "half-width of a gradient: '10%' of it (the default; ±0.1 "
                                  "below a gradient of 1) or a number in gradient units")
    adaptive: Bool = True  # one small cycle first to rescale the delay by a rough gradient
    concurrent: Int = Field(1, ge=1, le=8, description="links measured at once, each at its "
                            "own frequency: n, n-1, ... cycles in one window, no fundamental "
                            "an odd harmonic of another's; fitted jointly")
    max_delay_ms: Float = Field(100.0, ge=MIN_MAGNITUDE_MS, le=MAX_DELAY_MS)
    max_duration_s: Float = Field(900.0, gt=0, le=DAY_S, description="cap per measurement")
    throughput_drop_limit: Float = Field(0.3, gt=0, le=1, description="abort above this")
    error_rate_limit: Float = Field(0.05, gt=0, le=1, description="abort when the fraction of "
                                    "failed requests (5xx, 499, 408) over the last 10 s exceeds "
                                    "the training's by this")
    include: tuple[LinkSelector, ...] = Field((), description="links to measure (empty: all): "
                                              "SRC->DST, each side a host name, HOST:PORT or "
                                              "*; or re:REGEX on 'src->dst' and the label")
    exclude: tuple[LinkSelector, ...] = Field((), description="links not to measure (same "
                                              "selectors)")
    magnitudes_ms: tuple[Float, ...] = Field((), max_length=16, description="measure every "
                                             "link at each of these delays (the curvature of "
                                             "thesis ch. 6)")
    strategy: Literal["active", "passive-first"] = Field(
        "active", description="active: inject every selected link; passive-first: after the "
        "passive phase, inject only the links the questions need or the passive evidence "
        "leaves ambiguous, and give the rest their calibrated passive gradients")
    questions: tuple[Question, ...] = Field((), max_length=64, description="with "
                                            "passive-first: the placements to be predicted "
                                            "({move: {HOST: SITE}}): every link of a moved "
                                            "host is injected")
    inject_at: Literal["receiver", "sender"] = Field(
        "receiver", description="which end of a link holds its packets. The receiver delays "
        "them as a network does; the sender keeps held packets charged to the socket, so TCP "
        "autocorking holds its next write back and two-piece responses pay the delay twice")

    @model_validator(mode="after")
    def _training_bounds(self) -> Parameters:
        if self.max_training_s < self.min_training_s:
            raise ValueError(f"max_training_s {self.max_training_s:g} is below min_training_s "
                             f"{self.min_training_s:g}")
        return self

    @field_validator("magnitudes_ms")
    @classmethod
    def _magnitudes(cls, values: tuple[float, ...]) -> tuple[float, ...]:
        if values and (len(set(values)) < 2 or min(values) < MIN_MAGNITUDE_MS):
            raise ValueError(f"give two or more different delays of at least "
                             f"{MIN_MAGNITUDE_MS:g} ms (or none)")
        return tuple(sorted(values))

    @model_validator(mode="after")
    def _questions_need_passive_first(self) -> Parameters:
        if self.questions and self.strategy != "passive-first":
            raise ValueError("questions choose the links to inject only with strategy: "
                             "passive-first (the active strategy injects every link)")
        return self

    @model_validator(mode="after")
    def _within_cap(self) -> Parameters:
        if self.magnitudes_ms and max(self.magnitudes_ms) > self.max_delay_ms:
            raise ValueError(f"magnitudes_ms {max(self.magnitudes_ms):g} is above max_delay_ms "
                             f"{self.max_delay_ms:g}")
        if self.magnitude_ms is not None and self.magnitude_ms > self.max_delay_ms:
            raise ValueError(f"magnitude_ms {self.magnitude_ms:g} is above max_delay_ms "
                             f"{self.max_delay_ms:g}")
        return self


class Workload(_Strict):
    """A command run on a host for the whole run (a testbed has no users of its own)."""

    host: Str
    argv: tuple[Str, ...] | None = Field(None, min_length=1)
    rate_per_s: Float | None = Field(None, gt=0, le=100_000)  # or: the testbed's load generator
    clients: Int | None = Field(None, ge=1, le=1000)  # ... or closed loop: this many users
    think_s: Float | None = Field(None, ge=0, le=3600)  # closed loop: mean think (default 0.5)
    mix: Str | None = None  # /PATH=WEIGHT,... (default: every transaction)
    timeout_s: Float = Field(30.0, gt=0, le=3600)  # the load generator's clients give up after this

    @model_validator(mode="after")
    def _one(self) -> Workload:
        given = [f for f in ("argv", "rate_per_s", "clients") if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError("give one of argv, rate_per_s (open loop) or clients (closed "
                             f"loop){'; got ' + ', '.join(given) if given else ''}")
        if self.think_s is not None and self.clients is None:
            raise ValueError("think_s is for a closed loop: give clients")
        return self

    @property
    def generated(self) -> bool:
        """The testbed's load generator runs it (not the user's argv)."""
        return self.argv is None


class Snap(_Strict):
    """SNAP's passive profiling of every TCP connection on every host, for the whole run
    (Yu et al. 2011): its CPU budget (§7) and Table 2's thresholds."""

    enabled: Bool = True
    cpu_lower_pct: Float = Field(2.0, gt=0, le=100)  # of one core, on each host
    cpu_upper_pct: Float = Field(5.0, gt=0, le=100)
    table_interval_s: Float = Field(0.5, ge=0.05, le=30)  # mean, Poisson
    report_interval_s: Float = Field(5.0, ge=0.1, le=3600)
    max_queuing_delay_ms: Float = Field(10.0, gt=0, le=10_000)
    delayed_ack_timeout_ms: Float = Field(42.0, gt=0, le=10_000)
    socket_calls: Bool = True  # bpftrace on the sock tracepoints, where a host has them

    @model_validator(mode="after")
    def _budget(self) -> Snap:
        if self.cpu_lower_pct >= self.cpu_upper_pct:
            raise ValueError(f"cpu_lower_pct {self.cpu_lower_pct:g} must be below "
                             f"cpu_upper_pct {self.cpu_upper_pct:g}")
        return self


class Paths(_Strict):
    """WAP5's causal paths: every host's TCP messages captured during the passive phase, linked
    into paths (paths.json; each link's crossings beside its gradient)."""

    enabled: Bool = True
    linker: Literal["context", "wap5", "fcfs"] = "context"
    window_s: Float = Field(2.0, ge=0.001, le=3600)  # WAP5's x: the longest causal delay
    report_interval_s: Float = Field(1.0, ge=0.1, le=3600)
    # linking takes at most this fraction of the capture's duration; a node over its share
    # is linked greedily, then by §5.1 (paths.json's fallbacks)
    budget: Float = Field(0.1, gt=0, le=100)


class Probes(_Strict):
    """Every host's probe (Kissel et al.'s BLiPP: CPU, memory, NICs, disks, TCP, and the
    host's own cgroup) for the whole run, in contexts the run opens per phase (XSP's
    sessions): fast on the two hosts of the links being measured, slow elsewhere."""

    enabled: Bool = True
    slow_sample_s: Float = Field(1.0, ge=0.05, le=3600)
    slow_report_s: Float = Field(5.0, ge=0.05, le=86400)
    fast_sample_s: Float = Field(0.25, ge=0.05, le=3600)
    fast_report_s: Float = Field(1.0, ge=0.05, le=86400)

    @model_validator(mode="after")
    def _report_after_sample(self) -> Probes:
        for rate in ("slow", "fast"):
            sample, report = getattr(self, f"{rate}_sample_s"), getattr(self, f"{rate}_report_s")
            if report < sample:
                raise ValueError(f"{rate}_report_s {report:g} is shorter than a sample "
                                 f"({rate}_sample_s {sample:g})")
        return self


class Experiment(_Strict):
    name: RunName  # the run directory's name: one path component
    # what application this measures: runs of one application share the explanation's
    # calibration whatever their names (default: the name; a testbed: tag gives its app's)
    application: Str | None = None
    testbed: TestbedTag | None = None  # a `linkgrad testbed` tag: hosts, ssh, web_log from it
    hosts: tuple[Host, ...] = ()
    ssh: Ssh | None = None
    web_log: WebLog | None = None
    transactions: dict[Str, Str] = Field(min_length=1)  # name -> regex on path+query
    nodes: Nodes = Nodes()  # default: every process on the hosts
    parameters: Parameters = Parameters()
    workload: Workload | None = None
    snap: Snap = Snap()
    probes: Probes = Probes()
    paths: Paths = Paths()
    output: Path = Path("runs")
    frontend_url: Str | None = None  # for a workload's load generator (set from a testbed)

    # the file it was read from: a problem found after validation (a file it names that
    # cannot be opened) is reported at that file's field
    _source: Path | None = PrivateAttr(None)

    @property
    def source(self) -> Path | None:
        return self._source

    def read_from(self, path: Path) -> Experiment:
        """This experiment, knowing the file it was read from."""
        copy = self.model_copy()
        copy._source = path
        return copy

    @field_validator("transactions")
    @classmethod
    def _transaction_regexes(cls, transactions: dict[str, str]) -> dict[str, str]:
        for name, pattern in transactions.items():
            compile_regex(pattern, f"transaction {name!r}")
        return transactions

    @model_validator(mode="after")
    def _log_host_known(self) -> Experiment:
        if self.testbed is not None:
            return self  # filled from the testbed when loaded
        missing = [f for f in ("hosts", "ssh", "web_log") if not getattr(self, f)]
        if missing:
            raise ValueError(f"give {', '.join(missing)} (or testbed: TAG)")
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"host names must be unique: {names}")
        assert self.ssh is not None
        if self.ssh.config is None:
            if self.ssh.known_hosts is None:
                raise ValueError("without ssh.config, give ssh.known_hosts (host keys are "
                                 "always verified)")
            if bare := [h.name for h in self.hosts if h.address is None]:
                raise ValueError(f"without ssh.config, every host needs an address: "
                                 f"{', '.join(bare)}")
        return self

    def dangling_references(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Fields that name a host the experiment does not have, or need a URL it does not
        give: (the field's path, what is wrong). `load_experiment` checks them once a testbed
        tag has filled the hosts and URL in, so each is reported at its own line."""
        names = [h.name for h in self.hosts]
        known = f"one of the hosts ({', '.join(names)})" if names else "a host (hosts is empty)"
        out: list[tuple[tuple[str | int, ...], str]] = []
        if self.web_log is not None and self.web_log.host not in names:
            out.append((("web_log", "host"), f"{self.web_log.host!r} is not {known}"))
        if self.workload is not None:
            if self.workload.host not in names:
                out.append((("workload", "host"), f"{self.workload.host!r} is not {known}"))
            if self.workload.generated and not self.frontend_url:
                field = "rate_per_s" if self.workload.rate_per_s is not None else "clients"
                out.append((("workload", field), "the load generator needs the "
                            "application's URL: give frontend_url (a testbed: tag sets it)"))
        roles = {}
        if self.workload is not None:
            roles[self.workload.host] = "the workload"
        if self.web_log is not None:
            roles[self.web_log.host] = "the web log"
        for i, host in enumerate(self.hosts):
            if host.optional and host.name in roles:
                out.append((("hosts", i, "optional"), f"{host.name} runs {roles[host.name]}: "
                            "a run cannot go on without it, so it cannot be optional"))
        for i, question in enumerate(self.parameters.questions):
            for host in question.move:
                if host not in names:
                    out.append((("parameters", "questions", i, "move", host),
                                f"moves host {host!r}, which is not {known}"))
        for field in ("include", "exclude"):
            for i, text in enumerate(getattr(self.parameters, field)):
                for host in parse_selector(text).host_names:
                    if host not in names:
                        out.append((("parameters", field, i), f"{text!r} names host {host!r}, "
                                    f"which is not {known} (a regex on part of a name: "
                                    "re:REGEX)"))
        return out
