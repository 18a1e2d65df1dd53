#!/usr/bin/env python3
"""Peer baseline for the simulator throughput benchmark: robosuite (LIBERO's simulator).

Times robosuite's Panda ``Lift`` environment driven by the OSC_POSE controller,
the same controller LIBERO uses, under two settings:

  (a) no_camera        use_camera_obs=False, has_offscreen_renderer=False
  (b) two_cameras_128  agentview + robot0_eye_in_hand, 128x128 RGB, offscreen

For each setting it warms up, then times N control steps with uniform random
actions in [-1, 1] and reports control steps per second.  It also measures

  * the fraction of wall time spent in robosuite's Python controller path
    (``Robot.control``: state update, OSC goal setting, OSC/gripper
    ``run_controller``, writing ``data.ctrl``), timed with a light
    perf_counter wrapper during the timed run, plus a cProfile breakdown of a
    short separate run (OSC ``run_controller`` alone, MuJoCo stepping);
  * the wall time of each offscreen camera render (``MjSim.render``).

robosuite 1.5.2 needs mujoco==3.3.7, so this script runs in its own virtual
environment: use ``benchmarks/robosuite_peer.sh``, which creates it and sets
``MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa`` for offscreen rendering.

Controller config: robosuite 1.5 replaced the flat per-arm controller configs
with "composite" configs.  We load the Panda's default composite config the way
robosuite 1.5 does it, ``load_composite_controller_config(robot="Panda")``
(file ``controllers/config/robots/default_panda.json``: type BASIC, right arm
OSC_POSE with kp=150, damping_ratio=1, delta input in the base frame, GRIP
gripper), check that the arm part is OSC_POSE and store the full dict in the
output JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as _dt
import json
import os
import platform
import pstats
import sys
import tempfile
import time

CAMERAS = ("agentview", "robot0_eye_in_hand")


def _parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=(
            "Time robosuite 1.5.2 Panda Lift with the OSC_POSE controller "
            "(control_freq 20 Hz, 25 MuJoCo substeps of 0.002 s) without "
            "cameras and with two 128x128 offscreen cameras, and write a JSON "
            "report. Run it through benchmarks/robosuite_peer.sh, which sets "
            "up the robosuite virtual environment and OSMesa rendering."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=400,
                   help="timed control steps without cameras")
    p.add_argument("--camera-steps", type=int, default=100,
                   help="timed control steps with two cameras")
    p.add_argument("--warmup", type=int, default=20,
                   help="untimed control steps before each timed run")
    p.add_argument("--profile-steps", type=int, default=60,
                   help="control steps of the separate cProfile run "
                        "(no camera); 0 skips it")
    p.add_argument("--image-size", type=int, default=128,
                   help="camera width and height in pixels")
    p.add_argument("--seed", type=int, default=0, help="seed for the random actions")
    p.add_argument("--no-lite-physics", dest="lite_physics", action="store_false",
                   help="use mj_forward + mj_step per substep (robosuite <= 1.4 "
                        "and LIBERO behaviour) instead of robosuite 1.5's default "
                        "lite_physics=True (mj_step1 + mj_step2)")
    p.add_argument("--no-cameras-only", action="store_true",
                   help="skip the two-camera run (e.g. when OSMesa is missing)")
    p.add_argument("--out", default="benchmarks/results/robosuite_peer_cpu.json",
                   help="output JSON path (written atomically)")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="if given, write the cProfile stats (.prof and a "
                        "text summary) into DIR")
    args = p.parse_args(argv)
    for name in ("steps", "camera_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.profile_steps < 0:
        p.error("--warmup and --profile-steps must be >= 0")
    return args


# ---------------------------------------------------------------- machine info
def _machine_info():
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 ** 2, 2)
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu_model": cpu_model or platform.processor() or None,
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# ----------------------------------------------------------------- environment
def _controller_config():
    from robosuite.controllers import load_composite_controller_config

    cfg = load_composite_controller_config(robot="Panda")
    arm_type = cfg["body_parts"]["right"]["type"] if "right" in cfg.get("body_parts", {}) \
        else cfg["body_parts"]["arms"]["right"]["type"]
    if arm_type != "OSC_POSE":
        raise RuntimeError(f"Panda default arm controller is {arm_type}, expected OSC_POSE")
    return cfg


def _make_env(controller_config, cameras: bool, size: int, lite_physics: bool = True):
    import robosuite

    kw = dict(
        robots="Panda",
        controller_configs=controller_config,
        has_renderer=False,
        control_freq=20,
        horizon=10 ** 7,
        ignore_done=True,
        reward_shaping=True,
        hard_reset=False,
        lite_physics=lite_physics,
    )
    if cameras:
        kw.update(
            has_offscreen_renderer=True,
            use_camera_obs=True,
            camera_names=list(CAMERAS),
            camera_heights=size,
            camera_widths=size,
            camera_depths=False,
        )
    else:
        kw.update(has_offscreen_renderer=False, use_camera_obs=False)
    return robosuite.make("Lift", **kw)


class _Timer:
    """Wraps a bound method on an instance and accumulates its wall time."""

    def __init__(self, obj, name):
        self.obj, self.name = obj, name
        self.orig = getattr(obj, name)
        self.total = 0.0
        self.calls = 0
        orig = self.orig

        def wrapped(*a, **k):
            t0 = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                self.total += time.perf_counter() - t0
                self.calls += 1

        setattr(obj, name, wrapped)

    def reset(self):
        self.total, self.calls = 0.0, 0

    def remove(self):
        try:
            delattr(self.obj, self.name)
        except AttributeError:
            setattr(self.obj, self.name, self.orig)


def _random_actions(env, n, rng):
    low, high = env.action_spec
    return rng.uniform(-1.0, 1.0, size=(n, low.shape[0]))


def _run(env, actions):
    for a in actions:
        env.step(a)


def _bench(controller_config, cameras, steps, warmup, size, rng, lite_physics):
    env = _make_env(controller_config, cameras, size, lite_physics)
    try:
        env.reset()
        substeps = int(round(env.control_timestep / env.model_timestep))
        ctrl_timers = [_Timer(r, "control") for r in env.robots]
        render_timer = _Timer(env.sim, "render") if cameras else None
        _run(env, _random_actions(env, warmup, rng))
        for t in ctrl_timers:
            t.reset()
        if render_timer:
            render_timer.reset()
        acts = _random_actions(env, steps, rng)
        t0 = time.perf_counter()
        _run(env, acts)
        wall = time.perf_counter() - t0
        ctrl = sum(t.total for t in ctrl_timers)
        res = {
            "control_steps": steps,
            "wall_s": round(wall, 4),
            "control_steps_per_s": round(steps / wall, 3),
            "ms_per_control_step": round(1e3 * wall / steps, 3),
            "physics_substeps_per_s": round(steps * substeps / wall, 1),
            "controller_fraction": round(ctrl / wall, 4),
            "controller_ms_per_control_step": round(1e3 * ctrl / steps, 3),
        }
        if render_timer:
            n = max(render_timer.calls, 1)
            res.update(
                renders=render_timer.calls,
                renders_per_control_step=round(render_timer.calls / steps, 3),
                ms_per_render=round(1e3 * render_timer.total / n, 3),
                render_fraction=round(render_timer.total / wall, 4),
            )
            render_timer.remove()
        for t in ctrl_timers:
            t.remove()
        info = {
            "model_timestep": env.model_timestep,
            "control_timestep": env.control_timestep,
            "substeps": substeps,
            "action_dim": int(env.action_dim),
        }
        return res, info
    finally:
        env.close()


def _profile(controller_config, steps, warmup, rng, outdir, lite_physics):
    """cProfile a short no-camera run; return cumulative-time fractions."""
    env = _make_env(controller_config, False, 0, lite_physics)
    try:
        env.reset()
        _run(env, _random_actions(env, warmup, rng))
        acts = _random_actions(env, steps, rng)
        prof = cProfile.Profile()
        prof.enable()
        _run(env, acts)
        prof.disable()
    finally:
        env.close()
    st = pstats.Stats(prof)
    total = None
    groups = {
        "robot_control": 0.0,          # robosuite/robots/*: control
        "composite_run_controller": 0.0,
        "osc_run_controller": 0.0,     # controllers/parts/arm/osc.py: run_controller
        "osc_set_goal": 0.0,
        "gripper_run_controller": 0.0,
        "mujoco_sim_step": 0.0,        # MjSim.step / step1 / step2 / forward
        "observations": 0.0,           # _update_observables / _get_observations
    }
    for (fname, _line, func), (_cc, _nc, _tt, ct, _callers) in st.stats.items():
        f = fname.replace("\\", "/")
        if func == "step" and f.endswith("robosuite/environments/base.py"):
            total = ct
        if func == "control" and "/robosuite/robots/" in f:
            groups["robot_control"] += ct
        elif func == "run_controller" and "/controllers/composite/" in f:
            groups["composite_run_controller"] += ct
        elif func == "run_controller" and f.endswith("controllers/parts/arm/osc.py"):
            groups["osc_run_controller"] += ct
        elif func == "set_goal" and f.endswith("controllers/parts/arm/osc.py"):
            groups["osc_set_goal"] += ct
        elif func == "run_controller" and "/controllers/parts/gripper/" in f:
            groups["gripper_run_controller"] += ct
        elif func in ("step", "step1", "step2", "forward") and f.endswith("utils/binding_utils.py"):
            groups["mujoco_sim_step"] += ct
        elif func in ("_update_observables", "_get_observations") and "/environments/" in f:
            groups["observations"] = max(groups["observations"], ct)
    if not total:
        return None
    out = {k + "_fraction": round(v / total, 4) for k, v in groups.items()}
    out["profiled_control_steps"] = steps
    out["profiled_wall_s"] = round(total, 4)
    out["note"] = ("cumulative cProfile time / cumulative time of env.step; "
                   "cProfile overhead inflates Python-heavy parts")
    if outdir:
        os.makedirs(outdir, exist_ok=True)
        prof.dump_stats(os.path.join(outdir, "robosuite_no_camera.prof"))
        with open(os.path.join(outdir, "robosuite_no_camera.txt"), "w") as f:
            pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(40)
    return out


def _write_json_atomic(path, obj):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".robosuite_peer.", suffix=".json", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv=None):
    args = _parse_args(argv)
    try:
        import mujoco
        import numpy as np
        import robosuite
    except ImportError as e:  # pragma: no cover - environment problem
        sys.exit(f"robosuite_peer: {e}; run it through benchmarks/robosuite_peer.sh")

    rng = np.random.default_rng(args.seed)
    cfg = _controller_config()
    results = {}

    print(f"robosuite {robosuite.__version__}, mujoco {mujoco.__version__}: "
          f"no-camera run, {args.steps} control steps ...", flush=True)
    res, info = _bench(cfg, False, args.steps, args.warmup, args.image_size, rng,
                       args.lite_physics)
    if args.profile_steps:
        prof = _profile(cfg, args.profile_steps, args.warmup, rng, args.profile,
                        args.lite_physics)
        if prof:
            res["cprofile"] = prof
    results["no_camera"] = res

    cam_key = f"two_cameras_{args.image_size}"
    if not args.no_cameras_only:
        print(f"two-camera run ({args.image_size}x{args.image_size}, "
              f"MUJOCO_GL={os.environ.get('MUJOCO_GL')}), {args.camera_steps} "
              "control steps ...", flush=True)
        res_c, _ = _bench(cfg, True, args.camera_steps, args.warmup, args.image_size,
                          rng, args.lite_physics)
        results[cam_key] = res_c

    report = {
        "machine": _machine_info(),
        "versions": {
            "robosuite": robosuite.__version__,
            "mujoco": mujoco.__version__,
            "numpy": np.__version__,
        },
        "config": {
            "env": "Lift",
            "robot": "Panda",
            "controller": "OSC_POSE (robosuite 1.5 composite config BASIC, "
                          "load_composite_controller_config(robot='Panda'))",
            "controller_config": cfg,
            "control_freq_hz": 20,
            **info,
            "horizon": 10 ** 7,
            "ignore_done": True,
            "hard_reset": False,
            "lite_physics": args.lite_physics,
            "actions": "uniform random in [-1, 1]",
            "seed": args.seed,
            "warmup_control_steps": args.warmup,
            "no_camera": {"use_camera_obs": False, "has_offscreen_renderer": False,
                          "control_steps": args.steps},
            cam_key: {"use_camera_obs": True, "has_offscreen_renderer": True,
                      "camera_names": list(CAMERAS),
                      "width": args.image_size, "height": args.image_size,
                      "depth": False, "control_steps": args.camera_steps,
                      "MUJOCO_GL": os.environ.get("MUJOCO_GL"),
                      "PYOPENGL_PLATFORM": os.environ.get("PYOPENGL_PLATFORM"),
                      "skipped": bool(args.no_cameras_only)},
            "controller_fraction_method": (
                "wall time inside Robot.control (perf_counter wrapper) / "
                "wall time of the timed run"),
        },
        "results": results,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    _write_json_atomic(args.out, report)

    # ------------------------------------------------------------------ table
    print()
    print(f"{'setting':<18}{'ctrl steps/s':>14}{'ms/step':>10}{'controller':>12}{'ms/render':>11}")
    for k, r in results.items():
        ms_r = f"{r['ms_per_render']:.2f}" if "ms_per_render" in r else "-"
        print(f"{k:<18}{r['control_steps_per_s']:>14.2f}{r['ms_per_control_step']:>10.2f}"
              f"{100 * r['controller_fraction']:>11.1f}%{ms_r:>11}")
    p = results["no_camera"].get("cprofile")
    if p:
        print(f"cProfile (no camera, {p['profiled_control_steps']} steps): "
              f"Robot.control {100 * p['robot_control_fraction']:.1f}%, "
              f"OSC run_controller {100 * p['osc_run_controller_fraction']:.1f}%, "
              f"MuJoCo step/forward {100 * p['mujoco_sim_step_fraction']:.1f}%")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
