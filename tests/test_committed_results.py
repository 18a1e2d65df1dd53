"""The committed evidence is what the report code makes of the committed files.

docs/RESULTS.md quotes docs/results/evidence_libero_goal_final/metrics.json, the cross-seed merge of the per-seed run
folders committed beside it. benchmarks/evidence_merge.py rebuilds those folders, merges and reports them; every
number must come out as committed, so a change to the metrics or the merge that moves a documented number fails here
instead of leaving RESULTS stale.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "results" / "evidence_libero_goal_final"
PEFT = ROOT / "docs" / "results" / "evidence_libero_goal_peft"  # the methods on a frozen LIBERO-90 base
MERGED = [e for e in (EVIDENCE, PEFT) if (e / "metrics.json").exists()]


def without_notes(d):
    """The metrics without their "note" strings (a rebuilt folder has no checkpoints, and says so)."""
    if isinstance(d, dict):
        return {k: without_notes(v) for k, v in d.items() if k != "note"}
    if isinstance(d, list):
        return [without_notes(v) for v in d]
    return d


@pytest.mark.parametrize("evidence", MERGED, ids=lambda e: e.name)
def test_merged_evidence_is_rebuilt_from_the_committed_runs(tmp_path, evidence):
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "evidence_merge.py"), "--work", str(tmp_path),
                    "--evidence", str(evidence)], check=True, cwd=ROOT, capture_output=True)
    got = without_notes(json.loads((tmp_path / "merged" / "metrics.json").read_text()))
    want = without_notes(json.loads((evidence / "metrics.json").read_text()))
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == want[key], f"metrics.json[{key!r}] differs from the committed merge"
    # every committed (method, seed) folder is in the merge, once
    folders = [p.name for p in evidence.glob("s[0-9]*/*") if (p / "episodes.h5").exists()]
    assert {m: len(r["original"]["final"]["per_seed"]) for m, r in got["metrics"].items()} == \
        {m: folders.count(m) for m in set(folders)}


@pytest.mark.parametrize("merged", [MERGED[:1], MERGED], ids=["final", "all"])
def test_results_holds_the_cross_seed_table_of_the_committed_merge(merged):
    """docs/RESULTS.md's cross-seed tables are `evidence_merge.py --table` of the committed metrics.json, row for
    row: the four methods trained from scratch, and with the frozen-base methods beside them once committed."""
    args = [a for e in merged for a in ("--evidence", str(e))]
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "evidence_merge.py"), "--table", *args],
                         check=True, cwd=ROOT, capture_output=True, text=True).stdout
    results = (ROOT / "docs" / "RESULTS.md").read_text()
    missing = [row for row in out.strip().splitlines() if row not in results]
    assert missing == [], "RESULTS.md lacks these rows of the committed merge's table (paste the --table output)"
    assert out.strip() in results, "RESULTS.md has the rows, not the table as one block (stale rows between them?)"


PRETRAINING = ROOT / "docs" / "results" / "pretraining_libero_10"  # seed 001's Fig. 5 experiment
PRETRAINING_RUNS = sorted(p.parent for p in PRETRAINING.glob("*/s[0-9]*/*/episodes.h5"))


@pytest.mark.parametrize("run", PRETRAINING_RUNS, ids=lambda p: "/".join(p.parts[-3:]))
def test_pretraining_run_metrics_are_the_report_of_its_committed_episodes(tmp_path, run):
    """Each committed libero_10 run folder: its metrics.json is what the report makes of its committed episodes and
    training curves (the grid's success matrix, FWT / NBT / AUC / final)."""
    import shutil

    from clbench_jax.eval.report import finalize

    cfg = json.loads((run / "train_metrics.json").read_text())["config"]
    (tmp_path / "grid").mkdir()
    (tmp_path / "train" / f"{cfg['algo']}_s{cfg['seed']}").mkdir(parents=True)
    shutil.copy(run / "episodes.h5", tmp_path / "grid" / "episodes.h5")
    shutil.copy(run / "train_metrics.json", tmp_path / "train" / f"{cfg['algo']}_s{cfg['seed']}" / "metrics.json")
    got = finalize(tmp_path, log=lambda m: None)
    want = json.loads((run / "metrics.json").read_text())
    assert without_notes(got["metrics"]) == without_notes(want["metrics"])
    assert json.loads(json.dumps(got["success"])) == want["success"]


def test_results_holds_the_pretraining_table(tmp_path):
    if not PRETRAINING_RUNS:
        pytest.fail(f"no committed run folder under {PRETRAINING}")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pretraining_table.py")], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    results = (ROOT / "docs" / "RESULTS.md").read_text()
    missing = [row for row in out.strip().splitlines() if row not in results]
    assert missing == [], "RESULTS.md lacks these rows of pretraining_table.py's table (paste its output)"
    assert out.strip() in results, "RESULTS.md has the rows, not the table as one block (stale rows between them?)"
    # and its bars draw, one group per method with a bar per arm that has runs
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pretraining_table.py"), "--plot",
                    str(tmp_path / "f.png")], check=True, cwd=ROOT, capture_output=True)
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


COMMITTED_BASE = ROOT / "docs" / "results" / "libero_90_state_base"  # clbench pretrain's folder, checkpoints dropped


def test_the_peft_config_starts_from_the_committed_libero_90_base(monkeypatch):
    """configs/evidence_libero_goal_peft.yaml names the committed base; it passes the pretrained checks for each of
    the four methods' configs and restores into every leaf of the adapted policy's base, finite and equal to the
    stored base (not the placeholder it replaces)."""
    import jax
    import numpy as np

    from clbench_jax.eval.chunk_size import param_shapes
    from clbench_jax.eval.run import load_run_config, train_config
    from clbench_jax.language import EMBED_DIM
    from clbench_jax.lifelong.checkpoints import StageCheckpoints
    from clbench_jax.lifelong.loop import DEFAULT_SEQ_LEN, make_policy
    from clbench_jax.lifelong.pretrain import check_pretrained, load_pretrained
    from clbench_jax.tasks.suites import ordered_tasks

    monkeypatch.chdir(ROOT)  # config paths are relative to the repository root, as `clbench run` is run from it
    cfg = load_run_config("configs/evidence_libero_goal_peft.yaml", methods=["tail"])  # one method per run folder
    for method in ("l2m", "tail", "iscil", "dmpel"):
        tcfg = train_config(cfg, method, 0)
        assert Path(tcfg.pretrained).resolve() == COMMITTED_BASE
        check_pretrained(tcfg)
    policy = make_policy(train_config(cfg, "tail", 0))
    shapes = param_shapes(policy, ordered_tasks(cfg.suite, 0)[0].scene, "state", 128, DEFAULT_SEQ_LEN, EMBED_DIM)
    params = jax.tree.map(lambda s: np.full(s.shape, np.nan, s.dtype), shapes)
    loaded = load_pretrained(train_config(cfg, "tail", 0), policy, params)["base"]
    store = StageCheckpoints(str(COMMITTED_BASE / "base"))
    stored = store.manager.restore(0)["arrays"]["params"]
    store.close()
    got, want = jax.tree_util.tree_leaves_with_path(loaded), jax.tree_util.tree_leaves_with_path(stored)
    assert [p for p, _ in got] == [p for p, _ in want]
    for (path, x), (_, y) in zip(got, want):
        assert np.isfinite(x).all() and np.array_equal(np.asarray(x), np.asarray(y)), jax.tree_util.keystr(path)
