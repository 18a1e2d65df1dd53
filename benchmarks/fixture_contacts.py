"""The frame contacts of an articulated fixture, three ways (docs/SIM.md, "Known difference"): LIBERO's compiled
model (the fixture's root welded to the world), the same model with the root made a mocap body (as sim/scene.py
builds it: MuJoCo's parent filter then drops the frame-drawer contacts), and that model with the dropped pairs added
back as explicit contact pairs mixed as MuJoCo mixes dynamic contacts (equal priority, solmix 1: max friction and
condim, mean solref and solimp, max margin and gap). A steady 20 N pushes libero_goal's top drawer shut for 1 s;
where it stops tells whether the frame holds it.

    python benchmarks/fixture_contacts.py     # -> benchmarks/results/fixture_contacts.json

A prototype of the fix, not the fix: sim/scene.py still builds fixtures without the pairs.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from common import machine, write_json  # noqa: E402

from clbench_jax.sim.libero_source import make_env  # noqa: E402
from clbench_jax.tasks.suites import get_task  # noqa: E402

TASK, FIXTURE, DRAWER, JOINT = ("libero_goal:0", "wooden_cabinet_1_main", "wooden_cabinet_1_cabinet_top",
                                "wooden_cabinet_1_top_level")


def frame_pairs(m: mujoco.MjModel, root: int) -> list[tuple[int, int]]:
    """Geom pairs (static part, moving part) of the fixture under `root` that contype/conaffinity let collide."""
    def inside(b):
        while b > 0:
            if b == root:
                return True
            b = m.body_parentid[b]
        return False

    bodies = [b for b in range(m.nbody) if inside(b)]
    static = {b for b in bodies if m.body_weldid[b] == m.body_weldid[root]}
    geoms = lambda bs: [g for g in range(m.ngeom) if m.geom_bodyid[g] in bs]  # noqa: E731
    return [(g1, g2) for g1 in geoms(static) for g2 in geoms(set(bodies) - static)
            if (m.geom_contype[g1] & m.geom_conaffinity[g2]) or (m.geom_contype[g2] & m.geom_conaffinity[g1])]


def build(xml: str, mocap: bool, pairs: bool) -> tuple[mujoco.MjModel, int]:
    spec = mujoco.MjSpec.from_string(xml)
    spec.body(FIXTURE).mocap = mocap
    m = spec.compile()
    added = 0
    if pairs:
        for g1, g2 in frame_pairs(m, m.body(FIXTURE).id):
            p = spec.add_pair(geomname1=m.geom(g1).name, geomname2=m.geom(g2).name)
            p.condim = int(max(m.geom_condim[g1], m.geom_condim[g2]))
            f = np.maximum(m.geom_friction[g1], m.geom_friction[g2])
            p.friction = [f[0], f[0], f[1], f[2], f[2]]
            p.solref = list(0.5 * (m.geom_solref[g1] + m.geom_solref[g2]))
            p.solimp = list(0.5 * (m.geom_solimp[g1] + m.geom_solimp[g2]))
            p.margin = float(max(m.geom_margin[g1], m.geom_margin[g2]))
            p.gap = float(max(m.geom_gap[g1], m.geom_gap[g2]))
            added += 1
        m = spec.compile()
    return m, added


def push(m: mujoco.MjModel, mocap: bool, force: float = 20.0, steps: int = 500) -> float:
    d = mujoco.MjData(m)
    if mocap:
        b = m.body(FIXTURE).id
        d.mocap_pos[0], d.mocap_quat[0] = m.body_pos[b], m.body_quat[b]
    mujoco.mj_forward(m, d)
    top, j = m.body(DRAWER).id, m.joint(JOINT).id
    for _ in range(steps):
        d.xfrc_applied[top, :3] = force * d.xmat[top].reshape(3, 3) @ m.jnt_axis[j]
        mujoco.mj_step(m, d)
    return float(d.qpos[m.jnt_qposadr[j]])


def main() -> None:
    env = make_env(str(get_task(TASK).file))
    env.reset()
    xml = env.sim.model.get_xml()
    env.close()
    rows = []
    for name, mocap, pairs in (("LIBERO's model", False, False), ("root as mocap (this project)", True, False),
                               ("root as mocap + frame pairs", True, True)):
        m, added = build(xml, mocap, pairs)
        rows.append({"model": name, "pairs_added": added, "drawer_q_after_1s": push(m, mocap)})
        print(rows[-1])
    write_json(Path(__file__).parent / "results" / "fixture_contacts.json",
               {"benchmark": "fixture_contacts", "machine": machine(), "task": TASK, "drawer_joint": JOINT,
                "push_newtons": 20.0, "seconds": 1.0, "rows": rows})


if __name__ == "__main__":
    main()
