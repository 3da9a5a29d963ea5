"""Tests of the evidence writers (pytest_qualify/evidence/) and what each reader of a bundle sees."""
