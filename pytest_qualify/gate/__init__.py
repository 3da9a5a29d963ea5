"""The gate room: the hard 100% gate and what it reads (waivers, SLO limits, a baseline), one pure decision per run."""
