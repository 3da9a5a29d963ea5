"""Tests of the server's lifecycle, probes and watch (pytest_qualify/server/), with real child processes."""
