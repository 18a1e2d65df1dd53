"""The `native` backend: MuJoCo C, many worlds stepped on threads with `mujoco.rollout`.

A world's state is MuJoCo's full physics state (time, qpos, qvel, act, ...) plus its mocap poses (the fixtures'
placement). Each control step sends the controls and mocap poses of all worlds to one threaded rollout of
`n_substeps` physics steps and reads back the last substep's state and sensor readings.
"""

from __future__ import annotations

import mujoco
import mujoco.rollout
import numpy as np

FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
CONTROL_SPEC = (mujoco.mjtState.mjSTATE_CTRL | mujoco.mjtState.mjSTATE_MOCAP_POS
                | mujoco.mjtState.mjSTATE_MOCAP_QUAT)


class NativeWorlds:
    """`nworld` copies of a model stepped together. Not a pytree: host state, one per batch."""

    def __init__(self, model: mujoco.MjModel, nworld: int, n_substeps: int, nthread: int | None = None):
        import os
        self.m, self.n, self.nsub = model, nworld, n_substeps
        self.nthread = nthread or min(os.cpu_count() or 1, nworld)
        self._datas = [mujoco.MjData(model) for _ in range(self.nthread)]
        self._rollout = mujoco.rollout.Rollout(nthread=self.nthread) if self.nthread > 1 else None
        self.nstate = mujoco.mj_stateSize(model, FULL)
        self.state = np.zeros((nworld, self.nstate))
        self.mocap = np.zeros((nworld, model.nmocap, 7))
        self._out_state = np.zeros((nworld, n_substeps, self.nstate))
        self._out_sens = np.zeros((nworld, n_substeps, model.nsensordata))
        self.sensordata = np.zeros((nworld, model.nsensordata))
        self._models = [model] * nworld
        self._control = np.zeros((nworld, n_substeps, model.nu + 7 * model.nmocap))

    def close(self):
        if self._rollout is not None:
            self._rollout.close()
            self._rollout = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def set_state(self, state: np.ndarray, mocap: np.ndarray) -> np.ndarray:
        """Load full-physics states (n, nstate) and mocap poses (n, nmocap, 7); returns their sensor readings."""
        self.state[:] = state
        self.mocap[:] = mocap
        d = self._datas[0]
        for i in range(self.n):
            mujoco.mj_setState(self.m, d, self.state[i], FULL)
            d.mocap_pos[:] = self.mocap[i, :, :3]
            d.mocap_quat[:] = self.mocap[i, :, 3:]
            mujoco.mj_forward(self.m, d)
            self.sensordata[i] = d.sensordata
        return self.sensordata

    def step(self, ctrl: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
        """Hold `ctrl` (n, nu) for n_substeps physics steps in every world, or only in the worlds where `active`
        (n,) is true (the others keep their state: finished episodes cost nothing); returns sensordata (n, ns)."""
        c = self._control
        nu, nm = self.m.nu, self.m.nmocap
        c[:, :, :nu] = np.asarray(ctrl, np.float64).reshape(self.n, 1, nu)
        c[:, :, nu:nu + 3 * nm] = self.mocap[:, None, :, :3].reshape(self.n, 1, -1)
        c[:, :, nu + 3 * nm:] = self.mocap[:, None, :, 3:].reshape(self.n, 1, -1)
        idx = np.arange(self.n) if active is None else np.flatnonzero(active)
        if idx.size == 0:
            return self.sensordata
        every = idx.size == self.n
        out_state = self._out_state if every else np.empty((idx.size,) + self._out_state.shape[1:])
        out_sens = self._out_sens if every else np.empty((idx.size,) + self._out_sens.shape[1:])
        args = (self._models[:idx.size], self.state if every else self.state[idx], c if every else c[idx])
        kw = dict(control_spec=CONTROL_SPEC, nstep=self.nsub, state=out_state, sensordata=out_sens, skip_checks=True)
        if self._rollout is not None:
            self._rollout.rollout(args[0], self._datas, *args[1:], **kw)
        else:
            mujoco.rollout.rollout(args[0], self._datas[:1], *args[1:], **kw)
        self.state[idx] = out_state[:, -1]
        self.sensordata[idx] = out_sens[:, -1]
        return self.sensordata

    def qvel_max(self) -> np.ndarray:
        """(n,) max |qvel| per world, for blow-up detection."""
        nq = self.m.nq
        return np.abs(self.state[:, 1 + nq:1 + nq + self.m.nv]).max(axis=1)


def state_to_qpos(m: mujoco.MjModel, state: np.ndarray) -> np.ndarray:
    """qpos part of full-physics states (..., nstate) (layout: time, qpos, qvel, act, ...)."""
    return state[..., 1:1 + m.nq]
