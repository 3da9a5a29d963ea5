"""Settings: one documented precedence (CLI > environment > ini > default) and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_qualify.settings import SettingsError, resolve


def _resolve(cli=None, env=None, ini=None):
    ini = ini or {}
    return resolve(cli or {}, env or {}, lambda key: ini.get(key))


def test_defaults():
    s = _resolve()
    assert not s.active
    assert (s.repeat, s.endpoint, s.api_key_env, s.evidence_dir) == (1, None, "QUALIFY_API_KEY", Path("qualify-evidence"))
    assert s.mode == "launch"


def test_precedence_cli_over_env_over_ini():
    ini = {"qualify_repeat": "2", "qualify_profile": "small"}
    assert _resolve(ini=ini).repeat == 2
    assert _resolve(env={"QUALIFY_REPEAT": "4"}, ini=ini).repeat == 4
    assert _resolve(cli={"qualify_repeat": "3"}, env={"QUALIFY_REPEAT": "4"}, ini=ini).repeat == 3
    assert _resolve(ini=ini).profile == "small"


@pytest.mark.parametrize("bad", ["0", "-1", "three"])
def test_bad_repeat(bad):
    with pytest.raises(SettingsError, match="--repeat"):
        _resolve(cli={"qualify_repeat": bad})


@pytest.mark.parametrize("bad, problem", [
    ("localhost:8000", "is not a URL"), ("ftp://x", "is not a URL"), ("http://", "is not a URL"),
    ("not a url", "is not a URL"), ("ftp://host/v1", "is not a URL"), ("http://host:notaport", "has an invalid port"),
])
def test_endpoint_must_be_a_url(bad, problem):
    with pytest.raises(SettingsError) as info:
        _resolve(cli={"qualify": "small", "qualify_endpoint": bad})
    assert str(info.value) == f"--qualify-endpoint: {bad!r} {problem}" + (
        " (expected http://HOST:PORT or 'reference')" if problem == "is not a URL" else "")


def test_endpoint_forms():
    from pytest_qualify.settings import Mode

    assert _resolve(cli={"qualify_endpoint": "reference"}).mode is Mode.REFERENCE
    s = _resolve(cli={"qualify_endpoint": "http://127.0.0.1:8000/v1/"})
    assert (s.mode, s.endpoint) == (Mode.ATTACH, "http://127.0.0.1:8000")
    assert _resolve().mode is Mode.LAUNCH
    # One vocabulary, spelt as the evidence and the xdist hand-over write it.
    assert [str(m) for m in Mode] == ["launch", "attach", "reference"]


def test_serve_command_is_split():
    s = _resolve(cli={"qualify_serve_command": "python -m vllm.entrypoints.openai.api_server --model {model}"})
    assert s.serve_command == ("python", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}")


def test_evidence_options_share_the_precedence():
    s = _resolve(cli={"qualify_baseline": "old.json"}, env={"QUALIFY_WAIVERS": "w.toml", "QUALIFY_BASELINE": "x.json"},
                 ini={"qualify_fail_on_regression": "5"})
    assert (s.waivers, s.baseline, s.fail_on_regression_pct) == ("w.toml", "old.json", 5.0)


@pytest.mark.parametrize("where, expected", [
    ({"cli": {"qualify_repeat": "zero"}}, "--repeat: expected a whole number"),
    ({"env": {"QUALIFY_REPEAT": "zero"}}, "environment variable QUALIFY_REPEAT (for --repeat): expected a whole number"),
    ({"ini": {"qualify_repeat": "zero"}}, "ini key qualify_repeat (for --repeat): expected a whole number"),
    ({"env": {"QUALIFY_ENDPOINT": "localhost:1"}}, "environment variable QUALIFY_ENDPOINT (for --qualify-endpoint): "),
    ({"ini": {"qualify_startup_timeout": "soon"}}, "ini key qualify_startup_timeout (for --qualify-startup-timeout): "),
])
def test_an_error_names_where_the_bad_value_came_from(where, expected):
    with pytest.raises(SettingsError) as info:
        _resolve(**where)
    assert str(info.value).startswith(expected)


@pytest.mark.parametrize("value, expected", [("ten", "expected a percentage"), ("-1", "expected a percentage >= 0")])
def test_fail_on_regression_is_a_percentage(value, expected):
    with pytest.raises(SettingsError, match=f"environment variable QUALIFY_FAIL_ON_REGRESSION.*{expected}"):
        _resolve(cli={"qualify": "small", "qualify_baseline": "b.json"}, env={"QUALIFY_FAIL_ON_REGRESSION": value})


def test_help_text_has_one_percent_sign_where_one_is_meant():
    from pytest_qualify.settings import OPTIONS

    assert all("%%" not in opt.help for opt in OPTIONS)
    assert {opt.flag: opt.metavar for opt in OPTIONS}["--qualify"] == "PROFILE"


def test_stage_defaults_to_full_and_shares_the_precedence():
    assert _resolve().stage == "full" and _resolve().promoted is None
    ini = {"qualify_stage": "preflight"}
    assert _resolve(ini=ini).stage == "preflight"
    assert _resolve(env={"QUALIFY_STAGE": "post-promotion"}, ini=ini).stage == "post-promotion"
    assert _resolve(cli={"qualify_stage": "full"}, env={"QUALIFY_STAGE": "post-promotion"}, ini=ini).stage == "full"
    assert _resolve(env={"QUALIFY_PROMOTED": "run/summary.json"}).promoted == "run/summary.json"


@pytest.mark.parametrize("where, expected", [
    ({"cli": {"qualify_stage": "prefligth"}}, "--qualify-stage: "),
    ({"env": {"QUALIFY_STAGE": "prefligth"}}, "environment variable QUALIFY_STAGE (for --qualify-stage): "),
    ({"ini": {"qualify_stage": "prefligth"}}, "ini key qualify_stage (for --qualify-stage): "),
])
def test_an_unknown_stage_is_named_wherever_it_came_from(where, expected):
    with pytest.raises(SettingsError) as info:
        _resolve(**where)
    assert str(info.value) == expected + "unknown stage 'prefligth' (expected one of preflight, full, post-promotion, rollback, timing, parsers)"
