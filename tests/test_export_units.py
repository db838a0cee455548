"""`linkgrad export`'s builders on a small run with known numbers (tests/export_run.py): the
Prometheus families (names, labels, values, no timestamps, phases), promtool's verdict on the
file, the pScheduler records' and esmond documents' shapes, perfSONAR's credentials file, and
bad input through the command: exit 2 with a sentence naming the file, nothing written."""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import subprocess
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client import write_to_textfile

from coordinator.cli import export as export_cli
from coordinator.cli.main import main
from coordinator.export import esmond, perfsonar, prometheus
from coordinator.export.host_metrics import host_families
from coordinator.export.metrics import Family, run_families
from coordinator.export.proxy_auth import authorization
from coordinator.export.source import read_run
from linkgrad.errors import InputError
from tests.export_run import CORES, EXPERIMENT, LINK_A, LINK_B, MEASURE, hosts_file, make_run
from tests.marks import needs_tool

ESMOND_JSON_TYPES = {"pscheduler-raw", "pscheduler-run-href", "tcpinfo", "failures"}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path)


def _family(families: list[Family], name: str) -> dict[tuple[str, ...], float]:
    found = [f for f in families if f.name == name]
    assert len(found) == 1, name
    return found[0].samples


def test_gradients_are_each_links_last_measurement_with_its_interval(run_dir: Path) -> None:
    families = run_families(read_run(run_dir, hosts=True))
    gradient = _family(families, "linkgrad_gradient")
    # LINK_A was measured at 5 ms (0.5) then at 10 ms (1.02): the last state is 1.02
    assert gradient == {(EXPERIMENT, "single", LINK_A): 1.02, (EXPERIMENT, "single", LINK_B): 2.0,
                        (EXPERIMENT, "async", LINK_B): 0.01}  # LINK_A's async: no estimate
    assert _family(families, "linkgrad_gradient_ci_low")[(EXPERIMENT, "single", LINK_A)] == 0.9
    assert _family(families, "linkgrad_gradient_ci_high")[(EXPERIMENT, "async", LINK_B)] == 0.12
    assert _family(families, "linkgrad_snap_seconds") == {
        (EXPERIMENT, LINK_A, "delayed_ack", "passive"): 3.5,
        (EXPERIMENT, LINK_A, "app_limited", "measurement"): 7.25}
    assert _family(families, "linkgrad_run_info") == {(EXPERIMENT, "shop-run", "completed"): 1.0}


def test_host_counters_integrate_each_reports_rates_over_its_span() -> None:
    families = host_families(hosts_file(), EXPERIMENT)
    cpu = _family(families, "linkgrad_host_cpu_seconds_total")
    # app1: three 10 s reports on 2 cores; db reported no per-core line: no CPU at all
    assert cpu == pytest.approx({(EXPERIMENT, "app1", "user"): 0.25 * 30 * CORES,
                                 (EXPERIMENT, "app1", "system"): 0.05 * 30 * CORES,
                                 (EXPERIMENT, "app1", "idle"): 0.7 * 30 * CORES})
    assert sum(cpu.values()) == pytest.approx(30 * CORES)
    rx = _family(families, "linkgrad_host_network_receive_bytes_total")
    assert rx == pytest.approx({(EXPERIMENT, "app1", "eth0"): 30_000,
                                (EXPERIMENT, "db", "eth0"): 10_000})
    # vda1 is in vda: node_exporter leaves partitions out, so that sum by (host) counts once
    assert _family(families, "linkgrad_host_disk_io_time_seconds_total") == pytest.approx({
        (EXPERIMENT, "app1", "vda"): 3.0, (EXPERIMENT, "db", "vda"): 1.0})
    assert _family(families, "linkgrad_host_disk_written_bytes_total")[
        (EXPERIMENT, "app1", "vda")] == pytest.approx(4096 * 30)
    # the cgroup's devices are MAJ:MIN, as io.stat has them (the probe keeps no name)
    assert _family(families, "linkgrad_host_cgroup_fs_writes_bytes_total") == pytest.approx(
        {(EXPERIMENT, "app1", "254:0"): 2048 * 30})
    assert _family(families, "linkgrad_host_netstat_tcp_retranssegs")[
        (EXPERIMENT, "app1")] == pytest.approx(15.0)
    assert _family(families, "linkgrad_host_cgroup_cpu_usage_seconds_total") == pytest.approx(
        {(EXPERIMENT, "app1"): 15.0})  # db has no cgroup of its own


def test_what_the_probe_measures_less_than_node_exporter_is_named_or_said() -> None:
    families = {f.name: f for f in host_families(hosts_file(), EXPERIMENT)}
    # node_exporter counts drops and errors each way; the probe sums them: a name of our own
    assert not {"linkgrad_host_network_drop_total", "linkgrad_host_network_errs_total",
                "linkgrad_host_network_receive_drop_total"} & set(families)
    for which in ("drop", "errs"):
        family = families[f"linkgrad_host_network_receive_and_transmit_{which}_total"]
        assert "received and sent together" in family.help
        assert f"receive_{which} and transmit_{which} apart" in family.help
    assert "no cpu label" in families["linkgrad_host_cpu_seconds_total"].help
    assert families["linkgrad_host_cpu_seconds_total"].labels == ("experiment", "host", "mode")
    assert "MAJ:MIN" in families["linkgrad_host_cgroup_fs_writes_bytes_total"].help


def test_host_levels_are_means_per_phase() -> None:
    families = host_families(hosts_file(), EXPERIMENT)
    available = _family(families, "linkgrad_host_memory_memavailable_bytes")
    assert available == pytest.approx({
        (EXPERIMENT, "app1", "passive"): 8e9 - 3e9,  # used 2 GB then 4 GB, 10 s each
        (EXPERIMENT, "app1", MEASURE): 8e9 - 6e9, (EXPERIMENT, "db", MEASURE): 8e9 - 1e9})
    assert _family(families, "linkgrad_host_procs_running")[(EXPERIMENT, "db", MEASURE)] == 3


def test_the_exposition_has_no_timestamps_and_every_family_typed(run_dir: Path) -> None:
    run = read_run(run_dir, hosts=True)
    text = prometheus.exposition(prometheus.registry_of(prometheus.families(run)))
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(samples) > 50
    sample = re.compile(r'^[a-z_][a-z0-9_]*(\{[^}]*\})? [-+0-9.e]+$')  # a value, no timestamp
    assert [s for s in samples if not sample.match(s)] == []
    assert ('linkgrad_gradient{experiment="shop",link="tcp app1:0 -> db:5432",'
            'transaction="single"} 1.02') in samples
    assert "# TYPE linkgrad_host_cpu_seconds_total counter" in text
    assert "# TYPE linkgrad_host_netstat_tcp_retranssegs untyped" in text
    assert 'phase="passive"' in text


def test_the_textfile_is_the_exposition(run_dir: Path, tmp_path: Path) -> None:
    registry = prometheus.registry_of(prometheus.families(read_run(run_dir, hosts=True)))
    path = tmp_path / "linkgrad.prom"
    write_to_textfile(str(path), registry)
    assert path.read_text() == prometheus.exposition(registry)


def _promtool(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)


@needs_tool("promtool")
def test_promtool_passes_the_file(capsys: pytest.CaptureFixture[str], run_dir: Path,
                                  tmp_path: Path) -> None:
    target = tmp_path / "shop.prom"
    assert main(["export", str(run_dir), "--prometheus", str(target)]) == 0
    done = _promtool(target.read_text())
    assert done.returncode == 0, done.stdout + done.stderr


@needs_tool("promtool")
def test_promtool_flags_what_it_should(tmp_path: Path) -> None:
    """The check above can fail: promtool refuses node_exporter's camelCase names (hence
    lower-cased) and a counter without _total."""
    done = _promtool("# HELP node_memory_MemTotal_bytes m\n"
                     "# TYPE node_memory_MemTotal_bytes gauge\nnode_memory_MemTotal_bytes 1\n"
                     "# HELP x_bytes b\n# TYPE x_bytes counter\nx_bytes 1\n")
    assert done.returncode != 0
    assert "camelCase" in done.stderr
    assert '"_total" suffix' in done.stderr


def _iso(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_pscheduler_records_carry_what_logstash_reads(run_dir: Path) -> None:
    run = read_run(run_dir, hosts=True)
    records = [r.model_dump(mode="json") for r in perfsonar.records(run, "coord.example", "9.9")]
    assert len(records) == 3  # every measurement, each delay of LINK_A too
    for r, m in zip(records, run.links, strict=True):
        assert r["test"]["type"] == "linkgrad"
        assert r["task"]["test"] == r["test"]
        assert r["tool"] == {"name": "linkgrad", "version": "9.9"}
        task = re.fullmatch(r"https://coord\.example/pscheduler/tasks/([0-9a-f-]{36})",
                            r["task"]["href"])
        assert task
        assert r["run"]["task-href"] == r["task"]["href"]
        assert r["run"]["href"] == f"{r['task']['href']}/runs/{r['id']}"
        uuid.UUID(task.group(1))
        assert _iso(r["run"]["start-time"]) == pytest.approx(m.record.start)
        assert _iso(r["run"]["end-time"]) - _iso(r["run"]["start-time"]) == pytest.approx(32)
        assert r["task"]["detail"]["duration"] == r["run"]["duration"] == "PT32S"
        assert r["result"]["succeeded"] is True
        assert r["result"]["json"]["link"]["label"] == m.link.label
        assert r["participants"] == [r["test"]["spec"]["source"], r["test"]["spec"]["dest"]]
    assert records[0]["test"]["spec"]["source"] == "10.0.0.3"  # the graph's address
    assert records[2]["test"]["spec"]["source"] == "10.0.0.2"  # experiment.json's
    assert records[0]["task"]["href"] == records[1]["task"]["href"]  # one link, one task
    assert records[0]["id"] != records[1]["id"]
    again = [r.model_dump(mode="json") for r in perfsonar.records(run, "coord.example", "9.9")]
    assert again == records  # stable ids: an export repeated is the same records
    single = next(t for t in records[1]["result"]["transactions"] if t["name"] == "single")
    assert single == {"name": "single", "gradient": 1.02, "ci95-low": 0.9, "ci95-high": 1.1,
                      "thesis-gradient": None, "requests": 400}


def test_iso_durations_are_what_logstash_parses() -> None:
    assert perfsonar.iso_duration(32.0) == "PT32S"
    assert perfsonar.iso_duration(0.5) == "PT0.5S"
    assert perfsonar.iso_duration(86400 * 3) == "PT259200S"


def test_esmond_documents_are_point_to_point_with_ips_and_known_event_types(run_dir: Path
                                                                            ) -> None:
    doc = esmond.documents(read_run(run_dir, hosts=True), "coord.example", "9.9")
    entries = doc["entries"]
    assert len(entries) == 3
    first = entries[0]["metadata"]
    assert first["subject-type"] == "point-to-point"
    assert (first["source"], first["destination"], first["measurement-agent"]) == \
        ("10.0.0.3", "10.0.0.5", "10.0.0.3")
    assert (first["input-source"], first["input-destination"]) == ("app1", "db")
    assert first["tool-name"] == "linkgrad"
    assert first["time-duration"] == 32
    for entry in entries:
        types = {e["event-type"] for e in entry["metadata"]["event-types"]}
        assert types <= ESMOND_JSON_TYPES
        (point,) = entry["data"]["data"]
        assert isinstance(point["ts"], int)
        assert {v["event-type"] for v in point["val"]} == types
        raw = next(v["val"] for v in point["val"] if v["event-type"] == "pscheduler-raw")
        assert raw["succeeded"] is True


def test_esmond_refuses_a_link_without_ip_addresses(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    (run_dir / "experiment.json").write_text(json.dumps({"name": EXPERIMENT, "hosts": [
        {"name": "web", "address": "web.example"}]}))
    with pytest.raises(InputError) as e:
        esmond.documents(read_run(run_dir, hosts=True), "coord.example", "9.9")
    assert "esmond needs IP addresses: host 'web'" in str(e.value)
    assert "'web.example'" in str(e.value)
    assert "host 'app1'" in str(e.value)


def _basic(user_password: str) -> str:
    return base64.b64encode(user_password.encode()).decode()


def test_proxy_auth_as_perfsonar_writes_it_and_as_an_object() -> None:
    token = _basic("pscheduler_logstash:s3cret")
    assert authorization(f'"Authorization":"Basic {token}"\n', "f") == f"Basic {token}"
    assert authorization(f'{{"Authorization": "Basic {token}"}}', "f") == f"Basic {token}"


@pytest.mark.parametrize(("text", "said"), [
    ("", "no Authorization header"),
    ("Basic abc", "not perfSONAR's proxy_auth.json"),
    ('"Authorization":"Token abc"', "not 'Basic '"),
    ('"Authorization":"Basic !!!"', "not 'Basic '"),
    (f'"Authorization":"Basic {_basic("no-colon")}"', "not 'Basic '"),
    ('"X":"Basic abc"', "no Authorization header"),
    ('{"Authorization": "Basic abc", "authorization": "Basic def"}',
     "2 Authorization headers ('Authorization', 'authorization'): keep one"),
])
def test_a_bad_proxy_auth_file_is_named(text: str, said: str) -> None:
    with pytest.raises(InputError) as e:
        authorization(text, "/etc/perfsonar/logstash/proxy_auth.json")
    assert said in str(e.value)
    assert "/etc/perfsonar/logstash/proxy_auth.json" in str(e.value)


def _export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["export", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_summary_fits_80_columns_and_says_where_node_exporter_looks(
        capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "textfiles" / "shop.prom"
    target.parent.mkdir()
    code, out, _ = _export(capsys, str(run_dir), "--prometheus", str(target))
    assert code == 0
    # past 80 columns only a path too long for a line of its own, never broken
    assert [line for line in out.splitlines() if len(line) > 80 and len(line.split()) > 1] == []
    assert "--collector.textfile.directory=" in out
    assert "2 hosts" in out
    assert target.read_text().startswith("# HELP linkgrad_run_info")
    assert [p.name for p in target.parent.iterdir()] == ["shop.prom"]  # no temporary left


def test_dry_run_prints_what_it_would_write_and_writes_nothing(
        capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "shop.prom"
    code, out, _ = _export(capsys, str(run_dir), "--prometheus", str(target), "--dry-run")
    assert code == 0
    assert not target.exists()
    said = json.loads(out)
    assert said["dry_run"] is True
    assert said["target"] == "prometheus"
    assert "linkgrad_gradient{" in said["text"]
    code, out, _ = _export(capsys, str(run_dir), "--esmond", str(tmp_path / "e.json"),
                           "--dry-run")
    assert code == 0
    assert not (tmp_path / "e.json").exists()
    assert len(json.loads(out)["document"]["entries"]) == 3


def test_the_esmond_file_is_written_whole(capsys: pytest.CaptureFixture[str], run_dir: Path,
                                          tmp_path: Path) -> None:
    target = tmp_path / "e.json"
    code, out, _ = _export(capsys, str(run_dir), "--esmond", str(target), "--json")
    assert code == 0
    assert json.loads(out) == {"target": "esmond", "file": str(target),
                                             "entries": 3}
    assert len(json.loads(target.read_text())["entries"]) == 3
    assert [p.name for p in tmp_path.iterdir() if p.name != "shop-run"] == ["e.json"]


def _refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> str:
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, _out, err = _export(capsys, *argv)
    assert code == 2, err
    assert err.startswith("linkgrad: error: ")
    assert "Traceback" not in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    return err


def test_bad_input_is_exit_2_with_a_sentence_and_nothing_written(
        capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path) -> None:
    prom = str(tmp_path / "x.prom")
    err = _refused(capsys, tmp_path, str(tmp_path / "nowhere"), "--prometheus", prom)
    assert "nowhere: no such run directory" in err
    (run_dir / "gradients.json").rename(run_dir / "kept.json")
    err = _refused(capsys, tmp_path, str(run_dir), "--prometheus", prom)
    assert "gradients.json: no gradients.json (the link gradients)" in err
    (run_dir / "kept.json").rename(run_dir / "gradients.json")
    err = _refused(capsys, tmp_path, str(run_dir), "--prometheus", str(tmp_path / "x.txt"))
    assert "reads only files named *.prom" in err
    err = _refused(capsys, tmp_path, str(run_dir), "--prometheus",
                   str(tmp_path / "no" / "x.prom"))
    assert "no directory" in err
    assert "'--prometheus'" in err
    err = _refused(capsys, tmp_path, str(run_dir), "--esmond", str(tmp_path / "e.json"),
                   "--auth-file", str(tmp_path / "a"))
    assert "'--auth-file': only with --perfsonar" in err
    err = _refused(capsys, tmp_path, str(run_dir), "--perfsonar", "ftp://archive/logstash")
    assert "not an http:// or https:// URL" in err
    err = _refused(capsys, tmp_path, str(run_dir), "--perfsonar", "https://127.0.0.1:9/logstash",
                   "--auth-file", str(tmp_path / "missing.json"))
    assert "missing.json: cannot read (the archive's credentials)" in err


def test_a_corrupt_hosts_file_leaves_the_old_export_in_place(
        capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "shop.prom"
    target.write_text("# the previous export\n")
    (run_dir / "hosts.json").write_text('{"experiment": "shop", "hosts": {"app1": 3}}')
    err = _refused(capsys, tmp_path, str(run_dir), "--prometheus", str(target))
    assert "hosts.json: field 'hosts.app1'" in err
    assert target.read_text() == "# the previous export\n"


def test_perfsonar_and_esmond_never_read_hosts_json(capsys: pytest.CaptureFixture[str],
                                                    run_dir: Path, tmp_path: Path) -> None:
    """They export no host metric: a hosts.json cut short (a run killed while writing it) is
    none of their business. --prometheus exports them, so it refuses the file, naming it."""
    (run_dir / "hosts.json").write_text('{"experiment": "shop", "hosts": {"app1": {"rep')
    code, out, err = _export(capsys, str(run_dir), "--esmond", str(tmp_path / "e.json"))
    assert code == 0, err
    code, out, err = _export(capsys, str(run_dir), "--perfsonar", "https://archive/logstash",
                             "--dry-run")
    assert code == 0, err
    assert len(json.loads(out)["records"]) == 3
    err = _refused(capsys, tmp_path, str(run_dir), "--prometheus", str(tmp_path / "x.prom"))
    assert f"{run_dir / 'hosts.json'}:" in err


def test_a_directory_named_as_the_file_is_exit_2(capsys: pytest.CaptureFixture[str],
                                                 run_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "d.prom").mkdir()
    err = _refused(capsys, tmp_path, str(run_dir), "--prometheus", str(tmp_path / "d.prom"))
    assert "d.prom: field '--prometheus' is a directory" in err
    long_name = str(tmp_path / ("x" * 300 + ".json"))  # past any file system's NAME_MAX
    err = _refused(capsys, tmp_path, str(run_dir), "--esmond", long_name)
    assert "field '--esmond' cannot write: File name too long" in err


def _failing(number: int) -> Callable[..., None]:
    """A writer that fails as the kernel would, with `number`."""

    def write(*_args: object) -> None:
        raise OSError(number, os.strerror(number))
    return write


@pytest.mark.parametrize(("number", "code"), [
    (errno.EACCES, 2), (errno.EROFS, 2), (errno.ENOENT, 2),  # the path named: another fixes it
    (errno.ENOSPC, 1), (errno.EIO, 1), (errno.EDQUOT, 1),  # the machine's: exit 1
])
def test_a_failed_write_is_the_paths_fault_or_the_machines(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, run_dir: Path,
        tmp_path: Path, number: int, code: int) -> None:
    monkeypatch.setattr(export_cli, "write_to_textfile", _failing(number))
    monkeypatch.setattr(export_cli, "write_whole", _failing(number))
    for option, name in (("--prometheus", "x.prom"), ("--esmond", "e.json")):
        got, _out, err = _export(capsys, str(run_dir), option, str(tmp_path / name))
        assert got == code, err
        assert err.startswith("linkgrad: error: ")
        assert str(tmp_path / name) in err
        assert os.strerror(number) in err
        assert (f"field '{option}'" in err) == (code == 2)
