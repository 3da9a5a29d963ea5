"""Repository-level wiring, nothing else: which folders of a checkout are not test folders.

``pytest`` from the repository root collects ``testpaths`` (``tests/``); these keep a path given by
hand (``pytest .``) out of the benchmarks (``bench/``: they start servers and take minutes, run them
as scripts), the docs, the media corpus and the CI scripts. The tests' own fixtures and helpers are
in ``tests/`` (``tests/conftest.py``, ``tests/helpers.py``); ``bench/`` imports none of them.

A qualification run from a checkout loads this file too, so it must not change one: it defines no
hook, fixture, option or plugin (``tests/project/test_repo_conftest.py`` compares a run's summary with and
without it).
"""

collect_ignore = ["bench", "docs", "media", ".ci"]
