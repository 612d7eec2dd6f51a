"""Documents read whole (docs/limits.md): per-request metrics, llama.cpp --responses,
TensorRT-LLM iteration stats and `lint`'s files. `json.dump` without ``indent`` writes one
line, so a line of such a document may be as long as the document; the document itself is
bounded, and an endless or binary input ends at its first control byte or at that bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.engine_bridge.cli import import_group
from spectally.engine_bridge.steplog import source
from spectally.engine_bridge.steplog.limits import MAX_LINE_BYTES
from spectally.engine_bridge.steplog.source import BadInput
from spectally.exit_codes import ExitCode
from test_importers import request_metrics


def _requests_on_one_line(n: int) -> str:
    metrics = request_metrics([(2, 3), (0, 3), (0, 0), (3, 3)] * 4, 3)
    items = [{"id": f"cmpl-{i}", "metrics": {"speculative_decoding": metrics}} for i in range(n)]
    return json.dumps(items)  # one line, as json.dump writes a benchmark's results


def test_requests_dumped_on_one_line_longer_than_a_line_may_be(tmp_path: Path) -> None:
    """A JSON list of 3,000 requests on one line (~1.3 MB) was refused at the line limit."""
    path = tmp_path / "responses.json"
    path.write_text(_requests_on_one_line(3000))
    assert path.stat().st_size > MAX_LINE_BYTES
    result = CliRunner().invoke(import_group, ["requests", "--json", str(path)])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)
    assert sum("16 detailed steps replayed" in f["message"] for f in findings) == 3000


def test_a_document_past_its_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the document limit (here 2 MiB for the test's sake): exit 2 naming the limit, with
    no more than the limit and one chunk read."""
    monkeypatch.setattr(source, "MAX_DOCUMENT_BYTES", 2 << 20)
    path = tmp_path / "responses.json"
    path.write_text(_requests_on_one_line(7000))  # ~3 MB
    with pytest.raises(BadInput) as caught:
        source.read_text(str(path))
    assert (caught.value.line, caught.value.column) == (1, 1)
    assert caught.value.reason == (
        "input larger than the limit of 2097152 bytes for a document read whole (docs/limits.md)"
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize("command", ["requests", "trtllm"])
def test_dev_zero_ends_at_its_first_byte(command: str) -> None:
    """An endless input of NUL bytes, which no JSON holds: refused at once, not read up to the
    document limit."""
    result = CliRunner().invoke(import_group, [command, "/dev/zero"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert result.stderr.strip() == (
        "/dev/zero:1:1: control byte 0x00: no JSON or YAML text holds one (a binary file?)"
    )
