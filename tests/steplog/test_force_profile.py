"""``--force-profile``: a log whose engine version has no counting profile is refused (exit 2,
the message naming the flag and the known versions) unless the user forces a profile; then every
replay path (columnar, --reference, the fallback from columnar to reference, --jobs fleet, the
Ray task's options) counts it under that profile and every report says so.

The forced logs are committed fixtures with the header's engine_version rewritten to 0.35.0,
so they must give exactly the verdict, totals and report of the original, plus the FORCED lines.
"""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from spectally.engine_bridge.cli import replay
from spectally.engine_bridge.fleet import ReplayOptions, read_engine_info, replay_local, replay_one
from spectally.engine_bridge.fleet.report import fleet_summary, render_fleet
from spectally.engine_bridge.replay import reference_replay
from spectally.engine_bridge.replay.columnar import judge
from spectally.engine_bridge.replay.dispatch import render_summary, replay_file, result_json
from spectally.engine_bridge.replay.reference_replay import Replayer
from spectally.engine_bridge.steplog import profiles
from spectally.engine_bridge.steplog.translate import LEGACY_PROFILE, profile_for
from spectally.reference.profile import FIXED

ROOT = Path(__file__).parents[2]
VLLM = ROOT / "tests" / "fixtures" / "vllm"
SYNC = VLLM / "draft-noise05-k3-greedy-preempt.ndjson.gz"
ASYNC = VLLM / "async-draft-noise05-k3-so-json-xgrammar.ndjson.gz"
FORCE = ["--force-profile", LEGACY_PROFILE]


@pytest.fixture(autouse=True)
def strict_columnar(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault of the columnar code fails these tests instead of falling back silently."""
    monkeypatch.setattr(judge, "STRICT", True)


def records(src: Path) -> list[dict[str, Any]]:
    with gzip.open(src, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def write(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs))
    return path


def versioned(tmp_path: Path, src: Path, version: str = "0.35.0", name: str = "") -> Path:
    """A copy of fixture ``src`` whose header names ``version``."""
    recs = records(src)
    assert recs[0]["record"] == "header"
    recs[0]["engine_version"] = version
    return write(tmp_path / (name or f"{version}-{src.name.removesuffix('.gz')}"), recs)


def same(path: Path, **kw: Any) -> tuple[Any, Any]:
    """Replay the default way and with --reference; every visible part must be the same."""
    fast = replay_file(str(path), progress=False, **kw)
    plain = replay_file(str(path), progress=False, reference=True, **kw)
    assert (fast.status, fast.exit_code) == (plain.status, plain.exit_code)
    assert render_summary(fast) == render_summary(plain)
    assert result_json(fast) == result_json(plain)
    assert fast.totals == plain.totals
    return fast, plain


# -- the refusal ---------------------------------------------------------------------------------


@pytest.mark.parametrize("reference", [False, True])
def test_the_refusal_names_the_flag_and_the_known_versions(tmp_path: Path, reference: bool) -> None:
    path = versioned(tmp_path, SYNC)
    result = replay_file(str(path), progress=False, reference=reference)
    assert result.status == "bad_input" and result.exit_code == 2
    message = str(result.bad_input)
    assert message.startswith(f"{path}:1:1: no counting profile for vllm 0.35.0: ")
    assert message.endswith(
        "replay with --force-profile vllm-legacy | vllm-0.34 | vllm-legacy-rfc | vllm-0.34-rfc"
    )
    assert "vllm <= 0.33" in message and "compared for 0.32.0, 0.33.0" in message


def test_the_cli_refusal_is_exit_2_with_the_flag(tmp_path: Path) -> None:
    path = versioned(tmp_path, SYNC)
    result = CliRunner().invoke(replay, [str(path)])
    assert result.exit_code == 2
    assert f"{path}:1:1: no counting profile for vllm 0.35.0" in result.output
    assert "--force-profile vllm-legacy" in result.output


def test_another_engine_is_refused_the_same_way(tmp_path: Path) -> None:
    recs = records(SYNC)
    recs[0]["engine"] = "vllm-fork"
    path = write(tmp_path / "fork.ndjson", recs)
    result = replay_file(str(path), progress=False)
    assert result.status == "bad_input"
    assert "no counting profile for vllm-fork 0.32.0" in str(result.bad_input)
    fast, _ = same(path, force_profile=LEGACY_PROFILE)  # a fork can be forced too
    assert fast.status == "agree"


# -- forced replay -------------------------------------------------------------------------------


@pytest.mark.parametrize("src", [SYNC, ASYNC], ids=["sync", "async"])
def test_forced_replay_agrees_like_the_original(tmp_path: Path, src: Path) -> None:
    path = versioned(tmp_path, src)
    fast, _ = same(path, force_profile=LEGACY_PROFILE)
    assert fast.status == "agree"
    assert fast.checker == "columnar"  # the columnar path itself took the flag (no fallback)
    original = replay_file(str(src), progress=False)
    assert fast.totals == original.totals
    assert fast.summary["profile"] == LEGACY_PROFILE
    assert fast.summary["engine"] == "vllm 0.35.0"
    assert fast.summary["profile_forced"] == {
        "flag": "--force-profile",
        "profile": LEGACY_PROFILE,
        "header_engine": "vllm 0.35.0",
        "header_profile": None,
    }
    assert original.summary["profile_forced"] is None
    text = render_summary(fast).splitlines()
    assert text[0] == (
        f"{path}: AGREE with the vllm-legacy profile FORCED (vllm 0.35.0,"
        f" {fast.summary['scheduling']}, k=3)"
    )
    assert text[1].startswith(
        "  profile FORCED by --force-profile vllm-legacy: the header says vllm 0.35.0, which has"
        " no counting profile; counted as vllm-legacy (vllm <= 0.33)"
    )
    # Apart from the verdict line, the FORCED line and the path, the report is the original's.
    base = render_summary(original).splitlines()
    assert text[2:] == base[1:]


def _tamper_stats(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = next(i for i, r in enumerate(recs) if r["record"] == "step_stats" and r["num_drafts"])
    recs[i] = {**recs[i], "num_drafts": recs[i]["num_drafts"] + 1}
    return recs


def test_the_fallback_to_the_reference_keeps_the_forced_profile(tmp_path: Path) -> None:
    """A log the columnar checker hands to the reference (a divergence, a missing totals
    record): the reference replay judges it under the forced profile, not as bad input."""
    recs = records(SYNC)
    recs[0]["engine_version"] = "0.35.0"
    diverging = write(tmp_path / "diverge.ndjson", _tamper_stats([dict(r) for r in recs]))
    fast, _ = same(diverging, force_profile=LEGACY_PROFILE)
    assert fast.status == "diverge" and fast.checker == "reference"
    assert fast.summary["profile_forced"]["profile"] == LEGACY_PROFILE
    assert "DIVERGE (1 shown) with the vllm-legacy profile FORCED" in render_summary(fast)
    cut = write(tmp_path / "cut.ndjson", recs[:-1])
    fast, _ = same(cut, force_profile=LEGACY_PROFILE)
    assert fast.status == "incomplete" and fast.exit_code == 3
    assert "INCOMPLETE with the vllm-legacy profile FORCED" in render_summary(fast)


def test_forcing_a_known_versions_own_profile_is_reported_too() -> None:
    """Decision: the flag applies to every log; on a known version it is used as well and the
    report names the header's own profile (here the same one: the counts are unchanged)."""
    fast, _ = same(SYNC, force_profile=LEGACY_PROFILE)
    plain = replay_file(str(SYNC), progress=False)
    assert fast.totals == plain.totals and fast.status == plain.status == "agree"
    view = fast.summary["profile_forced"]
    assert view["header_profile"] == LEGACY_PROFILE and view["header_engine"] == "vllm 0.32.0"
    assert "whose own profile is the same" in render_summary(fast)


def test_an_overridden_profile_is_named() -> None:
    view = {
        "flag": "--force-profile",
        "profile": LEGACY_PROFILE,
        "header_engine": "vllm 9.0.0",
        "header_profile": "vllm-other",
    }
    assert "whose own profile vllm-other is overridden" in profiles.forced_text(view)


# -- bad flag values -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["bogus", "0.33.0", "", "VLLM-LEGACY", "rfc"])
def test_an_unknown_profile_is_a_usage_error(tmp_path: Path, value: str) -> None:
    path = versioned(tmp_path, SYNC)
    result = CliRunner().invoke(replay, ["--force-profile", value, str(path)])
    assert result.exit_code == 2
    assert f"Invalid value for '--force-profile': unknown counting profile {value!r}" in (
        result.output
    )
    assert "the profiles are vllm-legacy (vllm <= 0.33" in result.output
    for call in (
        lambda: replay_file(str(path), progress=False, force_profile=value),
        lambda: replay_file(str(path), progress=False, force_profile=value, reference=True),
        lambda: Replayer(str(path), force_profile=value),
    ):
        with pytest.raises(ValueError, match="unknown counting profile"):
            call()


def test_the_flag_needs_a_value(tmp_path: Path) -> None:
    path = versioned(tmp_path, SYNC)
    result = CliRunner().invoke(replay, [str(path), "--force-profile"])
    assert result.exit_code == 2
    assert "'--force-profile' requires an argument" in result.output


# -- the CLI: human, --json, --reference ---------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--reference"]], ids=["columnar", "reference"])
def test_cli_forced_json_and_text(tmp_path: Path, extra: list[str]) -> None:
    path = versioned(tmp_path, SYNC)
    result = CliRunner().invoke(replay, [*FORCE, *extra, "--json", str(path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["status"] == "agree"
    assert data["summary"]["profile_forced"]["header_engine"] == "vllm 0.35.0"
    text = CliRunner().invoke(replay, [*FORCE, *extra, str(path)])
    assert text.exit_code == 0
    assert "AGREE with the vllm-legacy profile FORCED (vllm 0.35.0" in text.output


def test_help_names_the_flag_and_the_exit_code() -> None:
    result = CliRunner().invoke(replay, ["--help"])
    assert result.exit_code == 0
    flat = " ".join(result.output.split())
    assert "--force-profile PROFILE" in flat
    assert "no counting profile (the message names --force-profile)" in flat
    for name, (engine, versions) in profiles.PROFILES.items():
        label = "vLLM" if engine == "vllm" else engine
        assert f"{name}: {label} {versions.removeprefix(engine + ' ')}" in flat


# -- fleet ---------------------------------------------------------------------------------------


def test_fleet_with_the_flag(tmp_path: Path) -> None:
    logs = [str(versioned(tmp_path, SYNC)), str(versioned(tmp_path, ASYNC)), str(SYNC)]
    options = ReplayOptions(force_profile=LEGACY_PROFILE)
    refused = list(replay_local(logs, ReplayOptions(), jobs=2))
    assert [o.status for o in refused] == ["bad_input", "bad_input", "agree"]
    assert "--force-profile vllm-legacy" in (refused[0].first_divergence or "")
    pooled = list(replay_local(logs, options, jobs=2))
    here = list(replay_local(logs, options, jobs=1))
    assert pooled == here
    assert [o.status for o in pooled] == ["agree"] * 3
    assert all(o.engine is not None and o.engine.profile_forced for o in pooled)
    assert pooled[0].engine is not None and "vllm-legacy profile FORCED" in pooled[0].engine.label()
    summary = fleet_summary(pooled)
    assert summary["exit_code"] == 0
    assert summary["profile_forced"] == {
        "flag": "--force-profile",
        "profile": LEGACY_PROFILE,
        "logs": logs,
        "header_engines": ["vllm 0.32.0", "vllm 0.35.0"],
    }
    assert fleet_summary(refused)["profile_forced"] is None
    text = render_fleet(summary)
    assert "profile FORCED by --force-profile vllm-legacy for 3 logs" in text
    assert "vllm 0.35.0, vllm-legacy profile FORCED, sync" in text


def test_cli_fleet_with_the_flag(tmp_path: Path) -> None:
    logs = [str(versioned(tmp_path, SYNC)), str(versioned(tmp_path, ASYNC))]
    result = CliRunner().invoke(replay, ["--jobs", "2", *FORCE, "--json", *logs])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["fleet"]["profile_forced"]["logs"] == logs
    assert [f["summary"]["profile_forced"]["profile"] for f in data["files"]] == [
        LEGACY_PROFILE
    ] * 2
    refused = CliRunner().invoke(replay, ["--jobs", "2", *logs])
    assert refused.exit_code == 2


def test_the_ray_task_gets_the_option(tmp_path: Path) -> None:
    """What a Ray task receives: `replay_one` with the pickled options (fleet.ray.replay_ray)."""
    path = str(versioned(tmp_path, SYNC))
    options = pickle.loads(pickle.dumps(ReplayOptions(force_profile=LEGACY_PROFILE)))
    assert options == ReplayOptions(force_profile=LEGACY_PROFILE)
    outcome = replay_one(path, options)
    assert outcome.status == "agree"
    assert pickle.loads(pickle.dumps(outcome)) == outcome
    info = read_engine_info(path, LEGACY_PROFILE)
    assert info is not None and info.profile == LEGACY_PROFILE and info.profile_forced
    plain = read_engine_info(path)
    assert plain is not None and plain.profile is None and not plain.profile_forced


# -- the table and the mutants -------------------------------------------------------------------


def test_every_profile_of_the_table_is_one_the_header_can_select() -> None:
    for name, (engine, _) in profiles.PROFILES.items():
        compared = profiles.compared_releases(name)
        # The pin hashes vLLM's counting source; llama.cpp's evidence is its real captures
        # replayed AGREE with /metrics (tests/llamacpp/test_llamacpp_fixtures.py); a profile of
        # a release with the counting fix is selected by the header's counting, and its
        # evidence is the patched engine's captures (tests/vllm/test_engine_fix.py).
        fixed = name in FIXED.values()
        assert compared or engine != "vllm" or fixed, name
        assert all(profile_for(engine, v) == name for v in compared)


def test_a_path_that_ignores_the_flag_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The mutants the checks above exist for: the flag dropped by the columnar checker (the
    log falls back to the reference: `checker` says so) or by the reference replay (bad input)."""
    path = versioned(tmp_path, SYNC)
    with monkeypatch.context() as m:
        m.setattr(judge, "resolve", lambda header, forced: header)
        fast = replay_file(str(path), progress=False, force_profile=LEGACY_PROFILE)
        assert fast.status == "agree" and fast.checker == "reference"
    with monkeypatch.context() as m:
        m.setattr(reference_replay, "resolve", lambda header, forced: header)
        plain = replay_file(str(path), progress=False, force_profile=LEGACY_PROFILE, reference=True)
        assert plain.status == "bad_input"


def test_the_docs_show_the_refusal_as_printed(tmp_path: Path) -> None:
    """docs/replay.md, "Profiles", quotes the refusal; it must be what replay prints."""
    path = versioned(tmp_path, SYNC, name="log.ndjson")
    result = replay_file(str(path), progress=False)
    shown = str(result.bad_input).replace(str(path), "log.ndjson")
    assert shown in (ROOT / "docs" / "replay.md").read_text().splitlines()


def _command(*args: str) -> Any:
    from spectally.commands import main

    return CliRunner().invoke(main, list(args))


def test_compare_takes_force_profile(tmp_path: Path) -> None:
    """compare replays both logs: an unknown version is refused as replay refuses it, and with
    --force-profile both are counted under it and the profile row says FORCED."""
    log = versioned(tmp_path, SYNC)
    refused = _command("compare", str(log), str(ASYNC))
    assert refused.exit_code == 2, refused.output
    assert "no counting profile for vllm 0.35.0" in refused.output
    forced = _command("compare", str(log), str(ASYNC), *FORCE)
    assert forced.exit_code == 0, forced.output
    assert forced.output == _command("compare", str(SYNC), str(ASYNC), *FORCE).output.replace(
        str(SYNC), str(log)
    ).replace("vllm 0.32.0 ", "vllm 0.35.0 ", 1)
    row = next(line for line in forced.output.splitlines() if line.startswith("profile"))
    assert row.split() == ["profile", LEGACY_PROFILE, "FORCED", LEGACY_PROFILE, "FORCED"]


def test_export_aiperf_takes_force_profile(tmp_path: Path) -> None:
    log = versioned(tmp_path, SYNC)
    assert _command("export", "aiperf", str(log)).exit_code == 2
    forced = _command("export", "aiperf", str(log), *FORCE)
    assert forced.exit_code == 0, forced.output
    own = _command("export", "aiperf", str(SYNC))
    assert forced.stdout == own.stdout  # the same counts, the same records
    assert f"the log replayed under {LEGACY_PROFILE} FORCED" in forced.stderr


def test_rules_tests_from_takes_force_profile(tmp_path: Path) -> None:
    log = versioned(tmp_path, SYNC)
    out = tmp_path / "rules"
    assert _command("rules", "--out", str(out), "--tests-from", str(log)).exit_code == 2
    forced = _command("rules", "--out", str(out), "--tests-from", str(log), *FORCE)
    assert forced.exit_code == 0, forced.output
    own = tmp_path / "own"
    assert _command("rules", "--out", str(own), "--tests-from", str(SYNC)).exit_code == 0
    (written,) = out.glob("test-*.yml")
    (expected,) = own.glob("test-*.yml")
    assert written.read_text() == expected.read_text().replace(str(SYNC), str(log))


def test_force_profile_is_checked_wherever_it_is_taken(tmp_path: Path) -> None:
    """An unknown profile name is a usage error in every command; rules without --tests-from
    has no log to force it on."""
    for args in (
        ["compare", str(SYNC), str(ASYNC)],
        ["export", "aiperf", str(SYNC)],
        ["rules", "--out", str(tmp_path / "r"), "--tests-from", str(SYNC)],
        ["parity", str(SYNC), str(ASYNC)],
        ["version-diff", str(SYNC)],
    ):
        result = _command(*args, "--force-profile", "0.33.0")
        assert result.exit_code == 2 and "unknown counting profile '0.33.0'" in result.output
    alone = _command("rules", "--out", str(tmp_path / "r"), *FORCE)
    assert alone.exit_code == 2
    assert "--force-profile applies to the --tests-from logs" in alone.output


def test_parity_takes_force_profile(tmp_path: Path) -> None:
    """parity replays both runs through the reference: forced, the report is the one of the
    logs' own profile, and stderr says the profile was forced."""
    sync_run, async_run = VLLM / "sync-draft-noise05-k3-so-json-xgrammar.ndjson.gz", ASYNC
    log = versioned(tmp_path, sync_run)
    assert _command("parity", str(log), str(async_run)).exit_code == 2
    forced = _command("parity", str(log), str(async_run), "--json", *FORCE)
    own = _command("parity", str(sync_run), str(async_run), "--json")
    assert forced.exit_code == own.exit_code, forced.output
    assert json.loads(forced.stdout) == json.loads(own.stdout.replace(str(sync_run), str(log)))
    assert f"both logs replayed under {LEGACY_PROFILE} FORCED" in forced.stderr


def test_version_diff_takes_force_profile(tmp_path: Path) -> None:
    """version-diff of a release without a profile: forced, its own column is the forced
    profile's, marked FORCED, with the counts of the log's real own profile."""
    log = versioned(tmp_path, SYNC)
    assert _command("version-diff", str(log)).exit_code == 2
    forced = _command("version-diff", str(log), "--json", *FORCE)
    assert forced.exit_code == 0, forced.output
    got, own = (
        json.loads(forced.stdout),
        json.loads(_command("version-diff", str(SYNC), "--json").stdout),
    )
    assert got["own_profile_forced"] is True and own["own_profile_forced"] is False
    assert got["columns"] == own["columns"] and got["own_matches_replay"]
    text = _command("version-diff", str(log), *FORCE).output
    assert f"{LEGACY_PROFILE} (0.32, 0.33) own FORCED" in text
