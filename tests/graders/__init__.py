"""Tests of the graders (pytest_qualify/graders/) and the answer-style corpus."""
