"""Tests of the gate (pytest_qualify/gate/): pass^k, baselines, waivers, SLOs, failure kinds."""
