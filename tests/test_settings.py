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


@pytest.mark.parametrize("bad", ["localhost:8000", "ftp://x", "http://", "not a url"])
def test_endpoint_must_be_a_url(bad):
    with pytest.raises(SettingsError, match="--qualify-endpoint.*not a URL"):
        _resolve(cli={"qualify_endpoint": bad})


def test_endpoint_forms():
    assert _resolve(cli={"qualify_endpoint": "reference"}).mode == "reference"
    s = _resolve(cli={"qualify_endpoint": "http://127.0.0.1:8000/v1/"})
    assert (s.mode, s.endpoint) == ("attach", "http://127.0.0.1:8000")


def test_serve_command_is_split():
    s = _resolve(cli={"qualify_serve_command": "python -m vllm.entrypoints.openai.api_server --model {model}"})
    assert s.serve_command == ("python", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}")


def test_evidence_options_share_the_precedence():
    s = _resolve(cli={"qualify_baseline": "old.json"}, env={"QUALIFY_WAIVERS": "w.toml", "QUALIFY_BASELINE": "x.json"},
                 ini={"qualify_fail_on_regression": "5"})
    assert (s.waivers, s.baseline, s.fail_on_regression_pct) == ("w.toml", "old.json", "5")


def test_stage_defaults_to_full_and_shares_the_precedence():
    assert _resolve().stage == "full" and _resolve().promoted is None
    ini = {"qualify_stage": "preflight"}
    assert _resolve(ini=ini).stage == "preflight"
    assert _resolve(env={"QUALIFY_STAGE": "post-promotion"}, ini=ini).stage == "post-promotion"
    assert _resolve(cli={"qualify_stage": "full"}, env={"QUALIFY_STAGE": "post-promotion"}, ini=ini).stage == "full"
    assert _resolve(env={"QUALIFY_PROMOTED": "run/summary.json"}).promoted == "run/summary.json"


@pytest.mark.parametrize("where", ["cli", "env", "ini"])
def test_an_unknown_stage_is_named_wherever_it_came_from(where):
    source = {"cli": {"cli": {"qualify_stage": "prefligth"}}, "env": {"env": {"QUALIFY_STAGE": "prefligth"}},
              "ini": {"ini": {"qualify_stage": "prefligth"}}}[where]
    with pytest.raises(SettingsError, match="--qualify-stage: unknown stage 'prefligth'.*preflight, full, post-promotion"):
        _resolve(**source)
