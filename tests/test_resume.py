"""Interrupted jobs resume to exactly the uninterrupted result (same machine, same batch layout: bit for bit).

A separate Python process runs the job and is killed with SIGKILL part-way (tests/resume_jobs.py): in the middle of
writing a demo file (demo collection), in the middle of a lifelong stage (training), in the middle of a grid chunk.
This process then resumes it and compares with the same job run without interruption: every demo array, the
trained weights and the algorithm's state, the success matrix (not all zero), every grid column. Damage found on
resume is named or repaired: a truncated checkpoint stage is named with the command that drops it (and training
then redoes that stage, to the same weights); a truncated grid chunk and a garbled grid.json are recomputed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import resume_jobs as jobs
from clbench_jax.data import hdf5
from clbench_jax.data.collect import collect_tasks, task_file
from clbench_jax.errors import DataFileError

TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.slow


def kill_during(job: str, folder: Path, demos: Path | str = "") -> None:
    """Run `job` in a child process that SIGKILLs itself part-way; check that it died so."""
    code = f"import resume_jobs; resume_jobs.main({job!r}, {str(folder)!r}, {str(demos)!r})"
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    r = subprocess.run([sys.executable, "-c", code], cwd=TESTS.parent, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == -signal.SIGKILL, f"{job}: exit {r.returncode}\n{r.stderr[-3000:]}"


def strict_json(path: Path):
    return json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in {path}"))


@pytest.fixture(scope="module")
def reference_demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref_demos")
    collect_tasks(jobs.tasks(), out, jobs.collect_config(), progress=False, log=lambda *a: None)
    return out


def test_collection_killed_while_writing_a_demo_resumes_to_the_same_demos(reference_demos, tmp_path):
    task = jobs.tasks()[0]
    kill_during("collect", tmp_path)
    partial = task_file(tmp_path, task).with_suffix(".partial")
    assert not task_file(tmp_path, task).exists() and partial.is_dir()
    # demos 0..2 were written and 3 was being written (its temporary file is there); progress.json, saved after
    # every settled attempt, counts exactly the three written (none of that work is redone)
    settled = strict_json(partial / "progress.json")["outcomes"]
    assert len(settled) == 3 and all(o[0] for o in settled)
    assert sorted(p.name for p in partial.glob("demo_*.hdf5")) == [f"demo_00000{i}.hdf5" for i in range(3)]
    assert list(partial.glob(".demo_000003*tmp"))
    rows = collect_tasks(jobs.tasks(), tmp_path, jobs.collect_config(), progress=False, log=lambda *a: None)
    assert not partial.exists() and [r["kept"] for r in rows] == [8, 8]
    for t in jobs.tasks():
        ref, got = task_file(reference_demos, t), task_file(tmp_path, t)
        a, b = hdf5.read_demos(ref), hdf5.read_demos(got)
        assert [d["attrs"]["attempt"] for d in a] == [d["attrs"]["attempt"] for d in b]
        for x, y in zip(a, b):
            jax.tree.map(np.testing.assert_array_equal, {k: x[k] for k in hdf5.DEMO_ARRAYS + ("obs",)},
                         {k: y[k] for k in hdf5.DEMO_ARRAYS + ("obs",)})
        ea, eb = hdf5.read_meta(ref)["extras_attrs"], hdf5.read_meta(got)["extras_attrs"]
        assert [ea[k] for k in ("attempts", "successes", "failures")] == [eb[k] for k in ("attempts", "successes",
                                                                                          "failures")]


def _arrays(out: Path, stage: int):
    from clbench_jax.lifelong.checkpoints import StageCheckpoints

    ck = StageCheckpoints(out / "checkpoints")
    raw = ck.manager.restore(stage)["arrays"]  # untyped restore: the arrays as saved
    ck.close()
    return raw


def test_training_killed_mid_stage_resumes_to_the_same_weights(reference_demos, tmp_path):
    cfg = jobs.train_config(str(reference_demos))
    from clbench_jax.lifelong.loop import run_lifelong

    full = run_lifelong(cfg, str(tmp_path / "full"), progress=False)
    s = np.array(full["success_matrix"], float)
    assert np.nanmax(s) > 0, f"trivial success matrix {full['success_matrix']}: the comparison would say little"

    killed = tmp_path / "killed"
    kill_during("train", killed, reference_demos)
    assert sorted(p.name for p in (killed / "checkpoints").iterdir() if p.name.isdigit()) == ["0"]
    assert strict_json(killed / "metrics.json")["complete"] is False
    resumed = run_lifelong(cfg, str(killed), progress=False)
    for k in ("success_matrix", "curves", "curve_epochs", "losses", "best_epoch", "fwt", "nbt", "auc"):
        assert resumed[k] == full[k], k
    # params, ER's buffer and the optimizer state: stage 1 keeps its best-success parameters (stage 0's trained
    # ones where stage 1 never beat them), and its optimizer state is the one after its 60 interrupted-then-redone
    # epochs: both are compared bit for bit.
    ref, got = _arrays(tmp_path / "full", 1), _arrays(killed, 1)
    jax.tree.map(np.testing.assert_array_equal, ref, got)
    assert not all(jax.tree.leaves(jax.tree.map(np.array_equal, _arrays(tmp_path / "full", 0)["opt_state"],
                                                ref["opt_state"])))
    assert strict_json(killed / "metrics.json")["complete"] is True

    # A damaged last stage: named with the command that drops it, and nothing is touched; after the drop the run
    # restarts from the last good stage (stage 1 is then trained again, exactly as the resume above did).
    stage = killed / "checkpoints" / "1"
    biggest = max((p for p in stage.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with open(biggest, "r+b") as f:
        f.truncate(100)
    before = sorted((str(p), p.stat().st_mtime_ns) for p in killed.rglob("*"))
    with pytest.raises(DataFileError, match=f"stage 1 is damaged.*rm -r {stage}.*resumes after stage 0") as e:
        run_lifelong(cfg, str(killed), progress=False)
    assert e.value.field == "checkpoints/1"
    assert sorted((str(p), p.stat().st_mtime_ns) for p in killed.rglob("*")) == before
    shutil.rmtree(stage)  # what the message says to do
    from clbench_jax.lifelong.checkpoints import StageCheckpoints
    from clbench_jax.lifelong.loop import finished_stages

    assert finished_stages(killed) == [0] and StageCheckpoints(killed / "checkpoints").latest() == 0


def test_grid_killed_mid_chunk_resumes_to_the_same_episodes(tmp_path):
    from clbench_jax.eval import grid as G
    from clbench_jax.eval.grid_runner import run_grid
    from clbench_jax.eval.episodes import read_columns

    spec, cks, policy, emb = jobs.grid_setup()
    full = run_grid(spec, cks, policy, tmp_path / "full", embeddings=emb, progress=False)
    assert 0 < full["success"].sum() < full["success"].size  # the contrast's goal holds; the originals fail
    assert len(G.plan(spec, cks)) == 3

    killed = tmp_path / "killed"
    kill_during("grid", killed)
    chunks = killed / "chunks"
    assert sorted(p.name for p in chunks.glob("*.h5")) == ["00000.h5", "00001.h5"]
    kept = (chunks / "00000.h5").stat().st_mtime_ns
    with open(chunks / "00001.h5", "r+b") as f:  # damage: a truncated chunk and a garbled manifest
        f.truncate(f.seek(0, 2) // 2)
    (killed / "grid.json").write_text('{"fingerprint": "abc", "tasks": [')
    ran = []
    cols = run_grid(spec, cks, policy, killed, embeddings=emb, progress=False, on_chunk=ran.append)
    assert ran == [1, 2] and (chunks / "00000.h5").stat().st_mtime_ns == kept
    for k, v in full.items():
        np.testing.assert_array_equal(cols[k], v, err_msg=k)
    back, _ = read_columns(killed / "episodes.h5")
    for k, v in full.items():
        np.testing.assert_array_equal(back[k], v, err_msg=k)
    strict_json(killed / "grid.json")
