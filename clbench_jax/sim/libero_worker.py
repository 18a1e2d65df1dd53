"""One worker process of the `libero` backend: LIBERO's own environment stepping episodes (driven by
sim/libero_backend.py over a pipe).

Imports numpy and, lazily, LIBERO (robosuite 1.4): no JAX here. Each worker holds one LIBERO environment at a time
(rebuilt when the task changes) and runs one episode in it:

- start: LIBERO's reset (hard reset, as LIBERO's evaluation does), then the episode's fixture placement written into
  the model (`body_pos` / `body_quat`, as LIBERO's reset writes its samples), the controller rebuilt from the episode's
  reset joints q0 (robosuite's `Robot.reset` does this from its own noised joints), and the initial state loaded as
  LIBERO's `set_init_state` does (`regenerate_obs_from_state`);
- step: `env.step(action)`.
After either it replies with what LIBERO's predicates read: its `body_xpos` and contacts come from the last
substep's forward pass (the state before the last integration, `pre`), its joint values from the state after it
(`post`); both states are returned (LIBERO's flattened layout: time, qpos, qvel), so the main process can read this
project's sensors in exactly those states. Also returned: LIBERO's own verdict on each goal atom
(`_eval_predicate`) and on the goal (`_check_success`), the exact robot joints, and (with cameras) the two images,
upright.
"""

from __future__ import annotations

import traceback

import numpy as np

CAMERAS = ("agentview", "robot0_eye_in_hand")


class Episode:
    """LIBERO's environment for one task and the episode running in it."""

    def __init__(self):
        self.env, self.key = None, None
        self.pre = None  # (1 + nq + nv,) LIBERO's state before the last physics substep

    def build(self, bddl: str, cameras: bool, size: int):
        from clbench_jax.sim import libero_source

        key = (bddl, cameras, size)
        if self.key == key:
            return
        self.close()
        kw = dict(ignore_done=True)  # episodes end when the main process says so, not at robosuite's horizon
        if cameras:
            kw.update(has_offscreen_renderer=True, use_camera_obs=True, camera_names=list(CAMERAS),
                      camera_heights=size, camera_widths=size)
        self.env = libero_source.make_env(bddl, **kw)
        self.key = key

    def close(self):
        if self.env is not None:
            self.env.close()
        self.env, self.key = None, None

    def _watch_substeps(self):
        """Keep the state before each physics substep (LIBERO's positions and contacts are that state's)."""
        import mujoco

        sim = self.env.sim
        m, d = sim.model._model, sim.data._data
        pre = np.zeros(1 + m.nq + m.nv)

        def step(with_udd=True):
            pre[0], pre[1:1 + m.nq], pre[1 + m.nq:] = d.time, d.qpos, d.qvel
            mujoco.mj_step(m, d)

        sim.step = step
        self.pre = pre

    def start(self, ep: dict) -> dict:
        self.build(ep["bddl"], ep["cameras"], ep["size"])
        env = self.env
        np.random.seed(ep["seed"])  # LIBERO's reset samples from numpy's global generator
        env.reset()
        self._watch_substeps()
        m = env.sim.model._model
        names = [m.joint(j).name for j in range(m.njnt)]
        if names != list(ep["joint_names"]):
            raise RuntimeError(f"LIBERO built another model for this task than the cached capture "
                               f"({len(names)} joints, expected {len(ep['joint_names'])})")
        for name, pose in ep["fixtures"].items():  # the episode's placement, as LIBERO's reset writes its own
            b = m.body(env.fixtures_dict[name].root_body).id
            m.body_pos[b], m.body_quat[b] = pose[:3], pose[3:]
        robot = env.robots[0]
        env.sim.data.qpos[robot._ref_joint_pos_indexes] = ep["q0"]
        robot._load_controller()  # robosuite's Robot.reset: the controller is built at the reset joints
        robot.controller.update_base_pose(robot.base_pos, robot.base_ori)
        # LIBERO's set_init_state (ControlEnv.regenerate_obs_from_state)
        env.sim.set_state_from_flattened(ep["state"])
        env.sim.forward()
        env._check_success()
        env._post_process()
        env._update_observables(force=True)
        obs = env._get_observations()
        self.atoms = [list(a) for a in env.parsed_problem["goal_state"]]
        self.robot_joints = [m.joint(n).qposadr[0] for n in ep["robot_joints"]]
        self.qvel_limit = ep["qvel_limit"]
        state = env.sim.get_state().flatten()
        self.pre[:] = state
        return self.reading(obs, atoms=self.atoms)

    def step(self, action) -> dict:
        sim = self.env.sim
        t0 = sim.data.time
        obs, _, _, _ = self.env.step(np.asarray(action, np.float64))
        nsub = int(round(self.env.control_timestep / self.env.model_timestep))
        # MuJoCo resets a world whose accelerations go bad and carries on from its default pose: the clock tells
        diverged = sim.data.time < t0 + (nsub - 0.5) * self.env.model_timestep
        return self.reading(obs, diverged=diverged)

    def reading(self, obs, diverged: bool = False, atoms=None) -> dict:
        env, d = self.env, self.env.sim.data
        post = env.sim.get_state().flatten()
        qvel = np.asarray(d.qvel)
        bad = bool(diverged or not np.all(np.isfinite(post)) or np.abs(qvel).max() > self.qvel_limit)
        out = dict(pre=self.pre.copy(), post=post, robot_q=post[1:][self.robot_joints], bad=bad,
                   libero_atoms=np.array([bool(env._eval_predicate(a)) for a in self.atoms]),
                   libero_success=bool(env._check_success()))
        if atoms is not None:
            out["goal_state"] = atoms
        if self.key[1]:
            out["images"] = np.stack([obs[f"{c}_image"][::-1] for c in CAMERAS])  # OpenGL rows -> upright
        return out


def serve(conn) -> None:
    """The worker's loop: requests ("start", episode dict) | ("step", action) | ("close",); one reply each:
    ("ok", reading) or ("error", LIBERO's error text)."""
    ep = Episode()
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg[0] == "close":
                return
            try:
                reply = ("ok", ep.start(msg[1]) if msg[0] == "start" else ep.step(msg[1]))
            except Exception as e:  # noqa: BLE001  (LIBERO's own failure: its text goes back to the episode record)
                ep.close()
                reply = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
            conn.send(reply)
    finally:
        ep.close()


if __name__ == "__main__":  # python -m clbench_jax.sim.libero_worker FD  (sim/libero_backend.Pool starts it)
    import sys
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])))
