"""Offline variant generator: a deterministic grammar over the BDDL vocabulary (no network, no key).

Paraphrases re-render the task's frames with other verbs (synonyms), word orders, the passive voice and other names
of the same objects; every object / target / attribute word is kept. Contrasts and collisions edit exactly one
slot's words in the original instruction (its character span from frames.py) and, for contrasts, compute the
modified goal from the edited frame (`frames.frame_atom`). Candidates come in a fixed order; variants.build_task
keeps the first of each slot that passes validation.
"""

from __future__ import annotations

from clbench_jax.errors import ClbenchError
from clbench_jax.language import frames as F
from clbench_jax.language.variants import Candidate
from clbench_jax.tasks.spec import Atom, TaskSpec

GRAMMAR_VERSION = 1
PLACE_SYNONYMS = ("place", "put", "set", "move")
PUSH_SYNONYMS = ("push", "slide", "shove")
PARTICIPLE = {"place": "placed", "put": "put", "set": "set", "move": "moved", "push": "pushed", "slide": "slid",
              "shove": "shoved"}
STATE_SYNONYMS = {"open": ("open", "pull open"), "close": ("close", "shut"), "turnon": ("turn on", "switch on"),
                  "turnoff": ("turn off", "switch off")}
STATE_PARTICIPLE = {"open": "opened", "close": "closed", "turnon": "switched on", "turnoff": "switched off"}
RELATION_ALT = {"on": ("on", "onto"), "in": ("in", "into"), "on top of": ("on top of", "onto the top of"),
                "front of": ("in front of", "to the front of"), "right of": ("to the right of", "on the right side of"),
                "left of": ("to the left of", "on the left side of"), "under": ("under", "beneath")}


class OfflineGenerator:
    name = "offline"

    def __init__(self, n_paraphrases: int = 5):
        self.n_paraphrases = n_paraphrases

    def describe(self) -> dict:
        return {"name": self.name, "grammar_version": GRAMMAR_VERSION, "n_paraphrases": self.n_paraphrases,
                "candidates_per_slot": "ordered; first valid kept"}

    def propose(self, task: TaskSpec, tf: F.TaskFrames) -> list[Candidate]:
        out = paraphrases(task, tf)
        for slot in F.SLOTS:
            out += contrasts(task, tf, slot) or [Candidate("contrast", "", slot=slot, rejected=_why_none(tf, slot))]
            out += collisions(task, tf, slot) or [Candidate("collision", "", slot=slot,
                                                            rejected="no words for this slot in the instruction")]
        return out


def _prov(kind: str, **kw) -> dict:
    return {"generator": "offline", "grammar_version": GRAMMAR_VERSION, "rule": kind, **kw}


# ------------------------------------------------------------------------------------------- paraphrases
def _object_np(task: TaskSpec, tf: F.TaskFrames, f: F.Frame, alt: int = 0) -> str:
    """The object's words with its attribute ('black bowl between the plate and the ramekin'); `alt` picks another
    name of the same thing that keeps every word (e.g. 'akita black bowl')."""
    text = tf.instruction
    spans = [s.span for s in (f.object, f.attribute if f.attribute_of == "object" else None) if s and s.span]
    if not spans or f.object.text in ("it", None):
        names = F.place_phrases(task, F.place_of_region(task, f.atom.args[0], "in")) \
            if f.atom.args[0] in task.regions else F.noun(task, f.atom.args[0]).phrases
        return names[0]
    np_ = text[min(s[0] for s in spans):max(s[1] for s in spans)]
    loc = f.attribute if f.attribute_of == "object" and f.attribute.span[0] > f.object.span[1] else None
    if loc is not None and not loc.text.startswith("from") and alt % 2 == 0:
        np_ = np_.replace(loc.text, "that is " + loc.text)  # "the black bowl that is on the stove"
    if alt and f.atom.args[0] in task.objects:
        for name in F.noun(task, f.atom.args[0]).phrases:
            if alt == 4 and f.object.text in name and name != f.object.text and name not in np_:
                return np_.replace(f.object.text, name, 1)
    return np_


def _target_np(task: TaskSpec, f: F.Frame, alt: int = 0) -> str:
    """The target's words; with alt == 3 another name of the place that keeps them ('rack' -> 'wine rack')."""
    names = F.place_phrases(task, F.resolve_place(task, f.atom.pred, f.atom.args[1]))
    said = f.target.text
    if not said or said == "it":
        return names[0]
    if alt == 3:
        return next((n for n in names if said in n and n != said), said)
    return said


def _clause(task: TaskSpec, tf: F.TaskFrames, f: F.Frame, style: int) -> str:
    o = _object_np(task, tf, f, alt=style)
    if f.atom.pred in F.STATE_PREDICATES:
        verbs = STATE_SYNONYMS[f.atom.pred]
        v = verbs[style % len(verbs)]
        if style == 2:
            return f"the {o} should be {STATE_PARTICIPLE[f.atom.pred]}"
        if style == 3 and " " in v:
            head, part = v.split(" ", 1)
            return f"{head} the {o} {part}"
        return f"{v} the {o}"
    rel = RELATION_ALT[f.relation.value][style % 2 if style != 1 else 0]
    d = _target_np(task, f, style)
    pushing = f.action.text == "push"
    verbs = PUSH_SYNONYMS if pushing else PLACE_SYNONYMS
    v = verbs[style % len(verbs)]
    if style == 1:
        return f"{rel} the {d}, {v} the {o}"
    if style == 2:
        return f"the {o} should be {PARTICIPLE[v]} {rel} the {d}"
    if style == 3 and not pushing:
        return f"take the {o} and {v} it {rel} the {d}"
    return f"{v} the {o} {rel} the {d}"


def _said_at(f: F.Frame) -> int:
    return min([s.span[0] for s in (f.action, f.object, f.target) if s is not None and s.span] or [10 ** 6])


def paraphrases(task: TaskSpec, tf: F.TaskFrames, n_styles: int = 8) -> list[Candidate]:
    # sub-goals in the order the instruction says them ("put the bowl in the drawer and close it")
    said = sorted([f for f in tf.frames if not f.implicit], key=_said_at)
    joins = (" and ", ", then ", " and then ", ", and ")
    out = []
    for style in range(n_styles):
        # a fronted target ("on the plate, put ...") only opens a sentence
        parts = [_clause(task, tf, f, s if k == 0 or s != 1 else 0)
                 for k, f in enumerate(said) for s in [(style + k) % 5]]
        text = parts[0] if len(parts) == 1 else joins[style % len(joins)].join(parts)
        if style >= 5:
            text = "please " + text
        out.append(Candidate("paraphrase", text, provenance=_prov("paraphrase", style=style)))
    return out


# ------------------------------------------------------------------------------------------- contrasts
def _shared(tf: F.TaskFrames, f: F.Frame, k: str) -> bool:
    """Is this slot's span also another frame's (e.g. 'moka pots' names both pots)?"""
    s = f.slot(k)
    return any(g is not f and g.slot(k) is not None and g.slot(k).span == s.span for g in tf.frames)


def _goal_with(task: TaskSpec, f: F.Frame, atom: Atom) -> tuple[Atom, ...]:
    return tuple(atom if (a.pred, a.args) == (f.atom.pred, f.atom.args) else a for a in task.goal)


def _why_none(tf: F.TaskFrames, slot: str) -> str:
    if slot == "attribute" and not any(f.attribute for f in tf.frames):
        return "the instruction names no attribute"
    if slot == "action" and not any(f.atom.pred in F.STATE_PREDICATES and not f.implicit for f in tf.frames):
        return "no other supported action keeps object, relation and target"
    return "no one-slot alternative in the scene inventory"


def contrasts(task: TaskSpec, tf: F.TaskFrames, slot: str) -> list[Candidate]:
    """Ordered one-slot contrast candidates for `slot` over the task's said frames."""
    text, out = tf.instruction, []
    for i, f in enumerate(tf.frames):
        s = f.slot(slot)
        if f.implicit or s is None or s.span is None or _shared(tf, f, slot) or s.text == "it":
            continue
        for new_text, span, atom in _options(task, f, slot):
            out.append(Candidate("contrast", F.edit_text(text, span, new_text), slot=slot, frame=i,
                                 goal=_goal_with(task, f, atom), provenance=_prov(f"contrast/{slot}")))
    return out


def _options(task: TaskSpec, f: F.Frame, slot: str):
    """(replacement words, span, new atom) for each alternative value of the slot, in a fixed order."""
    a, x = f.atom, f.atom.args[0]
    state = a.pred in F.STATE_PREDICATES
    if slot == "action":
        if state:
            opp = F.OPPOSITE[a.pred]
            yield F.STATE_VERBS[opp][0], f.action.span, Atom(opp, (x,))
        return
    if slot == "object":
        if f.attribute_of == "object":
            return  # the attribute names the old object: changing the noun would change two slots
        if state:
            for e in sorted(set(task.objects) | set(task.fixtures)):
                if e != x and F.predicate_supported_by(task, a.pred, e) and F.noun(task, e).head not in f.object.text:
                    yield F.noun(task, e).phrases[0], f.object.span, Atom(a.pred, (e,))
            return
        used = {b.args[0] for b in task.goal} | {F.resolve_place(task, a.pred, a.args[1]).landmark}
        for e in sorted(task.objects):
            if e not in used and F.noun(task, e).head != F.noun(task, x).head:
                yield F.noun(task, e).phrases[0], f.object.span, Atom(a.pred, (e, a.args[1]))
        return
    if slot == "attribute":
        if f.attribute is None:
            return
        if f.attribute_of == "object" and state:
            level = f.attribute.value
            for other in ("top", "middle", "bottom"):
                region = x.replace(f"_{level}_", f"_{other}_")
                if other != level and region in task.regions:
                    yield other, f.attribute.span, Atom(a.pred, (region,))
            return
        if f.attribute_of == "object":
            for e in F.same_head(task, x):
                loc = F.locator_phrases(task, e)
                word = loc[0] if loc and len(f.attribute.text.split()) > 1 else (
                    F.noun(task, e).color or F.position_word(task, e))
                if word:
                    yield word, f.attribute.span, Atom(a.pred, (e, a.args[1]))
            return
        place = F.resolve_place(task, a.pred, a.args[1])
        for p in F.places(task):
            if (p.relation, p.landmark) == (place.relation, place.landmark) and p.part and p.part != place.part:
                yield p.part.split()[0], f.attribute.span, Atom(p.pred, (x, p.arg))
        return
    if state or f.target is None or f.target.span is None:
        return
    place = F.resolve_place(task, a.pred, a.args[1])
    if slot == "relation":
        if f.relation.span is None:
            return
        for p in F.places(task):
            if p.landmark == place.landmark and p.relation != place.relation and p.arg != x:
                new = F.RELATION_PHRASES[p.relation][0]
                if p.part == place.part:
                    yield new, f.relation.span, Atom(p.pred, (x, p.arg))
                elif f.relation.span[1] <= f.target.span[0]:  # a drawer instead of the top: part words too
                    yield f"{new} the {_place_words(task, p, f.target.text)}", (f.relation.span[0], f.target.span[1]), \
                        Atom(p.pred, (x, p.arg))
        return
    if slot == "target":
        # not a manipulated object, not a look-alike of the object (a bowl on "the black bowl"), not a place
        # another sub-goal already fills (two mugs cannot both be within 3 cm of one plate's centre)
        used = {b.args[0] for b in task.goal} | {b.args[1] for b in task.goal if b is not f.atom and len(b.args) > 1}
        for p in sorted(F.places(task), key=lambda p: p.landmark in task.objects):  # fixtures first
            if p.relation == place.relation and p.landmark != place.landmark and p.landmark not in used and \
                    p.arg not in used and p.landmark not in F.same_head(task, x) and (
                    p.part is None or f.attribute_of != "target"):
                words = _place_words(task, p, "")
                if p.landmark in task.objects and F.same_head(task, p.landmark):
                    words = f"{F.position_word(task, p.landmark) or ''} {words}".strip()
                yield words, f.target.span, Atom(p.pred, (x, p.arg))


def _place_words(task: TaskSpec, p: F.Place, said: str) -> str:
    """How to name a place, preferring the name the instruction already uses for its landmark."""
    names = F.place_phrases(task, p)
    if said:
        for n in names:  # the instruction's own name first ("cabinet", not "wooden cabinet")
            if n == said or n.endswith(" the " + said) or said.endswith(" the " + n):
                return n
    return names[0]


# ------------------------------------------------------------------------------------------- collisions
def collisions(task: TaskSpec, tf: F.TaskFrames, slot: str) -> list[Candidate]:
    """One candidate per slot: the slot's words replaced by an absent entity or an unsupported predicate."""
    text = tf.instruction
    heads = {F.noun(task, e).head for e in list(task.objects) + list(task.fixtures)}
    absent = next(p for p in F.ABSENT_CANDIDATES if p.split()[-1] not in heads and p not in heads)
    for i, f in enumerate(tf.frames):
        s = f.slot(slot)
        if slot == "attribute":
            s = f.object  # a frame without an attribute still gets one: a colour nothing has
        if f.implicit or s is None or s.span is None or s.text == "it":
            continue
        if slot == "object":
            span = s.span
            if f.attribute_of == "object":
                span = (min(span[0], f.attribute.span[0]), max(span[1], f.attribute.span[1]))
            new, kind, term = absent, "entity", absent
        elif slot == "target":
            span, new, kind, term = s.span, absent, "entity", absent
        elif slot == "relation":
            span, new, kind, term = s.span, F.UNSUPPORTED_RELATIONS[0], "predicate", F.UNSUPPORTED_RELATIONS[0]
        elif slot == "action":
            verb = F.UNSUPPORTED_ACTIONS[0]
            edited = F.edit_text(text, s.span, verb)
            for second in (" and place it", " and put it"):  # "pick up X and place it ...": one action, two verbs
                edited = edited.replace(second, f" and {verb} it")
            return [Candidate("collision", edited, slot=slot, frame=i, absent=verb, absent_kind="predicate",
                              provenance=_prov("collision/action"))]
        else:  # attribute: a colour that no object of this kind has
            head = F.noun(task, f.atom.args[0]).head if f.atom.args[0] in task.objects else None
            if head is None or f.object.span is None:
                continue
            owned = {F.noun(task, e).color for e in task.objects if F.noun(task, e).head == head}
            color = next(c for c in F.ABSENT_COLORS if c not in owned)
            span = f.object.span
            if f.attribute_of == "object":
                span = (min(span[0], f.attribute.span[0]), max(span[1], f.attribute.span[1]))
            name = f.object.text  # "black bowl" -> "red bowl", "bbq sauce" -> "red bbq sauce"
            own = F.noun(task, f.atom.args[0]).color
            if own and name.startswith(own + " "):
                name = name[len(own) + 1:]
            new, kind, term = f"{color} {name}", "entity", f"{color} {name}"
        try:
            edited = F.edit_text(text, span, new)
        except ClbenchError:
            continue
        return [Candidate("collision", edited, slot=slot, frame=i, absent=term, absent_kind=kind,
                          provenance=_prov(f"collision/{slot}"))]
    return []
