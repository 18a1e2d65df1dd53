"""Train-step throughput of the BC policies (BC-RNN, BC-Transformer, BC-ViLT; state and RGB), with LIBERO's own
PyTorch policies timed on the same batch shapes as the peer; `--algos` adds rows for the lifelong algorithms' steps
(l2m, tail, iscil, dmpel: the frozen base plus the method's adapters, retrieval and routing, with their default
settings, after the first task's start_task on the benchmark batch, in a 10-task run); `--scan 1,10` adds rows for
the multi-step path (clbench_jax.algos.train.make_train_steps: K optimizer steps in one dispatch, a lax.scan over K
batches staged on the device; per-step rates divide the dispatch's time by K).

What is timed: the jitted step of clbench_jax.algos.train.make_train_step (sequential fine-tuning: GMM NLL over the
policy in train mode, dropout on, gradient clipped at global norm 100, AdamW lr 1e-4 wd 1e-4; RGB mode also runs
clbench_jax.policies.augment.augment_batch inside the step, as LIBERO augments inside compute_loss). One fixed
random batch, seq_len 10, 128 x 128 images, 768-d language input (LIBERO's BERT width). Each configuration runs
in its own subprocess, so its peak RSS is its own and a configuration that runs out of memory or time is recorded
as a miss while the others go on.

Peer: benchmarks/libero_train_peer.py in the torch venv (benchmarks/libero_train_peer.sh builds it) times
LIBERO's Sequential.observe step on the same shapes (RGB only: LIBERO has no state mode).

Usage:
  python benchmarks/train_throughput.py                        # full grid + peer BC-Transformer at batch 32
  python benchmarks/train_throughput.py --policies transformer --modes rgb --batches 32 --steps 3
  python benchmarks/train_throughput.py --resume               # keep finished rows of an interrupted run
  python benchmarks/train_throughput.py --policies transformer --modes state --batches 32 --peer-python '' \
      --algos seqft,l2m,tail,iscil,dmpel --out benchmarks/results/train_throughput_methods_cpu.json
  python benchmarks/train_throughput.py --policies transformer,rnn,vilt --modes state --batches 32 --scan 1,10 \
      --peer-python ''                                         # one step per dispatch vs 10 (lax.scan)
Writes benchmarks/results/train_throughput_cpu.json (atomic, after every row) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PEER_NAMES = {"transformer": "bc_transformer", "rnn": "bc_rnn", "vilt": "bc_vilt"}
N_TOKENS = 10  # object tokens per step in state mode (LIBERO scenes have 4-10 entities)


def make_batch(mode: str, b: int, t: int, img: int, lang_dim: int, seed: int = 0) -> dict:
    import numpy as np

    from clbench_jax.sim.scene import TOKEN_DIM

    rng = np.random.default_rng(seed)
    obs = {"joint_states": rng.normal(size=(b, t, 7)).astype(np.float32),
           "gripper_states": rng.normal(size=(b, t, 2)).astype(np.float32)}
    if mode == "rgb":
        for k in ("agentview_rgb", "eye_in_hand_rgb"):
            obs[k] = rng.integers(0, 256, size=(b, t, img, img, 3), dtype=np.uint8)
    else:
        obs["tokens"] = rng.normal(size=(b, t, N_TOKENS, TOKEN_DIM)).astype(np.float32)
        mask = np.ones((b, t, N_TOKENS), bool)
        mask[:, :, 7:] = False
        obs["token_mask"] = mask
        obs["ee_pos"] = rng.normal(size=(b, t, 3)).astype(np.float32)
    return {"obs": obs, "lang": rng.normal(size=(b, lang_dim)).astype(np.float32),
            "actions": rng.uniform(-1, 1, size=(b, t, 7)).astype(np.float32)}


def _mem_available() -> int:
    """Free bytes where the step runs: the accelerator's limit, else the host's MemAvailable."""
    import jax

    if jax.default_backend() != "cpu":
        stats = jax.devices()[0].memory_stats() or {}
        return stats.get("bytes_limit", 1 << 62) - stats.get("bytes_in_use", 0)
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable"):
            return int(line.split()[1]) * 1024
    return 1 << 62


N_TASKS = 10  # a LIBERO suite's tasks: the size of the per-task adapter banks and DMPEL's library


def run_one(policy: str, mode: str, b: int, steps: int, warmup: int, t: int, img: int, lang_dim: int,
            profile: str | None = None, algo_name: str = "seqft", scan: int = 1) -> dict:
    """Time one configuration in this process -> row dict (`profile`: a jax.profiler trace of the timed steps).
    scan > 1: `steps` dispatches of make_train_steps, each `scan` optimizer steps over `scan` stacked batches."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from clbench_jax.algos import TaskContext, make_algorithm
    from clbench_jax.algos.train import make_optimizer, make_train_step, make_train_steps
    from clbench_jax.policies import make_bc_rnn, make_bc_transformer, make_bc_vilt

    pol = {"transformer": make_bc_transformer, "rnn": make_bc_rnn, "vilt": make_bc_vilt}[policy](mode)
    batch = jax.tree_util.tree_map(jnp.asarray, make_batch(mode, b, t, img, lang_dim))
    algo = make_algorithm(algo_name)
    net = pol if algo.network is None else algo.network(pol, N_TASKS)
    params = net.init(jax.random.PRNGKey(0), batch)
    state = algo.init(params, N_TASKS)
    ctx = TaskContext(stage=0, n_windows=b, batches=lambda rng: iter([batch]), grad=None, fit=None,
                      rng=np.random.default_rng(0), key=jax.random.PRNGKey(0), policy=net, gather=None)
    params, state = algo.start_task(params, state, 0, ctx)
    opt = make_optimizer()
    opt_state = opt.init(params)
    lr = jnp.float32(1e-4)
    key = {"policy": policy, "framework": "jax", "obs": mode, "batch": b, "algo": algo_name}
    if scan > 1:  # K optimizer steps per dispatch: K batches stacked on a leading axis, K keys
        fn = make_train_steps(net, algo, opt, augment=(mode == "rgb"))
        batch = jax.tree_util.tree_map(lambda x: jnp.stack([x] * scan), batch)
        keys_for = lambda k: jax.random.split(k, scan)  # noqa: E731
        key["steps_per_dispatch"] = scan
    else:
        fn = make_train_step(net, algo, opt, augment=(mode == "rgb"))
        keys_for = lambda k: k  # noqa: E731
    t0 = time.perf_counter()
    compiled = fn.lower(params, opt_state, state, batch, keys_for(jax.random.PRNGKey(1)), lr).compile()
    step = lambda p, o, s, bt, k, lr_: compiled(p, o, s, bt, keys_for(k), lr_)  # noqa: E731
    compile_s = time.perf_counter() - t0
    # XLA knows the step's buffer sizes before running it: refuse a step that cannot fit (a swapless machine
    # shared with others would OOM-kill), and record why.
    mem = compiled.memory_analysis()
    need = mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes
    if need > 0.85 * _mem_available():
        return {**key, "compile_s": compile_s, "needs_gib": need / 2**30,
                "error": f"needs {need / 2**30:.1f} GiB (XLA buffer estimate), {_mem_available() / 2**30:.1f} GiB free"}
    params, opt_state, info = step(params, opt_state, state, batch, jax.random.PRNGKey(1), lr)
    jax.block_until_ready(info)
    for i in range(warmup):
        params, opt_state, info = step(params, opt_state, state, batch, jax.random.PRNGKey(2 + i), lr)
    jax.block_until_ready(info)
    times, cpu = [], []
    if profile:
        jax.profiler.start_trace(profile)
    for i in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        params, opt_state, info = step(params, opt_state, state, batch, jax.random.PRNGKey(100 + i), lr)
        jax.block_until_ready(info)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if profile:
        jax.profiler.stop_trace()
    med = sorted(times)[len(times) // 2] / scan  # per optimizer step
    mask = algo.grad_mask(params, state)
    trainable = (sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params)) if mask is None else
                 sum(int(np.sum(np.broadcast_to(np.asarray(m), np.shape(x))))
                     for x, m in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(mask))))
    loss = info["loss"] if scan == 1 else info["loss"][-1]
    return {**key, "seq_len": t, "needs_gib": need / 2**30,
            "params": int(sum(np.size(x) for x in jax.tree_util.tree_leaves(params))), "trainable": trainable,
            "compile_s": compile_s, "steps": steps, "step_s_median": med, "step_s_all": times,
            "steps_per_s": 1.0 / med, "samples_per_s": b / med,
            "cpu_s_per_step": sorted(cpu)[len(cpu) // 2] / scan, "loss": float(loss), "loadavg_1min": os.getloadavg()[0],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _subprocess_row(cmd: list[str], key: dict, timeout: float) -> dict:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**key, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if lines and "error" in json.loads(lines[-1]):
        return json.loads(lines[-1])
    if p.returncode != 0 or not lines:
        why = "killed (out of memory?)" if p.returncode in (-9, 137) else f"exit {p.returncode}"
        return {**key, "error": f"{why}: {p.stderr.strip()[-400:]}"}
    return json.loads(lines[-1])


def _key(r: dict) -> tuple:
    return (r["framework"] != "jax", r["policy"], r["obs"], r["batch"], r.get("algo", "seqft"),
            r.get("steps_per_dispatch", 1))


def table(rows: list[dict]) -> str:
    out = ["| policy | obs | batch | algo | framework | steps/s | samples/s | step (s) | CPU-s / step | load "
           "| compile (s) | peak RSS (MiB) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["policy"], r["obs"], r["batch"], r["framework"] != "jax",
                                         r.get("algo", "seqft"), r.get("steps_per_dispatch", 1))):
        algo = r.get("algo", "seqft") + (f" x{r['steps_per_dispatch']} scan" if r.get("steps_per_dispatch", 1) > 1
                                         else "")
        if "error" in r:
            out.append(f"| {r['policy']} | {r['obs']} | {r['batch']} | {algo} | {r['framework']} | -- | -- | -- | -- "
                       f"| -- | -- | miss: {r['error'][:60]} |")
            continue
        comp = f"{r['compile_s']:.1f}" if "compile_s" in r else "--"
        out.append(f"| {r['policy']} | {r['obs']} | {r['batch']} | {algo} | {r['framework']} | "
                   f"{r['steps_per_s']:.3f} | "
                   f"{r['samples_per_s']:.1f} | {r['step_s_median']:.4f} | {r['cpu_s_per_step']:.4f} | "
                   f"{r['loadavg_1min']:.0f} | {comp} | {r['peak_rss_mib']:.0f} |")
    return "\n".join(out)


def ratios(rows: list[dict]) -> list[dict]:
    """JAX over LIBERO's torch for each (policy, rgb, batch) measured by both: steps/s (wall) and CPU-s per step
    (steadier when other jobs share the cores)."""
    jax_rows = {(r["policy"], r["obs"], r["batch"]): r for r in rows
                if r["framework"] == "jax" and "error" not in r and r.get("algo", "seqft") == "seqft"
                and r.get("steps_per_dispatch", 1) == 1}
    out = []
    for r in rows:
        if r["framework"] == "jax" or "error" in r:
            continue
        j = jax_rows.get((r["policy"], r["obs"], r["batch"]))
        if j:
            out.append({"policy": r["policy"], "obs": r["obs"], "batch": r["batch"],
                        "jax_over_libero_torch": j["steps_per_s"] / r["steps_per_s"],
                        "jax_over_libero_torch_cpu_time": r["cpu_s_per_step"] / j["cpu_s_per_step"]})
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="rnn,transformer,vilt")
    ap.add_argument("--modes", default="state,rgb")
    ap.add_argument("--batches", default="32,256")
    ap.add_argument("--algos", default="seqft", help="lifelong algorithms whose train step to time (comma list)")
    ap.add_argument("--scan", default="1", help="optimizer steps per dispatch (comma list; K > 1: make_train_steps, "
                    "a lax.scan over K batches)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=10)
    ap.add_argument("--img", type=int, default=128)
    ap.add_argument("--lang-dim", type=int, default=768)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per configuration before it is a miss")
    ap.add_argument("--peer-python", default=os.environ.get("TORCHPEER_PYTHON", "/tmp/torchpeer/bin/python"),
                    help="python of the torch venv (benchmarks/libero_train_peer.sh); '' skips the peer")
    ap.add_argument("--peer-device", default="cpu", help="torch device for the peer (cpu, cuda)")
    ap.add_argument("--peer-policies", default="transformer")
    ap.add_argument("--peer-batches", default="32")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/train_throughput_cpu.json"))
    ap.add_argument("--resume", action="store_true", help="keep rows already in --out, run only the missing ones")
    ap.add_argument("--profile", metavar="DIR", default=None,
                    help="write a jax.profiler trace of each JAX configuration's timed steps to "
                         "DIR/<policy>_<obs>_<batch>")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: policy,mode,batch in this process
    a = ap.parse_args(argv)

    if a.one:
        policy, mode, b, algo, k = (a.one.split(",") + ["1"])[:5]
        print(json.dumps(run_one(policy, mode, int(b), a.steps, a.warmup, a.seq_len, a.img, a.lang_dim, a.profile,
                                 algo, int(k))))
        return

    from tqdm import tqdm

    from common import machine, write_json

    split = lambda s: [x for x in s.split(",") if x]
    todo = [("jax", p, m, int(b), al, int(k)) for p in split(a.policies) for m in split(a.modes)
            for b in split(a.batches) for al in split(a.algos) for k in split(a.scan)]
    if a.peer_python:
        todo += [("torch (LIBERO)", p, "rgb", int(b), "seqft", 1) for p in split(a.peer_policies)
                 for b in split(a.peer_batches)]
    rows, peer_versions = [], None
    if a.resume and Path(a.out).exists():  # keep every old row except the misses this run tries again
        old = json.loads(Path(a.out).read_text())
        again = {(fw != "jax", p, m, b, al, k) for fw, p, m, b, al, k in todo}
        rows = [r for r in old.get("rows", []) if "error" not in r or _key(r) not in again]
        peer_versions = old.get("peer")
    done = {_key(r) for r in rows}
    common_args = ["--steps", str(a.steps), "--warmup", str(a.warmup), "--seq-len", str(a.seq_len),
                   "--img", str(a.img), "--lang-dim", str(a.lang_dim)]
    info = {"machine": machine(), "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
            "what": "one jitted train step (seqft: GMM NLL, dropout, clip 100, AdamW 1e-4/1e-4; RGB: + augment_batch; "
                    "other algos: their step with default settings, 10-task banks) vs LIBERO's Sequential.observe "
                    "(compute_loss with augmentation, backward, clip 100, AdamW)",
            "n_object_tokens": N_TOKENS, "seq_len": a.seq_len, "img": a.img, "lang_dim": a.lang_dim}
    bar = tqdm([x for x in todo if (x[0] != "jax", *x[1:]) not in done], desc="configs", unit="cfg")
    for fw, p, m, b, al, k in bar:
        bar.set_postfix_str(f"{fw} {p} {m} b{b} {al}" + (f" x{k}/dispatch" if k > 1 else ""))
        key = {"policy": p, "framework": fw, "obs": m, "batch": b, "algo": al}
        if k > 1:
            key["steps_per_dispatch"] = k
        if fw == "jax":
            cmd = [sys.executable, str(Path(__file__).resolve()), "--one", f"{p},{m},{b},{al},{k}", *common_args]
            if a.profile:
                cmd += ["--profile", os.path.join(a.profile, f"{p}_{m}_{b}_{al}_{k}")]
            row = _subprocess_row(cmd, key, a.timeout)
        else:
            cmd = [a.peer_python, str(ROOT / "benchmarks/libero_train_peer.py"), "--policies", PEER_NAMES[p],
                   "--batches", str(b), "--device", a.peer_device, *common_args]
            out = _subprocess_row(cmd, key, a.timeout)
            if "results" in out:
                peer_versions = {**out["versions"], "torch_threads": out["torch_threads"]}
                row = {**out["results"][0], "policy": p, "algo": al}
            else:
                row = out
        rows.append(row)
        tqdm.write(json.dumps({k: v for k, v in row.items() if k != "step_s_all"}))
        write_json(a.out, {**info, "peer": peer_versions, "rows": rows, "ratios": ratios(rows)})
    print(table(rows))
    for r in ratios(rows):
        print(f"{r['policy']} {r['obs']} batch {r['batch']}: JAX / LIBERO torch = {r['jax_over_libero_torch']:.2f}x "
              f"(wall steps/s), {r['jax_over_libero_torch_cpu_time']:.2f}x (CPU-s per step)")


if __name__ == "__main__":
    main()
