"""Instruction variants: schema, deterministic validation, the versioned JSON file, and the coverage report.

Four conditions of seed 000: the original instruction; paraphrases (every slot kept, original goal); one-slot
minimal contrasts (a modified goal, written as a goal table over the scene's entities); incompatible collisions (one
slot changed to an absent entity or an unsupported predicate: no goal). Two faces of seed 004 (language/faces.py,
proposed for every task whatever the generator): swaps (the object renamed to another object of the scene, a
modified goal) and nonsense (a string that names nothing; original goal). Generators (offline.py, llm.py) propose
`Candidate`s; everything here is deterministic and decides what is kept:

- paraphrase: not a normalized duplicate of the original or of a kept paraphrase; offline ones name exactly what
  the original names (`frames.mentions`: the same entities and parts, each unambiguously); tagged with its kinds
  (the generator's, else read off the text by `kinds.tag_kinds`).
- contrast / swap: its entities exist in the task's inventory, its predicates are supported (and by the entity: a
  stove has no Open), it differs from the original goal, it compiles to a goal table of the scene, and it does not
  already hold at reset (checked on `n_reset` settled initial states). One that a nudge of the reset state meets
  (an articulated joint moved by NUDGE: `Close` needs q > 0 where drawers rest at q = 0) is kept but flagged
  `trivial` (reported apart from GSA).
- collision: statically proven incompatible (absent entity / unsupported predicate) -> verified; otherwise kept as
  an unverified probe, outside the validated aggregate.
- nonsense: none of its words is part of an object or place name the benchmark knows (lexicon, synonyms, hypernyms,
  the task's categories).
A task-slot pair with no kept contrast is listed as unavailable, with the reasons.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np

from clbench_jax.errors import ClbenchError, DataFileError
from clbench_jax.jsonio import read_versioned, save_figure, write_json
from clbench_jax.language import frames as F
from clbench_jax.language.kinds import tag_kinds
from clbench_jax.tasks.adapter import SUPPORTED_GOAL_PREDICATES, check_goal, parse_goal_text
from clbench_jax.tasks.spec import Atom, TaskSpec

FORMAT = "clbench-variants"
VERSION = 2  # 2: swap / nonsense conditions, paraphrase kinds, trivial contrasts; version-1 files still read
CONDITIONS = ("original", "paraphrase", "contrast", "collision", "swap", "nonsense")
NUDGE = 0.01  # how far an articulated joint is moved from its reset value by the trivial-reachability check
N_PARAPHRASES = 5
QUALIFIERS = frozenset({"red", "green", "blue", "purple", "orange", "black", "white", "yellow", "left", "right",
                        "front", "back", "middle", "top", "bottom"})
_STOP = frozenset({"the", "a", "an", "of", "and", "it", "to", "please"})


@dataclass(frozen=True)
class Candidate:
    """What a generator proposes (not yet validated)."""

    condition: str
    text: str
    slot: str | None = None
    frame: int | None = None
    goal: tuple[Atom, ...] | None = None   # contrast: the modified goal (offline)
    goal_text: str | None = None           # contrast: the modified goal as BDDL text (LLM)
    absent: str | None = None              # collision: the absent entity phrase / unsupported predicate
    absent_kind: str | None = None         # "entity" | "predicate"
    provenance: dict = field(default_factory=dict)
    rejected: str | None = None            # the generator already knows it is unusable (bad JSON, no option)
    kinds: tuple[str, ...] = ()            # paraphrase: the kinds of rewording (offline.KINDS)


class Generator(Protocol):
    name: str

    def describe(self) -> dict: ...

    def propose(self, task: TaskSpec, frames: F.TaskFrames) -> list[Candidate]: ...


@dataclass(frozen=True)
class Variant:
    id: str
    condition: str
    text: str
    retained: bool
    slot: str | None = None
    frame: int | None = None
    goal: tuple[tuple[str, ...], ...] | None = None   # atoms as (pred, *args)
    goal_table: dict | None = None                    # {"scene", "rows": [[pred_id, a, b], ...]}
    checks: dict = field(default_factory=dict)        # check -> "pass" | "fail: why"
    reasons: tuple[str, ...] = ()
    probe: str | None = None                          # collisions: "verified" | "unverified"
    provenance: dict = field(default_factory=dict)
    kinds: tuple[str, ...] = ()                       # paraphrases: kinds of rewording
    trivial: bool = False                             # contrast / swap: a nudge of the reset state meets the goal


@dataclass(frozen=True)
class TaskVariants:
    task: str
    index: int
    instruction: str
    goal: tuple[tuple[str, ...], ...]
    frames: tuple[dict, ...]
    variants: tuple[Variant, ...]
    unavailable: tuple[dict, ...] = ()   # {"slot", "reasons"}
    error: str | None = None             # the generator failed for this task (e.g. the LLM server)


# ------------------------------------------------------------------------------------------- text helpers
def normalize(text: str) -> str:
    """Lower case, no punctuation, single spaces: two texts equal here are duplicates."""
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower()).split())


def words(text: str) -> set[str]:
    return set(normalize(text).split())


# ------------------------------------------------------------------------------------------- static checks
def atoms_tuple(atoms: Iterable[Atom]) -> tuple[tuple[str, ...], ...]:
    return tuple((a.pred, *a.args) for a in atoms)


def predicate_supported(task: TaskSpec, atom: Atom) -> str | None:
    """None if the entity's stand-in can be tested for this predicate, else why not."""
    if atom.pred not in F.STATE_PREDICATES or F.predicate_supported_by(task, atom.pred, atom.args[0]):
        return None
    return f"{atom.args[0]} has no {atom.pred} state"


def _entity_match(task: TaskSpec, term: str) -> str:
    """Could `term` (e.g. 'red bowl', 'left drawer') refer to something in the task? -> "yes" | "no" | "maybe"
    ("maybe": a thing of that kind exists but its colour is not known, e.g. 'red ketchup')."""
    tw = words(term) - _STOP
    quals = tw & QUALIFIERS
    maybe = False
    for e in list(task.objects) + list(task.fixtures):
        n = F.noun(task, e)
        own = set().union(*(words(p) for p in n.phrases)) | words(n.color or "") | {F.position_word(task, e) or ""}
        if any(words(p) - _STOP - QUALIFIERS <= tw for p in n.phrases):
            if quals <= own:
                return "yes"
            maybe |= n.color is None
    if any(p.part and words(p.part) <= tw for p in F.places(task)):
        return "yes"
    return "maybe" if maybe else "no"


def known_vocabulary() -> set[str]:
    vocab = set()
    for n in F.LEXICON.values():
        for p in n.phrases:
            vocab |= words(p)
    return vocab | {"drawer", "compartment", "cabinet", "table", "shelf"}


def prove_incompatible(task: TaskSpec, kind: str | None, term: str | None) -> tuple[str, str]:
    """-> ("verified" | "unverified" | "rejected", why). Verified only when provably absent / unsupported."""
    if not term or kind not in ("entity", "predicate"):
        return "unverified", "no absent entity or predicate named"
    if kind == "entity":
        match = _entity_match(task, term)
        if match == "yes":
            return "rejected", f"{term!r} names something in the scene"
        if match == "maybe":
            return "unverified", f"{term!r} may name a scene object whose colour is not modelled"
        if (words(term) - _STOP - QUALIFIERS) <= known_vocabulary():
            return "verified", f"no entity of the task matches {term!r}"
        return "unverified", f"{term!r} is outside the known vocabulary: absence not provable"
    t = normalize(term)
    if t in SUPPORTED_GOAL_PREDICATES or t in F.RELATION_PHRASES or any(
            t in v for v in F.STATE_VERBS.values()) or t in F.PLACE_VERBS:
        return "rejected", f"{term!r} is a supported predicate / relation"
    if t in F.UNSUPPORTED_RELATIONS or t in F.UNSUPPORTED_ACTIONS:
        return "verified", f"no goal predicate expresses {term!r}"
    return "unverified", f"{term!r}: unsupported-ness not provable"


# ------------------------------------------------------------------------------------------- reset check
class ResetCheck:
    """Evaluates goals on a task's settled initial states (the scene's own predicates, native MuJoCo)."""

    def __init__(self, scene, task: TaskSpec, n: int = 4, seed: int = 0):
        from clbench_jax.sim import env
        from clbench_jax.sim.init_states import make_init_bank
        from clbench_jax.sim.native import NativeWorlds

        self.scene, self.task = scene, task
        bank = make_init_bank(scene, task, n, seed=seed)
        worlds = NativeWorlds(scene.model, n, 1, nthread=1)
        self.sens = worlds.set_state(bank.state, bank.mocap)
        worlds.close()
        self.consts = env.scene_consts(scene)

    def compile(self, atoms):
        from clbench_jax.sim import env

        return env.task_arrays(self.scene, self.task, list(atoms))

    def held(self, ta) -> np.ndarray:
        """(n,) bool: the TaskArrays' goal holds in each initial state."""
        return np.asarray(_held(self.consts, self.sens, self.sens[:, self.scene.sensors.pair_found], ta))

    def nudged(self, ta) -> str | None:
        """Is the goal met once one articulated joint moves by +-NUDGE from its reset value (a drawer pushed in by
        a centimetre meets LIBERO's Close, q > 0)? -> what nudge does it, or None."""
        idx = np.asarray(self.consts.sens_joint_q)
        n, found = len(self.sens), self.sens[:, self.scene.sensors.pair_found]
        for k, name in enumerate(self.scene.joints):
            for sign in (1.0, -1.0):
                sens = self.sens.copy()
                sens[:, idx[k]] += sign * NUDGE
                held = np.asarray(_held(self.consts, sens, found, ta))
                if held.any():
                    return f"joint {name} {sign * NUDGE:+g} from reset meets it in {int(held.sum())}/{n} states"
        return None


@functools.lru_cache(maxsize=None)
def _held_fn():
    import jax

    from clbench_jax.sim import env

    @jax.jit
    def run(c, sens, found, ta):
        g = jax.tree.map(lambda x: x[None], ta.goal)
        return jax.vmap(lambda s, f: env.goals_hold(c, s, f, ta, g)[0])(sens, found)

    return run


def _held(c, sens, found, ta):
    return _held_fn()(c, sens, found, ta)


def validate_contrast(task: TaskSpec, goal: tuple[Atom, ...], reset: ResetCheck | None) -> tuple[dict, dict | None]:
    """-> (checks, goal_table). Each check is "pass" or "fail: why"; later checks are skipped after a failure."""
    checks: dict[str, str] = {}
    try:
        goal = check_goal(task, goal, source="<contrast>")
        checks["entities"] = checks["predicates"] = "pass"
    except ClbenchError as e:
        key = "entities" if "entity" in type(e).__name__.lower() or "region" in str(e) else "predicates"
        checks[key] = f"fail: {e}"
        return checks, None
    bad = [why for a in goal if (why := predicate_supported(task, a))]
    if bad:
        checks["predicates"] = "fail: " + "; ".join(bad)
        return checks, None
    if set(atoms_tuple(goal)) == set(atoms_tuple(task.goal)):
        checks["differs"] = "fail: same goal as the original"
        return checks, None
    checks["differs"] = "pass"
    if reset is None:
        checks["registers"] = "skipped: built without the simulator check (not retained)"
        return checks, None
    try:
        ta = reset.compile(goal)
    except ClbenchError as e:
        checks["registers"] = f"fail: {e}"
        return checks, None
    checks["registers"] = "pass"
    held = reset.held(ta)
    checks["not_at_reset"] = "pass" if not held.any() else \
        f"fail: already satisfied in {int(held.sum())}/{len(held)} initial states"
    if not held.any():
        nudge = reset.nudged(ta)
        checks["not_trivial"] = "pass" if nudge is None else f"trivial: {nudge}"
    g = ta.goal
    rows = [[int(g.pred[r]), int(g.a[r]), int(g.b[r])] for r in range(len(g.pred)) if g.valid[r]]
    return checks, {"scene": reset.scene.key, "rows": rows}


def _failed(checks: dict) -> list[str]:
    return [f"{k}: {v[6:]}" for k, v in checks.items() if v.startswith("fail")]


# ------------------------------------------------------------------------------------------- building
def build_task(task: TaskSpec, index: int, cands: list[Candidate], reset: ResetCheck | None, *,
               generator: str, n_paraphrases: int = N_PARAPHRASES, error: str | None = None) -> TaskVariants:
    """Validate one task's candidates. Contrasts / collisions of a slot are tried in order until one is kept."""
    tf = F.task_frames(task)
    key = f"{task.suite}:{index}"
    out = [Variant(f"{key}/original", "original", task.instruction, True, goal=atoms_tuple(task.goal),
                   checks={"registers": "pass"}, provenance={"source": "task"})]
    if reset is not None:
        ta = reset.compile(task.goal)
        g = ta.goal
        out[0] = Variant(**{**asdict(out[0]), "goal_table": {"scene": reset.scene.key, "rows": [
            [int(g.pred[r]), int(g.a[r]), int(g.b[r])] for r in range(len(g.pred)) if g.valid[r]]}})
    seen = {normalize(task.instruction)}
    names = F.mentions(task, task.instruction)
    n_para = 0
    for c in [c for c in cands if c.condition == "paraphrase"]:
        checks = {}
        if c.rejected:
            checks["schema"] = f"fail: {c.rejected}"
        elif n_para >= n_paraphrases:
            continue
        else:
            checks["redundancy"] = "fail: normalized duplicate" if normalize(c.text) in seen else "pass"
            if generator == "offline":
                checks["referents"] = _same_referents(task, names, c.text)
        ok = not _failed(checks)
        if ok:
            seen.add(normalize(c.text))
            n_para += 1
        kinds = tuple(c.kinds) or (tag_kinds(task, task.instruction, c.text) if ok else ())  # LLM: read them
        out.append(Variant(f"{key}/paraphrase/{len([v for v in out if v.condition == 'paraphrase'])}",
                           "paraphrase", c.text, ok, goal=atoms_tuple(task.goal) if ok else None,
                           checks=checks, reasons=tuple(_failed(checks)), provenance=c.provenance, kinds=kinds))
    unavailable = []
    for slot in F.SLOTS:
        kept, reasons = False, []
        for i, c in enumerate([c for c in cands if c.condition == "contrast" and c.slot == slot]):
            if kept:
                break
            checks: dict[str, str] = {}
            goal, table = None, None
            if not c.text and c.rejected:  # the generator had nothing to propose: not a candidate
                reasons.append(c.rejected)
                continue
            if c.rejected:
                checks["schema"] = f"fail: {c.rejected}"
            else:
                try:
                    atoms = c.goal if c.goal is not None else parse_goal_text(task, c.goal_text or "",
                                                                               source="<generated goal>")
                    checks, table = validate_contrast(task, tuple(atoms), reset)
                    goal = atoms_tuple(atoms)
                except ClbenchError as e:
                    checks["goal_parse"] = f"fail: {e}"
            ok = not _failed(checks) and table is not None
            kept = ok
            mine = _failed(checks) + [f"{k}: {v}" for k, v in checks.items() if v.startswith("skipped")]
            reasons += mine
            out.append(Variant(f"{key}/contrast/{slot}/{i}", "contrast", c.text, ok, slot=slot, frame=c.frame,
                               goal=goal, goal_table=table if ok else None, checks=checks,
                               reasons=tuple(mine), provenance=c.provenance, trivial=ok and _trivial(checks)))
        if not kept:
            unavailable.append({"slot": slot, "reasons": reasons or ["no candidate proposed"]})
        kept = False
        for i, c in enumerate([c for c in cands if c.condition == "collision" and c.slot == slot]):
            if kept:
                break
            if c.rejected:
                verdict, why = "rejected", c.rejected
            elif normalize(c.text) == normalize(task.instruction):
                verdict, why = "rejected", "same text as the original"
            else:
                verdict, why = prove_incompatible(task, c.absent_kind, c.absent)
            if not c.text and c.rejected:
                continue
            kept = verdict == "verified"
            status = "pass" if kept else f"{'fail' if verdict == 'rejected' else verdict}: {why}"
            out.append(Variant(f"{key}/collision/{slot}/{i}", "collision", c.text, verdict == "verified",
                               slot=slot, frame=c.frame, checks={"incompatible": status},
                               reasons=() if kept else (why,),
                               probe=verdict if verdict != "rejected" else None, provenance=c.provenance))
    out += face_variants(task, tf, key, reset)
    frames = tuple(frame_dict(f) for f in tf.frames)
    return TaskVariants(task.name, index, task.instruction, atoms_tuple(task.goal), frames, tuple(out),
                        tuple(unavailable), error)


def _trivial(checks: dict) -> bool:
    return checks.get("not_trivial", "").startswith("trivial")


def _same_referents(task: TaskSpec, names: set, text: str) -> str:
    """ "pass" when `text` names exactly what the original names (frames.mentions), else why not."""
    got = F.mentions(task, text)
    if got == names:
        return "pass"
    show = lambda ms: sorted("/".join(sorted(e)) + (f" ({p})" if p else "") for e, p in ms)  # noqa: E731
    return f"fail: names {show(got - names) or 'nothing new'}, drops {show(names - got) or 'nothing'}"


def face_variants(task: TaskSpec, tf: F.TaskFrames, key: str, reset: ResetCheck | None) -> list[Variant]:
    """Seed 004's swap and nonsense faces of a task (language/faces.py), validated: every swap that passes the
    contrast checks is kept; a nonsense string is kept when it names nothing."""
    from clbench_jax.language import faces

    out = []
    for i, sw in enumerate(faces.swaps(task, tf)):
        checks, table = validate_contrast(task, sw.goal, reset)
        ok = not _failed(checks) and table is not None
        why = _failed(checks) + [f"{k}: {v}" for k, v in checks.items() if v.startswith("skipped")]
        out.append(Variant(f"{key}/swap/object/{i}", "swap", sw.text, ok, slot="object", frame=sw.frame,
                           goal=atoms_tuple(sw.goal), goal_table=table if ok else None, checks=checks,
                           reasons=tuple(why), provenance={"generator": "faces", "entity": sw.entity},
                           trivial=ok and _trivial(checks)))
    vocab = known_vocabulary() | {w for t in (F.SYNONYMS, F.HYPERNYMS) for ps in t.values() for p in ps
                                  for w in words(p)} | {w for e in list(task.objects) + list(task.fixtures)
                                                        for w in (task.category(e) or "").split("_")}
    for i, text in enumerate(faces.NONSENSE):
        hit = sorted((words(text) - _STOP) & vocab)
        checks = {"names_nothing": "pass" if not hit else f"fail: names {hit}"}
        out.append(Variant(f"{key}/nonsense/{i}", "nonsense", text, not hit, goal=atoms_tuple(task.goal) if not hit
                           else None, checks=checks, reasons=tuple(_failed(checks)),
                           provenance={"generator": "faces"}))
    return out


def frame_dict(f: F.Frame) -> dict:
    d = {"atom": [f.atom.pred, *f.atom.args], "implicit": f.implicit, "attribute_of": f.attribute_of}
    for k in F.SLOTS:
        s = f.slot(k)
        d[k] = None if s is None else {"value": s.value, "text": s.text, "span": list(s.span) if s.span else None}
    return d


def scenes_for(tasks: list[TaskSpec]):
    """Scene of each task (one build per scene key)."""
    from clbench_jax.sim.scene import build_scene
    from clbench_jax.tasks.suites import scene_tasks

    cache = {}
    for t in tasks:
        if t.scene not in cache:
            cache[t.scene] = build_scene(scene_tasks(t.scene))
    return cache


def build_suite(suite: str, generator: Generator, *, n_reset: int = 4, seed: int = 0, check_reset: bool = True,
                progress: bool = True, tasks: list[int] | None = None) -> dict:
    """Propose and validate variants for a suite's tasks -> the file's JSON document (see `write_variants`)."""
    from tqdm import tqdm

    from clbench_jax.tasks.suites import suite_tasks

    specs = suite_tasks(suite)
    idx = list(range(len(specs))) if tasks is None else tasks
    scenes = scenes_for([specs[i] for i in idx]) if check_reset else {}
    out = []
    for i in tqdm(idx, desc=f"variants {suite}", disable=not progress):
        t = specs[i]
        tf = F.task_frames(t)
        error = None
        try:
            cands = generator.propose(t, tf)
        except ClbenchError as e:  # e.g. the LLM server kept failing: this task's request fails, the rest go on
            if getattr(e, "stop_build", False):  # ... unless no request can succeed (unreachable, unauthorised)
                raise
            cands, error = [], str(e)
        reset = ResetCheck(scenes[t.scene], t, n_reset, seed) if check_reset and error is None else None
        out.append(build_task(t, i, cands, reset, generator=generator.name, error=error))
    return document(suite, generator.describe(), out, {"n_reset": n_reset, "seed": seed, "check_reset": check_reset})


def document(suite: str, gen: dict, tasks: list[TaskVariants], validation: dict) -> dict:
    return {"format": FORMAT, "version": VERSION, "suite": suite, "generator": gen, "validation": validation,
            "tasks": [_task_json(t) for t in tasks]}


def _task_json(t: TaskVariants) -> dict:
    d = asdict(t)
    d["variants"] = [{k: v for k, v in asdict(x).items()} for x in t.variants]
    return d


# ------------------------------------------------------------------------------------------- file IO
def write_variants(path: str | Path, doc: dict) -> None:
    """Atomic write (temporary file, then os.replace)."""
    write_json(path, doc)


def read_variants(path: str | Path) -> dict:
    """Load and check a variant file's format, version and required fields."""
    doc = read_versioned(path, "variant file", FORMAT, (1, VERSION), ("suite", "generator", "tasks"))
    for t in doc["tasks"]:
        for key in ("task", "index", "instruction", "goal", "variants", "unavailable"):
            if key not in t:
                raise DataFileError("missing field", file=str(path), task=t.get("task"), field=key)
        for v in t["variants"]:
            if v.get("condition") not in CONDITIONS:
                raise DataFileError("unknown condition", file=str(path), task=t["task"], field="condition",
                                    token=str(v.get("condition")))
            if v["condition"] in ("contrast", "swap") and v.get("retained") and not v.get("goal_table"):
                raise DataFileError("a retained contrast needs its goal table", file=str(path), task=t["task"],
                                    field=f"variants[{v.get('id')}].goal_table")
    return doc


def retained(doc: dict, condition: str | None = None) -> list[tuple[str, dict]]:
    """(task, variant) pairs kept for the aggregate (collisions: verified only)."""
    return [(t["task"], v) for t in doc["tasks"] for v in t["variants"]
            if v["retained"] and (condition is None or v["condition"] == condition)]


def audited_goals(task_entry: dict) -> list[tuple[tuple[str, ...], ...]]:
    """The verified comparison set G_j of a task: its original goal, then each kept contrast goal, unique, in file
    order. This is the order of the K goal columns the collision metrics read (eval/language_metrics.py)."""
    out: list = []
    for v in task_entry["variants"]:
        if v["retained"] and v["condition"] in ("original", "contrast"):
            g = tuple(tuple(a) for a in v["goal"])
            if g not in out:
                out.append(g)
    return out


# ------------------------------------------------------------------------------------------- coverage
def coverage(doc: dict) -> dict:
    """Per condition: retained / excluded counts (collisions: verified retained, unverified probes apart; contrasts
    and swaps: how many of the retained are trivially reachable), and per slot the number of tasks with no kept
    contrast."""
    cov = {c: {"retained": 0, "excluded": 0} for c in CONDITIONS}
    cov["collision"]["unverified"] = 0
    cov["contrast"]["trivial"] = cov["swap"]["trivial"] = 0
    slots = {s: {"contrast": 0, "collision": 0, "unavailable": 0} for s in F.SLOTS}
    for t in doc["tasks"]:
        for v in t["variants"]:
            c = cov[v["condition"]]
            if v["retained"]:
                c["retained"] += 1
                if "trivial" in c:
                    c["trivial"] += bool(v.get("trivial"))
                if v.get("slot") and v["condition"] in ("contrast", "collision"):
                    slots[v["slot"]][v["condition"]] += 1
            elif v.get("probe") == "unverified":
                c["unverified"] += 1
            else:
                c["excluded"] += 1
        for u in t["unavailable"]:
            slots[u["slot"]]["unavailable"] += 1
    return {"suite": doc["suite"], "tasks": len(doc["tasks"]), "conditions": cov, "slots": slots,
            "failed_tasks": [t["task"] for t in doc["tasks"] if t.get("error")]}


def coverage_table(covs: list[dict]) -> str:
    """Markdown table: retained / excluded per condition and suite."""
    conds = [k for k in CONDITIONS if any(k in cv["conditions"] for cv in covs)]
    head = "| suite | tasks | " + " | ".join(f"{c} kept / excl." for c in conds) + \
        " | unverified probes | trivial contrasts |"
    rows = [head, "|" + "---|" * (len(conds) + 4)]
    for cv in covs:
        c = cv["conditions"]
        rows.append(f"| {cv['suite']} | {cv['tasks']} | " + " | ".join(
            f"{c[k]['retained']} / {c[k]['excluded']}" if k in c else "-" for k in conds)
            + f" | {c['collision']['unverified']} | {c['contrast'].get('trivial', '-')} |")
    return "\n".join(rows)


def plot_coverage(covs: list[dict], out: str | Path) -> None:
    """Figure 5 style: per suite, retained vs excluded bars for each condition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(covs), figsize=(3.2 * len(covs), 3.2), sharey=True, squeeze=False)
    x = np.arange(len(CONDITIONS))
    for ax, cv in zip(axes[0], covs):
        kept = [cv["conditions"][c]["retained"] for c in CONDITIONS]
        excl = [cv["conditions"][c]["excluded"] for c in CONDITIONS]
        probe = [cv["conditions"][c].get("unverified", 0) for c in CONDITIONS]
        ax.bar(x, kept, color="#3a7d44", label="retained")
        ax.bar(x, probe, bottom=kept, color="#9a9a9a", label="unverified probe")
        ax.bar(x, excl, bottom=np.add(kept, probe), color="#c8553d", label="excluded")
        for xi, k, p, e in zip(x, kept, probe, excl):
            ax.text(xi, k + p + e + 0.5, f"{k}/{k + p + e}", ha="center", fontsize=7)
        ax.set_xticks(x, CONDITIONS, fontsize=7, rotation=30)
        ax.set_title(f"{cv['suite']} ({cv['tasks']} tasks)", fontsize=9)
    axes[0][0].set_ylabel("variants")
    top = max(sum(c[k] for k in ("retained", "excluded", "unverified") if k in c)
              for cv in covs for c in cv["conditions"].values())
    axes[0][0].set_ylim(0, top * 1.4 + 1)
    axes[0][0].legend(fontsize=6, loc="upper left", ncol=3)
    fig.suptitle("instruction variants retained / generated (collisions: statically verified)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, out, dpi=120, bbox_inches=None)
    plt.close(fig)
