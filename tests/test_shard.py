"""The grid sharded over 4 (forced host) devices returns exactly the single-device episode table.

Runs in a subprocess so XLA_FLAGS takes effect before JAX starts. 7 chunks: the 4-device run does one full round of
4 chunks and one of 3 (padded with a repeat), so padding and the chunk-to-device split are both exercised."""

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    from clbench_jax.eval import grid as G
    from clbench_jax.eval.grid_runner import run_grid
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.policies import make_bc_transformer
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.tasks.suites import suite_tasks

    assert len(jax.devices()) == 4, jax.devices()
    policy = make_bc_transformer("state", embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32,
                                 seq_len=4, gmm_hidden=(32,), gmm_modes=3)
    tasks = tuple(suite_tasks("libero_goal")[:2])
    scene = scene_for(tasks[0].scene)
    ex = {"obs": {k: np.zeros((1, 4) + s, d) for k, (s, d) in obs_spec(scene, "state").items()},
          "lang": np.zeros((1, 384), np.float32)}
    ps = [policy.init(jax.random.PRNGKey(i), ex) for i in range(4)]
    held = (("on", "wooden_cabinet_1", "main_table_cabinet_region"),)
    # a goal that holds at reset under a stop-at-goal condition: those episodes stop at once
    variants = ((G.original_variant(tasks[0]), G.Variant("c", "paraphrase", "leave it", held)),
                (G.original_variant(tasks[1]),))
    cks = [G.Checkpoint("m", s % 2, 1, lambda j, s=s: ps[s]) for s in range(4)]
    cks.append(G.Checkpoint("m", 0, 0, lambda j: ps[0]))
    spec = G.GridSpec(tasks=tasks, variants=variants, n_rollouts=2, horizon=10, chunk=4)
    emb = [np.random.default_rng(j).normal(size=(len(vs), 384)).astype(np.float32) for j, vs in enumerate(variants)]
    assert len(G.plan(spec, cks)) == 7
    out = {}
    for d in (4, 1):
        out[d] = run_grid(spec, cks, policy, f"{sys.argv[1]}/d{d}", embeddings=emb, n_devices=d, progress=False)
    # exact for every count, flag and step; float diagnostics (motion maxima) to rtol 1e-4: XLA does not promise
    # bit-identical floats when the batch is split differently (a fresh-clone run differed in ee_disp_max)
    same = lambda a, b: np.allclose(a, b, rtol=1e-4, atol=1e-6) if a.dtype.kind == "f" else np.array_equal(a, b)
    diff = [k for k in out[1] if not same(out[1][k], out[4][k])]
    print(json.dumps({"rows": len(out[1]["method"]), "diff": diff, "ok": int((out[1]["status"] == "ok").sum()),
                      "lengths": sorted(set(out[1]["length"].tolist()))}))
""")


def test_four_devices_match_one(tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["rows"] == 14 * 2 and out["ok"] == 14 * 2  # 4 x (2 + 1) + 2 groups of 2 rollouts
    assert out["diff"] == []
    assert 1 in out["lengths"] and 10 in out["lengths"]  # the held-goal episodes stop at once, the others run on
