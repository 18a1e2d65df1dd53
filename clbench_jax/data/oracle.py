"""A scripted, privileged-state oracle policy for every goal kind of the 130 LIBERO tasks (and any other goal over a
scene's entities), as one pure JAX function that runs inside the batched rollout engine.

    policy, pstate0_fn = make_oracle(scene)
    rec = rollout.rollout(scene, policy, pstate0_fn(N), batch, 600)

The policy reads the privileged `sensordata` / `found` / `goals` / `tasks` of its world (never learned policies'
business), evaluates goal 0's rows with LIBERO's predicates and works through the false ones in a sensible order
(Open / TurnOn first, then On / In, then Close / TurnOff; an `In(x, drawer or microwave region)` opens the drawer or
door first). Each row becomes a *job*, run by a phase machine held in `pstate` (job, phase, steps in phase, grasp
choice, carried-object offset, per-job noise):

- pick-and-place (On object / On site / In site): above the grasp point, descend, close, lift to a transit height
  that clears the nearby entities, carry (turning the object if it fits the region better), descend (from the front
  into the microwave and the shelf), release, retreat; a lost object restarts the job;
- push (objects the gripper cannot span, the plate): closed gripper behind it, pushed toward the region centre,
  the push direction turned away from the goal's where the hand would have to stand inside a fixture;
- drawers: open = grasp the pull bar with the hand horizontal (pointing into the cabinet, fingers pinching the bar
  top and bottom), pull along the slide axis, step sideways clear of the drawer; close = push the bar with the
  closed gripper;
- microwave door: open = pinch the vertical bar from above, pull along the arc while the wrist turns with the door;
  close = push the door's outer face along the arc with the closed gripper above the cabinet roof;
- stove knob: pinch the pointer and turn the wrist about z.

Motion is a saturated proportional law toward the phase's waypoint (speed drawn per episode), orientation from the
axis-angle error; waypoints carry a few millimetres of per-job noise, so demos differ. Everything is branch-free
jnp, vmapped over worlds. Geometry (grasp heights, handle positions) comes from the stand-ins (`assets.standin`).
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax.sim import assets, control, env, rollout
from clbench_jax.sim.predicates import PRED, _joint_test, eval_rows, quat_to_mat, site_contains
from clbench_jax.sim.scene import Scene

# Jobs.
J_NONE, J_PICK, J_PUSH, J_DOPEN, J_DCLOSE, J_MOPEN, J_MCLOSE, J_KNOB = range(8)
P_MAX = 10  # phases per job (padded)
NCAND = 6  # grasp candidates per entity

PULL_Q = -0.20  # drawers are pulled to this slide position (open: q < -0.14; 0.185 m exposed at -0.20)
DOOR_OPEN_Q = -1.55
KNOB_ON_Q, KNOB_OFF_Q = 0.8, -0.04
PRE_H = 0.10  # pre-grasp height above the grasp point
DROP = 0.012  # objects are released this far above their resting height
HAND_CLEAR = 0.035  # solids are grasped at least this far below their top (hand box underside: grip site + 0.045)
PAD_HALF = 0.021  # finger pads reach this far above and below the grip site
CARRY_LOST = 0.05  # the carried object this far from where the grasp holds it -> start the job again
BOWL_TILT = 0.5  # fraction of a bowl wall's slant the hand leans by (below)
BOWL_OPEN = -0.2  # gripper command approaching a bowl rim: servo target 3.6 cm open (the wall is 6 mm)
WRIST_UP = 0.20  # the wrist (joint 6) sits about this far up the hand from the grip site
REACH_IN = 0.30  # a wrist nearer than this to the base's vertical axis folds the elbow onto its limit
SLOT_OFF = 0.04  # objects sharing a target region go this far from its centre along each axis (diagonal)
SLOT_MARGIN = 0.02  # ... and at least this far inside the region's edges
HAND_BOX_HALF = (0.095, 0.025)  # the hand's collision box, half-extents along / across the closing axis (robot.py)
HAND_BOX_UNDER = 0.045  # its underside above the grip site

# Joint kinds.
JK_NONE, JK_DRAWER, JK_DOOR, JK_KNOB = range(4)


# --------------------------------------------------------------------------------------------- static geometry
def _grasp_spec(cat: str):
    """(candidates [(x, y, psi)], grip z above the origin, pushable). psi = finger-closing axis angle (object frame)."""
    s = assets.standin(cat)
    sx, sy, h = s.size
    sc = s.shape_class
    if s.kind != "object":
        return [], 0.0, False
    if cat == "plate":
        return [], 0.0, True
    if sc == 1:  # bowl: pinch a rim wall; walls at phi = k*60 deg
        a0, a1 = (0.032, 0.056) if cat == "akita_black_bowl" else (0.034, 0.058)
        t, floor_t = 0.006, 0.008
        zb = 0.5 * floor_t
        height = h - zb
        beta = math.atan2(a1 - a0, height)
        a_mid = 0.5 * (a0 + a1) + 0.5 * t / math.cos(beta)
        zg = h - 0.012
        r = a_mid + (zg - (zb + height / 2)) * math.tan(beta)
        return [(r * math.cos(k * math.pi / 3), r * math.sin(k * math.pi / 3), k * math.pi / 3)
                for k in range(6)], zg, False
    if sc == 6:  # basket / tray: pinch the wall nearest the robot (both x walls offered)
        return [(-(sx / 2 - 0.004), 0.0, 0.0), ((sx / 2 - 0.004), 0.0, 0.0)], h - 0.015, False
    if sc == 8:  # frypan: handle
        return [(0.18, 0.0, math.pi / 2)], 0.043, False
    if sc == 7:  # book, upright: across its thickness (x)
        return [(0.0, 0.0, 0.0)], h - 0.03, False
    # Solids: the hand box's underside is 0.045 m above the grip site (the pads reach 0.021 below and above
    # it), so a tall object is grasped high enough that the hand clears its top (a bottle by its neck, a carton
    # just under its gable); otherwise the descending hand lands on the top and topples it.
    top = h - HAND_CLEAR
    if cat in ("wine_bottle", "salad_dressing", "new_salad_dressing"):
        # by the neck, the pads' lower edge just above the body's domed shoulder (squeezing the dome wedges the
        # bottle down out of the pinch)
        shoulder = max(g.pos[2] + g.size[0] + g.size[1] for g in s.geoms if g.kind == "capsule" and g.size[0] > 0.02)
        return [(0.0, 0.0, k * math.pi / 4) for k in range(4)], shoulder + PAD_HALF + 0.002, False
    if sc == 11:  # cartons: across the gable's flat ends (closing along x; the gable's slopes face +-y)
        return [(0.0, 0.0, 0.0), (0.0, 0.0, math.pi / 2)], top, False
    if sc == 5:  # cans
        return [(0.0, 0.0, k * math.pi / 4) for k in range(4)], max(0.6 * h, top), False
    if sc == 10:  # ramekin: across flats
        return [(0.0, 0.0, k * math.pi / 4) for k in range(4)], max(0.025, top), False
    if sc == 4:  # mugs: across y (handle on +x)
        return [(0.0, 0.0, math.pi / 2)], max(0.06, top), False
    if sc == 9:  # moka pot
        return [(0.0, 0.0, math.pi / 2)], max(0.10, top), False
    if sc == 3:  # squeeze bottles
        return [(0.0, 0.0, math.pi / 2)], max(0.09, top), False
    # boxes: across the shorter horizontal side
    psi = math.pi / 2 if sy <= sx else 0.0
    return [(0.0, 0.0, psi)], max(h / 2, 0.025, top), False


def _rise_first(ee, target):
    """A first waypoint well above the hand becomes the point straight above the hand: rise, then move across."""
    return jnp.where(ee[2] < target[2] - 0.04, jnp.array([ee[0], ee[1], target[2] + 0.01]), target)


def _geom_local(s: assets.StandIn, body: str, size) -> np.ndarray:
    for g in s.geoms:
        if g.body == body and np.allclose(g.size, size):
            return np.asarray(g.pos)
    raise KeyError((s.category, body, size))


def _tables(scene: Scene) -> dict:
    E = len(scene.entities)
    ents = scene.entities
    cand = np.zeros((E, NCAND, 3), np.float32)
    cmask = np.zeros((E, NCAND), bool)
    grip_z = np.zeros(E, np.float32)
    pushable = np.zeros(E, bool)
    size = np.zeros((E, 3), np.float32)
    stack_h = np.zeros(E, np.float32)  # resting height of something put On this entity
    is_obj = np.zeros(E, bool)
    tilt = np.zeros(E, np.float32)
    gopen = np.full(E, -1.0, np.float32)  # gripper command while approaching a grasp
    for e, name in enumerate(ents):
        cat = scene.categories[name]
        s = assets.standin(cat)
        size[e] = s.size
        is_obj[e] = s.kind == "object"
        c, zg, push = _grasp_spec(cat)
        for k, v in enumerate(c[:NCAND]):
            cand[e, k], cmask[e, k] = v, True
        grip_z[e], pushable[e] = zg, push
        if s.shape_class == 1:
            a0, a1 = (0.032, 0.056) if cat == "akita_black_bowl" else (0.034, 0.058)
            # the hand leans outward by half the wall's slant (~14 deg): at the full slant (27 deg) the descent often
            # stopped with a pad on the rim, worst where the arm reaches high or far (libero_spatial bowl on the cabinet
            # 62%, on the cookie box 70%; 100% at half, n = 20); upright hands lost bowls dropped into a drawer (KS4 95
            # -> 45%) and bowls stacked in the tray
            tilt[e] = BOWL_TILT * math.atan2(a1 - a0, s.size[2] - 0.004)
            # tilted hand: open fingers would put the outer pad ~2 cm below the grip point (onto the table)
            gopen[e] = BOWL_OPEN
        stack_h[e] = {1: 0.022, 6: 0.01}.get(s.shape_class, s.size[2])
    # joints
    J = len(scene.joints)
    jkind = np.zeros(J, np.int32)
    jowner = np.zeros(J, np.int32)
    jbar = np.zeros((J, 3), np.float32)  # handle (bar / knob) centre in the owner frame at q = 0
    jaxis = np.zeros((J, 3), np.float32)
    jfront = np.zeros((J, 3), np.float32)
    jchild = np.zeros((J, 3), np.float32)
    jface = np.zeros(J, np.float32)  # drawers: cabinet face along front (owner frame)
    jtop = np.zeros(J, np.float32)  # owner's top height
    for j, jn in enumerate(scene.joints):
        owner = max((e for e in ents if jn.startswith(e + "_")), key=len)
        o = ents.index(owner)
        s = assets.standin(scene.categories[owner])
        jd = next(x for x in s.joints if f"{owner}_{x.suffix}" == jn)
        child = np.asarray(s.child_body_pos[s.child_bodies.index(jd.body)])
        jowner[j], jaxis[j], jfront[j], jchild[j] = o, jd.axis, s.front, child
        jtop[j] = s.size[2]
        if jd.kind == "slide":
            jkind[j] = JK_DRAWER
            jbar[j] = child + _geom_local(s, jd.body, (0.006, 0.05, 0.007))
            jface[j] = float(np.dot(jbar[j], s.front)) - 0.031
        elif s.category == "microwave":
            jkind[j] = JK_DOOR
            jbar[j] = _geom_local(s, jd.body, (0.006, 0.006, 0.06))  # in the door frame
        else:
            jkind[j] = JK_KNOB
            jbar[j] = child
    # sites
    S = len(scene.layout.sites)
    nb = len(scene.body_sites)
    s_side = np.zeros(S, bool)
    s_front = np.zeros((S, 3), np.float32)
    s_joint = np.full(S, -1, np.int32)
    s_drawer = np.zeros(S, bool)
    for i, sn in enumerate(scene.body_sites):
        owner = max((e for e in ents if sn.startswith(e + "_")), key=len)
        cat = scene.categories[owner]
        suffix = sn[len(owner) + 1:]
        st = assets.standin(cat)
        s_front[i] = st.front
        js = np.flatnonzero(scene.layout.site_joints[i])
        if len(js):
            s_joint[i], s_drawer[i] = js[0], True
        if cat == "microwave" and suffix == "heating_region":
            s_side[i] = True
            s_joint[i] = next(j for j, jn in enumerate(scene.joints) if jn.startswith(owner + "_"))
        if cat == "wooden_two_layer_shelf" and suffix in ("top_region", "bottom_region"):
            s_side[i] = True
    del nb
    pad = lambda x: np.concatenate([x, np.zeros((1,) + x.shape[1:], x.dtype)])  # noqa: E731
    jkind, jowner, jbar, jaxis, jfront, jchild, jface, jtop = map(pad, (jkind, jowner, jbar, jaxis, jfront, jchild,
                                                                     jface, jtop))
    return dict(cand=cand, cmask=cmask, grip_z=grip_z, pushable=pushable, size=size, stack_h=stack_h,
                is_obj=is_obj, tilt=tilt, gopen=gopen, jkind=jkind, jowner=jowner, jbar=jbar, jaxis=jaxis, jfront=jfront, jchild=jchild,
                jface=jface, jtop=jtop, s_side=s_side, s_front=s_front, s_joint=s_joint, s_drawer=s_drawer)


# ------------------------------------------------------------------------------------------------ math helpers
def _rz(a):
    c, s = jnp.cos(a), jnp.sin(a)
    return jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rx(a):
    c, s = jnp.cos(a), jnp.sin(a)
    return jnp.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _r_down(yaw):
    """EE rotation pointing down, hand x at angle `yaw` (fingers close along Rz(yaw) (0, -1, 0))."""
    c, s = jnp.cos(yaw), jnp.sin(yaw)
    return jnp.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])


def _r_point(d, up_sign):
    """EE rotation with hand z along the horizontal unit vector d and hand y = up_sign * world z."""
    z = jnp.array([d[0], d[1], 0.0])
    y = jnp.array([0.0, 0.0, 1.0]) * up_sign
    x = jnp.cross(y, z)
    return jnp.stack([x, y, z], axis=1)


def _wrap_half(a):
    """Angle -> (-pi/2, pi/2] (the two-finger gripper is symmetric under a half turn)."""
    return a - jnp.pi * jnp.round(a / jnp.pi)


def _yaw_of(R):
    return jnp.arctan2(R[1, 0], R[0, 0])


def _rot_angle(R):
    return jnp.arccos(jnp.clip((jnp.trace(R) - 1.0) / 2.0, -1.0, 1.0))


def _pick(arrs, p):
    """Select row p from a list of per-phase values (padded to P_MAX by repeating the last)."""
    arrs = list(arrs) + [arrs[-1]] * (P_MAX - len(arrs))
    return jnp.stack([jnp.asarray(a, jnp.float32) for a in arrs])[jnp.clip(p, 0, P_MAX - 1)]


# --------------------------------------------------------------------------------------------------- the oracle
def make_oracle(scene: Scene, noise: bool = True):
    """-> (policy, pstate0_fn): `policy(obs, pstate, keys) -> (actions (N, 7), pstate)` for `rollout.rollout`,
    `pstate0_fn(N)` the initial policy state of N worlds."""
    c = env.scene_consts(scene)
    T = {k: jnp.asarray(v) for k, v in _tables(scene).items()}
    E = len(scene.entities)
    base = jnp.asarray(scene.arena.robot_base, jnp.float32)
    surf = float(scene.arena.surface_z)
    pred_open, pred_close = PRED["open"], PRED["close"]
    pred_on, pred_in, pred_ton, pred_toff = PRED["on"], PRED["in"], PRED["turnon"], PRED["turnoff"]
    nz = 1.0 if noise else 0.0

    def one(obs, ps, key):
        sens, found = obs["sensordata"], obs["found"]
        task = obs["tasks"]
        goal = jax.tree.map(lambda x: x[0], obs["goals"])
        view = env.sim_view(c, sens, found, task)
        truth = eval_rows(view, goal, c.joint_tests)
        ee = obs["ee_pos"]
        R = control.axisangle_to_mat(obs["ee_ori"])
        pos = view.body_pos
        Rq = quat_to_mat(sens[c.sens_entity_quat])  # (E, 3, 3)
        yaw_e = jnp.arctan2(Rq[:, 1, 0], Rq[:, 0, 0])
        q = jnp.concatenate([view.joint_q, jnp.zeros(1)])  # one dummy joint so joint-free scenes index safely
        present = task.present

        # ---------------------------------------------------------------- choose a job when idle
        J = q.shape[0]

        jt_op = jnp.concatenate([c.joint_tests.op, jnp.zeros((4, 1), jnp.int32)], 1)
        jt_thr = jnp.concatenate([c.joint_tests.thr, jnp.zeros((4, 1), jnp.float32)], 1)

        def jpass(k, j):  # joint test k (0 open, 1 close, 2 on, 3 off) for joint j
            return _joint_test(jt_op[k][j], jt_thr[k][j], q[j])

        G = goal.pred.shape[0]
        # closes come last when something is to be put in (or on) first; with nothing to place they come first: an
        # open drawer below another stops the hand pinching that one's bar, and an opened drawer above another
        # blocks pushing that one shut from above (KITCHEN_SCENE4 "close the bottom drawer and open the top one")
        is_place = goal.valid & ((goal.pred == pred_on) | (goal.pred == pred_in))
        prio = jnp.where((goal.pred == pred_open) | (goal.pred == pred_ton), 0,
                         jnp.where((goal.pred == pred_close) | (goal.pred == pred_toff),
                                   jnp.where(jnp.any(is_place), 2, -1), 1))
        todo = goal.valid & ~truth
        # an object that another row stacks something on is placed first (LIVING_ROOM_SCENE4 "stack the right bowl
        # on the left bowl and place them in the tray": moving the left bowl with the right one nested in it failed)
        support = is_place & jnp.any(is_place[None, :] & (goal.b[None, :] == goal.a[:, None]), axis=1)
        score = jnp.where(todo, prio * 10 + jnp.arange(G) - 5 * support, 1000)
        row = jnp.argmin(score)
        any_todo = todo.any()
        rp, ra, rb = goal.pred[row], goal.a[row], goal.b[row]
        jm = jnp.concatenate([goal.jmask[row], jnp.zeros(1, bool)])
        # joint for open/close/turn rows: the first masked joint not yet passing
        kk = jnp.select([rp == pred_open, rp == pred_close, rp == pred_ton], [0, 1, 2], 3)
        passing = jax.vmap(lambda j: jpass(kk, j))(jnp.arange(J))
        rj = jnp.argmax(jm & ~passing)
        S = view.site_pos.shape[0]
        bsite = jnp.clip(rb - E, 0, S - 1)
        b_is_site = rb >= E
        need_j = jnp.where(b_is_site & (rp == pred_in), T["s_joint"][bsite], -1) if S else -1
        need_open = (need_j >= 0) & ~jpass(0, jnp.clip(need_j, 0, J - 1))
        jk_r = T["jkind"][rj]
        jk_n = T["jkind"][jnp.clip(need_j, 0, J - 1)]
        a_ent = jnp.clip(ra, 0, E - 1)
        place = (rp == pred_on) | (rp == pred_in)
        new_job = jnp.select(
            [~any_todo, place & need_open & (jk_n == JK_DRAWER), place & need_open & (jk_n == JK_DOOR),
             place & T["pushable"][a_ent], place,
             ((rp == pred_open) & (jk_r == JK_DRAWER)), ((rp == pred_close) & (jk_r == JK_DRAWER)),
             ((rp == pred_open) & (jk_r == JK_DOOR)), ((rp == pred_close) & (jk_r == JK_DOOR)),
             (rp == pred_ton) | (rp == pred_toff)],
            [J_NONE, J_DOPEN, J_MOPEN, J_PUSH, J_PICK, J_DOPEN, J_DCLOSE, J_MOPEN, J_MCLOSE, J_KNOB], J_NONE)
        new_joint = jnp.where(place & need_open, need_j, rj)
        new_dir = jnp.where(rp == pred_toff, -1.0, 1.0)
        k1, k2, k3 = jax.random.split(key, 3)
        new_noise = jax.random.normal(k1, (3,)) * 0.003 * nz
        new_speed = 0.55 + 0.3 * jax.random.uniform(k2) * nz + 0.15 * (1 - nz)

        # grasp candidate choice (pick) at job start
        cnd = T["cand"][a_ent]  # (K, 3)
        Ra = _rz(yaw_e[a_ent])
        cpt = pos[a_ent][None, :2] + (Ra[:2, :2] @ cnd[:, :2].T).T  # (K, 2)
        cyaw = _wrap_half(yaw_e[a_ent] + cnd[:, 2] + jnp.pi / 2)
        others = present & (jnp.arange(E) != a_ent) & T["is_obj"]
        dmin = jnp.min(jnp.where(others[None, :], jnp.linalg.norm(cpt[:, None, :] - pos[None, :, :2], axis=-1)
                                 + 0.0, 1.0), axis=1)
        off_dir = cpt - pos[a_ent][None, :2]
        # drawer targets: prefer the grasp on the side away from the cabinet
        fr = view.site_mat[bsite] @ T["s_front"][bsite] if S else jnp.zeros(3)
        pref = jnp.where(T["s_drawer"][bsite] & b_is_site, 1.0, 0.0) if S else 0.0
        # + a habit for off-centre grasps (bowl rims): the near wall on the robot's left (+y). Without it the two near
        # walls of a hexagonal rim tie at yaw 0, mid-way through the initial-yaw range, and the demos split between
        # two mirror-image approaches a policy cannot tell apart (it averages them and misses both). The right-hand
        # wall was tried first: 62% / 11% on bowl-on-stove / bowl-on-plate, against 100% / 100% for the left (n=8).
        # Only near walls (-x) get it: it breaks their tie, and on a far wall it outvoted the reach term below.
        near_w = (off_dir[:, 0] < -0.01) & (off_dir[:, 1] > 0.01)
        # - reach: the hand leans outward by the wall's slant, so its wrist sits ~WRIST_UP * sin(tilt) (9 cm) outward
        # of the grip point; a wrist this close to the base's axis folds the elbow onto its joint limit (traced:
        # libero_spatial "bowl on the stove", 0.31 m from the base: on the left near wall the pre-grasp stalled
        # with joint 4 at -3.06 until the phase's time limit, then the descent shoved the bowl; 2 of 10 solved,
        # the right near wall 10 of 10). Zero for every bowl farther than ~0.4 m (all of libero_goal's).
        odn = off_dir / jnp.maximum(jnp.linalg.norm(off_dir, axis=1, keepdims=True), 1e-6)
        wrist = cpt + odn * WRIST_UP * jnp.sin(T["tilt"][a_ent])
        reach_in = jnp.maximum(REACH_IN - jnp.linalg.norm(wrist - base[None, :2], axis=1), 0.0)
        # - hand box: it is 0.19 m long along the closing axis; a neighbour taller than the box's underside at the
        # grasp within that footprint stops the descent (traced: libero_object tomato sauce, an orange-juice carton
        # ~0.1 m beside the can; the hand sat on the carton's top and slid off it, 7 of 50 lost)
        cax = yaw_e[a_ent] + cnd[:, 2]
        u = jnp.stack([jnp.cos(cax), jnp.sin(cax)], -1)  # (K, 2) closing axis
        dn = pos[None, :, :2] - cpt[:, None, :]  # (K, E, 2)
        along = jnp.abs(jnp.einsum("ked,kd->ke", dn, u))
        across = jnp.abs(jnp.einsum("ked,kd->ke", dn, jnp.stack([-u[:, 1], u[:, 0]], -1)))
        r_o = 0.5 * jnp.max(T["size"][:, :2], axis=1)[None, :]
        tall = pos[:, 2] + T["size"][:, 2] > pos[a_ent, 2] + T["grip_z"][a_ent] + HAND_BOX_UNDER
        box_hit = jnp.any(others[None, :] & tall[None, :] & (along < HAND_BOX_HALF[0] + r_o + 0.01)
                          & (across < HAND_BOX_HALF[1] + r_o + 0.01), axis=1)
        # - an object in a drawer is pinched across the drawer's slide axis: along it, the hand box reached over the
        # drawer's front panel (2-3 cm from a bowl's rim) and pushed the drawer shut while descending (traced:
        # libero_spatial bowl in the top drawer, q -0.16 -> -0.04 in every episode)
        if S:
            in_site = T["s_drawer"] & site_contains(view.site_pos, view.site_mat, view.site_size, pos[a_ent])
            k_dr = jnp.argmax(in_site)
            f_dr = view.site_mat[k_dr] @ T["s_front"][k_dr]
            along_slide = jnp.where(in_site.any(), jnp.abs(u @ f_dr[:2]), 0.0)
            new_out = jnp.where(in_site.any(), f_dr.at[2].set(0.0), 0.0)
        else:
            along_slide, new_out = 0.0, jnp.zeros(3)
        cscore = (-jnp.abs(cyaw) + 2.0 * jnp.minimum(dmin, 0.12) - 3.0 * along_slide
                  + pref * 3.0 * (off_dir @ fr[:2]) - 0.3 * (off_dir[:, 0] > 0.01) + 0.4 * near_w
                  - 20.0 * reach_in - 3.0 * box_hit)
        cscore = jnp.where(T["cmask"][a_ent], cscore, -1e9)
        new_cand = jnp.argmax(cscore)

        start = ~ps["active"]
        ps = dict(ps)
        ps["job"] = jnp.where(start, new_job, ps["job"])
        ps["a"] = jnp.where(start, ra, ps["a"])
        ps["b"] = jnp.where(start, rb, ps["b"])
        ps["pred"] = jnp.where(start, rp, ps["pred"])
        ps["joint"] = jnp.where(start, new_joint, ps["joint"])
        ps["dir"] = jnp.where(start, new_dir, ps["dir"])
        ps["cand"] = jnp.where(start, new_cand, ps["cand"])
        ps["noise"] = jnp.where(start, new_noise, ps["noise"])
        ps["out"] = jnp.where(start, new_out, ps["out"])
        ps["speed"] = jnp.where(ps["t"] == 0, new_speed, ps["speed"])
        ps["phase"] = jnp.where(start, 0, ps["phase"])
        ps["tp"] = jnp.where(start, 0, ps["tp"])
        ps["active"] = jnp.asarray(True)

        job, ph, tp = ps["job"], ps["phase"], ps["tp"]
        a = jnp.clip(ps["a"], 0, E - 1)
        b = ps["b"]
        bs = jnp.clip(b - E, 0, S - 1)
        b_site = b >= E
        be = jnp.clip(b, 0, E - 1)
        jj = jnp.clip(ps["joint"], 0, J - 1)
        nse = ps["noise"]
        yaw_now = _yaw_of(R)

        # ================================================================ PICK & PLACE
        cd = T["cand"][a, jnp.clip(ps["cand"], 0, NCAND - 1)]
        Ra = _rz(yaw_e[a])
        gz = T["grip_z"][a]
        gpt = pos[a] + Ra @ jnp.array([cd[0], cd[1], 0.0]) + jnp.array([0.0, 0.0, gz])
        gyaw_raw = yaw_e[a] + cd[2] + jnp.pi / 2
        gyaw = jnp.where(ph == 0, _wrap_half(gyaw_raw), ps["yaw0"] + _wrap_half(gyaw_raw - ps["yaw0"]))
        off = ps["off"]  # object origin - EE at grasp (world)
        dy = ps["dyaw"]
        off_r = _rz(dy) @ off
        # target of the object origin
        sp, sm, ssz = view.site_pos[bs], view.site_mat[bs], view.site_size[bs]
        s_top = sp[2] + jnp.abs(sm @ ssz)[2]
        s_bot = sp[2] - jnp.abs(sm @ ssz)[2]
        is_in = ps["pred"] == pred_in
        tgt_xy = jnp.where(b_site, sp[:2], pos[be][:2])
        # drawers: shift toward the exposed part
        sf = sm @ T["s_front"][bs]
        half_f = jnp.abs(ssz @ jnp.abs(sm.T @ sf))
        jo = T["jowner"][T["s_joint"][bs]]
        cab_face = (pos[jo] @ sf) + T["jface"][T["s_joint"][bs]]
        u_c = sp @ sf
        u_front = u_c + half_f
        ext = 0.5 * jnp.max(T["size"][a][:2])
        u_t = jnp.clip(0.5 * (u_front + cab_face) + 0.01, cab_face + ext + 0.01, u_front - ext)
        dr = T["s_drawer"][bs] & b_site & is_in
        tgt_xy = jnp.where(dr, tgt_xy + sf[:2] * (u_t - u_c), tgt_xy)
        # several goal rows put objects on one region (both moka pots on the stove): each gets its own slot on the
        # region's diagonal, in entity order, instead of all aiming at the centre (traced: the second moka pot came
        # down on the first and knocked it off the stove, 0 of 50). Not for In: items dropped into a basket settle.
        shared = goal.valid & (goal.pred == pred_on) & (goal.b == b)
        n_sh = jnp.sum(shared)
        rank = jnp.sum(shared & (goal.a < ps["a"]))
        frac = jnp.where(n_sh > 1, 2.0 * rank / jnp.maximum(n_sh - 1, 1) - 1.0, 0.0)
        slot = jnp.minimum(SLOT_OFF, jnp.abs(ssz[:2]) - SLOT_MARGIN) * frac
        tgt_xy = jnp.where(b_site & ~dr, tgt_xy + (sm[:2, :2] @ slot), tgt_xy)
        rest_z = jnp.where(b_site, jnp.where(is_in, s_bot + 0.01, s_top), pos[be][2] + T["stack_h"][be])
        # into a drawer: released 3 cm higher (the tilted hand's box dips ~4 cm at its outer end, onto the open
        # drawer's front panel or side wall, and shoved the bowl back under the drawer above: libero_10 / KS4 bowl
        # into the bottom drawer)
        tgt = jnp.concatenate([tgt_xy + nse[:2], (rest_z + DROP + jnp.where(dr, 0.03, 0.0))[None]])
        side = b_site & T["s_side"][bs]
        sfront = sm @ T["s_front"][bs]
        # transit height: clear entities near the source and the target
        near = present & (jnp.arange(E) != a) & (
            (jnp.linalg.norm(pos[:, :2] - tgt_xy[None], axis=-1) < 0.3)
            | (jnp.linalg.norm(pos[:, :2] - pos[a][None, :2], axis=-1) < 0.2))
        owner_b = jnp.where(b_site, view.site_parent[bs], be)
        near = near & ~(side & (jnp.arange(E) == owner_b))
        tops = jnp.where(near, pos[:, 2] + T["size"][:, 2], surf)
        clear = jnp.maximum(jnp.max(tops), rest_z) + 0.05
        z_cap = base[2] + 0.62
        ee_transit = jnp.minimum(jnp.maximum(clear - off[2], surf + 0.2), z_cap)
        live = (pos[a] - ee)
        # carrying (phases 4-7): the object's live offset; the retreat after release (8) keeps the grasp offset --
        # with the live one its target (0.12 m above the hand's own place point) rose with the hand, which
        # climbed ~0.6 m until the phase's 60-step limit, and the next job started from there (traced: libero_10
        # both moka pots; the dive from that height onto the next object knocked the first pot over)
        off_use = jnp.where((ph >= 4) & (ph <= 7), live, off_r)
        ee_tgt = tgt - off_use
        ins_z = ee_tgt[2] + 0.01
        p_front = ee_tgt + sfront * 0.22
        P1 = jnp.where(side, jnp.array([p_front[0], p_front[1], jnp.maximum(ins_z, ee_tgt[2] + 0.03)]),
                       jnp.array([ee_tgt[0], ee_tgt[1], ee_transit]))
        P2 = jnp.where(side, jnp.array([p_front[0], p_front[1], ins_z]),
                       jnp.array([ee_tgt[0], ee_tgt[1], ee_tgt[2] + 0.05]))
        P3 = ee_tgt
        P4 = jnp.where(side, jnp.array([p_front[0], p_front[1], ee_tgt[2] + 0.01]), ee_tgt + jnp.array([0, 0, 0.12]))
        above_obj = present & T["is_obj"] & (jnp.arange(E) != a) & (
            jnp.linalg.norm(pos[:, :2] - gpt[None, :2], axis=-1) < 0.12)
        pre_z = jnp.maximum(gpt[2] + PRE_H, jnp.max(jnp.where(above_obj, pos[:, 2] + T["size"][:, 2], 0.0)) + 0.05)
        pre = jnp.array([gpt[0], gpt[1], pre_z]) + nse * jnp.array([1.0, 1.0, 2.0])
        # well below the pre-grasp height: rise first (a sideways sweep knocks open drawers / nearby objects)
        pre = _rise_first(ee, pre)
        g_lift = jnp.array([ps["anchor"][0], ps["anchor"][1], ee_transit])
        # out of a drawer: first (10 steps) slide 2 cm toward its front panel along the floor, then lift (straight
        # up, a bowl's back rim caught under the cabinet's top panel and the lift stalled to its time limit:
        # libero_spatial bowl in the top drawer; the rim is 2.7 cm from the drawer's front panel)
        from_drawer = jnp.any(ps["out"] != 0)
        g_lift = jnp.where(from_drawer & (tp < 10), ps["anchor"] + ps["out"] * 0.02 + jnp.array([0.0, 0.0, 0.004]),
                           jnp.where(from_drawer, g_lift.at[:2].add(ps["out"][:2] * 0.02), g_lift))
        # bowls: tilt the hand outward (BOWL_TILT of the wall's slant)
        rad = (gpt - pos[a]).at[2].set(0.0)
        rad = rad / jnp.maximum(jnp.linalg.norm(rad), 1e-6)
        tilt = T["tilt"][a]
        Rt1, Rt2 = _rx(tilt), _rx(-tilt)
        Rg0 = _r_down(gyaw)
        Rg = jnp.where(((Rg0 @ Rt1)[:, 2] @ rad) < 0, Rg0 @ Rt1, Rg0 @ Rt2)
        Rp0 = _r_down(ps["yaw0"] + dy)
        rad_p = _rz(dy) @ (-off).at[2].set(0.0)
        rad_p = rad_p / jnp.maximum(jnp.linalg.norm(rad_p), 1e-6)
        Rp = jnp.where(((Rp0 @ Rt1)[:, 2] @ rad_p) < 0, Rp0 @ Rt1, Rp0 @ Rt2)  # the tilt it was grasped with
        pick = dict(
            pos=[pre, gpt + nse * jnp.array([0.3, 0.3, 0.0]), gpt, g_lift, P1, P2, P3, P3, P4],
            R=[Rg, Rg, Rg, Rg, Rp, Rp, Rp, Rp, Rp],
            grip=[T["gopen"][a], T["gopen"][a], 1, 1, 1, 1, 1, -1, -1],
            tol=[0.02, 0.006, 1, 0.03, 0.02, 0.012, 0.008, 1, 0.03],
            vmax=[1, 0.45, 1, 0.35, 0.45, 0.4, 0.3, 1, 0.8],
            mins=[0, 0, 12, jnp.where(from_drawer, 12, 0), 0, 0, 0, 6, 0],
            maxs=[150, 60, 12, 80, 150, 80, 60, 6, 60],
            n=9)
        carried = pos[a] - (ee + off)
        held = env.finger_contacts(c, found)[a]
        lost = (ph >= 3) & (ph <= 5) & (jnp.linalg.norm(carried) > CARRY_LOST) & ~held & (job == J_PICK)

        # ================================================================ PUSH
        rr = 0.5 * jnp.max(T["size"][a][:2]) + 0.014
        goal_xy = jnp.where(b_site, sp[:2], pos[be][:2])
        dvec = goal_xy - pos[a][:2]
        dist_goal = jnp.linalg.norm(dvec)
        pz = surf + 0.022
        # push direction: the goal's, turned by up to 80 deg, and the hand's yaw (its 0.19 m box across or along
        # the push), chosen so neither the hand's spot behind the object nor the box's ends are inside a fixture
        # (libero_goal's plate starts 1.6 cm from the cabinet's side: pushing straight, the hand stuck on it)
        ang_g = jnp.arctan2(dvec[1], dvec[0])
        turns = jnp.deg2rad(jnp.array([0.0, 20.0, -20.0, 40.0, -40.0, 60.0, -60.0, 80.0, -80.0] * 2))
        along = jnp.arange(18) >= 9
        dcs = jnp.stack([jnp.cos(ang_g + turns), jnp.sin(ang_g + turns)], 1)  # (18, 2)
        bh = pos[a][None, :2] - dcs * (rr + 0.015)  # hand positions behind the object
        ax = jnp.where(along[:, None], dcs, jnp.stack([-dcs[:, 1], dcs[:, 0]], 1))  # the hand box's long axis
        probes = jnp.stack([bh, bh + 0.075 * ax, bh - 0.075 * ax], 1)  # (18, 3, 2)
        fix = present & ~T["is_obj"] & (T["size"][:, 2] > 0.02)  # fixtures taller than the pushed object
        rel = probes[:, :, None, :] - pos[None, None, :, :2]  # (18, 3, E, 2)
        cy, sy_ = jnp.cos(yaw_e), jnp.sin(yaw_e)
        lx = jnp.abs(rel[..., 0] * cy + rel[..., 1] * sy_)
        ly = jnp.abs(-rel[..., 0] * sy_ + rel[..., 1] * cy)
        inside = (lx < 0.5 * T["size"][:, 0] + 0.03) & (ly < 0.5 * T["size"][:, 1] + 0.03) & fix[None, None]
        dscore = jnp.cos(turns) - 10.0 * inside.any((1, 2)) - 0.01 * along
        kbest = jnp.argmax(dscore)
        dd = dcs[kbest]
        Rpush = _r_down(_wrap_half(jnp.arctan2(dd[1], dd[0]) + jnp.where(along[kbest], jnp.pi / 2, 0.0)))
        behind = pos[a][:2] - dd * (rr + 0.015)
        push_pt = pos[a][:2] - dd * rr + dd * jnp.minimum(dist_goal, 0.04)
        push = dict(
            pos=[jnp.array([behind[0], behind[1], pz + 0.08]), jnp.array([behind[0], behind[1], pz]),
                 jnp.array([push_pt[0], push_pt[1], pz]), jnp.array([ee[0], ee[1], pz + 0.10])],
            R=[Rpush] * 4, grip=[1, 1, 1, 1], tol=[0.02, 0.008, 1, 0.03], vmax=[1, 0.5, 0.3, 0.8],
            mins=[0, 0, 0, 0], maxs=[150, 60, 250, 60], n=4)
        # the hand no longer behind the object (it turned or slid off): retreat up and approach again
        vrel = ee[:2] - pos[a][:2]
        off_push = (jnp.linalg.norm(vrel) > rr + 0.05) | ((vrel @ -dd) < 0.8 * jnp.linalg.norm(vrel))
        push_cond2 = (dist_goal < 0.01) | off_push

        # ================================================================ joints: shared geometry
        o = T["jowner"][jj]
        Ro_all = quat_to_mat(sens[c.sens_entity_quat][T["jowner"]])  # every joint's owner (door checks below)
        hinge_all = pos[T["jowner"]] + jnp.einsum("jab,jb->ja", Ro_all, T["jchild"])  # door hinges (child origins)
        Ro = Ro_all[jj]
        qj = q[jj]
        f = Ro @ T["jfront"][jj]
        # drawer bar (world) at the current q
        bar = pos[o] + Ro @ (T["jbar"][jj] + T["jaxis"][jj] * qj)
        f2 = f[:2] / jnp.maximum(jnp.linalg.norm(f[:2]), 1e-6)
        up = jnp.where(ps["cand"] > 0, 1.0, -1.0)
        Rh = _r_point(-f2, up)
        df = jnp.array([f2[0], f2[1], 0.0])
        lead = jnp.clip(qj - PULL_Q, 0.0, 0.05)
        # after the pull, step sideways (toward the robot's centre line) clear of the open drawer: the next job's
        # straight path down from above the drawer swept the hand across its front panel and shut it again
        # (libero_goal "open the top drawer and put the bowl inside": the drawer back at q ~ -0.02 in 9 of 12)
        lat = jnp.array([-f2[1], f2[0], 0.0])
        lat = lat * jnp.where(lat[:2] @ (base[:2] - bar[:2]) >= 0, 1.0, -1.0)
        up_out = bar + df * 0.10 + jnp.array([0, 0, 0.12])
        dopen = dict(
            pos=[bar + df * 0.15 + jnp.array([0, 0, 0.05]), bar + df * 0.08, bar + df * 0.002, bar + df * 0.002,
                 bar + df * (0.002 + lead), bar, bar + df * 0.10, up_out, up_out + lat * 0.25],
            R=[Rh] * 9, grip=[-1, -1, -1, 1, 1, -1, -1, -1, -1], tol=[0.02, 0.01, 0.005, 1, 1, 1, 0.02, 0.03, 0.04],
            vmax=[1, 0.6, 0.25, 1, 0.3, 1, 0.5, 0.8, 0.8], mins=[0, 0, 0, 8, 0, 6, 0, 0, 0],
            maxs=[150, 80, 60, 8, 150, 6, 60, 60, 60], n=9)
        dopen_cond4 = qj < PULL_Q + 0.01
        Rdc = _r_down(_wrap_half(jnp.arctan2(f2[1], f2[0])))
        close_pt = bar + df * 0.027
        push_in = bar - df * (0.03 - 0.017)
        dclose = dict(
            pos=[close_pt + jnp.array([0, 0, 0.10]), close_pt, push_in, bar + df * 0.08,
                 bar + df * 0.08 + jnp.array([0, 0, 0.12])],
            R=[Rdc] * 5, grip=[1, 1, 1, 1, 1], tol=[0.02, 0.008, 1, 0.02, 0.03], vmax=[1, 0.5, 0.3, 0.6, 0.8],
            mins=[0, 0, 0, 0, 0], maxs=[150, 60, 120, 60, 60], n=5)
        dclose_cond2 = qj > 0.004

        # microwave door: hinge at the door body's origin; door frame = owner yaw, turned by q about the joint's axis
        # (+-z); the door runs from the hinge along its frame's x toward the bar
        hinge = hinge_all[jj]
        psi_o = _yaw_of(Ro)
        hsgn = T["jaxis"][jj][2]
        along_d = jnp.array([jnp.sign(T["jbar"][jj][0]), 0.0, 0.0])

        def door_pt(qq, local):
            return hinge + _rz(psi_o + hsgn * qq) @ local

        s_push = 0.17
        n_out = lambda qq: _rz(psi_o + hsgn * qq) @ jnp.array([0.0, -1.0, 0.0])  # noqa: E731
        z_door = pos[o][2] + T["jtop"][jj]
        qt_close = jnp.minimum(qj + 0.3, 0.05)
        cpt_now = door_pt(qj, along_d * s_push) + n_out(qj) * 0.025
        cpt_lead = door_pt(qt_close, along_d * s_push) + n_out(qt_close) * 0.02
        zc = z_door - 0.04
        Rmc = _r_down(jnp.asarray(0.0))
        mc0 = cpt_now.at[2].set(z_door + 0.06) + n_out(qj) * 0.03
        # from well below the roof line (e.g. just pulled out of the microwave after placing something in it), rise
        # first: the straight path up to the roof ran into the open door (libero_10 mug in the microwave and close
        # it: the door never closed)
        mc0 = _rise_first(ee, mc0)
        mclose = dict(
            pos=[mc0, cpt_now.at[2].set(zc),
                 cpt_lead.at[2].set(zc), (cpt_now + n_out(qj) * 0.06).at[2].set(zc),
                 (cpt_now + n_out(qj) * 0.06).at[2].set(z_door + 0.1)],
            R=[Rmc] * 5, grip=[1, 1, 1, 1, 1], tol=[0.02, 0.01, 1, 0.02, 0.03], vmax=[1, 0.5, 0.35, 0.6, 0.8],
            mins=[0, 0, 0, 0, 0], maxs=[150, 60, 200, 60, 60], n=5)
        mclose_cond2 = qj > -0.002
        # open: pinch the vertical bar from above, hand y along the door, wrist turns with the door
        bar_top = T["jbar"][jj] + jnp.array([0.0, 0.0, 0.06])
        bpt = lambda qq: door_pt(qq, bar_top) + jnp.array([0.0, 0.0, -0.016])  # noqa: E731
        qt_open = jnp.maximum(qj - 0.3, DOOR_OPEN_Q - 0.1)
        dyaw_door = lambda qq: psi_o + hsgn * qq + ps["yaw0"]  # noqa: E731
        mopen = dict(
            pos=[bpt(qj) + jnp.array([0, 0, 0.08]), bpt(qj), bpt(qj), bpt(qt_open), bpt(qj),
                 bpt(qj) + jnp.array([0, 0, 0.10])],
            R=[_r_down(dyaw_door(qj))] * 3 + [_r_down(dyaw_door(qt_open))] + [_r_down(dyaw_door(qj))] * 2,
            grip=[-1, -1, 1, 1, -1, -1], tol=[0.02, 0.005, 1, 1, 1, 0.03], vmax=[1, 0.3, 1, 0.3, 1, 0.8],
            mins=[0, 0, 8, 0, 6, 0], maxs=[150, 60, 8, 250, 6, 60], n=6)
        mopen_cond3 = qj < DOOR_OPEN_Q

        # knob: pinch the pointer, turn the wrist
        knob = pos[o] + Ro @ T["jbar"][jj]
        kz = knob + jnp.array([0.0, 0.0, 0.023])
        kyaw = lambda qq: psi_o + qq + ps["yaw0"]  # noqa: E731
        qk_t = qj + ps["dir"] * 0.35
        knob_j = dict(
            pos=[kz + jnp.array([0, 0, 0.08]), kz, kz, kz, kz, kz + jnp.array([0, 0, 0.10])],
            R=[_r_down(kyaw(qj))] * 3 + [_r_down(kyaw(qk_t))] + [_r_down(kyaw(qj))] * 2,
            grip=[-1, -1, 1, 1, -1, -1], tol=[0.02, 0.005, 1, 1, 1, 0.03], vmax=[1, 0.3, 1, 0.5, 1, 0.8],
            mins=[0, 0, 8, 0, 6, 0], maxs=[150, 60, 8, 80, 6, 60], n=6)
        knob_cond3 = jnp.where(ps["dir"] > 0, qj > KNOB_ON_Q, qj < KNOB_OFF_Q)

        idle = dict(pos=[ee], R=[R], grip=[-1], tol=[1], vmax=[1], mins=[0], maxs=[10 ** 6], n=1)

        skills = [idle, pick, push, dopen, dclose, mopen, mclose, knob_j]
        conds = [jnp.zeros(P_MAX, bool)] * 8
        conds[J_PUSH] = jnp.zeros(P_MAX, bool).at[2].set(push_cond2)
        conds[J_DOPEN] = jnp.zeros(P_MAX, bool).at[4].set(dopen_cond4)
        conds[J_DCLOSE] = jnp.zeros(P_MAX, bool).at[2].set(dclose_cond2)
        conds[J_MCLOSE] = jnp.zeros(P_MAX, bool).at[2].set(mclose_cond2)
        conds[J_MOPEN] = jnp.zeros(P_MAX, bool).at[3].set(mopen_cond3)
        conds[J_KNOB] = jnp.zeros(P_MAX, bool).at[3].set(knob_cond3)

        def sel(field):
            vals = jnp.stack([_pick(s_[field], ph) for s_ in skills])
            return vals[job]

        tpos = sel("pos")
        # an open microwave door swings out beside the cabinet, its top ~1 cm below the arm's start pose: a job's
        # first move from near it (other than the door's own jobs) rises over it first (traced: libero_10 mug into
        # the microwave: the first move toward the mug swept the fingers across the door's top and shut it, q -1.55
        # -> -0.3, knocking the mug off the table in 6 of 20)
        d_ang = jax.vmap(_yaw_of)(Ro_all) + T["jaxis"][:, 2] * q
        d_len = T["jbar"][:, :1] + 0.035 * jnp.sign(T["jbar"][:, :1])  # hinge to the door's free edge
        d_end = hinge_all + jnp.stack([jnp.cos(d_ang), jnp.sin(d_ang), jnp.zeros(J)], 1) * d_len
        seg = d_end[:, :2] - hinge_all[:, :2]
        s_t = jnp.clip(jnp.sum((ee[None, :2] - hinge_all[:, :2]) * seg, 1) / jnp.maximum(jnp.sum(seg * seg, 1), 1e-9),
                       0.0, 1.0)
        d_door = jnp.linalg.norm(hinge_all[:, :2] + s_t[:, None] * seg - ee[None, :2], axis=1)
        door_top = pos[T["jowner"], 2] + T["jtop"]
        by_door = (T["jkind"] == JK_DOOR) & (d_door < 0.08) & (ee[2] < door_top + 0.03)
        rise = (ph == 0) & (job != J_MOPEN) & (job != J_MCLOSE) & by_door.any()
        tpos = jnp.where(rise, jnp.array([ee[0], ee[1], jnp.max(jnp.where(by_door, door_top, 0.0)) + 0.10]), tpos)
        tR = jnp.stack([jnp.stack([jnp.asarray(r, jnp.float32) for r in (s_["R"] + [s_["R"][-1]] * (P_MAX - len(s_["R"])))])[
            jnp.clip(ph, 0, P_MAX - 1)] for s_ in skills])[job]
        grip = sel("grip")
        tol = sel("tol")
        vmax = sel("vmax")
        mins = sel("mins")
        maxs = sel("maxs")
        nph = jnp.asarray([s_["n"] for s_ in skills])[job]
        cond = jnp.stack(conds)[job][jnp.clip(ph, 0, P_MAX - 1)]

        # ---------------------------------------------------------------- action
        dp = tpos - ee
        dist = jnp.linalg.norm(dp)
        v = jnp.minimum(0.35 * dist, 0.05 * vmax * ps["speed"])
        a_pos = dp / jnp.maximum(dist, 1e-9) * v / control.POS_SCALE
        err = control.mat_to_axisangle(tR @ R.T)
        ang = jnp.linalg.norm(err)
        a_rot = err / jnp.maximum(ang, 1e-9) * jnp.minimum(0.4 * ang, 0.15) / control.ROT_SCALE
        act = jnp.concatenate([jnp.clip(a_pos, -1, 1), jnp.clip(a_rot, -1, 1), grip[None]])

        # ---------------------------------------------------------------- phase update
        reached = (dist < tol) & (ang < 0.08)
        done = (tp >= mins) & ((reached & (tol < 0.9)) | cond | ((tol >= 0.9) & (mins > 0))) | (tp >= maxs)
        nxt = jnp.where(done, ph + 1, ph)
        # grasp bookkeeping (pick): leaving CLOSE -> remember offset, anchor, yaw; choose the place yaw
        leaving_close = done & (ph == 2) & (job == J_PICK)
        new_off = pos[a] - ee
        # yaw delta that fits the object's footprint into an In region best
        hx, hy = 0.5 * T["size"][a][0], 0.5 * T["size"][a][1]
        s_yaw = _yaw_of(sm)
        s_half = jnp.abs(ssz[:2])
        cands_d = jnp.array([0.0, jnp.pi / 2, -jnp.pi / 2])

        def slack(dd_):
            rel = yaw_e[a] + dd_ - s_yaw
            ex = jnp.abs(jnp.cos(rel)) * hx + jnp.abs(jnp.sin(rel)) * hy
            ey = jnp.abs(jnp.sin(rel)) * hx + jnp.abs(jnp.cos(rel)) * hy
            return jnp.minimum(s_half[0] - ex, s_half[1] - ey)

        sl = jax.vmap(slack)(cands_d)
        yaw_ok = jnp.abs(yaw_now + cands_d) < 2.3
        sl = jnp.where(yaw_ok, sl, -1e3) + jnp.array([0.01, 0.0, 0.0])
        best_d = jnp.where(is_in & b_site, cands_d[jnp.argmax(sl)], 0.0)
        ps["off"] = jnp.where(leaving_close, new_off, ps["off"])
        ps["anchor"] = jnp.where(leaving_close, ee, ps["anchor"])
        ps["dyaw"] = jnp.where(leaving_close, best_d, ps["dyaw"])
        ps["yaw0"] = jnp.where(leaving_close, yaw_now, ps["yaw0"])
        # phase 0 of a pick: remember the grasp yaw (continuity); joints: yaw offsets
        up_choice = jnp.where(_rot_angle(_r_point(-f2, 1.0) @ R.T) < _rot_angle(_r_point(-f2, -1.0) @ R.T), 1, 0)
        kyaw0 = _wrap_half(psi_o + qj + ps["dir"] * 0.45) - (psi_o + qj + ps["dir"] * 0.45)
        # door open: hand y along the door, choose the half turn so the wrist ends near yaw 0
        dy0 = _wrap_half(psi_o + hsgn * 0.5 * (qj + DOOR_OPEN_Q)) - (psi_o + hsgn * 0.5 * (qj + DOOR_OPEN_Q))
        first = start
        ps["yaw0"] = jnp.where(first & (job == J_PICK), _wrap_half(gyaw_raw), ps["yaw0"])
        ps["yaw0"] = jnp.where(first & (job == J_KNOB), kyaw0, ps["yaw0"])
        ps["yaw0"] = jnp.where(first & (job == J_MOPEN), dy0, ps["yaw0"])
        ps["cand"] = jnp.where(first & (job == J_DOPEN), up_choice, ps["cand"])
        nxt = jnp.where(lost, 0, nxt)
        ps["phase"] = nxt
        ps["tp"] = jnp.where(nxt != ph, 0, tp + 1)
        ps["active"] = (nxt < nph) & (job != J_NONE)
        ps["t"] = ps["t"] + 1
        return act, ps

    def policy(obs, pstate, keys):
        return jax.vmap(one)(obs, pstate, keys)

    def pstate0_fn(n: int):
        z = lambda *s, dt=jnp.float32: jnp.zeros((n,) + s, dt)  # noqa: E731
        return dict(active=z(dt=bool), job=z(dt=jnp.int32), a=z(dt=jnp.int32), b=z(dt=jnp.int32),
                    pred=z(dt=jnp.int32), joint=z(dt=jnp.int32), dir=z(), cand=z(dt=jnp.int32), noise=z(3), out=z(3),
                    speed=z() + 0.7, phase=z(dt=jnp.int32), tp=z(dt=jnp.int32), off=z(3), anchor=z(3), dyaw=z(),
                    yaw0=z(), t=z(dt=jnp.int32))

    return policy, pstate0_fn


# ------------------------------------------------------------------------------------------------- evaluation
_ORACLES: dict = {}


def _oracle_for(scene: Scene, noise: bool):
    key = (id(scene), noise)
    if key not in _ORACLES:
        _ORACLES[key] = (scene, make_oracle(scene, noise))  # keep the scene alive: id() stays unique
    return _ORACLES[key][1]


def run_oracle(scene: Scene, tasks, n_per_task: int, seed: int = 0, horizon: int = 600, goal_atoms=None,
               noise: bool = True, trace: bool = False):
    """Run the oracle on `n_per_task` init states of each task (TaskSpecs of `scene`) in one native batch.
    `goal_atoms`: None (each task's own goal) or one atom list used for every task. -> (Records, task_ids[, trace])"""
    from clbench_jax.sim.init_states import make_init_bank

    tasks = list(tasks)
    banks = [make_init_bank(scene, t, n_per_task, seed=seed) for t in tasks]
    ids = np.concatenate([np.full(n_per_task, scene.task_index(t.name)) for t in tasks])
    state = np.concatenate([b.state for b in banks])
    mocap = np.concatenate([b.mocap for b in banks])
    if goal_atoms is None:
        goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
    else:
        g = env.task_arrays(scene, tasks[0], goal_atoms).goal
        goals = jax.tree.map(lambda x: np.broadcast_to(np.asarray(x)[None, None], (len(ids), 1) + np.shape(x)), g)
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(seed + 12345), len(ids)))
    batch = rollout.EpisodeBatch(task_ids=ids, goals=goals, state=state, mocap=mocap, keys=keys)
    policy, p0 = _oracle_for(scene, noise)
    out = rollout.rollout(scene, policy, p0(len(ids)), batch, horizon, backend="native", trace=trace)
    return (out + (ids,)) if trace else (out, ids)


def oracle_success(scene: Scene, tasks, n_per_task: int, seed: int = 0, horizon: int = 600, goal_atoms=None,
                   noise: bool = True) -> dict:
    """Per-task oracle success rates: {task name: {"success": rate, "mean_length": steps, "n": n}}."""
    t0 = time.perf_counter()
    rec, ids = run_oracle(scene, tasks, n_per_task, seed, horizon, goal_atoms, noise)
    out = {}
    for t in tasks:
        m = ids == scene.task_index(t.name)
        succ = rec.success[m, 0]
        out[t.name] = {"success": float(succ.mean()), "n": int(m.sum()),
                       "mean_length": float(rec.length[m][succ].mean()) if succ.any() else float("nan"),
                       "physics_failures": int((rec.fail_reason[m] != 0).sum()),
                       "seconds": time.perf_counter() - t0}
    return out
