"""Testbeds with known answers: a synthetic workload now, namespaces and real servers later."""
