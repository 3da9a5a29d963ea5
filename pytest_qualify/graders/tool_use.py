"""The model's own tool use at scale, unforced: the Kimi K2 Vendor Verifier's measures over a request
set whose answers are known, held to a reference deployment's own run-to-run noise.

Per request (:func:`grade_request`): whether a call was expected (the request set's answer) and
whether one came (``tool_calls`` not empty: a call written in the content is no call); per call made,
whether its arguments are the API's JSON object and valid under the tool's schema; where a call was
expected and came, whether the calls are exactly the expected ones (graders/tools.py ``grade_calls``,
BFCL's rules). Over the set (:func:`measures`):

- **trigger F1**: precision and recall of "a tool was called" against "a tool was expected";
- **schema accuracy**: the share of the calls made whose name is an offered tool and whose arguments
  validate (K2VV's "schema accuracy");
- **exact-argument accuracy**: of the requests that expected a call and got one, the share whose
  calls are exactly the expected ones (every function and argument value).

A threshold is no constant (:func:`thresholds`): it is the lower one-sided prediction bound for one
new run of the reference deployment, from its earlier runs' figures (a t prediction interval on
their mean and standard deviation, ``mean - t(1 - a, k - 1) * sd * sqrt(1 + 1/k)``), with ``a``
Šidák-adjusted over the three measures so a run of the reference itself falls under some bound
about one time in twenty (``ALPHA``). A reference that never varied (the SIMULATED server) gives
bounds at its mean. Pure functions: no file, no socket.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.tools import (
    ArgumentsError, CallLike, ExpectedCall, grade_calls, read_arguments, schema_problems, without_optional_nulls,
)

# The measures, in the order every reader shows them.
MEASURES = ("trigger_f1", "schema_accuracy", "exact_accuracy")
MEASURE_TITLES = {"trigger_f1": "trigger F1", "schema_accuracy": "schema accuracy",
                  "exact_accuracy": "exact-argument accuracy"}
ALPHA = 0.05  # the chance that one run of the reference itself falls under some bound (all three together)
METHOD = ("lower one-sided t prediction bound for one new run from the reference's runs, "
          "Sidak-adjusted over the three measures (alpha 0.05 in all)")


@dataclass(frozen=True)
class UseRequest:
    """One request of the set: the user's prompt and the calls it asks for (none: no tool fits)."""

    id: str
    template: str
    prompt: str
    calls: tuple[ExpectedCall, ...]

    @property
    def expects_call(self) -> bool:
        return bool(self.calls)


@dataclass(frozen=True)
class Outcome:
    """One request as answered: what was expected, what came, and why an exact miss missed."""

    id: str
    expected_call: bool
    called: bool
    calls_made: int
    calls_valid: int  # of calls_made: an offered tool, arguments a JSON object valid under its schema
    exact: bool | None  # None unless a call was expected and one came
    reason: str = ""


def _valid(call: CallLike, schemas: Mapping[str, Mapping[str, Any]]) -> bool:
    schema = schemas.get(call.name)
    if schema is None:
        return False
    try:
        arguments = read_arguments(call.arguments)
    except ArgumentsError:
        return False
    return not schema_problems(without_optional_nulls(arguments, schema), schema)


def grade_request(request: UseRequest, calls: Sequence[CallLike], content: str | None,
                  schemas: Mapping[str, Mapping[str, Any]]) -> Outcome:
    """One answer to ``request`` read for the three measures."""
    valid = sum(_valid(c, schemas) for c in calls)
    exact: bool | None = None
    reason = ""
    if request.expects_call and calls:
        verdict = grade_calls(calls, request.calls, schemas, content)
        exact, reason = verdict.ok, ("" if verdict.ok else verdict.reason)
    elif request.expects_call:
        reason = "no tool call, where one was expected"
    elif calls:
        reason = f"{len(calls)} tool call(s) ({', '.join(c.name for c in calls)}), where no tool fits"
    return Outcome(request.id, request.expects_call, bool(calls), len(calls), valid, exact, reason)


@dataclass(frozen=True)
class Measures:
    """The set's figures and the counts they come from. A share with nothing to count is None."""

    requests: int
    true_positive: int
    false_positive: int
    false_negative: int
    calls_made: int
    calls_valid: int
    exact: int
    precision: float | None
    recall: float | None
    trigger_f1: float
    schema_accuracy: float | None
    exact_accuracy: float | None

    def figure(self, measure: str) -> float | None:
        return float(getattr(self, measure)) if getattr(self, measure) is not None else None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def measures(outcomes: Sequence[Outcome]) -> Measures:
    tp = sum(o.expected_call and o.called for o in outcomes)
    fp = sum(o.called and not o.expected_call for o in outcomes)
    fn = sum(o.expected_call and not o.called for o in outcomes)
    precision, recall = _share(tp, tp + fp), _share(tp, tp + fn)
    f1 = 2 * tp / (2 * tp + fp + fn) if (tp + fp + fn) else 1.0  # no call expected, none made: all agree
    made = sum(o.calls_made for o in outcomes)
    valid = sum(o.calls_valid for o in outcomes)
    exact = sum(bool(o.exact) for o in outcomes)
    return Measures(len(outcomes), tp, fp, fn, made, valid, exact, precision, recall, f1,
                    _share(valid, made), _share(exact, tp))


# -- thresholds from the reference's runs ----------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    measure: str
    bound: float  # the run's figure must be at least this
    reference_mean: float
    reference_sd: float
    runs: int


class FloorError(ValueError):
    """The reference's runs cannot give a threshold (too few, a figure missing or out of range)."""


def thresholds(runs: Sequence[Mapping[str, float]], alpha: float = ALPHA) -> dict[str, Threshold]:
    """Each measure's bound from the reference deployment's earlier runs (one figures mapping a run)."""
    from scipy import stats

    if len(runs) < 2:
        raise FloorError(f"{len(runs)} reference run(s): a run-to-run spread needs at least 2")
    per_measure = 1 - (1 - alpha) ** (1 / len(MEASURES))  # Sidak
    out = {}
    for m in MEASURES:
        values = [r.get(m) for r in runs]
        if any(not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 1 for v in values):
            raise FloorError(f"{MEASURE_TITLES[m]}: every reference run needs a figure between 0 and 1, got {values}")
        k = len(values)
        mean = math.fsum(values) / k
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (k - 1))
        bound = mean - float(stats.t.ppf(1 - per_measure, k - 1)) * sd * math.sqrt(1 + 1 / k)
        # A reference that never varied bounds at its mean; float noise never lowers that.
        out[m] = Threshold(m, min(max(bound, 0.0), mean), mean, sd, k)
    return out


def judge(run: Measures, bounds: Mapping[str, Threshold]) -> Verdict:
    """Every measure at or above its bound; the reason names each one below, with its bound and the
    reference's runs."""
    below = []
    for m in MEASURES:
        value, t = run.figure(m), bounds[m]
        shown = "none (no call to count)" if value is None else f"{value:.4f}"
        if value is None or value < t.bound - 1e-12:
            below.append(f"{MEASURE_TITLES[m]} {shown} below its threshold {t.bound:.4f} (the reference's "
                         f"{t.runs} runs: {t.reference_mean:.4f} +/- {t.reference_sd:.4f})")
    counts = (f"{run.requests} requests: {run.true_positive} calls as expected, {run.false_negative} missed, "
              f"{run.false_positive} where no tool fits; {run.calls_valid} of {run.calls_made} calls valid, "
              f"{run.exact} of {run.true_positive} exact")
    if below:
        return Verdict.reject(f"{'; '.join(below)} [{counts}]")
    figures = ", ".join(f"{MEASURE_TITLES[m]} {run.figure(m):.4f} >= {bounds[m].bound:.4f}" for m in MEASURES)
    return Verdict.accept(f"{figures} [{counts}]")
