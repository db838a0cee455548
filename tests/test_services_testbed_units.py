"""The generated application's topology and `testbed up --services` options (no root): its
hosts, its transactions with their exact truth, and each wrong combination an input error."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from coordinator.cli.main import main
from testbed.service_graph import generate, true_gradients
from testbed.topology import MAX_HOSTS, Topology, services_topology
from testbed.transactions import transactions_of


def test_n_services_are_the_client_and_s0_to_s_n_minus_1_with_the_front_as_web():
    topology = services_topology(12, seed=5)
    assert [h.name for h in topology.hosts] == ["client", *(f"s{i}" for i in range(12))]
    assert topology.host("web").name == "s0"
    assert topology.host("client").name == "client"


def test_its_transactions_are_the_front_s_endpoints_with_the_graph_s_truth():
    topology = services_topology(12, seed=5)
    truth = true_gradients(generate(12, 5))
    transactions = transactions_of(topology)
    assert [t.path for t in transactions] == ["/t0", "/t1", "/t2", "/t3"]
    for t in transactions:
        assert t.expected == truth[t.name]
        assert t.expected["client->s0"] == 1.0


def test_the_largest_fits_a_topology_and_a_wrong_host_list_is_refused():
    assert len(services_topology(MAX_HOSTS - 1).hosts) == MAX_HOSTS
    good = services_topology(4).model_dump()
    good["hosts"] = good["hosts"][:-1]
    with pytest.raises(ValidationError, match="client, s0, s1"):
        Topology.model_validate(good)
    good = services_topology(4).model_dump()
    good["generated"] = None
    with pytest.raises(ValidationError, match="go together"):
        Topology.model_validate(good)


@pytest.mark.parametrize(("argv", "said"), [
    (["--services", "1"], "'--services': 1: expected 2 to 63"),
    (["--services", "64"], "'--services': 64: expected 2 to 63"),
    (["--seed", "3"], "'--seed': seeds a generated application: give --services N too"),
    (["--services", "5", "--app", "rubis"], "not with --app"),
    (["--services", "5", "--seed", "-1"], "'--seed': -1: expected 0 to"),
])
def test_wrong_options_are_input_errors_before_anything_is_made(argv, said, capsys, tmp_path):
    assert main(["testbed", "up", "--root", str(tmp_path), *argv]) == 2
    assert said in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
