"""Tests of the pytest side on top: the plugin, its hooks and fixtures, settings, profiles, checks, init, the self-test."""
