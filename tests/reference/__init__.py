"""Tests of the reference server and the steering proxy (pytest_qualify/reference/)."""
