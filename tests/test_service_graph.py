"""The generated microservice application's call graph and its truth (issue 31): pure."""

import pytest

from testbed.service_graph import (
    PARALLEL_MARGIN_MS,
    TRUTH_DELAY_MS,
    Call,
    Service,
    ServiceGraph,
    Step,
    busiest_link,
    duration_ms,
    generate,
    true_gradients,
)


def test_the_truth_counts_sequential_cached_and_parallel_calls_on_the_critical_path():
    services = {
        "s1": Service("s1", 1.0, (Step((Call("s3", repeat=2),)),)),  # 1 + 2 x 2 = 5 ms
        "s2": Service("s2", 9.0),  # 9 ms: the slower branch
        "s3": Service("s3", 2.0),
        "s4": Service("s4", 1.0),
    }
    graph = ServiceGraph("s0", services, {
        "t0": (Step((Call("s1"), Call("s2"))),  # parallel: s2 is critical
               Step((Call("s4", miss_p=0.3),))),  # a cache's miss
        "t1": (Step((Call("s1"),)),)})
    assert duration_ms(graph, "s1") == 5.0
    truth = true_gradients(graph)
    t0, t1 = truth["t0"], truth["t1"]
    assert t0["client->s0"] == t0["s0->client"] == 1.0
    assert t0["s0->s2"] == t0["s2->s0"] == 1.0
    assert t0["s0->s1"] == 0.0
    assert t0["s1->s3"] == 0.0
    assert t0["s0->s4"] == pytest.approx(0.3)
    assert t1["s0->s1"] == 1.0
    assert t1["s1->s3"] == t1["s3->s1"] == 2.0
    assert t1["s0->s2"] == 0.0  # a link of the graph this transaction never crosses


def _reachable(graph: ServiceGraph) -> set[str]:
    seen, todo = set(), [c.target for s in graph.transactions.values() for st in s
                         for c in st.calls]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [c.target for st in graph.calls_of(name) for c in st.calls]
    return seen


@pytest.mark.parametrize("n", [2, 3, 10, 50])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_generated_graph_reaches_every_service_and_keeps_its_truth_exact(n, seed):
    graph = generate(n, seed)
    assert generate(n, seed) == graph  # the seed alone decides it
    assert len(graph.services) == n - 1
    assert _reachable(graph) == set(graph.services)
    for name, s in graph.services.items():
        for step in s.steps:
            for c in step.calls:
                assert graph.layers[c.target] > graph.layers[name]  # no cycles
            if step.parallel:  # deterministic branches, far enough apart for any delay
                # up to TRUTH_DELAY_MS on one link to leave the slower one critical
                slow, fast = sorted((c.target for c in step.calls),
                                    key=lambda n: duration_ms(graph, n), reverse=True)
                most = busiest_link(graph, fast)
                assert duration_ms(graph, slow) - duration_ms(graph, fast) >= (
                    PARALLEL_MARGIN_MS + TRUTH_DELAY_MS * most)
                assert all(c.miss_p == 1.0 for c in step.calls)
    truth = true_gradients(graph)
    assert set(truth) == set(graph.transactions)
    assert all(g >= 0 for t in truth.values() for g in t.values())
    # request-response: both directions of a link carry the same count
    for t in truth.values():
        for link, g in t.items():
            a, b = link.split("->")
            assert t[f"{b}->{a}"] == pytest.approx(g)


def test_fifty_services_have_every_shape():
    graph = generate(50, seed=7)
    steps = [st for s in graph.services.values() for st in s.steps]
    assert any(st.parallel for st in steps)
    assert any(c.miss_p < 1 for st in steps for c in st.calls)
    assert any(c.repeat > 1 for st in steps for c in st.calls)
    assert max(graph.layers.values()) >= 4


def test_too_small_an_application_is_refused():
    with pytest.raises(ValueError, match="2 services or more"):
        generate(1)
