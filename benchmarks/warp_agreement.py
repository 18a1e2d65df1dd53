"""MJX-Warp against native MuJoCo on the same episodes: same initial states, same actions, how far apart they end up.

N worlds cycle over the 10 libero_goal tasks from LIBERO's official initial states (this project's banks, seed 0);
both backends replay the same random actions (piecewise constant: a new action every `--hold` steps, arm translation
scaled 0.6, rotation 0.2, the gripper -1 / +1) after LIBERO's 2-step warm-up here, with stop_at_success off, and
trace every control step. Reported per step and overall: the hand's (grip site's) divergence, every BDDL entity's
(objects and fixtures) position divergence, the finger joints' divergence, how often the goal predicates agree, and
each backend's failure codes. MJX-Warp runs in float32 with its own collision routines, so small divergences are
expected and grow with contact; tests/test_backends.py holds 2 worlds x 10 steps to 1 mm on the CPU.

    python benchmarks/warp_agreement.py --worlds 2 --steps 3 --out /tmp/agree.json     # CPU smoke (minutes)
    python benchmarks/warp_agreement.py --worlds 256 --steps 60 \
        --out benchmarks/results/warp_agreement_gpu.json                               # on a GPU
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clbench_jax  # noqa: E402,F401
import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import Timer, add_profile_arg, machine, maybe_profile, write_json  # noqa: E402

from clbench_jax.sim import rollout  # noqa: E402
from clbench_jax.sim.init_states import make_init_bank  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402

SCALE = np.array([0.6, 0.6, 0.6, 0.2, 0.2, 0.2, 1.0])
WARMUP = 2


def episodes(scene, n: int, steps: int, hold: int, seed: int = 0):
    """-> (EpisodeBatch of n worlds cycling over the scene's tasks, actions (n, steps, 7))."""
    T = len(scene.tasks)
    per = -(-n // T)
    banks = [make_init_bank(scene, t, per, seed=seed) for t in scene.tasks]
    ids = np.arange(n) % T
    row = np.arange(n) // T
    pick = lambda f: np.stack([getattr(banks[i], f)[r] for i, r in zip(ids, row)])  # noqa: E731
    goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(seed), n))
    batch = rollout.EpisodeBatch(task_ids=ids, goals=goals, state=pick("state"), mocap=pick("mocap"), keys=keys,
                                 q0=pick("q0"))
    rng = np.random.default_rng(seed + 1)
    acts = rng.uniform(-1, 1, (n, -(-steps // hold), 7)) * SCALE
    acts[..., 6] = np.sign(acts[..., 6])
    return batch, np.repeat(acts, hold, axis=1)[:, :steps]


def quantiles(x: np.ndarray) -> dict:
    x = np.asarray(x, np.float64).ravel()
    return {"median": float(np.median(x)), "p90": float(np.quantile(x, 0.9)), "max": float(x.max())}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", type=int, default=256)
    ap.add_argument("--steps", type=int, default=60, help="policy steps after the warm-up")
    ap.add_argument("--hold", type=int, default=5, help="control steps each random action is held")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/warp_agreement_cpu.json")
    add_profile_arg(ap)
    a = ap.parse_args(argv)

    scene = build_scene(suite_tasks("libero_goal"))
    batch, acts = episodes(scene, a.worlds, a.steps, a.hold, a.seed)
    pol, p0 = rollout.replay_policy(np.concatenate([np.zeros((a.worlds, WARMUP, 7)), acts], axis=1))
    out, secs = {}, {}
    with maybe_profile(a.profile):
        for b in ("native", "mjx"):
            with Timer() as t:
                out[b] = rollout.rollout(scene, pol, p0, batch, a.steps, backend=b, warmup=WARMUP,
                                         stop_at_success=False, trace=True, mjx_impl="warp")
            secs[b] = t.s
            print(f"{b}: {t.s:.1f} s (compile included)", flush=True)
    (rn, tn), (rw, tw) = out["native"], out["mjx"]
    ok = (rn.fail_reason == 0) & (rw.fail_reason == 0)  # worlds neither backend failed
    hand = np.linalg.norm(tn["ee_pos"] - tw["ee_pos"], axis=-1)[ok]  # (n_ok, steps + 1)
    ent = np.linalg.norm(tn["entity_pos"] - tw["entity_pos"], axis=-1)[ok]  # (n_ok, steps + 1, E)
    fing = np.abs(tn["fingers"] - tw["fingers"]).max(-1)[ok]
    holds_equal = tn["holds"][ok] == tw["holds"][ok]  # (n_ok, steps + 1, K)
    travel = np.abs(np.diff(tn["ee_pos"], axis=1)).sum(-1).sum(-1)[ok]
    moved = np.linalg.norm(tn["entity_pos"][:, -1] - tn["entity_pos"][:, 0], axis=-1)[ok]  # (n_ok, E)
    obj = np.asarray(rollout._consts(scene).is_object, bool)
    per_step = [{"step": s, "hand_m": quantiles(hand[:, s]), "entity_m": quantiles(ent[:, s]),
                 "goal_predicates_equal": float(holds_equal[:, s].mean())} for s in range(hand.shape[1])]
    summary = {
        "worlds": a.worlds, "worlds_compared": int(ok.sum()),
        "fail_reasons": {b: {rollout.FAIL_REASONS[int(c)]: int((r.fail_reason == c).sum())
                             for c in np.unique(r.fail_reason)} for b, r in (("native", rn), ("mjx", rw))},
        "hand_divergence_m": quantiles(hand), "hand_divergence_final_m": quantiles(hand[:, -1]),
        "object_divergence_m": quantiles(ent[..., obj]), "object_divergence_final_m": quantiles(ent[:, -1, obj]),
        "finger_divergence": quantiles(fing),
        "goal_predicates_equal": float(holds_equal.mean()),
        "goal_predicate_checks": int(holds_equal.size),
        "worlds_with_any_predicate_difference": int((~holds_equal).any(axis=(1, 2)).sum()),
        "success_equal": float((rn.success[ok] == rw.success[ok]).mean()),
        "first_grasp_equal": float((rn.first_grasp[ok] == rw.first_grasp[ok]).mean()),
        "hand_travel_m": quantiles(travel), "objects_moved_m": quantiles(moved[:, obj]),
        "seconds_incl_compile": secs,
    }
    result = {"benchmark": "warp_agreement", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
              "config": vars(a), "warmup": WARMUP, "summary": summary,
              "per_step_note": "step t: the reading after t control steps (0: reset; t <= warmup: zero actions)",
              "per_step": per_step}
    write_json(a.out, result)
    for k in ("worlds_compared", "hand_divergence_m", "hand_divergence_final_m", "object_divergence_m",
              "finger_divergence", "goal_predicates_equal", "worlds_with_any_predicate_difference", "fail_reasons"):
        print(f"{k}: {summary[k]}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
