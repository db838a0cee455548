"""Hostile and careless input (issue 13): no file makes a command end in a traceback.

Two layers. The corpus (tests/fuzz_corpus/: bytes that are not UTF-8, a byte-order mark on a
truncated file, NaN, Infinity, 1e999, 5000-digit integers, duplicate keys, YAML tags that run
code or make bytes, sets and dates, 10,000 nested brackets, an alias bomb, NUL characters,
empty and random files) goes through every command at every place it reads a file: exit 2,
the file named on stderr, and with --json one strict JSON error on stdout. Then hypothesis
feeds each parser values from the same classes and checks what it accepts is sane (finite,
strictly typed, within the caps) and what it refuses is an InputError naming the file.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.cli.main import main
from coordinator.config.experiment import Experiment
from coordinator.config.latencies import Latencies, Placement
from coordinator.config.run_dir import read_measurements
from coordinator.config.run_records import LinkMeasurement
from coordinator.config.strict_json import NOTE_KEY, dumps
from coordinator.config.yamlconf import parse_yaml
from linkgrad.errors import InputError
from linkgrad.reading import loads_json

CORPUS = sorted((Path(__file__).parent / "fuzz_corpus").iterdir())
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def attempt(parse: Any, *args: Any) -> tuple[Any, InputError | None]:
    """What `parse(*args)` returns, or the InputError it raises (anything else propagates)."""
    try:
        return parse(*args), None
    except InputError as e:
        return None, e


def strict_loads(text: str) -> Any:
    """A parser that refuses what Python's json writes but JSON does not have."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} in output")
    return json.loads(text, parse_constant=refuse)


# --- a valid run directory and experiment, each file of which the corpus replaces in turn ---

LABEL = "tcp app:0 -> db:5432"


def link_entry() -> dict[str, Any]:
    return {"link": {"proto": "tcp", "src_host": "app", "dst_host": "db", "label": LABEL},
            "record": {"start": 1.7e9, "period_s": 8.0, "cycles": 4, "magnitude_ms": 10.0,
                       "link": LABEL},
            "requested_ms": 10.0, "packets_delayed": 100,
            "perturbation": {"throughput_per_s": 20.0, "throughput_change": 0.01,
                             "mean_response_ms": 12.0, "mean_response_change_ms": 1.0},
            "transactions": {"two": {"gradient": 2.0, "ci95": [1.8, 2.2], "se_ms": 1.0,
                                     "thesis_gradient": 1.9, "requests": 400, "notes": []}}}


def write_run(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "gradients.json": {"experiment": "fake", "links": [link_entry()]},
        "graph.json": [{"src_host": a, "dst_host": b, "proto": "tcp"}
                       for a, b in (("app", "db"), ("web", "app"))],
        "baseline.json": {"transactions": {"two": {"mean_ms": 8.0, "se_ms": 0.1,
                                                   "requests": 300}}},
        "experiment.json": {"name": "fake", "hosts": [{"name": h} for h in ("web", "app", "db")],
                            "web_log": {"path": "/var/log/x.log", "format": "csv"},
                            "transactions": {"two": "^/two"}},
        "plan.json": {"period_s": 8.0, "cycles": 4, "magnitude_ms": 10.0, "n_bins": 64,
                      "notes": []},
        "run.json": {"status": "completed", "started": 1.7e9, "links_done": 1},
    }
    for name, data in files.items():
        (d / name).write_text(json.dumps(data))
    (d / "now.yaml").write_text("latency_ms: {app<->db: 0.1, web<->app: 0.1, db<->db: 0.1, "
                                "app<->app: 0.1, web<->web: 0.1, web<->db: 0.1}\n")
    (d / "move.yaml").write_text("move: {db: app}\n")
    (d / "candidates.yaml").write_text("candidates: {db: [app]}\n")
    return d


def write_experiment(path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "name": "fake", "hosts": [{"name": "web", "address": "10.0.0.1"}],
        "ssh": {"known_hosts": "known_hosts"},
        "web_log": {"host": "web", "path": "/var/log/x.log", "format": "csv"},
        "transactions": {"two": "^/two"}}))
    return path


def argv_for(slot: str, bad: Path, tmp: Path) -> tuple[list[str], Path]:
    """The command line that reads `bad` at `slot`, and the path the error must name."""
    run = write_run(tmp / "run")
    good = {"gradients": run / "gradients.json", "latencies": run / "now.yaml",
            "placement": run / "move.yaml", "candidates": run / "candidates.yaml"}
    if slot.startswith(("report:", "resume:")):
        command, name = slot.split(":")
        target = run / name
        shutil.copyfile(bad, target)
        if command == "report":
            return ["report", str(run)], target
        return ["run", str(write_experiment(tmp / "x.yaml")), "--resume", str(run)], target
    if slot in ("run", "latency", "deploy"):
        return [slot, str(bad)], bad
    if slot.startswith("gradient:"):  # an injection record, or a concurrent partner's
        log = tmp / "log.csv"
        log.write_text("".join(f"{1.7e9 + i / 10},{5 + i % 3},/two\n" for i in range(400)))
        good_record = tmp / "record.json"
        good_record.write_text(json.dumps(link_entry()["record"]))
        records = ["--injection", str(bad)] if slot == "gradient:injection" else \
            ["--injection", str(good_record), "--concurrent", str(bad)]
        return ["gradient", "--log", str(log), *records], bad
    if slot.startswith("predict:"):
        chosen = {**good, slot.split(":")[1]: bad}
        return ["predict", "--gradients", str(chosen["gradients"]), "--latencies",
                str(chosen["latencies"]), "--placement", str(chosen["placement"])], bad
    assert slot.startswith("place:")
    chosen = {**good, slot.split(":")[1]: bad}
    return ["place", "--app", str(chosen["gradients"]), "--latencies",
            str(chosen["latencies"]), "--candidates", str(chosen["candidates"])], bad


SLOTS = ("run", "latency", "deploy", "gradient:injection", "gradient:concurrent",
         "predict:gradients", "predict:latencies", "predict:placement",
         "place:gradients", "place:latencies", "place:candidates", "report:run.json",
         "report:plan.json", "report:experiment.json", "report:gradients.json",
         "resume:run.json", "resume:gradients.json")


def test_the_valid_run_directory_is_accepted_by_every_reader(tmp_path, capsys):
    """The baseline the corpus spoils: each command reads it and exits 0."""
    run = write_run(tmp_path / "run")
    for argv in (["predict", "--gradients", str(run / "gradients.json"), "--latencies",
                  str(run / "now.yaml"), "--placement", str(run / "move.yaml")],
                 ["place", "--app", str(run / "gradients.json"), "--latencies",
                  str(run / "now.yaml"), "--candidates", str(run / "candidates.yaml")],
                 ["report", str(run)]):
        code = main([*argv, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        strict_loads(out)


@pytest.mark.parametrize("slot", SLOTS)
def test_every_corpus_file_is_exit_2_naming_it_at_every_reader(slot, tmp_path, capsys):
    for bad in CORPUS:
        case = tmp_path / bad.name
        case.mkdir()
        argv, named = argv_for(slot, bad, case)
        code = main([*argv, "--json"])
        out, err = capsys.readouterr()
        assert code == 2, (bad.name, slot, err)
        assert str(named) in err, (bad.name, slot, err)
        assert strict_loads(out)["error"]["kind"] == "input", (bad.name, slot)


# --- properties of each parser -------------------------------------------------------------

NASTY = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 1e-308, 0, 0.0, -1, True,
                     False, None, "", "1", "NaN", "1e999", 10**30, -(10**30), [], {}, [1],
                     {"a": 1}, "../x", "/etc", "a/b", "\u202e", "x" * 300]),
    st.integers(), st.floats(), st.text(max_size=20))

BASE_EXPERIMENT: dict[str, Any] = {
    "name": "fake", "hosts": [{"name": "web", "address": "10.0.0.1", "port": 22}],
    "ssh": {"known_hosts": "kh", "connect_timeout_s": 10},
    "web_log": {"host": "web", "path": "/l", "format": "nginx"},
    "transactions": {"two": "^/two"},
    "parameters": {"training_s": 30, "period_s": 8, "cycles": 4, "magnitude_ms": 10,
                   "k": 8, "n_bins": 32, "max_delay_ms": 100, "max_duration_s": 900,
                   "include": ["web->web"], "magnitudes_ms": [5, 20], "adaptive": False},
}
PATHS = [("name",), ("testbed",), ("hosts", 0, "port"), ("hosts", 0, "name"),
         ("ssh", "connect_timeout_s"), ("web_log", "format"), ("transactions", "two"),
         *[("parameters", key) for key in BASE_EXPERIMENT["parameters"]],
         ("parameters", "half_width"), ("parameters", "chunks"), ("parameters", "scale_d"),
         ("parameters", "exclude"), ("output",)]


def with_value(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    data = json.loads(json.dumps(data))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def finite_and_strict(value: Any) -> bool:
    """Every number in a validated model is finite; no bool stands for a number."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite_and_strict(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(finite_and_strict(v) for v in value)
    return True


@FAST
@given(st.sampled_from(PATHS), NASTY)
def test_an_experiment_with_any_value_anywhere_is_valid_or_exit_2_at_its_field(path, value):
    text = yaml.safe_dump(with_value(BASE_EXPERIMENT, path, value))
    experiment, error = attempt(parse_yaml, text, Experiment, "x.yaml")
    if error is not None:
        assert all(p.file == "x.yaml" for p in error.problems)
        assert all(p.line is not None for p in error.problems), error
        return
    data = experiment.model_dump()
    assert finite_and_strict(data)
    p = experiment.parameters
    assert p.period_s is None or 0.1 <= p.period_s <= 3600
    assert p.cycles is None or (type(p.cycles) is int and 2 <= p.cycles <= 512)
    assert p.magnitude_ms is None or 0 < p.magnitude_ms <= p.max_delay_ms
    assert all(type(h.port) is int for h in experiment.hosts if h.port is not None)
    assert "/" not in experiment.name
    assert not experiment.name.startswith(".")


@FAST
@given(st.text(max_size=300))
def test_any_text_is_yaml_of_a_model_or_an_input_error(text):
    for model in (Experiment, Latencies, Placement):
        _, error = attempt(parse_yaml, text, model, "f.yaml")
        assert error is None or all(p.file == "f.yaml" for p in error.problems)


@FAST
@given(st.text(alphabet="[]{}\":,0123456789eE.-+ aNInfinityt\\\n", max_size=300))
def test_any_text_is_strict_json_or_an_input_error(text):
    data, error = attempt(loads_json, text, "f.json")
    if error is not None:
        assert all(p.file == "f.json" for p in error.problems)
        return
    strict_loads(json.dumps(data, allow_nan=False))  # what it accepted is strict JSON


@FAST
@given(st.lists(st.sampled_from("abcdef"), min_size=2, max_size=8), st.data())
def test_a_duplicate_key_is_named_with_both_lines(keys, data):
    first = data.draw(st.integers(0, len(keys) - 1))
    lines = [f"{k}: {i}" for i, k in enumerate(keys)]
    lines.insert(data.draw(st.integers(first + 1, len(lines))), f"{keys[first]}: again")
    seen: dict[str, int] = {}
    expected = []
    for number, line in enumerate(lines, 1):
        key = line.split(":")[0]
        if key in seen:
            expected.append((seen[key], number))
        else:
            seen[key] = number
    with pytest.raises(InputError) as e:
        parse_yaml("\n".join(lines), Placement, "p.yaml")
    said = str(e.value)
    for a, b in expected:
        assert f"(lines {a} and {b})" in said


@pytest.mark.parametrize(("text", "reading"), [
    ("022", "an octal number in YAML 1.1 (it would read as 18)"),
    ("0x16", "a hexadecimal number in YAML 1.1 (it would read as 22)"),
    ("0b10110", "a binary number in YAML 1.1 (it would read as 22)"),
    ("22:00", "a base-60 number in YAML 1.1 (it would read as 1320)"),
    ("2_2", "a number with underscores in YAML 1.1 (it would read as 22)"),
    ("0:22.5", "a base-60 number in YAML 1.1 (it would read as 22.5)"),
])
def test_a_number_yaml_versions_read_differently_is_refused_at_its_field(text, reading):
    experiment = yaml.safe_dump(BASE_EXPERIMENT).replace("port: 22", f"port: {text}", 1)
    assert f"port: {text}" in experiment
    _, error = attempt(parse_yaml, experiment, Experiment, "x.yaml")
    assert error is not None
    [problem] = error.problems
    assert reading in problem.message
    assert "plain decimal" in problem.message
    assert problem.field == "hosts.0.port"
    assert experiment.splitlines()[problem.line - 1].strip() == f"port: {text}"


@pytest.mark.parametrize("text", ["0x" + "f" * 300, "0" + "7" * 5000, "1" + ":59" * 200,
                                  "1" + ":59" * 200 + ".5", "0b" + "1" * 5000])
def test_a_huge_number_in_a_yaml_1_1_form_is_refused_not_a_crash(text):
    _, error = attempt(parse_yaml, f"name: x\nport: {text}\n", Experiment, "x.yaml")
    assert error is not None
    [problem] = error.problems
    assert (problem.line, problem.field) == (2, "port")
    assert "in YAML 1.1 (it would read as a number " in problem.message
    assert len(problem.message) < 300


@pytest.mark.parametrize(("tagged", "said"), [
    ('!!float "abc"', "'abc' is not a number, as its tag 'float' says"),
    ('!!float ""', "'' is not a number"),
    ('!!int "abc"', "'abc' is not an integer, as its tag 'int' says"),
    ('!!int ""', "'' is not an integer"),
    ('!!bool "abc"', "'abc' is not true or false"),
    ('!!null "abc"', "'abc' is not null"),
])
def test_a_tag_on_a_value_that_is_not_one_is_refused_at_its_field(tagged, said):
    """An explicit YAML tag is a claim about the value: one that is false is the user's
    error, at its line and field, in an experiment or a latencies file alike."""
    experiment = yaml.safe_dump(BASE_EXPERIMENT).replace("port: 22", f"port: {tagged}", 1)
    latencies = f"latency_ms:\n  a<->b: {tagged}\n"
    for text, model, field in ((experiment, Experiment, "hosts.0.port"),
                               (latencies, Latencies, "latency_ms.a<->b")):
        _, error = attempt(parse_yaml, text, model, "x.yaml")
        assert error is not None
        [problem] = error.problems
        assert said in problem.message
        assert problem.field == field
        assert text.splitlines()[problem.line - 1].strip().endswith(tagged)


def test_plain_decimal_numbers_still_read_as_numbers():
    text = (yaml.safe_dump(BASE_EXPERIMENT).replace("port: 22", "port: 2", 1)
            .replace("period_s: 8", "period_s: 1e1")
            .replace("magnitude_ms: 10", "magnitude_ms: .5"))
    experiment = parse_yaml(text, Experiment, "x.yaml")
    assert experiment.hosts[0].port == 2
    assert (experiment.parameters.period_s, experiment.parameters.magnitude_ms) == (10.0, 0.5)


@FAST
@given(st.sampled_from(["latency_ms", "sites", "se", "mean"]), NASTY)
def test_latencies_are_finite_non_negative_and_capped_or_exit_2(field, value):
    doc: dict[str, Any] = {"latency_ms": {"a<->b": {"mean": 1.0, "se": 0.1}, "a->a": 0.1}}
    if field in ("mean", "se"):
        doc["latency_ms"]["a<->b"][field] = value
    elif field == "latency_ms":
        doc["latency_ms"]["a->a"] = value
    else:
        doc["sites"] = value
    latencies, error = attempt(parse_yaml, yaml.safe_dump(doc), Latencies, "l.yaml")
    if error is not None:
        assert all(p.file == "l.yaml" for p in error.problems)
        assert all(p.line is not None for p in error.problems)
        return
    for v in latencies.latency_ms.values():
        mean = v if isinstance(v, float | int) else v.mean
        assert type(mean) is not bool
        assert math.isfinite(mean)
        assert 0 <= mean <= 60_000


RECORD_FIELDS = [("record", k) for k in ("start", "period_s", "cycles", "magnitude_ms")] + [
    ("transactions", "two", k) for k in ("gradient", "ci95", "se_ms", "requests")] + [
    ("perturbation", "throughput_change"), ("requested_ms",), ("packets_delayed",),
    ("link", "label"), ("link", "src_host"), ("planned_ms",)]


@FAST
@given(st.sampled_from(RECORD_FIELDS), NASTY)
def test_a_gradients_json_with_any_value_anywhere_reads_sane_or_exit_2(tmp_path, field, value):
    path = tmp_path / "gradients.json"
    entry = with_value(link_entry(), field, value)
    path.write_text(json.dumps({"links": [entry]}))  # Python writes NaN: the reader must not
    links, error = attempt(read_measurements, path)
    if error is not None:
        assert all(p.file == str(path) for p in error.problems)
        return
    [m] = links
    assert finite_and_strict(m.model_dump())
    assert 1 <= m.record.cycles <= 1_000_000
    assert type(m.record.cycles) is int
    assert 0 < m.record.magnitude_ms <= 10_000
    assert isinstance(m, LinkMeasurement)


JSONISH = st.recursive(
    st.one_of(st.floats(), st.integers(), st.booleans(), st.none(), st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=20)


@FAST
@given(JSONISH)
def test_json_output_is_strict_and_names_every_value_it_wrote_null(data):
    text = dumps({"result": data})
    parsed = strict_loads(text)
    replaced = parsed.get(NOTE_KEY, [])

    def count(x: Any) -> int:
        if isinstance(x, float):
            return 0 if math.isfinite(x) else 1
        items = x.values() if isinstance(x, dict) else x if isinstance(x, list) else []
        return sum(count(v) for v in items)

    assert len(replaced) == count(data)


def test_report_of_an_endless_weblog_or_an_unwritable_report_is_a_sentence(tmp_path, capsys):
    """Found by benchmarks/fuzz_cli.py (issue 13): report read a run's weblog.log whole (a
    symlink to /dev/zero until MemoryError) and a report.html it could not write (another
    user's run directory) was a PermissionError traceback."""
    run = write_run(tmp_path / "run")
    (run / "weblog.log").symlink_to("/dev/zero")
    assert main(["report", str(run), "--json"]) == 2
    out, err = capsys.readouterr()
    assert f"{run / 'weblog.log'}:1: longer than 16 MiB" in err
    assert strict_loads(out)["error"]["kind"] == "input"
    (run / "weblog.log").unlink()
    (run / "report.html").mkdir()  # as root, a directory is what cannot be written
    assert main(["report", str(run), "--json"]) == 1
    out, err = capsys.readouterr()
    assert f"linkgrad: error: cannot write {run / 'report.html'}: Is a directory" in err
    assert strict_loads(out)["error"]["kind"] == "runtime"


@pytest.mark.parametrize("site", [" ", " east", "east ", "-east", "a<b", "a>b"])
def test_a_site_no_latency_can_name_is_refused_at_its_line(tmp_path, capsys, site):
    """Found by benchmarks/fuzz_cli.py (issue 13): `move: {db: " "}` was refused as a latency
    missing from the latencies file ('here-> '), not at the placement's own line."""
    run = write_run(tmp_path / "run")
    (run / "move.yaml").write_text(f"move:\n  db: {json.dumps(site)}\n")
    code = main(["predict", "--gradients", str(run / "gradients.json"), "--latencies",
                 str(run / "now.yaml"), "--placement", str(run / "move.yaml"), "--json"])
    assert code == 2
    assert f"{run / 'move.yaml'}:2: field 'move.db'" in capsys.readouterr().err


def test_a_copy_site_no_latency_can_name_is_exit_2_at_the_option(tmp_path, capsys):
    """route --copies ' 1' east: its Placement refused the site as a ValidationError, a bug
    said by the last-resort handler (found by benchmarks/fuzz_cli.py)."""
    run = write_run(tmp_path / "run")
    code = main(["route", "--gradients", str(run / "gradients.json"), "--latencies",
                 str(run / "now.yaml"), "--component", "db", "--copies", " 1", "app", "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    assert "field '--copies': ' 1' is no site name" in err
    assert strict_loads(out)["error"]["kind"] == "input"
