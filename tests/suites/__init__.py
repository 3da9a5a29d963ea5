"""Tests of the protocol modules (suites/) end to end against the reference server, fault by fault."""
