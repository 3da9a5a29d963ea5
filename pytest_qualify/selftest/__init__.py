"""The gate self-test, a room of its own: ``engine`` (the fault table ``selftest.toml``, the runs,
their judgement, finding the self-test a qualification requires), ``runner`` (the self-test's run,
from its plan to its exit status) and ``bundle`` (``selftest.json``
with its own ``SHA256SUMS`` and in-toto statement). Its pytest side is ``hooks/selftest_mode.py``."""
