"""The promotion room: the stages as data, the served identity at both ends of a run, the promoted run a check is held to."""
