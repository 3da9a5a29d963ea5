"""The repetition id pytest joins into a test id (``rep2of3``): made and removed in one place.

No pytest here. A waiver, the report and the gate name an item without its repetition.
"""

from __future__ import annotations

import re

# The id is one of pytest's "-"-joined parameter ids: at the start, in the middle or at the end
# of the brackets, or alone in them.
_REP_ID = re.compile(r"(?:(?<=\[)|(-))rep\d+of\d+(?:(?=\])|(-))")


def repetition_id(repetition: int, repetitions: int) -> str:
    """``rep2of3``: the parameter id of repetition 2 of 3."""
    return f"rep{repetition}of{repetitions}"


def without_repetition(name: str) -> str:
    """A test id or name with exactly the repetition id removed, wherever it stands:
    ``a.py::test_x[rep2of3-case]`` -> ``a.py::test_x[case]``, ``test_x[rep1of1]`` -> ``test_x``."""
    if "[" not in name:
        return name
    # Between two other ids one "-" stays; at an edge of the brackets both go.
    return _REP_ID.sub(lambda m: "-" if m.group(1) and m.group(2) else "", name).replace("[]", "")
