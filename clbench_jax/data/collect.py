"""Collect scripted-oracle demonstrations into LIBERO-layout HDF5 files (one `<task name>_demo.hdf5` per task).

Per task, `batch` worlds on the native backend each run a stream of oracle attempts (a world whose attempt ends
starts the next one at once) until the first `n` attempts in start order have succeeded, `max_attempts` have run, or
`give_up_after` have ended without one success (a task the oracle cannot do):
1. initial states come from the generator (`generators.init_bank`: confounded or deconfounded), in banks of 16;
2. the per-step function is `rollout.make_advance` with the oracle (the same code `rollout.rollout` runs); the host
   records, per world, the full MuJoCo state and the sensor readings before each action, and the action
   (everything is recorded in the first pass; nothing is re-simulated);
3. each successful attempt becomes a demo: the sensor readings (what the oracle saw) give LIBERO's proprio keys, the
   EE pose (axis-angle, as LIBERO) and object tokens; images are rendered from the recorded states, for successes
   only (exactly what `rollout(obs_mode="rgb")` would have shown).
Failures are counted, never kept. Nothing is lost when a collection is interrupted: as soon as every attempt that
started before a success has ended (so whether it is among the first n is known), the success is written as its own
file, and the outcomes of all such settled attempts are recorded, atomically, in `<task>_demo.partial/` beside the
task's file. A rerun resumes from the first unsettled attempt (attempts depend only on their number, so the result
is the uninterrupted one); when the task is done its file is written atomically and the partial folder removed.
Finished task files are skipped (`is_finished`).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from clbench_jax.data import hdf5
from clbench_jax.data.generators import GeneratorError, check_generator, init_bank, target_object
from clbench_jax.errors import DataFileError
from clbench_jax.sim import control, env, rollout
from clbench_jax.sim.scene import Scene, export_xml
from clbench_jax.tasks.spec import TaskSpec

CONTROL_FREQ = 20
BANK_SIZE = 16  # initial states are drawn in banks of this many (fixed: the data must not depend on the batch size)


@dataclass(frozen=True)
class CollectConfig:
    n: int = 50  # successful demos kept per task
    generator: str = "confounded"
    seed: int = 0
    horizon: int = 500  # policy steps before an attempt counts as failed
    batch: int = 32  # worlds stepped together (fixed, so one compile serves the whole collection)
    max_attempts: int | None = None  # per task; None: 10 * n
    give_up_after: int = 96  # attempts without a single success after which a task is abandoned (0: never)
    images: bool = True
    image_size: int = 128
    noise: bool = True  # oracle waypoint / speed noise (demos differ)

    def __post_init__(self):
        from clbench_jax.configs import at_least, check_ranges

        check_ranges(self, [at_least("n", 1), at_least("horizon", 1), at_least("batch", 1), at_least("image_size", 8),
                            at_least("max_attempts", 1, optional=True), at_least("give_up_after", 0),
                            at_least("seed", 0)])
        check_generator(self.generator)

    @property
    def attempt_cap(self) -> int:
        return self.max_attempts if self.max_attempts is not None else 10 * self.n


def task_file(out_dir: str | os.PathLike, task: TaskSpec) -> Path:
    """LIBERO's naming: `<out>/<suite>/<task name>_demo.hdf5`."""
    return Path(out_dir) / task.suite / f"{task.name}_demo.hdf5"


# ----------------------------------------------------------------------------------------------- per-step obs

@jax.jit
def _obs_rows(c: env.SceneConsts, sens, robot_q, ta: env.TaskArrays, key):
    """Sensor readings (T, ns) and exact robot joints (T, 9) -> LIBERO obs keys, EE quaternion (x, y, z, w as
    robosuite) and object tokens (one token order per demo: the same key every step)."""
    prop = jax.vmap(lambda q: env.proprio(c, q))(robot_q)
    wxyz = jax.vmap(lambda w: control.mat_to_quat(control.axisangle_to_mat(w)))(prop["ee_ori"])
    tok, mask = jax.vmap(lambda s: env.object_tokens(c, s, ta, key))(sens)
    return prop, jnp.roll(wxyz, -1, axis=1), tok, mask


def make_demo(scene: Scene, task: TaskSpec, states: np.ndarray, sens: np.ndarray, actions: np.ndarray,
              mocap: np.ndarray, key: np.ndarray, renderer=None, pad_to: int | None = None) -> dict:
    """One successful episode -> a demo dict for `hdf5.write_demos`: the full states (T, nstate) and sensor
    readings (T, ns) before each of its T actions (as the rollout traced them), the actions, the mocap poses."""
    T = len(actions)
    rows = pad_to or T  # pad to a fixed length so the jitted function compiles once per scene

    def pad(x):
        return np.concatenate([x, np.repeat(x[-1:], rows - T, 0)]) if rows > T else x

    rm = scene.robot
    robot_q = states[:, 1 + np.concatenate([rm.arm_qpos, rm.finger_qpos])]  # qpos follows time in the state
    prop, quat, tok, mask = jax.tree.map(lambda x: np.asarray(x)[:T], _obs_rows(
        rollout._consts(scene), jnp.asarray(pad(sens)), jnp.asarray(pad(robot_q)), env.task_arrays(scene, task),
        jnp.asarray(key)))
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731  (LIBERO stores low-dim obs as float64)
    obs = {k: f64(prop[k]) for k in ("joint_states", "gripper_states", "ee_states", "ee_pos", "ee_ori")}
    obs["object_tokens"], obs["object_token_mask"] = np.asarray(tok, np.float32), np.asarray(mask)
    if renderer is not None:
        img = renderer.render(states, np.broadcast_to(mocap, (T,) + mocap.shape))
        obs["agentview_rgb"], obs["eye_in_hand_rgb"] = img[:, 0], img[:, 1]
    dones = np.zeros(T, np.uint8)  # LIBERO: sparse, uint8, 1 at the last step (rewards too)
    dones[-1] = 1
    return {"obs": obs, "actions": f64(actions), "states": f64(states),
            "robot_states": np.concatenate([f64(prop["gripper_states"]), f64(prop["ee_pos"]), f64(quat)], 1),
            "rewards": dones.copy(), "dones": dones,
            "attrs": {"init_state": f64(states[0]), "mocap": f64(mocap)}}


# ----------------------------------------------------------------------------------------------- collection

_SCENES: dict[str, Scene] = {}


def scene_of(task: TaskSpec) -> Scene:
    """The shared model of the task's LIBERO scene, built once per process (the compiled oracle is per scene)."""
    from clbench_jax.sim.scene import build_scene
    from clbench_jax.tasks.suites import scene_tasks

    if task.scene not in _SCENES:
        _SCENES[task.scene] = build_scene(scene_tasks(task.scene))
    return _SCENES[task.scene]


@dataclass
class Episode:
    """One attempt: where it starts, its policy key, and (while it runs) its recorded rows."""

    state: np.ndarray
    mocap: np.ndarray
    q0: np.ndarray  # the controller's reset joints
    key: np.ndarray
    init_ok: bool  # recorded, not required: LIBERO's own initial states often miss their :init regions
    init_atoms: tuple
    chunk: int
    index: int
    number: int  # start order among the task's attempts (chunk * BANK_SIZE + index)
    states: list = field(default_factory=list)
    sens: list = field(default_factory=list)
    actions: list = field(default_factory=list)


def episode_source(scene: Scene, task: TaskSpec, cfg: CollectConfig, start: int = 0) -> Iterator[Episode]:
    """The task's attempts in a fixed order, from attempt number `start`: the generator's initial states in order
    (LIBERO's 50 official states first under `confounded`), drawn in banks of BANK_SIZE, and one policy key each;
    the same for any batch and any resume point."""
    root = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), zlib.crc32(task.name.encode()) & 0x7FFFFFFF)
    for chunk in itertools.count(start // BANK_SIZE):
        bank = init_bank(scene, task, BANK_SIZE, cfg.seed, cfg.generator, start=chunk * BANK_SIZE)
        keys = np.asarray(jax.random.split(jax.random.fold_in(root, chunk), BANK_SIZE))
        for j in range(start % BANK_SIZE if chunk == start // BANK_SIZE else 0, BANK_SIZE):
            yield Episode(state=bank.state[j], mocap=bank.mocap[j], q0=bank.q0[j], key=keys[j],
                          init_ok=bool(bank.init_ok[j]), init_atoms=bank.inits[j] if bank.inits else task.init,
                          chunk=chunk, index=j, number=chunk * BANK_SIZE + j)


# Settings a partial collection must share with the one resuming it (the others change speed or stopping only).
PARTIAL_KEYS = ("n", "generator", "seed", "horizon", "images", "image_size", "noise")


class PartialCollection:
    """A task's collection in progress, beside its file: `<task>_demo.partial/` holds progress.json (the settings
    and the outcome of every settled attempt, attempts 0..settled-1) and one `demo_<attempt>.hdf5` per kept success.
    Every write is atomic (temporary file, then rename)."""

    def __init__(self, path: str | os.PathLike, task: TaskSpec, cfg: CollectConfig):
        self.task, self.cfg = task, cfg
        self.folder = Path(path).with_suffix(".partial")
        self.outcomes: list[list[bool]] = []  # per settled attempt: [success, physics failure, invalid init]
        self.kept: list[int] = []  # attempt numbers of the demos written so far
        doc = self._read()
        if doc is not None:
            self._resume(doc)

    @property
    def settled(self) -> int:
        return len(self.outcomes)

    def _read(self) -> dict | None:
        prog = self.folder / "progress.json"
        if not prog.exists():
            return None
        try:
            doc = json.loads(prog.read_text())
            mine = {k: asdict(self.cfg)[k] for k in PARTIAL_KEYS}
        except (OSError, ValueError):
            return None  # unreadable progress (cannot happen with atomic writes): start over
        if doc.get("settings") != mine:
            diff = {k: (doc.get("settings", {}).get(k), v) for k, v in mine.items()
                    if doc.get("settings", {}).get(k) != v}
            raise DataFileError(f"a partial collection with other settings {diff} (partial, wanted) is in the way; "
                                "use another --out or delete it", file=str(prog), task=self.task.name,
                                field="settings")
        return doc

    def _resume(self, doc: dict) -> None:
        """Take the recorded outcomes up to the first kept success whose demo file is missing or unreadable (that
        attempt and later ones run again)."""
        for number, o in enumerate(doc.get("outcomes", [])):
            if o[0] and len(self.kept) < self.cfg.n:
                try:
                    hdf5.read_meta(self.demo_path(number))
                except DataFileError:
                    break
                self.kept.append(number)
            self.outcomes.append([bool(x) for x in o])

    def demo_path(self, number: int) -> Path:
        return self.folder / f"demo_{number:06d}.hdf5"

    def settle(self, outcome: tuple[bool, bool, bool], demo: dict | None) -> None:
        """Record the next attempt's outcome (and write its demo first, if it is kept)."""
        number = self.settled
        if demo is not None:
            hdf5.write_demos(self.demo_path(number), [demo], env_name=self.task.problem, problem_info={},
                             bddl_file_name=self.task.file, bddl_file_content="", env_args={})
            self.kept.append(number)
        self.outcomes.append([bool(x) for x in outcome])

    def save(self) -> None:
        from clbench_jax.jsonio import write_json

        write_json(self.folder / "progress.json", {"task": self.task.name, "settings": {
            k: asdict(self.cfg)[k] for k in PARTIAL_KEYS}, "outcomes": self.outcomes})

    def demos(self) -> list[dict]:
        return [hdf5.read_demos(self.demo_path(k))[0] for k in self.kept]

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


_STREAM_FNS: dict = {}


def _stream_fns(scene: Scene, noise: bool):
    """Jitted (advance, refill) for streaming the oracle over `scene` (compiled once per scene and batch size).


    advance: `rollout.make_advance` with the oracle, whose state also carries the action it chose (so the host can
    record it), and no horizon of its own (each world's episode has its own start; the host enforces the horizon).
    refill: reset the records, policy state, key and controller of the worlds in `mask` to a new episode."""
    from clbench_jax.sim import robot

    key = (id(scene), noise)
    if key not in _STREAM_FNS:
        from clbench_jax.data.oracle import _oracle_for

        oracle, p0_fn = _oracle_for(scene, noise)  # the oracle evaluation's own (one compile cache per policy)

        def policy(obs, ps, keys):
            act, ps = oracle(obs, ps[0], keys)
            return act, (ps, act)

        nsub = robot.substeps(scene.model)
        advance = jax.jit(rollout.make_advance(rollout._consts(scene), policy, 0, 2 ** 30, True, nsub))
        chain = scene.robot.chain

        @jax.jit
        def refill(carry, mask, keys, q0):
            n, k = carry.rec.success.shape
            fresh = (p0_fn(n), jnp.zeros((n, 7)))

            def pick(old, new):
                return jnp.where(mask.reshape(mask.shape + (1,) * (old.ndim - 1)), new, old)

            osc = jax.vmap(lambda q: control.reset_state(chain, q))(q0)
            return carry.replace(rec=jax.tree.map(pick, carry.rec, rollout._init_records(n, k)),
                                 pstate=jax.tree.map(pick, carry.pstate, fresh),
                                 key=pick(carry.key, keys), osc=jax.tree.map(pick, carry.osc, osc))

        _STREAM_FNS[key] = (advance, refill, lambda n: (p0_fn(n), jnp.zeros((n, 7))))
    return _STREAM_FNS[key]


def collect_task(scene: Scene, task: TaskSpec, cfg: CollectConfig, path: str | os.PathLike | None = None,
                 progress: bool = True) -> tuple[list[dict], dict]:
    """Collect up to `cfg.n` successful demos of `task` -> (demos, stats); with `path`, also write the file, and
    keep (then resume from) the partial collection beside it (`PartialCollection`).

    `cfg.batch` worlds step together on the native backend, and each runs its own stream of attempts: when an
    attempt ends (success, failure, horizon), its world starts the next attempt at once, so no world idles while
    the slowest episode of a batch finishes. Each world records the full state and the sensor readings before every
    action, and the action. The demos are the first n successes *in start order* (attempts that started earlier
    are waited for), so the result -- and the attempt and failure counts -- are those of running the attempts one
    after another until n succeed: the batch size changes the speed, not which attempts run. (XLA rounds the
    vmapped oracle differently per batch size, ~1e-7 in an action; contact can grow that along an episode, so across
    batch sizes the demos agree to rounding at first, and their outcomes as statistics, not bit for bit.)"""
    from tqdm.auto import tqdm

    from clbench_jax.sim import robot
    from clbench_jax.sim.native import FULL, NativeWorlds

    check_generator(cfg.generator)
    rm = scene.robot
    rq = np.concatenate([rm.arm_qpos, rm.finger_qpos])
    N = cfg.batch
    advance, refill, pstate0 = _stream_fns(scene, cfg.noise)
    stack = rollout.task_stack(scene)
    ids = np.full(N, scene.task_index(task.name))
    tasks = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[ids]), stack)
    goals = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[ids][:, None]), stack.goal)
    pf = scene.sensors.pair_found
    partial = PartialCollection(path, task, cfg) if path is not None else None
    done_before: list[list[bool]] = partial.outcomes if partial is not None else []
    kept: list[dict] = []  # demos of settled kept successes (without `path`; with it they are on disk)
    source = episode_source(scene, task, cfg, start=len(done_before))
    # attempt number -> (success, physics failure, invalid init); settled ones first
    outcome: dict[int, tuple[bool, bool, bool]] = {k: tuple(o) for k, o in enumerate(done_before)}
    running_wins: dict[int, Episode] = {}  # ended successes not yet settled
    settled = len(done_before)
    n_kept = len(partial.kept) if partial is not None else 0
    started, gave_up = settled, False
    renderer = None
    if cfg.images:
        from clbench_jax.sim.render import BatchRenderer
        renderer = BatchRenderer(scene.model, cfg.image_size)

    def wins() -> int:
        return sum(o[0] for o in outcome.values())

    def cutoff() -> int | None:  # number of the n-th success in start order, once there are n
        w = sorted(k for k, o in outcome.items() if o[0])
        return w[cfg.n - 1] if len(w) >= cfg.n else None

    def next_episode():
        nonlocal started
        if started >= cfg.attempt_cap or cutoff() is not None or gave_up:
            return None
        started += 1
        return next(source)

    def settle_ended():
        """Settle attempts in start order while each has ended: a success among the first n becomes a demo."""
        nonlocal settled, n_kept
        while settled in outcome:
            e = running_wins.pop(settled, None)
            demo = None
            if e is not None and n_kept < cfg.n:
                demo = _assemble(scene, task, e, cfg, renderer)
                n_kept += 1
            if partial is not None:  # saved at every attempt: with images one demo can take a minute to render
                partial.settle(outcome[settled], demo)
                partial.save()
            elif demo is not None:
                kept.append(demo)
            settled += 1

    gave_up = 0 < cfg.give_up_after <= len(outcome) and wins() == 0
    t0 = time.perf_counter()
    bar = tqdm(total=cfg.n, initial=min(wins(), cfg.n), desc=task.name[:48], unit="demo", disable=not progress)
    worlds = None
    try:
        eps = [next_episode() for _ in range(N)]  # first: a generator that refuses the task raises here
        live = np.array([e is not None for e in eps])
        if live.any():
            nsub = robot.substeps(scene.model)
            worlds = NativeWorlds(scene.model, N, nsub)
            ctrl = np.zeros((N, nsub, scene.model.nu))
            scratch = mujoco.MjData(scene.model)
            first = next(e for e in eps if e is not None)
            sens = worlds.set_state(np.stack([(e or first).state for e in eps]),
                                    np.stack([(e or first).mocap for e in eps]))
            carry = rollout.Carry(rec=rollout._init_records(N, 1), pstate=pstate0(N),
                                  key=jnp.asarray(np.stack([(e or first).key for e in eps])), ee0=jnp.zeros((N, 3)),
                                  finger0=jnp.zeros((N, 2)), near0=jnp.zeros((N, len(scene.entities)), bool),
                                  osc=rollout.initial_osc(scene, np.stack([(e or first).q0 for e in eps]), N),
                                  trace=None, t=jnp.asarray(0, jnp.int32))
            carry = carry.replace(rec=carry.rec.replace(done=jnp.asarray(~live)))
        while live.any() and not gave_up:
            cut = cutoff()
            if cut is not None and all(eps[i].number > cut for i in np.flatnonzero(live)):
                break  # every attempt that could still change the first n successes has ended
            bad = (worlds.qvel_max() > rollout.QVEL_LIMIT) | worlds.diverged
            js = jnp.asarray(sens)
            carry, g_ctrl, udata = advance(carry, tasks, goals, js, js[:, pf], jnp.asarray(worlds.qpos()[:, rq]),
                                           jnp.asarray(bad))
            done, succ, fail = (np.asarray(x) for x in (carry.rec.done, carry.rec.success[:, 0],
                                                          carry.rec.fail_reason))
            act = np.asarray(carry.pstate[1])
            ended = []
            for i in np.flatnonzero(live):
                e = eps[i]
                if not (done[i] or len(e.actions) >= cfg.horizon):
                    e.states.append(worlds.state[i].copy()), e.sens.append(sens[i].copy()), e.actions.append(act[i])
                    continue
                ended.append(i)
                ok = bool(done[i] and succ[i] and fail[i] == 0 and e.actions)
                outcome[e.number] = (ok, bool(fail[i] != 0), not e.init_ok)
                if ok:
                    running_wins[e.number] = e
                bar.update(min(wins(), cfg.n) - bar.n)
                bar.set_postfix(finished=len(outcome), success=f"{wins() / len(outcome):.0%}")
                gave_up = 0 < cfg.give_up_after <= len(outcome) and wins() == 0
            ctrl[:, :, rm.gripper_act] = np.asarray(g_ctrl)
            sens = worlds.step(ctrl, np.asarray(udata, np.float64), live).copy()
            if not ended:
                continue
            settle_ended()
            # Start the next attempt in every world whose attempt ended (its first reading as `set_state` gives it).
            mask, keys, q0 = np.zeros(N, bool), np.asarray(carry.key).copy(), np.zeros((N, 7))
            for i in ended:
                eps[i] = next_episode()
                if eps[i] is None:
                    live[i] = False
                    continue
                mask[i] = True
                worlds.set_world(i, eps[i].state, eps[i].mocap)
                mujoco.mj_setState(scene.model, scratch, eps[i].state, FULL)
                scratch.mocap_pos[:], scratch.mocap_quat[:] = eps[i].mocap[:, :3], eps[i].mocap[:, 3:]
                mujoco.mj_forward(scene.model, scratch)
                sens[i] = scratch.sensordata
                keys[i], q0[i] = eps[i].key, eps[i].q0
            if mask.any():
                carry = refill(carry, jnp.asarray(mask), jnp.asarray(keys), jnp.asarray(q0, jnp.float32))
            carry = carry.replace(rec=carry.rec.replace(done=carry.rec.done | jnp.asarray(~live)))
        settle_ended()
    finally:
        bar.close()
        if worlds is not None:
            worlds.close()
        if renderer is not None:
            renderer.close()
    # Count as if run one after another: every attempt up to the n-th success (all of them have ended), or every
    # attempt that ended when the cap was reached or the task abandoned. Later ones are `surplus`.
    cut = cutoff()
    counted = [o for k, o in outcome.items() if cut is None or k <= cut]
    stats = {"attempts": len(counted), "successes": sum(o[0] for o in counted),
             "failures": sum(not o[0] for o in counted), "physics_failures": sum(o[1] for o in counted),
             "invalid_init": sum(o[2] for o in counted), "gave_up": gave_up, "surplus": started - len(counted)}
    if partial is not None:
        kept = partial.demos()
    stats["kept"] = len(kept)
    stats["seconds"] = round(time.perf_counter() - t0, 2)
    if path is not None:
        write_task_file(path, scene, task, kept, cfg, stats)
        partial.remove()
    return kept, stats


def _assemble(scene: Scene, task: TaskSpec, e: Episode, cfg: CollectConfig, renderer) -> dict:
    """A recorded successful attempt -> its demo dict (images rendered if `renderer`)."""
    demo = make_demo(scene, task, np.stack(e.states), np.stack(e.sens), np.stack(e.actions), e.mocap, e.key,
                     renderer, pad_to=cfg.horizon + 1)
    demo["attrs"].update(attempt=e.number, init_index=e.number, init_seed=cfg.seed,
                         controller_q0=np.asarray(e.q0, np.float64), policy_key=np.asarray(e.key),
                         init_atoms=[str(a) for a in e.init_atoms])
    return demo


def write_task_file(path, scene: Scene, task: TaskSpec, demos: list[dict], cfg: CollectConfig,
                    stats: dict) -> None:
    xml = export_xml(scene, task)
    for d in demos:
        d["attrs"]["model_file"] = xml
    content = Path(task.file).read_text()
    domain = re.search(r"\(:domain\s+([^\s)]+)", content)
    problem_info = {"problem_name": task.problem.lower(), "domain_name": domain.group(1) if domain else "",
                    "language_instruction": task.language}
    env_args = {"type": 1, "env_name": task.problem, "problem_name": task.problem.lower(), "bddl_file": task.file,
                "env_kwargs": {"simulator": "clbench_jax (MuJoCo native)", "control_freq": CONTROL_FREQ,
                               "camera_names": ["agentview", "robot0_eye_in_hand"] if cfg.images else [],
                               "camera_heights": cfg.image_size, "camera_widths": cfg.image_size,
                               "has_offscreen_renderer": cfg.images, "use_camera_obs": cfg.images}}
    extras = {"generator": cfg.generator, "seed": cfg.seed, "config": asdict(cfg), "n_requested": cfg.n,
              "max_attempts": cfg.attempt_cap, "complete": len(demos) >= cfg.n, "suite": task.suite,
              "task": task.name, "scene": task.scene, "instruction": task.instruction,
              "target_object": target_object(scene, task) or "", "state_layout": "mjSTATE_FULLPHYSICS",
              "robot_states_layout": "gripper_states(2), ee_pos(3), ee_quat xyzw(4)", **stats}
    hdf5.write_demos(path, demos, env_name=task.problem, problem_info=problem_info, bddl_file_name=task.file,
                     bddl_file_content=content, env_args=env_args, extras_attrs=extras, image_convention="opencv")


def is_finished(path: str | os.PathLike, cfg: CollectConfig) -> bool:
    """Does `path` hold this task's finished collection under `cfg` (enough demos, its attempt cap spent, or
    abandoned after `give_up_after` ended attempts without a success)?
    A file from other settings raises DataFileError (use another --out, or delete it); an unreadable one is redone."""
    path = Path(path)
    if not path.exists():
        return False
    try:
        meta = hdf5.read_meta(path)
    except DataFileError:
        return False
    ex = meta["extras_attrs"]
    mine = {"generator": cfg.generator, "seed": cfg.seed, "images": cfg.images, "horizon": cfg.horizon}
    theirs = json.loads(ex["config"]) if isinstance(ex.get("config"), str) else ex.get("config", {})
    diff = {k: (theirs.get(k), v) for k, v in mine.items() if theirs.get(k) != v}
    if diff:
        raise DataFileError(f"existing file was collected with other settings {diff} (file, wanted); use another "
                            "--out or delete it", file=str(path), field="data.attrs[clbench_config]")
    return (int(meta["num_demos"]) >= cfg.n or int(ex.get("attempts", 0)) >= cfg.attempt_cap
            or bool(ex.get("gave_up", False)))


def collect_tasks(tasks: list[TaskSpec], out_dir: str | os.PathLike, cfg: CollectConfig,
                  progress: bool = True, log=print) -> list[dict]:
    """Collect every task into `out_dir/<suite>/`, skipping finished files and tasks the generator refuses
    -> one summary dict per task."""
    out = []
    for task in tasks:
        path = task_file(out_dir, task)
        with _task_lock(path, log):
            out.append(_collect_one(task, path, cfg, progress, log))
    return out


@contextmanager
def _task_lock(path: Path, log):
    """Hold `<task>_demo.lock` beside the task's file: runs sharing a demos folder (two `clbench run`s of one
    config, say) collect each task once and never write into each other's partial folder; the later one waits,
    then finds the task finished. The lock file stays (removing it would let a waiter lock a deleted inode)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"{path.name}: another process is collecting it; waiting")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _collect_one(task: TaskSpec, path: Path, cfg: CollectConfig, progress: bool, log) -> dict:
    """One task of `collect_tasks`, under its lock -> its summary dict."""
    if is_finished(path, cfg):
        meta = hdf5.read_meta(path)
        log(f"{task.name}: done already ({meta['num_demos']} demos in {path})")
        return {"task": task.name, "path": str(path), "skipped": True, "kept": int(meta["num_demos"]),
                **{k: meta["extras_attrs"].get(k) for k in ("attempts", "successes", "failures")}}
    try:
        _, stats = collect_task(scene_of(task), task, cfg, path, progress)
    except GeneratorError as e:  # e.g. deconfounded on a task named by position: skip it, go on
        log(f"{task.name}: skipped: {e}")
        return {"task": task.name, "path": None, "skipped": True, "refused": str(e), "kept": 0}
    log(f"{task.name}: {stats['kept']}/{cfg.n} demos kept; {stats['successes']} successes and "
        f"{stats['failures']} failures in {stats['attempts']} attempts "
        f"({stats['successes'] / max(stats['attempts'], 1):.0%}); {stats['seconds']:.0f} s -> {path}"
        + (" [gave up: no success]" if stats["gave_up"] else ""))
    return {"task": task.name, "path": str(path), "skipped": False, **stats}
