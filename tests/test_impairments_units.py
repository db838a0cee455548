"""testbed/impairments.py's command builders: what each puts on a host, without root."""

import pytest

from testbed.impairments import close_connections_argv, random_drop_argv, route_argv, tbf_argv


def test_random_drop_inserts_first_and_deletes_the_same_rule():
    add = random_drop_argv("lg-ec-db", "10.201.1.3", 0.05)
    assert add == ["ip", "netns", "exec", "lg-ec-db", "iptables", "-w", "5", "-I", "INPUT",
                   "-s", "10.201.1.3", "-m", "statistic", "--mode", "random",
                   "--probability", "0.05", "-j", "DROP"]
    # the undo names the rule by its whole spec: only ours goes
    delete = random_drop_argv("lg-ec-db", "10.201.1.3", 0.05, "-D")
    assert delete == [*add[:7], "-D", *add[8:]]


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5])
def test_random_drop_refuses_a_probability_outside_0_1(p):
    with pytest.raises(ValueError, match="probability"):
        random_drop_argv("ns", "10.0.0.1", p)


def test_route_is_a_host_route_with_its_metrics_in_order():
    assert route_argv("lg-ec-app1", "10.201.1.5", {"window": 64, "quickack": 1}) == [
        "ip", "-n", "lg-ec-app1", "route", "add", "10.201.1.5/32", "dev", "eth0",
        "window", "64", "quickack", "1"]
    assert route_argv("n", "10.0.0.2", {"initcwnd": 1, "initrwnd": 1}, device="veth1")[-6:] \
        == ["dev", "veth1", "initcwnd", "1", "initrwnd", "1"]


@pytest.mark.parametrize("metrics", [{}, {"windw": 64}, {"initcwnd": 0}, {"advmss": 0},
                                     {"quickack": 2}, {"window": 0}])
def test_route_refuses_a_misspelled_or_impossible_metric(metrics):
    with pytest.raises(ValueError, match="metrics"):
        route_argv("n", "10.0.0.2", metrics)


def test_close_connections_names_the_peer_and_its_port():
    assert close_connections_argv("lg-ec-app1", "10.201.1.5", 5432) == [
        "ip", "netns", "exec", "lg-ec-app1", "ss", "-K", "-t", "dst", "10.201.1.5",
        "dport", "=", ":5432"]


def test_tbf_rate_is_in_bits():
    assert "8000bit" in tbf_argv("n", 1000.0)
