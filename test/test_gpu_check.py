"""scripts/gpu_check.sh, the GPU kit, on the CPU: every stage's commands run on the tiny random
pair and the report is written with its tables (CI has no GPU; a session with one runs the
same script there)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_kit_runs_every_stage_and_writes_the_dated_report(tmp_path):
    result = subprocess.run([str(ROOT / "scripts/gpu_check.sh"), "smoke", str(tmp_path)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for stage in ("env", "exactness-bfloat16", "exactness-float32", "exactness-4bit",
                  "passes-bfloat16", "engine-bfloat16"):
        assert (tmp_path / f"{stage}.json").is_file(), stage
    [report] = (tmp_path / "docs").glob("gpu-*.md")
    text = report.read_text()
    for heading in ("## The verifier alone", "## One verifier pass",
                    "## Exactness: k-token verification", "## bench engine"):
        assert heading in text, heading
    exact = json.loads((tmp_path / "exactness-bfloat16.json").read_text())
    assert exact["runtimes"]["static"]["flips"] == 0


def test_the_gpu_report_names_the_stages_that_did_not_come_back(tmp_path):
    from crossspec_ros.cli.main import main

    (tmp_path / "env.json").write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3",
                                                   "torch": "2.11.0", "cuda": "13.0"}))
    assert main(["bench", "gpu-report", str(tmp_path), "--out", str(tmp_path / "docs"),
                 "--date", "2026-11-25"]) == 0
    text = (tmp_path / "docs" / "gpu-h100-2026-11-25.md").read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "Stages missing: tests, exactness" in text
    assert main(["bench", "gpu-report", str(tmp_path / "empty")]) == 2
