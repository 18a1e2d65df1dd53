"""The `mjx` backend: MuJoCo XLA, the whole episode on device.

Same model physics as the native backend, with two differences of form: MJX's jax impl lacks body-level contact
sensors, so contact pairs are read from MJX's contact list and reduced to the same (P,) found flags; and MJX
moves a mocap body but not its children, so fixtures are static bodies whose placement is a per-world `body_pos` /
`body_quat` (the model is vmapped over those two fields). The predicates see identical arrays on both backends
(tests/test_backends.py compares them).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from clbench_jax.sim.scene import Scene


def geom_groups(scene: Scene, m: mujoco.MjModel) -> np.ndarray:
    """(ngeom,) contact group of each geom: entity index (its whole subtree), E / E+1 for the left / right finger
    pad bodies, -1 for everything else."""
    E = len(scene.entities)
    root_to_entity = {m.body(n).id: i for i, n in enumerate(scene.entities)}
    fingers = {m.body("robot0_finger_left").id: E, m.body("robot0_finger_right").id: E + 1}
    out = np.full(m.ngeom, -1, np.int32)
    for g in range(m.ngeom):
        b = int(m.geom_bodyid[g])
        if b in fingers:
            out[g] = fingers[b]
        elif int(m.body_rootid[b]) in root_to_entity:
            out[g] = root_to_entity[int(m.body_rootid[b])]
    return out


class MjxBackend:
    def __init__(self, scene: Scene, impl: str = "jax", n_substeps: int | None = None):
        from clbench_jax.sim import robot

        self.scene = scene
        self.m_host = scene.mjx_model_host
        self.impl = impl
        self.mx = mjx.put_model(self.m_host, impl=impl)
        self.nsub = n_substeps or robot.PHYSICS.substeps
        self.groups = jnp.asarray(geom_groups(scene, self.m_host))
        self.pairs = jnp.asarray(scene.pairs)
        self.ngroup = len(scene.entities) + 2
        # sensordata of the MJX model has the same layout as the native one up to the contact sensors.
        self.nsens = self.m_host.nsensordata
        self.fixture_ids = np.array([self.m_host.body(n).id for n in scene.fixtures], np.int32)

    def placement(self, mocap: np.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        """Per-world body_pos / body_quat (n, nbody, 3|4) with the fixtures placed as the native mocap poses."""
        n = mocap.shape[0]
        bp = np.repeat(self.m_host.body_pos[None], n, 0)
        bq = np.repeat(self.m_host.body_quat[None], n, 0)
        bp[:, self.fixture_ids] = mocap[:, :, :3]
        bq[:, self.fixture_ids] = mocap[:, :, 3:]
        return jnp.asarray(bp), jnp.asarray(bq)

    def model(self, body_pos, body_quat):
        return self.mx.replace(body_pos=body_pos, body_quat=body_quat)

    def init_data(self, state: np.ndarray, placement) -> mjx.Data:
        """Batched mjx.Data from full-physics states (n, nstate) of the native model."""
        return self._init(jnp.asarray(state), *placement)

    @functools.cached_property
    def _init(self):
        m = self.m_host
        nq, nv, na = m.nq, m.nv, m.na
        d0 = mjx.make_data(m, impl=self.impl)

        def one(s, bp, bq):
            d = d0.replace(time=s[0], qpos=s[1:1 + nq], qvel=s[1 + nq:1 + nq + nv],
                           act=s[1 + nq + nv:1 + nq + nv + na])
            return mjx.forward(self.model(bp, bq), d)

        return jax.jit(jax.vmap(one))

    def found(self, d: mjx.Data) -> jnp.ndarray:
        """(P,) contact found flags of one world's data (same pairs as the native contact sensors)."""
        con = d._impl.contact
        g = self.groups[con.geom]  # (C, 2)
        g = jnp.where(g < 0, self.ngroup, g)
        active = con.dist < 0
        mat = jnp.zeros((self.ngroup + 1, self.ngroup + 1), bool).at[g[:, 0], g[:, 1]].max(active)
        mat = mat | mat.T
        return mat[self.pairs[:, 0], self.pairs[:, 1]].astype(jnp.float32)

    def step(self, placement, d: mjx.Data, ctrl: jnp.ndarray) -> mjx.Data:
        """One control step of one world: hold `ctrl` for n_substeps physics steps."""
        mx = self.model(*placement)
        d = d.replace(ctrl=ctrl)
        return jax.lax.fori_loop(0, self.nsub, lambda _, x: mjx.step(mx, x), d)

    def read(self, d: mjx.Data) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        """-> (sensordata, found, bad) for one world; bad flags NaN or exploding velocities."""
        bad = ~jnp.all(jnp.isfinite(d.qpos)) | (jnp.max(jnp.abs(d.qvel)) > QVEL_LIMIT)
        return d.sensordata, self.found(d), bad


QVEL_LIMIT = 1e3  # rad/s or m/s: beyond this a world has blown up
