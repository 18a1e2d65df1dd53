"""Seed 000's Table III and Figures 3-6 in the run report, and the action-level file (eval/battery.py): hand-built
episode columns whose expected values are worked out by hand, and the action level of a tiny real policy on
synthetic demo files."""

import json
import os

import jax
import numpy as np
import pytest
import yaml

from clbench_jax.data.hdf5 import write_demos
from clbench_jax.errors import DataFileError
from clbench_jax.eval import battery, episodes
from clbench_jax.eval import language_metrics as M
from clbench_jax.eval.grid import Checkpoint, Variant
from clbench_jax.eval.report import finalize
from clbench_jax.eval.run import RunConfig, action_level_phase, report
from clbench_jax.lifelong.loop import derive_rng

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cols(rows, k):
    """rows: (method, seed, stage, task, variant, condition, slot, target, success, held, initiated, status)."""
    names = ("method", "seed", "stage", "task", "variant", "condition", "slot", "target", "success",
             "held_at_reset", "action_initiated", "status")
    cols = {n: np.array([r[i] for r in rows]) for i, n in enumerate(names)}
    for n in ("success", "held_at_reset"):
        cols[n] = cols[n].astype(bool).reshape(len(rows), k)
    cols["action_initiated"] = cols["action_initiated"].astype(bool)
    return cols


def _collisions(method, seed, stage, task, succ, initiated, held=None, status="ok"):
    held = held or [(0, 0)] * len(succ)
    return [(method, seed, stage, task, f"x{task}", "collision", "object", -1, s, h, a, status)
            for s, h, a in zip(succ, held, initiated)]


def _table3_episodes():
    r = []
    # seed 0, final stage 2.   pair:  OGP   CGAR  AIR
    r += _collisions("a", 0, 2, 0, [(1, 0), (1, 0), (1, 0), (0, 0)], [1, 1, 1, 1])  # .75  .75  1
    r += _collisions("a", 0, 2, 1, [(1, 0), (0, 1), (0, 0), (0, 0)], [1, 1, 1, 0])  # .25  .5   .75
    r += _collisions("a", 0, 2, 2, [(0, 1), (0, 0), (0, 0), (0, 0)], [1, 1, 0, 0])  # 0    .25  .5
    r += _collisions("b", 0, 2, 0, [(1, 0), (1, 0), (0, 1), (0, 1)], [1, 0, 0, 0])  # .5   1    .25
    # every audited goal held at reset: OGP 1, CGAR undefined (no eligible rollout), AIR 0
    r += _collisions("b", 0, 2, 2, [(1, 1)] * 4, [0] * 4, held=[(1, 1)] * 4)
    # not eligible: a failed cell, a collision of an earlier stage, a contrast
    r += _collisions("b", 0, 2, 1, [(1, 0)] * 2, [1, 1], status="failed cell: boom")
    r += _collisions("a", 0, 1, 0, [(0, 0)] * 4, [0] * 4)
    r += [("a", 0, 2, 0, "c0", "contrast", "object", 1, (1, 1), (0, 0), 1, "ok")]
    # seed 1 (no action-level results): AIR and CGAR rank the same way -> rho 1
    r += _collisions("a", 1, 2, 0, [(1, 0), (1, 0)], [1, 1])  # CGAR 1, AIR 1
    r += _collisions("a", 1, 2, 1, [(1, 0), (0, 0)], [1, 0])  # .5, .5
    r += _collisions("a", 1, 2, 2, [(0, 0), (0, 0)], [0, 0])  # 0, 0
    return _cols(r, 2)


def _act_doc(values):
    runs = {}
    for (m, s, j), (ad, lm) in values.items():
        run = runs.setdefault(f"{m}_s{s}", {"method": m, "seed": s, "stage": 2, "tasks": []})
        run["tasks"].append({"task": j, "conditions": {"collision": {"ad": ad, "lm": lm, "variants": 1},
                                                       "paraphrase": {"ad": 9.0, "lm": 9.0, "variants": 1}}})
    return {"runs": runs}


ACT = {("a", 0, 0): (0.1, 2.0), ("a", 0, 1): (0.3, 1.0), ("a", 0, 2): (0.2, 3.0), ("b", 0, 0): (0.4, -1.0),
       ("b", 0, 2): (0.5, 0.0)}


def test_table3_eligible_pairs_and_spearman_by_hand():
    cols = _table3_episodes()
    rows = battery.pair_rows(cols, 3, _act_doc(ACT))
    assert [(r["method"], r["seed"], r["task"]) for r in rows] == [
        ("a", 0, 0), ("a", 0, 1), ("a", 0, 2), ("a", 1, 0), ("a", 1, 1), ("a", 1, 2), ("b", 0, 0), ("b", 0, 2)]
    by = {(r["method"], r["seed"], r["task"]): r for r in rows}
    assert by[("a", 0, 0)]["ogp"] == 0.75 and by[("a", 0, 1)]["cgar"] == 0.5 and by[("b", 0, 0)]["air"] == 0.25
    assert by[("b", 0, 2)]["ogp"] == 1.0 and np.isnan(by[("b", 0, 2)]["cgar"]) and by[("b", 0, 2)]["air"] == 0.0
    assert by[("a", 0, 2)]["ad"] == 0.2 and np.isnan(by[("a", 1, 0)]["ad"])  # seed 1 has no action level
    t = battery.table3(cols, 3, _act_doc(ACT))
    # seed 0, 5 pairs (a0 a1 a2 b0 b2). AD ranks 1 3 2 4 5, OGP ranks 4 2 1 3 5: sum d^2 = 12 -> 1 - 72/120 = .4
    # LM ranks 4 3 5 1 2 vs OGP: sum d^2 = 0+1+16+4+9 = 30 -> 1 - 180/120 = -.5
    # AIR vs CGAR without b2 (4 pairs): AIR ranks 4 3 2 1, CGAR ranks 3 2 1 4: sum d^2 = 12 -> 1 - 72/60 = -.2
    # seed 1: AD / LM undefined (no pair), AIR vs CGAR = 1.
    assert t["seeds"] == [0, 1]
    assert t["ad_vs_ogp"]["per_seed"] == [pytest.approx(0.4), None] and t["ad_vs_ogp"]["pairs"] == [5, 0]
    assert t["ad_vs_ogp"]["mean"] == pytest.approx(0.4)
    assert t["lm_vs_ogp"]["mean"] == pytest.approx(-0.5)
    assert t["air_vs_cgar"]["per_seed"] == [pytest.approx(-0.2), pytest.approx(1.0)]
    assert t["air_vs_cgar"]["mean"] == pytest.approx(0.4) and t["air_vs_cgar"]["std"] == pytest.approx(0.6)
    assert t["air_vs_cgar"]["pairs"] == [4, 3]
    json.dumps(t, allow_nan=False)  # NaN-free for metrics.json


def _report_episodes():
    """One task (final stage 0), K = 3 goal columns: original, and two contrast goals."""
    r, z = [], (0, 0, 0)

    def add(variant, cond, slot, target, succ, held=None, initiated=None):
        for i, s in enumerate(succ):
            r.append(("seqft", 0, 0, 0, variant, cond, slot, target, s, (held or [z] * len(succ))[i],
                      (initiated or [1] * len(succ))[i], "ok"))

    add("o", "original", "", 0, [(1, 0, 0), (0, 0, 0)])         # S_orig = .5
    add("p", "paraphrase", "", 0, [(1, 0, 0), (1, 0, 0)])       # S_para = 1 -> final gap -.5
    add("c1", "contrast", "object", 1, [(0, 1, 0), (1, 1, 0)])  # target SR 1, GSA .5, persistence .5
    add("c2", "contrast", "object", 2, [z, (0, 0, 1)])          # .5, .5, 0
    add("c3", "contrast", "target", 1, [(1, 0, 0), (1, 1, 0)])  # .5, 0, 1
    # achieved: original, multiple, none, none (goal 0 already held at reset); AIR 3/4
    add("x", "collision", "object", -1, [(1, 0, 0), (0, 1, 1), z, (1, 0, 0)],
        held=[z, z, z, (1, 0, 0)], initiated=[1, 1, 0, 1])
    return _cols(r, 3)


def test_report_per_slot_achieved_goals_gap_figures_and_skip_reason(tmp_path):
    episodes.write_columns(tmp_path / "grid" / "episodes.h5", _report_episodes(), {"tasks": ["task_a"]})
    logged = []
    doc = finalize(tmp_path, log=logged.append)
    lang = doc["language"]["seqft"]
    slots = lang["contrast_per_slot"]
    # object: variants c1 and c2 equally: target SR (1 + .5)/2, GSA (.5 + .5)/2, persistence (.5 + 0)/2
    assert {k: v["mean"] for k, v in slots["object"].items()} == pytest.approx(
        {"target_sr": 0.75, "gsa": 0.5, "original_persistence": 0.25})
    assert {k: v["mean"] for k, v in slots["target"].items()} == pytest.approx(
        {"target_sr": 0.5, "gsa": 0.0, "original_persistence": 1.0})
    assert slots["action"] == {"unavailable": True} and slots["attribute"] == {"unavailable": True}
    assert {k: v["mean"] for k, v in lang["collision_achieved"].items()} == pytest.approx(
        {"original": 0.25, "other": 0.0, "multiple": 0.25, "none": 0.5})
    assert lang["collision"]["air"]["mean"] == pytest.approx(0.75)
    assert doc["metrics"]["seqft"]["paraphrase_gap"]["final_gap"]["mean"] == pytest.approx(-0.5)
    # no config.yaml: no action level, no coverage, both say why; Table III still has the collision pair
    assert doc["action_level"]["file"] is None and "action_level.json" in doc["action_level"]["note"]
    assert any("action-level metrics" in m and "action_level.json" in m for m in logged)
    assert "config.yaml" in doc["coverage"]["skipped"]
    assert [(r["task"], r["ogp"], r["ad"]) for r in doc["table3"]["rows"]] == [(0, 0.5, None)]
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["language"]["seqft"]["contrast_per_slot"]["target"]["gsa"]["mean"] == 0.0
    md = (tmp_path / "report.md").read_text()
    assert "| seqft | n/a | 75.0 / 50.0 / 25.0 | n/a | 50.0 / 0.0 / 100.0 | n/a |" in md
    assert "| seqft | 25.0 ± 0.0 | 0.0 ± 0.0 | 25.0 ± 0.0 | 50.0 ± 0.0 | 75.0 ± 0.0 | n/a | n/a | n/a |" in md
    assert "Not computed: no action_level.json in the run folder." in md
    for png in ("fig3_contrast_slots.png", "fig4_collisions.png", "fig6_paraphrase_gaps.png"):
        assert f"]({png})" in md and (tmp_path / png).stat().st_size > 1000
    assert not (tmp_path / "fig5_coverage.png").exists()


def test_report_without_demos_skips_action_level_and_draws_coverage(tmp_path):
    from clbench_jax.language.variants import coverage, read_variants

    vfile = os.path.join(REPO, "configs", "variants", "libero_goal.offline.json")
    cfg = RunConfig(n_tasks=1, methods=("seqft",), demos={"dir": str(tmp_path / "no_demos")},
                    grid={"variants": vfile})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    episodes.write_columns(tmp_path / "grid" / "episodes.h5", _report_episodes(), {"tasks": ["task_a"]})
    doc = report(tmp_path, log=lambda m: None)
    assert doc["action_level"]["file"] is None and "no demos for task" in doc["action_level"]["note"]
    c = coverage(read_variants(vfile))["conditions"]
    assert doc["coverage"]["conditions"] == c
    md = (tmp_path / "report.md").read_text()
    assert f"{c['contrast']['retained']} / {c['contrast']['excluded']}" in md
    assert (tmp_path / "fig5_coverage.png").stat().st_size > 1000


# ------------------------------------------------------------------------------------------- action level
TINY = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, gmm_hidden=(32,), gmm_modes=2,
            seq_len=4)
E, DTOK, LEN, N_DEMOS = 4, 5, 8, 2


def _demo_file(path, seed, e=E, dtok=DTOK):
    rng = np.random.default_rng(seed)
    demos = []
    for _ in range(N_DEMOS):
        obs = {"joint_states": rng.normal(size=(LEN, 7)).astype(np.float32),
               "gripper_states": rng.normal(size=(LEN, 2)).astype(np.float32),
               "ee_pos": rng.normal(size=(LEN, 3)).astype(np.float32),
               "object_tokens": rng.normal(size=(LEN, e, dtok)).astype(np.float32),
               "object_token_mask": np.ones((LEN, e), bool)}
        demos.append({"obs": obs, "actions": rng.uniform(-1, 1, (LEN, 7)).astype(np.float32),
                      "states": np.zeros((LEN, 4)), "robot_states": np.zeros((LEN, 9)),
                      "rewards": np.zeros(LEN), "dones": np.eye(LEN)[-1]})
    write_demos(path, demos, env_name="synthetic", problem_info={}, bddl_file_name="x.bddl",
                bddl_file_content="", env_args={})
    return demos


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from clbench_jax.policies.bc import make_bc_transformer

    folder = tmp_path_factory.mktemp("demos")
    paths = [str(folder / f"task{j}_demo.hdf5") for j in range(2)]
    demos = [_demo_file(p, j) for j, p in enumerate(paths)]
    policy = make_bc_transformer("state", **TINY)
    ex = {"obs": {"joint_states": np.zeros((1, 4, 7), np.float32), "gripper_states": np.zeros((1, 4, 2), np.float32),
                  "ee_pos": np.zeros((1, 4, 3), np.float32), "tokens": np.zeros((1, 4, E, DTOK), np.float32),
                  "token_mask": np.ones((1, 4, E), bool)},
          "lang": np.zeros((1, 384), np.float32)}
    params = [policy.init(jax.random.PRNGKey(k), ex) for k in range(2)]
    variants = ((Variant("t0/original", "original", "do a", ()), Variant("t0/p0", "paraphrase", "do a!", ()),
                 Variant("t0/p1", "paraphrase", "please do a", ()), Variant("t0/x0", "collision", "do z", None,
                                                                            "object")),
                (Variant("t1/original", "original", "do b", ()), Variant("t1/c0", "contrast", "do c", (), "object")))
    rng = np.random.default_rng(7)
    emb = [rng.normal(size=(len(vs), 384)).astype(np.float32) for vs in variants]
    emb[0][1] = emb[0][0]  # paraphrase p0 is embedded exactly as the original
    return dict(paths=paths, demos=demos, policy=policy, params=params, variants=variants, emb=emb)


def _compute(tiny, out, loads, embed=None, n_windows=6, log=None, stamps=None):
    cks = [Checkpoint(m, 0, 1, load) for m, load in zip(("er", "ewc"), loads)]
    return battery.compute_action_level(out, cks, tiny["policy"], ["task0", "task1"], tiny["variants"],
                                        tiny["paths"], obs="state", embed=embed or (lambda: tiny["emb"]),
                                        n_windows=n_windows, seed=3, stamps=stamps, log=log or (lambda m: None))


def _boom(*_):
    raise AssertionError("recomputed although the file matches")


def test_action_level_file_for_a_tiny_policy(tiny, tmp_path):
    out = tmp_path / "action_level.json"
    calls = []
    loads = [lambda j, i=i: calls.append((i, j)) or tiny["params"][i] for i in range(2)]
    doc = _compute(tiny, out, loads)
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc)) and not list(tmp_path.glob("*.tmp"))
    assert sorted(doc["runs"]) == ["er_s0", "ewc_s0"] and sorted(calls) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    er = doc["runs"]["er_s0"]["tasks"]
    assert [t["windows"] for t in er] == [6, 6]  # 2 demos x (8 - 4 + 1) full windows, 6 drawn
    v = er[0]["variants"]
    assert set(v) == {"t0/p0", "t0/p1", "t0/x0"} and v["t0/x0"]["slot"] == "object"
    assert v["t0/p0"]["ad"] == 0.0 and v["t0/p0"]["lm"] == 0.0  # same embedding as the original
    assert 0 < v["t0/p1"]["ad"] < 1 and v["t0/p1"]["lm"] != 0
    c = er[0]["conditions"]
    assert c["paraphrase"]["ad"] == pytest.approx(v["t0/p1"]["ad"] / 2) and c["paraphrase"]["variants"] == 2
    assert set(er[1]["conditions"]) == {"contrast"}
    # the windows: full windows of the demo file, the expert action at each one's last step, and the numbers
    # equal language_metrics.action_level on them
    obs, expert = battery.demo_windows(tiny["paths"][0], "state", 4, 6, derive_rng(3, "action_level", "task0"))
    for js, a in zip(obs["joint_states"], expert):
        hits = [(d, s) for d, demo in enumerate(tiny["demos"][0]) for s in range(LEN)
                if np.array_equal(demo["obs"]["joint_states"][s], js[-1])]
        assert len(hits) == 1 and hits[0][1] >= 3  # the last step of a window with 3 steps before it
        d, s = hits[0]
        np.testing.assert_array_equal(tiny["demos"][0][d]["obs"]["joint_states"][s - 3:s + 1], js)
        np.testing.assert_array_equal(tiny["demos"][0][d]["actions"][s], a)
    e = tiny["emb"][0]
    ref = M.action_level(tiny["policy"], tiny["params"][0], obs, np.repeat(e[:1], 6, 0), np.repeat(e[2:3], 6, 0),
                         expert)
    assert v["t0/p1"]["ad"] == pytest.approx(ref["ad"], rel=1e-5)
    assert v["t0/p1"]["lm"] == pytest.approx(ref["lm"], rel=1e-4, abs=1e-6)
    assert doc["runs"]["ewc_s0"]["tasks"][0]["variants"]["t0/p1"]["ad"] != pytest.approx(v["t0/p1"]["ad"])
    # summary: tasks equally (only task 0 has paraphrases), one seed
    s = battery.summary(doc)
    assert s["er"]["paraphrase"]["ad"]["mean"] == pytest.approx(c["paraphrase"]["ad"])
    assert s["er"]["contrast"]["lm"]["mean"] == pytest.approx(er[1]["conditions"]["contrast"]["lm"])
    assert s["er"]["paraphrase"]["seeds"] == [0] and s["ewc"]["contrast"]["seeds"] == [0]

    # cached: a matching file is reused without loading anything
    assert _compute(tiny, out, [_boom, _boom], embed=_boom) == doc
    # resumable: a run missing from the file is computed, the other reused
    partial = dict(doc, runs={"er_s0": doc["runs"]["er_s0"]})
    out.write_text(json.dumps(partial))
    again = _compute(tiny, out, [_boom, lambda j: tiny["params"][1]])
    assert again["runs"]["ewc_s0"] == doc["runs"]["ewc_s0"]
    # a run whose checkpoint stamp changed (retrained) is recomputed, the other reused
    stamped = _compute(tiny, out, [lambda j: tiny["params"][1], _boom], stamps={"er_s0": "1:new"})
    assert stamped["runs"]["er_s0"]["checkpoint"] == "1:new"
    assert stamped["runs"]["er_s0"]["tasks"] == doc["runs"]["ewc_s0"]["tasks"]  # now the other parameters
    # other settings: recomputed
    logged = []
    fewer = _compute(tiny, out, [lambda j: tiny["params"][0]] * 2, n_windows=3, log=logged.append)
    assert [t["windows"] for t in fewer["runs"]["er_s0"]["tasks"]] == [3, 3] and fewer["fingerprint"] != doc[
        "fingerprint"]
    assert any("settings changed" in m for m in logged)


def test_action_level_skip_reasons(tmp_path):
    assert action_level_phase(tmp_path) == (None, "no config.yaml in the run folder")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(RunConfig(n_tasks=1).to_dict()))
    doc, why = action_level_phase(tmp_path)
    assert doc is None and "no variant file" in why
    (tmp_path / "action_level.json").write_text("{}")
    with pytest.raises(DataFileError, match="action_level.json") as e:
        battery.read_action_level(tmp_path / "action_level.json")
    assert e.value.field == "format"


def test_finalize_computes_action_level_from_checkpoints_and_demos(tmp_path):
    """The glue: config.yaml -> the run's variant set, demos and final orbax checkpoint -> action_level.json ->
    metrics.json / report.md; a second report reuses the file."""
    from clbench_jax.algos import make_algorithm
    from clbench_jax.algos.train import OptimConfig, make_optimizer
    from clbench_jax.eval.chunk_size import param_shapes
    from clbench_jax.eval.run import run_tasks, train_config
    from clbench_jax.lifelong.checkpoints import StageCheckpoints
    from clbench_jax.lifelong.loop import make_policy, scene_for
    from clbench_jax.policies.act import obs_spec

    vfile = os.path.join(REPO, "configs", "variants", "libero_goal.offline.json")
    cfg = RunConfig(n_tasks=2, methods=("seqft",), demos={"dir": str(tmp_path / "demos")},
                    train={"policy_kwargs": dict(TINY, gmm_hidden=[32]), "lang": "minilm"},
                    grid={"variants": vfile, "max_per_condition": 1})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    tasks = run_tasks(cfg)
    (e, dtok), _ = obs_spec(scene_for(tasks[0].scene), "state")["tokens"]
    for j, t in enumerate(tasks):
        _demo_file(str(tmp_path / "demos" / f"{t.name}_demo.hdf5"), j, e, dtok)
    tcfg = train_config(cfg, "seqft", 0)
    shapes = param_shapes(make_policy(tcfg), tasks[0].scene, "state", 128, 4, 384)
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: (0.3 * rng.normal(size=x.shape)).astype(x.dtype), shapes)
    opt = make_optimizer(OptimConfig(tcfg.lr, tcfg.end_lr, tcfg.weight_decay, tcfg.grad_clip))
    ck = StageCheckpoints(tmp_path / "train" / "seqft_s0" / "checkpoints")
    ck.save(1, {"params": params, "algo_state": make_algorithm("seqft").init(params, 2),
                "opt_state": opt.init(params)}, {})
    ck.close()
    # collision episodes of both tasks at the final stage (K = 1 goal column)
    rows = [("seqft", 0, 1, j, f"x{j}", "collision", "object", -1, (s,), (0,), 1, "ok")
            for j in (0, 1) for s in (1, 0)]
    episodes.write_columns(tmp_path / "grid" / "episodes.h5", _cols(rows, 1), {"tasks": [t.name for t in tasks]})
    doc = report(tmp_path, log=lambda m: None)
    assert doc["action_level"] == dict(doc["action_level"], file="action_level.json", note=None)
    act = battery.read_action_level(tmp_path / "action_level.json")
    got = [t["conditions"] for t in act["runs"]["seqft_s0"]["tasks"]]
    # every perturbed instruction condition of each task (occ changes observations: no action level); the drawer
    # task has no swap (no other object can be opened)
    five = sorted(("paraphrase", "contrast", "collision", "swap", "nonsense"))
    assert [sorted(c) for c in got] == [[c for c in five if c != "swap"], five]
    assert all(c[k]["variants"] == 1 and c[k]["ad"] > 0 for c in got for k in c)  # max_per_condition: 1
    s = doc["action_level"]["summary"]["seqft"]["collision"]["ad"]["mean"]
    assert s == pytest.approx(np.mean([c["collision"]["ad"] for c in got]))
    assert [r["ad"] for r in doc["table3"]["rows"]] == pytest.approx([c["collision"]["ad"] for c in got])
    md = (tmp_path / "report.md").read_text()
    assert f"| seqft | collision | 0 | {s:.3f} ± 0.000 |" in md
    fig4 = md.split("### Collision behaviour")[1].split("###")[0].splitlines()  # AD / LM there name their seeds
    assert any(r.startswith("| seqft |") and f"| {s:.3f} ± 0.000 |" in r and r.endswith("| 0 |") for r in fig4)
    before = (tmp_path / "action_level.json").stat().st_mtime_ns
    assert report(tmp_path, log=lambda m: None)["action_level"] == doc["action_level"]
    assert (tmp_path / "action_level.json").stat().st_mtime_ns == before
    # the report alone reads the file and computes nothing
    assert finalize(tmp_path, log=lambda m: None)["action_level"]["summary"] == doc["action_level"]["summary"]


def test_action_level_skips_a_task_without_demos(tiny, tmp_path):
    """A task whose collection kept no demo (the oracle never solved it) is skipped with its reason; the others
    are still measured."""
    cks = [Checkpoint("er", 0, 1, lambda j: tiny["params"][0])]
    doc = battery.compute_action_level(tmp_path / "a.json", cks, tiny["policy"], ["task0", "task1"], tiny["variants"],
                                       [None, tiny["paths"][1]], obs="state", embed=lambda: tiny["emb"],
                                       n_windows=6, seed=3, log=lambda m: None)
    t0, t1 = doc["runs"]["er_s0"]["tasks"]
    assert t0["skipped"].startswith("no demos") and "conditions" not in t0
    assert t1["windows"] == 6 and "contrast" in t1["conditions"]
