"""Tests of the repository as a whole: the import graph's floors, the top-level conftest, the docs' commands."""
