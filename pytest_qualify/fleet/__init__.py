"""Every replica of a fleet qualified: the replicas named (their URLs, or a router and the pins it
honours), each one's readiness, fingerprint and attribution read, each one graded by its own run of
a stage through an attribution proxy, and one bundle with a row per replica and the fleet's verdict.
Above the evidence writers, beside the comparisons; no pytest here (``python -m pytest_qualify fleet``)."""
