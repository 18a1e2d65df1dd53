"""A Panda-like 7-DoF arm with a parallel two-finger gripper, built into an `mujoco.MjSpec`.

Kinematics are the real Franka Emika Panda's (Craig / modified DH, Franka's published table):

    joint  a_{i-1}   d_i     alpha_{i-1}
      1    0         0.333    0
      2    0         0       -pi/2
      3    0         0.316    pi/2
      4    0.0825    0        pi/2
      5   -0.0825    0.384   -pi/2
      6    0         0        pi/2
      7    0.088     0        pi/2
    flange 0         0.107    0

so link i sits at ``(a, -sin(alpha) d, cos(alpha) d)`` in link i-1 rotated by ``alpha`` about x, and joint i
turns about its link's z axis. The hand is at the flange turned -45 deg about z; the fingers start 0.0584
below the hand and the grip site (the EE frame, `robot0_grip_site`) is at the finger-pad centres,
``GRIP_OFFSET`` = 0.1034 along the hand's z axis. The same table (`LINKS`) drives the JAX forward
kinematics in `clbench_jax.sim.control`, so the two cannot disagree.

Geometry is capsules and boxes (MJX-friendly); link masses are the Panda's published identified masses.
Collision pruning (what MJX needs): robot geoms have ``contype=2, conaffinity=1``. A pair collides when
``(t1 & a2) | (t2 & a1)``, so robot-robot pairs never collide (2 & 1 = 0 both ways) while every robot geom
still collides with ordinary scene geoms (default contype=1, conaffinity=1: 1 & 1). Only the hand box and the
finger boxes/pads carry collision geoms; the arm links are visual (contype=conaffinity=0) but carry mass.

Gripper: two slide joints (`robot0_finger_joint1` on the left finger along +y of the hand,
`robot0_finger_joint2` on the right finger along -y), each 0..0.04 m (0 = closed, 0.08 m total opening). One
position actuator `robot0_act_gripper` drives the fixed tendon ``q1 + q2`` (the total opening) and a joint
equality ``q1 == q2`` keeps the fingers symmetric (like the real Panda's mechanical coupling), so a grasp centres
on the object. Its control is 0..0.08 (`control.gripper_ctrl`: -1 -> 0.08 open, +1 -> 0 closed); the servo aims
at ``ctrl * (1 + GRIPPER_SQUEEZE / 0.08) - GRIPPER_SQUEEZE``, so "open" is 0.08 and "closed" lies 3 cm beyond the
stroke: a closed gripper squeezes with kp (0.03 + width), clipped to GRIPPER_FORCE_LIMIT (30 N) -- the same firm
30 N on a 6 mm bowl wall as on a 5 cm box (a target of 0 pinched a 6 mm wall with ~6 N; it sagged and slipped).
Finger armature 1.0 (the real gripper's reflected motor inertia is large too) is what makes that squeeze stable:
MuJoCo's soft contacts penetrate in proportion to the acceleration the squeeze would give the finger, so with
armature 0.1 a 30 N squeeze sank each pad ~2 mm into an object and pushed through a 6 mm wall (the wall then
squirted out, or was held by interpenetration and shot away on release); with 1.0 a pad sinks ~0.45 mm.
Stiffer pad contacts did not help (solref 0.01 / solimp 0.99: chaotic blow-ups at off-centre grasps).
Velocity gain 200 (as finger joint damping) closes at ~0.075 m/s per finger (open-to-closed ~0.5 s, 11 control
steps; robosuite's Panda gripper: ~8).

Finger pads: friction 1.5 (rubber-ish), condim 4 (adds torsional friction about the contact normal, so an object
grasped off its centre of mass does not swing about the grip axis), pyramidal cone with impratio 10; geom
priority 1, so a pad's own contact parameters apply whatever the object's (MuJoCo otherwise mixes both geoms').
Measured (tests/test_robot.py and `test_grasp_thin_wall_and_box`): 0.3 m lift of a 5 cm cube slips < 1 cm;
a 6 mm wall and a 3.5 cm box are held through a 0.2 m lift.
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np

PREFIX = "robot0_"

#: LIBERO's MountedPanda initial arm configuration.
INIT_QPOS = np.array([0.0, -0.161, 0.0, -2.445, 0.0, 2.227, math.pi / 4])
#: Finger joint positions with the gripper open (each finger 0.04 m from the centre).
INIT_FINGER_QPOS = np.array([0.04, 0.04])

#: Panda joint limits (rad).
JOINT_LOWER = np.array([-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973])
JOINT_UPPER = np.array([2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973])
#: Panda joint torque limits (N m).
TORQUE_LIMIT = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])
FINGER_RANGE = (0.0, 0.04)
GRIPPER_FORCE_LIMIT = 30.0

#: Modified-DH rows (a_{i-1}, d_i, alpha_{i-1}) for joints 1..7 and the flange (hand mount).
DH = np.array([
    [0.0, 0.333, 0.0],
    [0.0, 0.0, -math.pi / 2],
    [0.0, 0.316, math.pi / 2],
    [0.0825, 0.0, math.pi / 2],
    [-0.0825, 0.384, -math.pi / 2],
    [0.0, 0.0, math.pi / 2],
    [0.088, 0.0, math.pi / 2],
    [0.0, 0.107, 0.0],
])
HAND_YAW = -math.pi / 4          # hand turned about the flange z axis
FINGER_OFFSET = 0.0584           # finger bodies below the hand origin (along hand z)
GRIP_OFFSET = 0.1034             # EE site (pad centres) along hand z

#: Published identified link masses (kg): link0..link7, hand, each finger.
LINK_MASS = np.array([0.63, 4.97, 0.65, 3.23, 3.59, 1.23, 1.67, 0.74])
HAND_MASS = 0.73
FINGER_MASS = 0.015
ARMATURE = 0.1                   # reflected rotor inertia per arm joint (kg m^2), also steadies the servo
FINGER_ARMATURE = 1.0

#: Arm position servos: force = kp (target - q) - kv qdot, clipped to TORQUE_LIMIT; critically damped at
#: SERVO_OMEGA for the nominal joint inertias (incl. armature). See `Physics` for why the bandwidth is modest.
SERVO_OMEGA = 25.0
NOMINAL_INERTIA = np.array([1.5, 2.0, 0.9, 0.9, 0.13, 0.13, 0.11])
ARM_KP = SERVO_OMEGA ** 2 * NOMINAL_INERTIA
ARM_KV = 2.0 * SERVO_OMEGA * NOMINAL_INERTIA
GRIPPER_KP = 1000.0
GRIPPER_KV = 200.0
#: "closed" aims this far beyond the stroke (servo target ``ctrl * (1 + SQUEEZE / 0.08) - SQUEEZE``), so a closed
#: gripper squeezes with GRIPPER_FORCE_LIMIT whatever the object's width (see the module docstring).
GRIPPER_SQUEEZE = 0.03

ROBOT_CONTYPE = 2
ROBOT_CONAFFINITY = 1
PAD_FRICTION = (1.5, 0.02, 0.0001)
PAD_CONDIM = 4
PAD_SOLREF = (0.02, 1.0)
PAD_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)

ARM_JOINTS = tuple(f"{PREFIX}joint{i}" for i in range(1, 8))
FINGER_JOINTS = (f"{PREFIX}finger_joint1", f"{PREFIX}finger_joint2")
ARM_ACTUATORS = tuple(f"{PREFIX}act{i}" for i in range(1, 8))
GRIPPER_ACTUATOR = f"{PREFIX}act_gripper"
GRIP_SITE = f"{PREFIX}grip_site"
EYE_IN_HAND = f"{PREFIX}eye_in_hand"


@dataclasses.dataclass(frozen=True)
class Physics:
    """Physics options shared by every backend.

    Integrator: Euler, with each servo's velocity gain expressed as joint damping (which Euler integrates
    implicitly, in MuJoCo and in MJX alike). MJX's implicitfast leaves out actuator-velocity derivatives that
    MuJoCo's includes, so position servos with kv integrated differently on the two backends (0.68 rad/s apart
    after one step); with the damping on the joints they agree to 1e-6.

    Chosen: ``timestep 0.005 s x 10 substeps`` per 20 Hz action, Newton, 5 iterations,
    8 line-search iterations, pyramidal cone, impratio 10. Measured on this 2-core machine, one thread, the
    tests' scene (robot + table + 5 cm cube): 120-130k physics steps/s (cube resting or held), i.e. about
    12k control steps/s at 10 substeps vs 4.3k at LIBERO's 0.002 s x 25, with the same grasp quality (0.3 m
    lift: cube rises 0.298 m, cube-to-fingertip offset changes 4.1 mm, 4.9 mm after 5 s more holding, at both
    timesteps) and the same held-pose drift (4e-8 m over 600 zero-action steps).

    Why the servo bandwidth (`SERVO_OMEGA` 25 rad/s) is modest: implicitfast integrates actuator damping
    implicitly *after* the constraint solve, so a held object and the fingers get slightly different velocity
    updates; the mismatch scales with ``2 omega dt``. At omega 80 (servos that reach each step's target within
    the step) a grasped cube slid 3 cm during a 0.3 m lift; at omega 25 it slides about 4 mm. impratio 10 makes
    friction stiffer than the normal (grasp creep under the cube's weight: 3 mm over 5 s instead of 18 mm) for
    about 10% speed. 0.002 x 25 stays available as ``Physics(timestep=0.002, substeps=25)``.
    """

    timestep: float = 0.005
    substeps: int = 10
    iterations: int = 5
    ls_iterations: int = 8
    cone: str = "pyramidal"            # "pyramidal" | "elliptic"
    integrator: str = "euler"          # "euler" | "implicitfast" | "rk4" | "implicit"
    solver: str = "newton"
    impratio: float = 10.0

    @property
    def control_dt(self) -> float:
        return self.timestep * self.substeps


PHYSICS = Physics()

_INTEGRATORS = {"euler": mujoco.mjtIntegrator.mjINT_EULER, "rk4": mujoco.mjtIntegrator.mjINT_RK4,
                "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
                "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST}
_CONES = {"pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL, "elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC}
_SOLVERS = {"newton": mujoco.mjtSolver.mjSOL_NEWTON, "cg": mujoco.mjtSolver.mjSOL_CG,
            "pgs": mujoco.mjtSolver.mjSOL_PGS}


def apply_physics_options(spec: mujoco.MjSpec, physics: Physics = PHYSICS) -> None:
    """Set timestep, integrator, solver, iterations and friction cone on `spec` (in place)."""
    opt = spec.option
    opt.timestep = physics.timestep
    opt.integrator = _INTEGRATORS[physics.integrator]
    opt.cone = _CONES[physics.cone]
    opt.solver = _SOLVERS[physics.solver]
    opt.iterations = physics.iterations
    opt.ls_iterations = physics.ls_iterations
    opt.impratio = physics.impratio


def link_transforms() -> list[tuple[np.ndarray, np.ndarray]]:
    """(pos, quat wxyz) of link1..link7 and the hand, each in its parent's frame, from `DH`."""
    out = []
    for a, d, alpha in DH:
        pos = np.array([a, -math.sin(alpha) * d, math.cos(alpha) * d])
        quat = np.array([math.cos(alpha / 2), math.sin(alpha / 2), 0.0, 0.0])
        out.append((pos, quat))
    # the hand: flange frame then a yaw of HAND_YAW
    pos, _ = out[-1]
    out[-1] = (pos, np.array([math.cos(HAND_YAW / 2), 0.0, 0.0, math.sin(HAND_YAW / 2)]))
    return out


_ARM_RGBA = (0.92, 0.92, 0.95, 1.0)
_DARK_RGBA = (0.15, 0.15, 0.17, 1.0)
_PAD_RGBA = (0.25, 0.25, 0.28, 1.0)

# Visual capsules per link, in the link's own frame: (from xyz, to xyz, radius). Approximate Panda shapes.
_LINK_SHAPES: dict[int, list[tuple[tuple[float, ...], tuple[float, ...], float]]] = {
    0: [((0.0, 0.0, 0.03), (0.0, 0.0, 0.13), 0.07), ((-0.06, 0.0, 0.06), (0.0, 0.0, 0.06), 0.06)],
    1: [((0.0, 0.0, -0.19), (0.0, 0.0, -0.02), 0.06), ((0.0, 0.0, 0.0), (0.0, -0.06, 0.0), 0.06)],
    2: [((0.0, 0.0, -0.06), (0.0, 0.0, 0.06), 0.06), ((0.0, 0.0, 0.0), (0.0, -0.2, 0.0), 0.055)],
    3: [((0.0, 0.0, -0.12), (0.0, 0.0, 0.0), 0.055), ((0.0, 0.0, 0.0), (0.0825, 0.0, 0.0), 0.055)],
    4: [((0.0, 0.0, -0.05), (0.0, 0.0, 0.05), 0.055), ((0.0, 0.0, 0.0), (-0.0825, 0.1, 0.0), 0.055)],
    5: [((0.0, 0.0, -0.27), (0.0, 0.0, -0.03), 0.05), ((0.0, 0.0, -0.03), (0.0, 0.08, -0.03), 0.04)],
    6: [((0.0, 0.0, -0.04), (0.0, 0.0, 0.03), 0.05), ((0.0, 0.0, 0.0), (0.088, 0.0, 0.0), 0.045)],
    7: [((0.0, 0.0, -0.02), (0.0, 0.0, 0.09), 0.045)],
}


def _visual_capsule(body, name, p0, p1, radius, mass, rgba=_ARM_RGBA):
    g = body.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_CAPSULE)
    g.fromto = np.concatenate([p0, p1])
    g.size = [radius, 0.0, 0.0]
    g.contype, g.conaffinity = 0, 0
    g.mass = mass
    g.rgba = rgba
    g.group = 1
    return g


def _collision_box(body, name, pos, half, mass, rgba, friction=None, condim=None, solref=None, solimp=None):
    g = body.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_BOX)
    g.pos = pos
    g.size = half
    g.contype, g.conaffinity = ROBOT_CONTYPE, ROBOT_CONAFFINITY
    g.mass = mass
    g.rgba = rgba
    if friction is not None:
        g.friction = friction
    if condim is not None:
        g.condim = condim
    if solref is not None:
        g.solref = list(solref)
    if solimp is not None:
        g.solimp = list(solimp)
        g.priority = 1  # pads: their own contact parameters, not mixed with the object's
    return g


def add_robot(spec: mujoco.MjSpec, base_pos, base_quat=(1.0, 0.0, 0.0, 0.0)) -> None:
    """Add the arm, gripper, actuators, tendon, equality and eye-in-hand camera to `spec` (in place).

    `base_pos`/`base_quat` place `robot0_link0` (the arm base, where joint 1's axis meets the mount) in the world.
    A non-colliding pedestal is drawn below the base down to z = 0 of the base frame minus 0.9 m.
    """
    world = spec.worldbody
    base = world.add_body(name=f"{PREFIX}link0", pos=list(map(float, base_pos)),
                          quat=list(map(float, base_quat)))
    # mount pedestal (visual, no mass so it does not matter that link0 is fixed)
    ped = base.add_geom(name=f"{PREFIX}mount", type=mujoco.mjtGeom.mjGEOM_BOX)
    ped.pos, ped.size = [-0.04, 0.0, -0.45], [0.12, 0.12, 0.45]
    ped.contype, ped.conaffinity, ped.rgba, ped.group = 0, 0, _DARK_RGBA, 1
    ped.mass = 0.0
    ped.density = 0.0
    for k, (p0, p1, r) in enumerate(_LINK_SHAPES[0]):
        _visual_capsule(base, f"{PREFIX}link0_vis{k}", p0, p1, r, LINK_MASS[0] / len(_LINK_SHAPES[0]))

    transforms = link_transforms()
    parent = base
    for i in range(1, 8):
        pos, quat = transforms[i - 1]
        body = parent.add_body(name=f"{PREFIX}link{i}", pos=pos.tolist(), quat=quat.tolist())
        body.gravcomp = 1.0
        j = body.add_joint(name=ARM_JOINTS[i - 1], type=mujoco.mjtJoint.mjJNT_HINGE, axis=[0, 0, 1])
        # hinge ranges are read in the spec's angle unit (MJCF's default is degrees)
        unit = 180.0 / math.pi if spec.compiler.degree else 1.0
        j.range = [float(JOINT_LOWER[i - 1]) * unit, float(JOINT_UPPER[i - 1]) * unit]
        j.limited = mujoco.mjtLimited.mjLIMITED_TRUE
        j.armature = ARMATURE
        j.damping = [float(ARM_KV[i - 1]), 0.0, 0.0]  # the servo's velocity term, as joint damping: see Physics
        shapes = _LINK_SHAPES[i]
        for k, (p0, p1, r) in enumerate(shapes):
            _visual_capsule(body, f"{PREFIX}link{i}_vis{k}", p0, p1, r, LINK_MASS[i] / len(shapes))
        parent = body

    pos, quat = transforms[7]
    hand = parent.add_body(name=f"{PREFIX}hand", pos=pos.tolist(), quat=quat.tolist())
    hand.gravcomp = 1.0
    _collision_box(hand, f"{PREFIX}hand_collision", [0.0, 0.0, 0.03], [0.025, 0.095, 0.028], HAND_MASS,
                   _ARM_RGBA)
    site = hand.add_site(name=GRIP_SITE, pos=[0.0, 0.0, GRIP_OFFSET])
    site.size = [0.005, 0.005, 0.005]
    site.rgba = [1.0, 0.0, 0.0, 0.5]
    site.group = 2
    # eye-in-hand camera: on the hand's +x side, looking along +z of the hand (MuJoCo cameras look along -z).
    cam = hand.add_camera(name=EYE_IN_HAND, pos=[0.06, 0.0, 0.0], quat=[0.0, 1.0, 0.0, 0.0])
    cam.fovy = 75.0

    for side, name, jname, sign in (("left", f"{PREFIX}finger_left", FINGER_JOINTS[0], 1.0),
                                    ("right", f"{PREFIX}finger_right", FINGER_JOINTS[1], -1.0)):
        finger = hand.add_body(name=name, pos=[0.0, 0.0, FINGER_OFFSET])
        finger.gravcomp = 1.0
        j = finger.add_joint(name=jname, type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[0.0, sign, 0.0])
        j.range = list(FINGER_RANGE)
        j.limited = mujoco.mjtLimited.mjLIMITED_TRUE
        j.armature = FINGER_ARMATURE
        j.damping = [2.0 * GRIPPER_KV, 0.0, 0.0]  # the gripper servo's kv on q1 + q2, per finger (fingers move together)
        # knuckle (joins the hand) and the pad (inner face at y = 0 of the finger frame: fingers meet at q = 0)
        _collision_box(finger, f"{PREFIX}finger_{side}_knuckle", [0.0, sign * 0.012, 0.012],
                       [0.01, 0.008, 0.012], FINGER_MASS * 0.4, _ARM_RGBA)
        _collision_box(finger, f"{PREFIX}finger_{side}_pad", [0.0, sign * 0.006, GRIP_OFFSET - FINGER_OFFSET],
                       [0.011, 0.006, 0.021], FINGER_MASS * 0.6, _PAD_RGBA,
                       friction=list(PAD_FRICTION), condim=PAD_CONDIM, solref=PAD_SOLREF, solimp=PAD_SOLIMP)

    # arm actuators: position servos on each joint, torque-limited
    for i in range(7):
        act = spec.add_actuator(name=ARM_ACTUATORS[i], target=ARM_JOINTS[i],
                                trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=float(ARM_KP[i]), kv=0.0)
        act.ctrlrange = [float(JOINT_LOWER[i]), float(JOINT_UPPER[i])]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        # No force limit: the servo's damping lives on the joint (see Physics), so clipping kp * error alone
        # would saturate during ordinary motions (the shoulder then lifts the hand ~8 cm on a 0.25 m reach).

    # gripper: tendon = total opening q1 + q2, one position servo on it, fingers equality-coupled
    ten = spec.add_tendon(name=f"{PREFIX}gripper_tendon")
    ten.wrap_joint(FINGER_JOINTS[0], 1.0)
    ten.wrap_joint(FINGER_JOINTS[1], 1.0)
    eq = spec.add_equality(name=f"{PREFIX}finger_coupling", type=mujoco.mjtEq.mjEQ_JOINT,
                           objtype=mujoco.mjtObj.mjOBJ_JOINT, name1=FINGER_JOINTS[0], name2=FINGER_JOINTS[1])
    eq.data[:5] = [0.0, 1.0, 0.0, 0.0, 0.0]
    eq.solref = [0.005, 1.0]
    act = spec.add_actuator(name=GRIPPER_ACTUATOR, target=ten.name, trntype=mujoco.mjtTrn.mjTRN_TENDON)
    act.set_to_position(kp=GRIPPER_KP, kv=0.0)
    # target = ctrl * (1 + SQUEEZE / open) - SQUEEZE: force = gain * ctrl + bias0 - kp * opening
    act.gainprm[0] = GRIPPER_KP * (1.0 + GRIPPER_SQUEEZE / (2 * FINGER_RANGE[1]))
    act.biasprm[0] = -GRIPPER_KP * GRIPPER_SQUEEZE
    act.ctrlrange = [0.0, 2 * FINGER_RANGE[1]]
    act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
    act.forcerange = [-GRIPPER_FORCE_LIMIT, GRIPPER_FORCE_LIMIT]
    act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE

    # the arm bodies never touch each other (contype/conaffinity bits); keep the finger pair explicit too
    spec.add_exclude(bodyname1=f"{PREFIX}finger_left", bodyname2=f"{PREFIX}finger_right")


def robot_qpos_adr(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
    """qpos addresses of the 7 arm joints and of the 2 finger joints in a compiled model."""
    arm = np.array([model.jnt_qposadr[model.joint(n).id] for n in ARM_JOINTS])
    fingers = np.array([model.jnt_qposadr[model.joint(n).id] for n in FINGER_JOINTS])
    return arm, fingers


def robot_ctrl_adr(model: mujoco.MjModel) -> np.ndarray:
    """Actuator indices for the 8 controls `control.action_to_ctrl` returns (7 arm + gripper)."""
    return np.array([model.actuator(n).id for n in (*ARM_ACTUATORS, GRIPPER_ACTUATOR)])


def set_init_qpos(model: mujoco.MjModel, data: mujoco.MjData, q_arm=INIT_QPOS,
                  q_fingers=INIT_FINGER_QPOS) -> None:
    """Put the arm at `q_arm`, fingers at `q_fingers`, controls holding them, and run forward kinematics."""
    arm, fingers = robot_qpos_adr(model)
    data.qpos[arm] = q_arm
    data.qpos[fingers] = q_fingers
    ctrl = robot_ctrl_adr(model)
    data.ctrl[ctrl[:7]] = q_arm
    data.ctrl[ctrl[7]] = float(np.sum(q_fingers))
    mujoco.mj_forward(model, data)
