"""The `native` backend: MuJoCo C, many worlds stepped on threads with `mujoco.rollout`, robosuite's OSC at every
physics substep.

A world's state is MuJoCo's full physics state (time, qpos, qvel, act, ...) plus its mocap poses (the fixtures'
placement). Each 20 Hz control step sends, for every world and every one of its 25 substeps, the gripper servos'
controls (robosuite's PandaGripper ramps them by 0.01 per substep), the fixture poses and the OSC goal in
mjData.userdata; MuJoCo calls the OSC torque law (`native_osc.c`, installed once per process as mjcb_control)
before each substep's actuation, as robosuite's Python loop does, and the rollout returns the last substep's
state and sensor readings. The C law is tested against robosuite's own controller (tests/test_libero_scene.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import mujoco
import mujoco.rollout
import numpy as np

from clbench_jax.errors import ClbenchError
from clbench_jax.paths import cache_dir

FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
CONTROL_SPEC = (mujoco.mjtState.mjSTATE_CTRL | mujoco.mjtState.mjSTATE_MOCAP_POS
                | mujoco.mjtState.mjSTATE_MOCAP_QUAT | mujoco.mjtState.mjSTATE_USERDATA)
_SOURCE = Path(__file__).with_name("native_osc.c")
_LIB = None


def install_controller() -> None:
    """Compile native_osc.c once per MuJoCo version (cached) and install it as MuJoCo's control callback."""
    global _LIB
    if _LIB is not None:
        return
    mj_dir = Path(mujoco.__file__).parent
    libs = sorted(mj_dir.glob("libmujoco.so*")) + sorted(mj_dir.glob("libmujoco*.dylib"))
    if not libs:
        raise ClbenchError("the mujoco package ships no libmujoco shared library", file=str(mj_dir))
    src = _SOURCE.read_bytes()
    tag = hashlib.sha256(src + mujoco.__version__.encode() + str(libs[0]).encode()).hexdigest()[:12]
    out = cache_dir() / "native_osc" / f"native_osc-{tag}.so"
    if not out.is_file():
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            raise ClbenchError("the native backend compiles its 150-line C controller once, and no C compiler "
                               "was found: install one (apt-get install gcc) or set $CC", field="CC")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
        cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{mj_dir / 'include'}", str(_SOURCE), "-o", str(tmp),
               f"-L{mj_dir}", f"-l:{libs[0].name}", f"-Wl,-rpath,{mj_dir}", "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ClbenchError(f"compiling the native OSC controller failed: {proc.stderr.strip()[:2000]}",
                               file=str(_SOURCE))
        os.replace(tmp, out)
    lib = ctypes.CDLL(str(out))
    mujoco.set_mjcb_control(lib.clbench_osc)
    _LIB = lib


class NativeWorlds:
    """`nworld` copies of a model stepped together. Not a pytree: host state, one per batch."""

    def __init__(self, model: mujoco.MjModel, nworld: int, n_substeps: int, nthread: int | None = None):
        install_controller()
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
        self._control = np.zeros((nworld, n_substeps, mujoco.mj_stateSize(model, CONTROL_SPEC)))
        self.diverged = np.zeros(nworld, bool)  # MuJoCo reset the world after a numerical instability

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
        self.diverged[:] = False
        d = self._datas[0]
        for i in range(self.n):
            mujoco.mj_setState(self.m, d, self.state[i], FULL)
            d.mocap_pos[:] = self.mocap[i, :, :3]
            d.mocap_quat[:] = self.mocap[i, :, 3:]
            mujoco.mj_forward(self.m, d)
            self.sensordata[i] = d.sensordata
        return self.sensordata

    def step(self, ctrl: np.ndarray, userdata: np.ndarray | None = None, active: np.ndarray | None = None
             ) -> np.ndarray:
        """Run n_substeps physics steps in every world (or only where `active` (n,) is true: the others keep their
        state, so finished episodes cost nothing). `ctrl` is (n, nu) held for every substep or (n, nsub, nu) per
        substep; `userdata` (n, nuserdata) is held (the OSC goal). Returns sensordata (n, ns)."""
        c = self._control
        nu, nm, nud = self.m.nu, self.m.nmocap, self.m.nuserdata
        ctrl = np.asarray(ctrl, np.float64)
        c[:, :, :nu] = ctrl.reshape(self.n, 1, nu) if ctrl.ndim == 2 else ctrl
        c[:, :, nu:nu + 3 * nm] = self.mocap[:, None, :, :3].reshape(self.n, 1, -1)
        c[:, :, nu + 3 * nm:nu + 7 * nm] = self.mocap[:, None, :, 3:].reshape(self.n, 1, -1)
        if nud:
            c[:, :, nu + 7 * nm:] = 0.0 if userdata is None else np.asarray(userdata)[:, None, :]
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
        # MuJoCo resets a world whose accelerations go bad (mj_checkAcc) and carries on from its default pose: the
        # world's clock, which should have advanced n_substeps steps, tells.
        expect = self.state[idx, 0] + self.nsub * self.m.opt.timestep
        self.diverged[idx] |= out_state[:, -1, 0] < expect - 0.5 * self.m.opt.timestep
        self.state[idx] = out_state[:, -1]
        self.sensordata[idx] = out_sens[:, -1]
        return self.sensordata

    def set_world(self, i: int, state: np.ndarray, mocap: np.ndarray) -> None:
        """Start world i afresh from `state` and `mocap` (a new episode in a streaming batch)."""
        self.state[i], self.mocap[i], self.diverged[i] = state, mocap, False

    def qvel_max(self) -> np.ndarray:
        """(n,) max |qvel| per world, for blow-up detection."""
        nq = self.m.nq
        return np.abs(self.state[:, 1 + nq:1 + nq + self.m.nv]).max(axis=1)

    def qpos(self) -> np.ndarray:
        """(n, nq) the worlds' exact current qpos (sensordata is read before a substep's integration)."""
        return state_to_qpos(self.m, self.state)


def state_to_qpos(m: mujoco.MjModel, state: np.ndarray) -> np.ndarray:
    """qpos part of full-physics states (..., nstate) (layout: time, qpos, qvel, act, ...)."""
    return state[..., 1:1 + m.nq]
