"""Tests of the client (pytest_qualify/client/): stream reading, timing."""
