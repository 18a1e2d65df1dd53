"""Smoke test of the grid-vs-LIBERO benchmark at tiny sizes: both ways run the same episodes and the JSON is
written (the benchmark swaps its own worker-pool stand-ins into the rollout engine, which nothing else exercises).
It runs in its own process, as a user runs it: its worker pool forks before JAX starts any threads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_grid_vs_libero_tiny(tmp_path):
    out = tmp_path / "gvl.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/grid_vs_libero.py"), "--checkpoints", "1", "--tasks", "1",
                    "--rollouts", "3", "--horizon", "4", "--rgb-horizon", "0", "--envs", "2", "--out", str(out)],
                   check=True, cwd=ROOT, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))  # this checkout's code
    rows = json.loads(out.read_text())["rows"]
    assert [r["way"].split(" ")[0] for r in rows] == ["libero", "grid"]
    assert rows[0]["episodes"] == rows[1]["episodes"] == 6  # 1 checkpoint x 1 task x 2 variants x 3 rollouts
    assert rows[0]["control_steps"] == rows[1]["control_steps"] == 6 * (4 + 5)  # never succeed: horizon + warm-up
