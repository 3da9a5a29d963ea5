"""Stages as data: the default table, a profile's overrides, and the errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_qualify.profiles import Lane, ProfileError, builtin_profiles, load_profile, module_registry
from pytest_qualify.promotion.stages import StageError, check_stage_name, resolve_stages, stage_names

LANES = (Lane("1K", 1024), Lane("3K", 3072), Lane("2K", 2048))
KNOWN = tuple(module_registry())


def _by_name(stages):
    return {s.name: s for s in stages}


def test_the_stages_in_promotion_order_then_the_comparisons_timing_stage():
    assert stage_names() == ("preflight", "full", "post-promotion", "rollback", "timing", "parsers")
    with pytest.raises(ValueError, match="unknown stage 'qualify'.*preflight, full, post-promotion, rollback, timing, parsers"):
        check_stage_name("qualify")


def test_the_timing_stage_runs_the_figures_a_comparison_reads_and_never_qualifies():
    timing = _by_name(resolve_stages({}, KNOWN, LANES, KNOWN))["timing"]
    assert set(timing.modules) == {"smoke", "context", "load", "sweep"}
    assert timing.lanes == ("1K", "3K", "2K") and not timing.qualifies
    assert timing.verdict_line("PASS") == "TIMING: PASS (stage timing; not a qualification)"


def test_default_table_preflight_is_the_largest_lane_only():
    stages = _by_name(resolve_stages({}, KNOWN, LANES, KNOWN))
    assert stages["preflight"].modules == ("smoke", "json", "context", "tools")
    # Largest by prompt tokens, not by position in the list.
    assert stages["preflight"].lanes == ("3K",)
    assert stages["post-promotion"].modules == ("smoke", "json", "tools", "reasoning")
    assert stages["full"].modules == KNOWN and stages["full"].lanes == ("1K", "3K", "2K")


def test_only_full_qualifies_and_says_qualification():
    stages = _by_name(resolve_stages({}, KNOWN, LANES, KNOWN))
    assert [s.name for s in stages.values() if s.qualifies] == ["full"]
    assert stages["full"].verdict_line("PASS") == "QUALIFICATION: PASS"
    line = stages["preflight"].verdict_line("PASS")
    assert not line.startswith("QUALIFICATION") and "not a qualification" in line and "preflight" in line
    assert "QUALIFICATION: PASS" not in stages["post-promotion"].verdict_line("PASS")
    assert [s.name for s in stages.values() if s.accepts_promoted] == ["post-promotion", "rollback"]
    assert [s.name for s in stages.values() if s.requires_promoted] == ["rollback"]
    assert "QUALIFICATION: PASS" not in stages["rollback"].verdict_line("PASS")


def test_an_inherited_stage_is_cut_to_the_profile_and_says_what_it_lacks():
    text_only = ("smoke", "context", "window")
    stages = _by_name(resolve_stages({}, text_only, LANES, KNOWN))
    assert stages["preflight"].modules == ("smoke", "context")
    assert stages["preflight"].not_in_profile == ("json", "tools")
    assert stages["full"].not_in_profile == ()


def test_a_profile_overrides_modules_and_lanes():
    stages = _by_name(resolve_stages({"preflight": {"modules": ["context", "smoke"], "lanes": ["2K", "1K"]}},
                                     KNOWN, LANES, KNOWN))
    # Protocol order and the profile's lane order, whatever order the override lists them in.
    assert stages["preflight"].modules == ("smoke", "context")
    assert stages["preflight"].lanes == ("1K", "2K")
    assert _by_name(resolve_stages({"preflight": {"lanes": "all"}}, KNOWN, LANES, KNOWN))["preflight"].lanes == ("1K", "3K", "2K")


@pytest.mark.parametrize("overrides, field, message", [
    ({"canary": {"modules": ["smoke"]}}, "stages.canary", "unknown stage"),
    ({"full": {"modules": ["smoke"]}}, "stages.full", "always modules.required"),
    ({"preflight": {"modules": ["smoke", "jsn"]}}, "stages.preflight.modules.1", "unknown module 'jsn'"),
    ({"preflight": {"modules": ["smoke", "multimodal"]}}, "stages.preflight.modules.1", "not in modules.required"),
    ({"preflight": {"lanes": ["240K"]}}, "stages.preflight.lanes.0", "unknown lane '240K'"),
    ({"preflight": {"lanes": "biggest"}}, "stages.preflight.lanes", "expected 'all', 'largest'"),
    ({"post-promotion": {"title": "x"}}, "stages.post-promotion.title", "only 'modules' and 'lanes'"),
])
def test_a_bad_stage_table_names_the_field(overrides, field, message):
    required = tuple(m for m in KNOWN if m != "multimodal")
    with pytest.raises(StageError, match=message) as err:
        resolve_stages(overrides, required, LANES, KNOWN)
    assert err.value.field == field and f"'{field}'" in str(err.value)


def test_262k_has_the_stages_the_seed_ran():
    p = load_profile("262k")
    assert p.stage("preflight").modules == ("smoke", "json", "context", "tools")
    assert p.stage("preflight").lanes == ("240K",)
    assert p.stage("full").modules == p.required_modules and p.stage("full").lanes == ("32K", "128K", "240K")
    assert p.stage("post-promotion").modules == ("smoke", "json", "tools", "reasoning")


def test_every_builtin_profile_has_every_stage():
    # The parsers stage is the parsers module's whole corpus: a profile has it by requiring the module
    # (beyond the protocol, modules.toml), and one without it is refused with a usage error.
    for name in builtin_profiles():
        p = load_profile(name)
        for stage in stage_names():
            if stage == "parsers" and "parsers" not in p.required_modules:
                with pytest.raises(ValueError, match="stage 'parsers' requires parsers"):
                    p.stage(stage)
                continue
            assert p.stage(stage).modules, (name, stage)
    assert load_profile("tiny-qwen3-parsers").stage("parsers").modules == ("parsers",)


def _profile(tmp_path: Path, extra: str) -> str:
    path = tmp_path / "p.toml"
    path.write_text(Path(builtin_profiles()["small"]).read_text() + "\n" + extra)
    return str(path)


def test_a_profile_file_with_a_bad_stage_names_file_and_field(tmp_path):
    path = _profile(tmp_path, '[stages.preflight]\nlanes = ["9K"]\n')
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert path in str(err.value) and "stages.preflight.lanes.0" in str(err.value) and "'9K'" in str(err.value)


def test_a_profile_file_with_a_wrongly_typed_stage_field_is_a_schema_error(tmp_path):
    path = _profile(tmp_path, '[stages.preflight]\nmodules = "smoke"\n')
    with pytest.raises(ProfileError, match=r"stages\.preflight\.modules"):
        load_profile(path)


def test_a_stage_this_profile_cannot_run_is_refused():
    from pytest_qualify.promotion.stages import select

    stages = resolve_stages({}, ("window",), LANES, KNOWN)
    with pytest.raises(ValueError, match="post-promotion.*smoke, json, tools, reasoning"):
        select(stages, "post-promotion")
    assert select(stages, "full").modules == ("window",)


def test_a_stage_selects_its_modules_at_its_lanes():
    preflight = load_profile("262k").stage("preflight")
    assert preflight.selects("context", "240K") and preflight.selects("smoke", None)
    assert not preflight.selects("context", "32K") and not preflight.selects("window", None)
    full = load_profile("262k").stage("full")
    assert all(full.selects("context", lane) for lane in ("32K", "128K", "240K")) and full.selects("window", None)


def test_the_rollback_stage_is_smoke_json_and_tools_held_to_a_qualified_run():
    rollback = load_profile("262k").stage("rollback")
    assert rollback.modules == ("smoke", "json", "tools") and not rollback.qualifies
    assert rollback.verdict_line("FAIL") == "ROLLBACK CHECK: FAIL (stage rollback; not a qualification)"
    # A profile without json and tools still checks the rollback route's identity and smoke.
    assert load_profile("tiny-cpu").stage("rollback").modules == ("smoke",)


def test_the_rollback_stage_without_a_qualified_run_is_a_usage_error():
    from pytest_qualify.promotion.stage_run import StageUsageError, plan

    with pytest.raises(StageUsageError, match="--qualify-stage rollback needs --qualify-promoted SUMMARY"):
        plan(load_profile("262k"), "rollback", None, simulated=True)
    with pytest.raises(StageUsageError, match="applies to the post-promotion and rollback stages only, not to full"):
        plan(load_profile("262k"), "full", "x.json", simulated=True)
    assert plan(load_profile("262k"), "post-promotion", None, simulated=True).promoted is None
