"""The grid over two real jax.distributed processes (a coordinator on 127.0.0.1, one CPU device each) merges to
exactly the episode table of a one-process run.

Three subprocesses run the same small grid (test_shard's: 2 libero_goal tasks, 7 chunks of 4 episodes, horizon 10,
native backend, state observations): hosts 0 and 1 into one shared folder, where they split the chunks round-robin
(shard.host_share) and write their own chunk files, and a plain process without jax.distributed into another.
Each host runs one chunk per rollout on its one device, as the single process does, so the tables must be equal
bit for bit. Host 1 starts late, once host 0 has written a chunk file (at most 60 s): hosts that listed the pending
chunks each for itself split different lists (chunks run twice, others by no one); they split process 0's list.
Every subprocess has a timeout: a host waiting forever on a barrier fails the test."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

SCRIPT = textwrap.dedent("""
    import json, pathlib, sys, time
    import jax, numpy as np

    out_dir, port, pid, n_proc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if n_proc > 1:
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n_proc, process_id=pid)
    from clbench_jax.eval import grid as G
    from clbench_jax.eval.grid_runner import run_grid
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.policies import make_bc_transformer
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.tasks.suites import suite_tasks

    policy = make_bc_transformer("state", embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32,
                                 seq_len=4, gmm_hidden=(32,), gmm_modes=3)
    tasks = tuple(suite_tasks("libero_goal")[:2])
    scene = scene_for(tasks[0].scene)
    ex = {"obs": {k: np.zeros((1, 4) + s, d) for k, (s, d) in obs_spec(scene, "state").items()},
          "lang": np.zeros((1, 384), np.float32)}
    ps = [policy.init(jax.random.PRNGKey(i), ex) for i in range(4)]
    held = (("on", "wooden_cabinet_1", "main_table_cabinet_region"),)
    variants = ((G.original_variant(tasks[0]), G.Variant("c", "paraphrase", "leave it", held)),
                (G.original_variant(tasks[1]),))
    cks = [G.Checkpoint("m", s % 2, 1, lambda j, s=s: ps[s]) for s in range(4)]
    cks.append(G.Checkpoint("m", 0, 0, lambda j: ps[0]))
    spec = G.GridSpec(tasks=tasks, variants=variants, n_rollouts=2, horizon=10, chunk=4)
    emb = [np.random.default_rng(j).normal(size=(len(vs), 384)).astype(np.float32) for j, vs in enumerate(variants)]
    t = time.time()
    while pid == 1 and not (pathlib.Path(out_dir) / "chunks" / "00000.h5").exists() and time.time() - t < 60:
        time.sleep(0.2)  # a late host: starts once host 0 has written chunk 0 (or after 60 s, if host 0 waits for it)
    waited, ran = round(time.time() - t, 1), []
    cols = run_grid(spec, cks, policy, out_dir, embeddings=emb, n_devices=1, progress=False, on_chunk=ran.append)
    print(json.dumps({"process": [jax.process_index(), jax.process_count()], "chunks": ran,
                      "n_chunks": len(G.plan(spec, cks)), "rows": None if cols is None else len(cols["status"]),
                      "waited": waited}))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    from clbench_jax.eval import episodes

    root = str(Path(__file__).resolve().parents[1])  # this checkout's clbench_jax, whatever the venv installed
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    env.pop("XLA_FLAGS", None)  # one CPU device per process
    port = str(_free_port())
    runs = [(tmp_path / "hosts", port, 0, 2), (tmp_path / "hosts", port, 1, 2), (tmp_path / "one", 0, 0, 1)]
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, *map(str, r)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in runs]
    deadline, res = time.monotonic() + 600, []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert p.returncode == 0, err[-3000:]
            res.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()

    assert res[1]["waited"] < 60  # host 1 started late: after host 0 had written chunk 0
    n = res[2]["n_chunks"]
    assert n == 7 and res[2]["process"] == [0, 1] and res[2]["chunks"] == list(range(n))
    for i in (0, 1):  # each host ran its round-robin share, and both returned the merged table
        assert res[i]["process"] == [i, 2] and res[i]["chunks"] == list(range(i, n, 2))
        assert res[i]["rows"] == res[2]["rows"] == 28
    hosts, _ = episodes.read_columns(tmp_path / "hosts" / "episodes.h5")
    one, _ = episodes.read_columns(tmp_path / "one" / "episodes.h5")
    assert hosts.keys() == one.keys()
    diff = [k for k in one if not np.array_equal(one[k], hosts[k], equal_nan=one[k].dtype.kind == "f")]
    assert diff == []
