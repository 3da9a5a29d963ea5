"""Tests of the promotion's stages and the promoted run (pytest_qualify/promotion/)."""
