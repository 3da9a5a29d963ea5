"""Tests of the protocol's cases (pytest_qualify/tasks/): fixture data, haystacks, the media corpus."""
