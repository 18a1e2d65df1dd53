"""`clbench run` / `clbench report`: the report rebuilt from a run folder's files (numbers checked by hand), run
config errors, and (slow) the whole job end to end at toy scale."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from clbench_jax.errors import ClbenchError
from clbench_jax.eval import episodes
from clbench_jax.eval.report import finalize
from clbench_jax.eval.grid import CONDITIONS
from clbench_jax.eval.run import load_run_config, train_config

REPO = Path(__file__).resolve().parents[1]


def _episode_table():
    rows = []

    def add(seed, t, j, variant, cond, target, succ, status="ok"):
        rows.extend((seed, t, j, variant, cond, target, status, s) for s in succ)

    add(0, 0, 0, "o0", "original", 0, [(1, 0), (0, 0)])      # S[0, 0] = 0.5
    add(0, 0, 0, "p1", "paraphrase", 0, [(1, 0), (1, 0)])    # 1.0
    add(0, 0, 0, "p2", "paraphrase", 0, [(0, 0), (0, 0), (0, 0), (1, 0)])  # 0.25 -> S_para[0, 0] = 0.625
    add(0, 1, 0, "o0", "original", 0, [(0, 0), (0, 0)])      # S[1, 0] = 0
    add(0, 1, 1, "o1", "original", 0, [(1, 0), (1, 0)])      # S[1, 1] = 1
    add(0, 1, 1, "p3", "paraphrase", 0, [(1, 0), (0, 0)])    # S_para[1, 1] = 0.5
    add(0, 1, 0, "p1", "paraphrase", 0, [(0, 0), (0, 0)], "failed cell: non-finite values in parameter x")
    add(0, 1, 1, "c1", "contrast", 1, [(0, 1), (1, 1)])     # target SR 1, GSA .5, original persistence .5
    add(0, 1, 1, "x1", "collision", -1, [(1, 0), (0, 0)])   # OGP .5, CGAR .5; action initiated in the first only
    n = len(rows)
    cols = {k: np.array([r[i] for r in rows]) for i, k in
            enumerate(("seed", "stage", "task", "variant", "condition", "target", "status", "success"))}
    cols["success"] = cols["success"].astype(bool)
    cols["method"] = np.array(["seqft"] * n)
    cols["slot"] = np.where(cols["condition"] == "contrast", "object", "")
    cols["held_at_reset"] = np.zeros((n, 2), bool)
    cols["action_initiated"] = np.zeros(n, bool)
    cols["action_initiated"][-2] = True
    return cols


def test_report_from_files(tmp_path):
    episodes.write_columns(tmp_path / "grid" / "episodes.h5", _episode_table(), {"tasks": ["task_a", "task_b"]})
    train = tmp_path / "train" / "seqft_s0"
    train.mkdir(parents=True)
    # Learning curves: task 0 peaks at 0.5 then drops (held at the peak: [0, .5, .5]); task 1 at 1.0.
    (train / "metrics.json").write_text(json.dumps({"config": {"algo": "seqft", "seed": 0},
                                                    "curves": [[0.0, 0.5, 0.25], [1.0, 0.5]],
                                                    "curve_epochs": [[0, 5, 10], [0, 5]]}))
    doc = finalize(tmp_path)
    o = doc["metrics"]["seqft"]["original"]
    # paraphrases have no learning curves: one FWT definition for every condition, S[j, j]
    assert doc["fwt_definition"] == "S[j, j]"
    assert o["fwt"]["mean"] == pytest.approx((0.5 + 1) / 2)
    assert o["nbt"]["mean"] == pytest.approx(0.5)  # S[0,0] - S[1,0]
    assert o["auc"]["mean"] == pytest.approx(((0.5 + 0) / 2 + 1) / 2)
    assert o["final"]["mean"] == pytest.approx(0.5) and o["final"]["std"] == 0.0
    p = doc["metrics"]["seqft"]["paraphrase"]
    assert doc["success"]["seqft"]["mean"][1][0][1] is None  # the failed cell is missing, not 0
    assert p["fwt"]["mean"] == pytest.approx((0.625 + 0.5) / 2)  # S_para[j, j] (no paraphrase curves)
    assert p["nbt"]["mean"] is None  # needs the missing cell: unavailable rather than wrong
    assert doc["failed_cells"] == [{"method": "seqft", "seed": 0, "stage": 1, "task": 0,
                                    "reason": "failed cell: non-finite values in parameter x"}]
    assert doc["success"]["seqft"]["mean"][0][0][1] == pytest.approx(0.625)
    lang = doc["language"]["seqft"]
    assert {k: v["mean"] for k, v in lang["contrast"].items()} == pytest.approx(
        {"target_sr": 1.0, "gsa": 0.5, "original_persistence": 0.5})
    assert {k: v["mean"] for k, v in lang["collision"].items()} == pytest.approx({"ogp": 0.5, "cgar": 0.5, "air": 0.5})
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["metrics"] == json.loads(json.dumps(doc["metrics"]))
    md = (tmp_path / "report.md").read_text()
    assert "| seqft | 1 | 75.0 ± 0.0 | 50.0 ± 0.0 | 62.5 ± 0.0 | 50.0 ± 0.0 |" in md
    assert "FWT definition for every condition of this report: S[j, j]" in md
    assert "| 1: task_b | 100.0 ± 0.0 |" in md
    # target SR, GSA, its no-switch baseline (task 1's original rollouts never reach the contrast goal), persistence,
    # OGP, CGAR, AIR
    assert "| seqft | 100.0 ± 0.0 | 50.0 ± 0.0 | 0.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 |" in md
    assert "non-finite values in parameter x" in md
    for png in ("success_seqft.png", "curves_seqft_s0.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_fwt_from_learning_curves_when_they_serve_every_condition(tmp_path):
    """Original instructions only, curves for every run: LIBERO's curve-based FWT (and AUC)."""
    cols = _episode_table()
    keep = cols["condition"] == "original"
    episodes.write_columns(tmp_path / "grid" / "episodes.h5", {k: v[keep] for k, v in cols.items()},
                           {"tasks": ["task_a", "task_b"]})
    train = tmp_path / "train" / "seqft_s0"
    train.mkdir(parents=True)
    (train / "metrics.json").write_text(json.dumps({"config": {"algo": "seqft", "seed": 0},
                                                    "curves": [[0.0, 0.5, 0.25], [1.0, 0.5]]}))
    doc = finalize(tmp_path, log=lambda m: None)
    o = doc["metrics"]["seqft"]["original"]
    assert doc["fwt_definition"] == "learning curves (LIBERO)"
    assert o["fwt"]["mean"] == pytest.approx((1 / 3 + 1) / 2)  # curves held at their peak: [0, .5, .5], [1, 1]
    assert o["auc"]["mean"] == pytest.approx(((1 / 3 + 0) / 2 + 1) / 2)


def test_report_needs_the_episode_file(tmp_path):
    with pytest.raises(ClbenchError, match="episodes.h5"):
        finalize(tmp_path)


def test_peft_evidence_config_is_the_final_battery_on_the_libero_90_base():
    """The four methods on a frozen base run the same battery as the committed final evidence (so their rows share
    one table, benchmarks/evidence_merge.py), one method per folder, and the base configs/pretrain_libero_90.yaml
    makes fits their policy."""
    from clbench_jax.lifelong.pretrain import POLICY_FIELDS

    final = load_run_config(REPO / "configs" / "evidence_libero_goal_final.yaml").to_dict()
    path = REPO / "configs" / "evidence_libero_goal_peft.yaml"
    assert yaml.safe_load(path.read_text())["methods"] == ["l2m", "tail", "iscil", "dmpel"]
    peft = load_run_config(path, methods=["tail"]).to_dict()
    assert peft.pop("methods") == ["tail"] and peft.pop("algo_kwargs") == {}
    base = peft["train"].pop("pretrained")
    final.pop("methods"), final.pop("algo_kwargs")
    assert peft == final
    pre = yaml.safe_load((REPO / "configs" / "pretrain_libero_90.yaml").read_text())
    assert pre["suite"] == "libero_90" and base == "docs/results/libero_90_state_base"  # the committed base
    assert {k: pre.get(k) for k in POLICY_FIELDS} == {k: final["train"].get(k) for k in POLICY_FIELDS}


def test_pretrained_flag_starts_every_method_of_the_pretraining_experiment_from_the_base():
    """LIBERO's Fig. 5 runs one config twice: without --pretrained every method starts from scratch, with it every
    method starts from the named base, whose policy (configs/pretrain_libero_90.yaml) fits the config's."""
    from clbench_jax.lifelong.pretrain import POLICY_FIELDS

    path = REPO / "configs" / "pretraining_libero_10.yaml"
    scratch, based = load_run_config(path), load_run_config(path, pretrained="runs/pretrained/b")
    assert scratch.methods == based.methods == ("seqft", "er", "packnet") and scratch.suite == "libero_10"
    assert {train_config(scratch, m, 0).pretrained for m in scratch.methods} == {None}
    assert {train_config(based, m, 1).pretrained for m in based.methods} == {"runs/pretrained/b"}
    pre = yaml.safe_load((REPO / "configs" / "pretrain_libero_90.yaml").read_text())
    assert {k: pre.get(k) for k in POLICY_FIELDS} == {k: scratch.train.get(k) for k in POLICY_FIELDS}


def test_run_config_errors(tmp_path):
    cfg = load_run_config(REPO / "configs" / "quickstart.yaml")
    assert cfg.methods == ("seqft", "er") and cfg.n_tasks == 2
    for name in ("full_libero_goal", "full_libero_spatial", "full_libero_object", "full_libero_10"):
        full = load_run_config(REPO / "configs" / f"{name}.yaml")
        assert full.seeds == (100, 200, 300) and full.grid["n_rollouts"] == 20 and full.grid["horizon"] == 600
        # LIBERO's settings where the config claims LIBERO's protocol: sampled actions, padding kept, std floor 1e-4
        t = train_config(full, full.methods[0], full.seeds[0])
        assert (t.deterministic_eval, t.mask_padding, t.gmm_min_std, t.lr) == (False, False, 1e-4, 1e-4)
        assert set(full.grid["conditions"]) == set(CONDITIONS) and full.grid["max_per_condition"] is None
    bad = {"suite": "libero_goal", "methods": ["seqft"], "grid": {"rollouts": 3}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ClbenchError, match="grid.rollouts"):
        load_run_config(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"methods": ["sgd"]}))
    with pytest.raises(ClbenchError, match="field methods"):
        load_run_config(tmp_path / "b.yaml")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"train": {"suite": "libero_10"}}))
    with pytest.raises(ClbenchError, match="train.suite"):
        load_run_config(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"train": {"epochs": -1}}))
    with pytest.raises(ClbenchError, match="epochs"):
        load_run_config(tmp_path / "d.yaml")
    # condition, face and floor names the grid does not know: the error lists the known ones
    for i, (grid, field, listed) in enumerate((({"conditions": ["original", "swapp"]}, "grid.conditions", "nonsense"),
                                               ({"final_only": ["occ", "xx"]}, "grid.final_only", "probe"),
                                               ({"floors": ["zero"]}, "grid.floors", "random-motion"),
                                               ({"conditions": ["paraphrase"]}, "grid.conditions", "original"))):
        (tmp_path / f"g{i}.yaml").write_text(yaml.safe_dump({"grid": grid}))
        with pytest.raises(ClbenchError, match=listed) as e:
            load_run_config(tmp_path / f"g{i}.yaml")
        assert e.value.field == field and f"g{i}.yaml" in str(e.value)


TOY = """
suite: libero_goal
order: 17
n_tasks: 2
methods: [seqft, packnet]
seeds: [0]
train:
  epochs: 1
  eval_every: 1
  n_eval: 2
  horizon: 20
  batch_size: 8
  max_batches: 2
  lang: minilm
  policy_kwargs: {embed_dim: 16, num_layers: 1, num_heads: 2, head_dim: 8, mlp_dim: 32, gmm_hidden: [32],
                  seq_len: 4}
algo_kwargs:
  packnet: {post_prune_epochs: 1}
demos: {dir: DEMOS, n: 2, horizon: 150, batch: 8, images: false}
grid:
  variants: VARIANTS
  max_per_condition: 1
  n_rollouts: 2
  horizon: 10
  chunk: 8
"""


@pytest.mark.slow
def test_run_end_to_end(tmp_path):
    """Demos -> seqft and packnet over 2 tasks -> grid over their 4 stage checkpoints -> report; a rerun resumes
    without redoing anything and `report` rebuilds the same numbers."""
    from clbench_jax.cli import main

    text = TOY.replace("DEMOS", str(tmp_path / "demos")).replace(
        "VARIANTS", str(REPO / "configs" / "variants" / "libero_goal.offline.json"))
    (tmp_path / "toy.yaml").write_text(text)
    out = tmp_path / "run"
    assert main(["run", str(tmp_path / "toy.yaml"), "--out", str(out), "--quiet"]) == 0
    cols, meta = episodes.read_columns(out / "grid" / "episodes.h5")
    assert set(cols["method"]) == {"seqft", "packnet"} and (cols["status"] == "ok").all()
    assert meta["checkpoints"] == [["seqft", 0, 0], ["seqft", 0, 1], ["packnet", 0, 0], ["packnet", 0, 1]]
    # variants: original + at most one of each other condition per task, 2 rollouts, cells j <= t; probes and the
    # seed-004 faces only at the last stage
    cells = {}
    for m, st, j, v, c in zip(cols["method"], cols["stage"], cols["task"], cols["variant"], cols["condition"]):
        cells.setdefault((m, st, j), {}).setdefault(v, []).append(c)
    assert all(len(cs) == 2 for vs in cells.values() for cs in vs.values())
    faces = {"probe", "swap", "occ", "nonsense"}
    for m in ("seqft", "packnet"):
        early, late = cells[(m, 0, 0)], cells[(m, 1, 0)]
        assert not faces & {c[0] for c in early.values()} and set(early) < set(late)
        both = [c[0] for j in (0, 1) for c in cells[(m, 1, j)].values()]  # the stove task has no swap
        assert {"swap", "occ", "nonsense"} <= set(both)
        assert all(sum(c[0] == k for c in late.values()) <= 1 for k in faces)  # max_per_condition: 1
    assert len(cols["method"]) == 2 * sum(len(vs) for vs in cells.values())
    # the floors ran the final-stage battery; the report reads them beside the methods
    for floor in ("do-nothing", "random-motion"):
        fc, _ = episodes.read_columns(out / "floors" / floor / "episodes.h5")
        assert set(fc["method"]) == {floor} and len(fc["method"]) == 2 * (len(cells[("seqft", 1, 0)]) +
                                                                        len(cells[("seqft", 1, 1)]))
    # the demos the run trained on, each file's actions digest beside it
    from clbench_jax.data.commands import actions_digest

    demos = json.loads((out / "demos.json").read_text())
    assert [f["task"] for f in demos["files"]] == sorted(meta["tasks"])
    assert all(f["actions_sha256"] == actions_digest(p) for f, p in
               zip(demos["files"], sorted((tmp_path / "demos").rglob("*_demo.hdf5"))))
    doc = json.loads((out / "metrics.json").read_text())
    assert set(doc["metrics"]) == {"seqft", "packnet"}
    assert doc["success"]["seqft"]["mean"][0][1][0] is None and doc["success"]["seqft"]["mean"][1][1][0] is not None
    before = {p.name: p.stat().st_mtime_ns for p in (out / "grid" / "chunks").iterdir()}
    assert main(["run", str(tmp_path / "toy.yaml"), "--out", str(out), "--quiet"]) == 0  # resumes: nothing to do
    assert {p.name: p.stat().st_mtime_ns for p in (out / "grid" / "chunks").iterdir()} == before
    (out / "metrics.json").unlink()
    assert main(["report", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["metrics"] == doc["metrics"]
    assert (out / "report.md").exists() and (out / "success_packnet.png").exists()
    md = (out / "report.md").read_text()
    assert "| floor: random-motion |" in md and "Counterfactual battery (seed 004)" in md


def _merge_source(folder: Path, seed: int, spec: dict, cfg: dict) -> None:
    cols = _episode_table()
    cols["seed"] = np.full(len(cols["seed"]), seed)
    meta = {"tasks": ["task_a", "task_b"], "goal_columns": [], "spec": spec, "fingerprint": f"fp{seed}",
            "checkpoints": [["seqft", seed, 0], ["seqft", seed, 1]]}
    episodes.write_columns(folder / "grid" / "episodes.h5", cols, meta)
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    train = folder / "train" / f"seqft_s{seed}"
    train.mkdir(parents=True)
    (train / "metrics.json").write_text(json.dumps({"config": {"algo": "seqft", "seed": seed},
                                                    "curves": [[0.0, 0.5, 0.25], [1.0, 0.5]]}))


def test_report_merges_seed_folders(tmp_path):
    """`clbench report OUT --merge A B`: two folders holding seeds 0 and 1 of one grid become one 2-seed report;
    overlapping runs, another grid or another run config are refused with the file named."""
    from clbench_jax.eval.report import merge_runs

    spec, cfg = {"n_rollouts": 2}, {"suite": "libero_goal", "methods": ["seqft"], "seeds": [0], "train": {"lr": 1}}
    _merge_source(tmp_path / "a", 0, spec, cfg)
    _merge_source(tmp_path / "b", 1, spec, dict(cfg, seeds=[1]))
    (tmp_path / "b" / "grid" / "episodes.h5").rename(tmp_path / "b" / "grid" / "hold.h5")
    with pytest.raises(ClbenchError, match="has not finished"):
        merge_runs(tmp_path / "all", [tmp_path / "a", tmp_path / "b"])
    (tmp_path / "b" / "grid" / "hold.h5").rename(tmp_path / "b" / "grid" / "episodes.h5")
    doc = finalize(merge_runs(tmp_path / "all", [tmp_path / "a", tmp_path / "b"]), log=lambda m: None)
    assert doc["episodes"] == 2 * len(_episode_table()["seed"])
    o = doc["metrics"]["seqft"]["original"]
    assert o["nbt"]["per_seed"] == pytest.approx([0.5, 0.5]) and o["final"]["std"] == 0.0
    assert yaml.safe_load((tmp_path / "all" / "config.yaml").read_text())["seeds"] == [0, 1]
    assert (tmp_path / "all" / "train" / "seqft_s1").resolve() == (tmp_path / "b" / "train" / "seqft_s1").resolve()
    grid = json.loads((tmp_path / "all" / "grid" / "grid.json").read_text())
    assert grid["fingerprint"] == "merged:fp0,fp1" and len(grid["checkpoints"]) == 4
    # action-level results travel with the merge (the sources' checkpoints may be gone), or it is refused
    from clbench_jax.eval import battery
    from clbench_jax.jsonio import write_json

    def act(folder, key, demos, n_windows=256):
        settings = {"n_windows": n_windows, "demos": [[f"{t}_demo.hdf5", demos] for t in "ab"]}
        write_json(folder / battery.FILE, {"format": battery.FORMAT, "version": battery.VERSION, "fingerprint": "f",
                                           "settings": settings, "runs": {key: {"method": "seqft", "tasks": []}}})

    act(tmp_path / "a", "seqft_s0", 100)
    act(tmp_path / "b", "seqft_s1", 100)
    merge_runs(tmp_path / "all", [tmp_path / "a", tmp_path / "b"])
    merged = battery.read_action_level(tmp_path / "all" / battery.FILE)
    assert sorted(merged["runs"]) == ["seqft_s0", "seqft_s1"] and "demo_sets" not in merged
    # each run measured on the demos it trained on: other demo files merge, and the merge names each run's set
    act(tmp_path / "b", "seqft_s1", 101)
    merged = battery.read_action_level(merge_runs(tmp_path / "all", [tmp_path / "a", tmp_path / "b"]) / battery.FILE)
    assert merged["demo_sets"]["seqft_s1"] == [["a_demo.hdf5", 101], ["b_demo.hdf5", 101]]
    assert merged["demo_sets"]["seqft_s0"][0] == ["a_demo.hdf5", 100]
    # the merged folder's report takes that file as it is: recomputing it there would measure every run on one demo
    # set, and its config may unite methods with different networks, which a run's config may not
    from clbench_jax.eval.run import action_level_phase

    doc, note = action_level_phase(tmp_path / "all")
    assert note is None and doc["demo_sets"] == merged["demo_sets"]
    act(tmp_path / "b", "seqft_s1", 100, n_windows=128)
    with pytest.raises(ClbenchError, match="action-level settings differ") as e:
        merge_runs(tmp_path / "x", [tmp_path / "a", tmp_path / "b"])
    assert "b/action_level.json" in str(e.value) and not (tmp_path / "x").exists()
    (tmp_path / "b" / battery.FILE).unlink()
    with pytest.raises(ClbenchError, match="seqft seed 0 is also in") as e:
        merge_runs(tmp_path / "x", [tmp_path / "a", tmp_path / "a"])
    assert "a/grid/episodes.h5" in str(e.value)
    _merge_source(tmp_path / "c", 2, {"n_rollouts": 5}, cfg)
    with pytest.raises(ClbenchError, match="spec differs"):
        merge_runs(tmp_path / "x", [tmp_path / "a", tmp_path / "c"])
    _merge_source(tmp_path / "d", 3, spec, dict(cfg, train={"lr": 2}))
    with pytest.raises(ClbenchError, match="run config differs") as e:
        merge_runs(tmp_path / "x", [tmp_path / "a", tmp_path / "d"])
    assert "d/config.yaml" in str(e.value)
    # runs from two bases (one rebuilt by the same recipe) merge and the merged config names each run's base; a
    # run from a base never merges with one from scratch
    _merge_source(tmp_path / "e", 0, spec, dict(cfg, train={"lr": 1, "pretrained": "bases/first"}))
    _merge_source(tmp_path / "f", 1, spec, dict(cfg, seeds=[1], train={"lr": 1, "pretrained": "bases/s{seed}"}))
    merged = yaml.safe_load((merge_runs(tmp_path / "ef", [tmp_path / "e", tmp_path / "f"]) / "config.yaml").read_text())
    assert merged["pretrained_by_run"] == {"seqft_s0": "bases/first", "seqft_s1": "bases/s1"}
    assert merged["train"] == {"lr": 1, "pretrained": "bases/first"}
    merged = yaml.safe_load((merge_runs(tmp_path / "ab", [tmp_path / "a", tmp_path / "b"]) / "config.yaml").read_text())
    assert "pretrained_by_run" not in merged
    with pytest.raises(ClbenchError, match="seqft seed 1 starts from a pretrained base and seqft seed 0 does not") as e:
        merge_runs(tmp_path / "x", [tmp_path / "a", tmp_path / "f"])
    assert e.value.field == "train.pretrained" and "f/config.yaml" in str(e.value)


def test_eval_modules_import_one_way():
    """No import cycle among clbench_jax/eval's modules (module- or function-level imports): the report reads run
    folders and never calls back into the run (DESIGN: run -> report -> battery -> run was a knot)."""
    import ast

    folder = REPO / "clbench_jax" / "eval"
    deps = {}
    for f in folder.glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clbench_jax.eval"):
                names |= ({a.name for a in node.names} if node.module == "clbench_jax.eval"
                          else {node.module.split(".")[-1]})
        deps[f.stem] = names & {p.stem for p in folder.glob("*.py")}
    assert "run" not in deps["report"] and "run" not in deps["battery"] and "report" in deps["run"]

    def reach(start, seen):
        for d in deps[start]:
            if d not in seen:
                seen.add(d)
                reach(d, seen)
        return seen

    assert [m for m in deps if m in reach(m, set())] == []
