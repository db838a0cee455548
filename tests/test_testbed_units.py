"""The testbed's pure parts: topology validation, addressing, the plan, expected gradients,
the text `up` and `status` print."""

import ipaddress

import pytest

from coordinator.config.topology_file import load_topology
from linkgrad.errors import InputError
from testbed.addressing import free_subnet
from testbed.loadgen import arrival_times, parse_mix
from testbed.netns import network_steps, plan_testbed
from testbed.topology import DEFAULT
from testbed.transactions import prob_slower, transactions_of


def test_topology_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "topo.yaml"
    path.write_text("name: x\nhosts:\n  - name: web\n    roles: [web, dbms]\n"
                    "  - name: Client\n    roles: [client]\ncolour: blue\n")
    with pytest.raises(InputError) as err:
        load_topology(path)
    text = str(err.value)
    assert f"{path}:4: field 'hosts.0.roles.1'" in text
    assert f"{path}:5: field 'hosts.1.name'" in text
    assert f"{path}:7: field 'colour' unknown field" in text


def test_topology_needs_every_role(tmp_path):
    path = tmp_path / "topo.yaml"
    path.write_text("hosts:\n  - {name: a, roles: [client, web, app, db]}\n"
                    "  - {name: b, roles: [app]}\n")
    with pytest.raises(InputError, match="no host has the role 'cache'"):
        load_topology(path)


def test_subnet_avoids_every_network_in_use():
    used = [ipaddress.IPv4Network("10.201.0.0/16")]
    with pytest.raises(Exception, match="no free /24"):
        free_subnet(used)
    used = [ipaddress.IPv4Network("10.201.0.0/23"), ipaddress.IPv4Network("10.201.2.7/32")]
    assert free_subnet(used) == ipaddress.IPv4Network("10.201.3.0/24")


def test_plan_names_are_owned_and_short():
    plan = plan_testbed(DEFAULT, "tb", ipaddress.IPv4Network("10.201.9.0/24"))
    assert [h.namespace for h in plan.hosts][:2] == ["lgtb-tb-client", "lgtb-tb-web"]
    assert plan.host("db").address == "10.201.9.5"
    assert plan.gateway == "10.201.9.254"
    assert all(len(h.veth) <= 15 for h in plan.hosts)
    steps = network_steps(plan)
    undos = [s.undo for s in steps if s.undo]
    assert ("ip", "link", "del", "lgbr-tb") in undos
    assert ("ip", "netns", "del", "lgtb-tb-cache") in undos
    with pytest.raises(ValueError, match="tag"):
        plan_testbed(DEFAULT, "Bad-Tag", ipaddress.IPv4Network("10.201.9.0/24"))


def test_expected_gradients_follow_the_crossings():
    tx = {t.name: t.expected for t in transactions_of(DEFAULT)}
    assert tx["ViewItem"]["app1->db"] == 2.0
    assert tx["StoreBid"]["db->app1"] == 4.0
    assert tx["cache"]["app1->db"] == pytest.approx(0.3)
    assert tx["cache"]["app1->cache"] == 1.0
    assert tx["async"]["app1->db"] == 0.0
    assert tx["balanced"]["web->app1"] == 0.5
    assert tx["balanced"]["app2->db"] == 0.5
    # S2 ~ N(100, 30) vs S3 ~ N(200, 60): P[S2 slower] = Phi(-100 / sqrt(30^2 + 60^2))
    assert tx["parallel_all"]["app1->db"] == pytest.approx(0.0680, abs=1e-3)
    assert tx["parallel_first"]["app1->db"] == pytest.approx(0.9320, abs=1e-3)
    assert all(t["client->web"] == 1.0 for t in tx.values())
    assert prob_slower(1, 0, 1, 0) == 0.5


def test_poisson_arrivals_have_the_rate_and_mix_parses():
    import random

    times = arrival_times(50.0, 200.0, random.Random(3))
    assert len(times) == pytest.approx(10_000, rel=0.03)
    assert times == sorted(times)
    assert parse_mix("/a?x=1=2,/b=1") == [("/a?x=1", 2.0), ("/b", 1.0)]
    with pytest.raises(ValueError, match="expected /PATH=WEIGHT"):
        parse_mix("a=1")


def test_the_shipped_topology_file_is_the_default():
    from pathlib import Path

    shipped = Path(__file__).parent.parent / "experiments" / "topology-default.yaml"
    assert load_topology(shipped) == DEFAULT


def test_the_reference_experiment_is_valid_and_errors_point_at_lines(tmp_path):
    from pathlib import Path

    from coordinator.config.experiment_file import load_experiment

    shipped = Path(__file__).parent.parent / "experiments" / "reference.yaml"
    experiment = load_experiment(shipped)
    assert experiment.web_log.host == "web"
    assert experiment.ssh.config == shipped.parent / "ssh_config"
    assert experiment.parameters.exclude == ("->web",)
    assert experiment.parameters.inject_at == "receiver"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhosts: [{name: a}]\nssh: {config: c}\n"
                   "web_log: {host: b, path: /l}\ntransactions: {t: '('}\n"
                   "parameters: {cycles: 1, colour: red, inject_at: middle}\n")
    with pytest.raises(InputError) as err:
        load_experiment(bad)
    text = str(err.value)
    assert f"{bad}:6: field 'parameters.cycles'" in text
    assert f"{bad}:6: field 'parameters.colour' unknown field" in text
    assert "bad regex" in text
    assert f"{bad}:6: field 'parameters.inject_at'" in text
    assert "'receiver' or 'sender'" in text


def test_the_testbed_front_end_routes_by_the_variable_linkgrad_route_sets():
    from linkgrad import routing
    from testbed import nginx

    assert nginx.VARIABLE == routing.VARIABLE
    assert routing.nginx_fixed_ratio(1.0, ("app_first", "app_first")) == nginx.DEFAULT_ROUTES


def _printed(info, width: int = 80) -> str:
    import io

    from rich.console import Console

    from coordinator.cli.testbed import _print_testbed

    out = io.StringIO()
    _print_testbed(Console(file=out, width=width, force_terminal=True, color_system="standard"),
                   info, {"web/nginx": True})
    return out.getvalue()


def test_up_and_status_show_each_host_s_cgroup_or_say_in_yellow_why_none():
    from pathlib import Path

    from testbed.cgroups import V1_CONTROLLERS, Hierarchy, cgroup_dirs, unavailable
    from testbed.lifecycle import describe
    from testbed.topology import HostSpec, Topology

    h = Hierarchy(1, Path("/sys/fs/cgroup"), V1_CONTROLLERS)
    directory = Path("/var/tmp/linkgrad-testbed-abcd")
    plan = plan_testbed(DEFAULT, "abcd", ipaddress.IPv4Network("192.168.200.0/24"))
    own = {x.name: cgroup_dirs(h, "abcd", x.name) for x in plan.hosts}
    text = _printed(describe(plan, DEFAULT, directory, host_cgroups=own))
    assert "/linkgrad-abcd/client" in text  # whole, in 80 columns
    assert "cgroups:" not in text
    # roles that make the table too wide for 80 columns: no cgroup column (--json has it)
    two = Topology(name="two", hosts=(HostSpec(name="front", roles=("client", "web", "cache")),
                                      HostSpec(name="back", roles=("app", "db"))))
    plan = plan_testbed(two, "abcd", ipaddress.IPv4Network("192.168.200.0/24"))
    own = {x.name: cgroup_dirs(h, "abcd", x.name) for x in plan.hosts}
    assert "/linkgrad-abcd/front" in _printed(describe(plan, two, directory, host_cgroups=own),
                                              width=120)
    assert "linkgrad-abcd/" not in _printed(describe(plan, two, directory, host_cgroups=own))
    # measured as the machine: why, in yellow
    text = _printed(describe(plan, two, directory, cgroups_note=unavailable(None)))
    assert "\x1b[33mcgroups: no cgroup v1 controller" in text
    assert "measured as the machine" in text.replace("\n", " ")
    assert "linkgrad-abcd/" not in text


def test_status_of_no_testbed_says_so_and_what_to_do(tmp_path, capsys):
    from coordinator.cli.main import main

    assert main(["testbed", "status", "--tag", "zz", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"no testbed zz (in {tmp_path}); next: linkgrad testbed up --tag zz")
    assert "{" not in out
