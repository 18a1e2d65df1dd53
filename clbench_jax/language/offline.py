"""Offline variant generator: a deterministic grammar over the BDDL vocabulary (no network, no key).

Paraphrases say the task's frames the ways people reword an instruction, each tagged with its kinds (KINDS):
other names for the objects and places (`synonym`: "soup can"; `hypernym`: "the sauce", only where it names one
thing of the scene), other verbs (synonyms; `move` / `get` as hypernyms), indirect speech acts (`question`: "could
you ...?", `need`: "I need the bowl on the plate", `hint`: "the bowl belongs on the plate"), added or dropped
modifiers (`modifier_added`: "carefully", "wooden cabinet"; `modifier_dropped`: "the bowl" for "the black bowl"),
clauses coordinated or subordinated differently from the original (`coordination`: "pick up X and drop it in Y"
for "put X in Y", or the reverse; `subordination`: "after you pick up X, put it in Y", "make sure the drawer is
open", a relative clause for a locator), and `composition` when a paraphrase combines two or more of them. Recipes
come in a fixed order, rotated per task so a suite covers every kind; variants.build_task keeps the first that are
not duplicates and name exactly what the original names (`frames.mentions`).

Contrasts and collisions edit exactly one slot's words in the original instruction (its character span from
frames.py) and, for contrasts, compute the modified goal from the edited frame (`frames.frame_atom`). Candidates
come in a fixed order; variants.build_task keeps the first of each slot that passes validation.
"""

from __future__ import annotations

import re
import zlib
from typing import NamedTuple

from clbench_jax.errors import ClbenchError
from clbench_jax.language import frames as F
from clbench_jax.language.kinds import KINDS
from clbench_jax.language.kinds import structure as kinds_structure
from clbench_jax.language.variants import Candidate, words
from clbench_jax.tasks.spec import Atom, TaskSpec

GRAMMAR_VERSION = 2
PLACE_VERBS = {"synonym": ("place", "set", "drop", "stick"), "hypernym": ("move", "get")}
PUSH_VERBS = {"synonym": ("slide", "shove", "nudge"), "hypernym": ("move",)}
STATE_VERBS = {"open": {"synonym": ("pull open",)}, "close": {"synonym": ("shut", "push shut")},
               "turnon": {"synonym": ("switch on", "fire up")}, "turnoff": {"synonym": ("switch off", "shut off")}}
STATE_ADJ = {"open": "open", "close": "closed", "turnon": "on", "turnoff": "off"}
REL_STATIC = {"on": "on", "in": "in", "on top of": "on top of", "front of": "in front of", "right of": "to the right of",
              "left of": "to the left of", "next to": "next to", "under": "under"}
REL_MOTION = {"on": "onto", "in": "into", "inside": "into"}
QUESTIONS = ("could you", "can you", "would you please")
NEEDS = ("I need", "I'd like", "I want")
HINTS = ("belongs", "should be", "needs to be")
ADVERBS = (("carefully", ""), ("", "gently"), ("", "right away"))  # (before, after) the imperative


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
class Recipe(NamedTuple):
    template: str  # imperative | pickplace | question | need | hint | after | once
    obj: str = "said"  # how the objects are named: said | synonym | hypernym | dropped | added
    tgt: str = "said"  # how the places are named (same choices)
    verb: str = "said"  # said | synonym | hypernym
    alt: int = 0  # which question / need / hint form, or adverb (-1: none)


# One pass covers every kind; build_task keeps the first valid ones after a per-task rotation.
RECIPES = (
    Recipe("question", obj="synonym", verb="synonym"),
    Recipe("need", obj="synonym", tgt="synonym"),
    Recipe("hint", obj="hypernym", tgt="synonym"),
    Recipe("after", obj="dropped", tgt="synonym"),
    Recipe("imperative", obj="hypernym", verb="hypernym", alt=-1),
    Recipe("imperative", obj="added", tgt="added", alt=0),
    Recipe("pickplace", obj="synonym", tgt="dropped", verb="synonym", alt=1),
    Recipe("question", obj="hypernym", tgt="synonym", alt=1),
    Recipe("need", obj="synonym", tgt="added", alt=1),
    Recipe("once", obj="synonym", verb="synonym", alt=1),
    Recipe("hint", obj="said", tgt="hypernym", alt=1),
    Recipe("imperative", obj="synonym", verb="synonym", alt=2),
)


class Said(NamedTuple):
    """One clause to say: a goal frame (or several sharing one object span: 'both moka pots')."""
    frame: F.Frame
    state: str | None  # the state predicate, or None for On / In
    names: dict  # naming kind -> object phrase
    places: dict  # naming kind -> place phrase (On / In only)
    verb: dict  # verb kind -> verb
    rel: str  # relation words for a motion ("into") and ...
    rel_static: str  # ... for a result ("in")
    plural: bool = False  # one span names several objects: "them", "are"

    @property
    def it(self) -> str:
        return "them" if self.plural else "it"

    @property
    def is_(self) -> str:
        return "are" if self.plural else "is"


def _pick(options: list[str], alt: int) -> str | None:
    return options[alt % len(options)] if options else None


def _shorter_longer(task: TaskSpec, entity: str, said: str) -> tuple[list[str], list[str]]:
    """The entity's unique lexicon names with a strict subset / superset of the said words (dropped / added)."""
    lex = F.unique_names(task, entity, "lexicon")
    w = words(said)
    return [n for n in lex if words(n) < w], [n for n in lex if words(n) > w]


def _place_names(task: TaskSpec, place: F.Place, said: str | None) -> dict:
    """Naming kind -> phrases for a place (its landmark, with its part); "said" holds one phrase."""
    lm = place.landmark
    if not said or said == "it":
        said = F.place_phrases(task, place)[0]
    part = place.part
    if part:
        lex = [f"{part} of the {n}" for n in F.unique_names(task, lm, "lexicon")]
        dropped = [part] if " of the " in said and F.phrase_index(task).get(part, (None,))[0] == frozenset({lm}) \
            else []
        return {"said": said, "synonym": [f"{part} of the {n}" for n in F.unique_names(task, lm, "synonym")],
                "dropped": dropped, "added": [n for n in lex if words(n) > words(said)]}
    if lm in task.objects and F.same_head(task, lm):  # "the left plate": the position word stays
        return {"said": said}
    shorter, longer = _shorter_longer(task, lm, said)
    return {"said": said, "synonym": F.unique_names(task, lm, "synonym"),
            "hypernym": F.unique_names(task, lm, "hypernym"), "dropped": shorter[::-1], "added": longer}


def _object_names(task: TaskSpec, tf: F.TaskFrames, f: F.Frame, shared: bool) -> dict:
    """Naming kind -> phrases for the frame's object ("said": one phrase; "locator": a look-alike's locator words,
    which a single clause turns into a relative clause)."""
    text, x = tf.instruction, f.atom.args[0]
    if x in task.regions:  # a drawer / compartment / door: a place of its fixture
        place = F.place_of_region(task, x, "in")
        said = f.object.text if f.object.text and f.object.text != "it" else None
        return _place_names(task, place, said) if place else {"said": said or x}
    spans = [s.span for s in (f.object, f.attribute if f.attribute_of == "object" else None) if s and s.span]
    if not spans or f.object.text in ("it", None):
        return {"said": F.noun(task, x).phrases[0]}
    said = text[min(sp[0] for sp in spans):max(sp[1] for sp in spans)]
    if f.attribute_of == "object" or shared:
        # look-alikes: the qualifier stays; the noun may take another name of the same look-alikes ("black dish
        # between the plate and the ramekin")
        index = F.phrase_index(task)
        noun_ents = index.get(f.object.text, (None,))[0]
        out = {"said": said, "synonym": [said.replace(f.object.text, n, 1) for n in F._names(task, x)
                                         if F._names(task, x)[n] == "synonym" and index[n][0] == noun_ents]}
        loc = f.attribute if f.attribute_of == "object" and f.attribute.span[0] > f.object.span[1] else None
        if loc is not None and not loc.text.startswith("from"):
            out["locator"] = loc.text  # said after the noun: a relative clause can carry it
        return out
    shorter, longer = _shorter_longer(task, x, said)
    return {"said": said, "synonym": F.unique_names(task, x, "synonym"), "hypernym": F.unique_names(task, x, "hypernym"),
            "dropped": shorter[::-1], "added": longer}


def _clauses(task: TaskSpec, tf: F.TaskFrames) -> list[Said]:
    """The said frames in the order the instruction says them, merged where they share an object span."""
    said = sorted([f for f in tf.frames if not f.implicit], key=_said_at)
    out, seen = [], set()
    for f in said:
        key = f.object.span if f.object is not None else None
        shared = key is not None and sum(g.object.span == key for g in said if g.object is not None) > 1
        if shared and key in seen:
            continue
        seen.add(key)
        a = f.atom
        if a.pred in F.STATE_PREDICATES:
            said_verb = f.action.text or F.STATE_PREDICATES[a.pred]
            verbs = {"said": said_verb, **{k: v[0] for k, v in STATE_VERBS[a.pred].items()}}
            out.append(Said(f, a.pred, _object_names(task, tf, f, shared), {}, verbs, "", "", shared))
            continue
        pushing = f.action.text == "push"
        table = PUSH_VERBS if pushing else PLACE_VERBS
        said_verb = "push" if pushing else ("place" if f.action.text in (None, "pick up") else f.action.text)
        verbs = {"said": said_verb, **{k: v for k, v in table.items()}}
        place = F.resolve_place(task, a.pred, a.args[1])
        rel_said = f.relation.text if f.relation is not None and f.relation.text else None
        static = {"into": "in", "inside": "in", "onto": "on"}.get(rel_said, rel_said) or REL_STATIC[place.relation]
        if place.relation in ("front of", "right of", "left of") and rel_said:
            static = REL_STATIC[place.relation]
        motion = rel_said or REL_MOTION.get(place.relation, REL_STATIC[place.relation])
        out.append(Said(f, None, _object_names(task, tf, f, shared),
                        _place_names(task, place, f.target.text if f.target else None), verbs, motion, static,
                        shared))
    return out


def _said_at(f: F.Frame) -> int:
    return min([s.span[0] for s in (f.action, f.object, f.target) if s is not None and s.span] or [10 ** 6])


def _name(options: dict, kind: str, alt: int, kinds: set) -> str:
    """A phrase of the wanted naming kind (recording its kind; `alt` picks among several), else the said one."""
    said = options["said"]
    names = [n for n in options.get(kind, ()) if n != said] if kind != "said" else []
    if not names:
        return said
    kinds.add(NAME_TAGS[kind])
    return names[alt % len(names)]


NAME_TAGS = {"synonym": "synonym", "hypernym": "hypernym", "dropped": "modifier_dropped", "added": "modifier_added"}


def _verb(c: Said, kind: str, alt: int, kinds: set) -> str:
    said = c.verb["said"]
    v = c.verb.get(kind)
    options = [x for x in ((v,) if isinstance(v, str) else v or ()) if x != said]
    if kind == "said" or not options:
        return said
    kinds.add(kind)
    return options[alt % len(options)]


def _with_it(verb: str, it: str = "it") -> str:
    """'switch on' -> 'switch it on' (a phrasal verb's particle after the pronoun)."""
    head, _, particle = verb.partition(" ")
    return f"{head} {it} {particle}" if particle else f"{verb} {it}"


def _imperative(c: Said, o: str, t: str, v: str) -> str:
    if c.state:
        if " " in v and v.split()[0] in ("turn", "switch") and len(o.split()) == 1:
            head, particle = v.split(" ", 1)  # "switch the stove on"
            return f"{head} the {o} {particle}"
        return f"{v} the {o}"
    return f"{v} the {o} {c.rel} the {t}"


def _result(c: Said, o: str, t: str, copula: str = "") -> str:
    """'the bowl on the plate' / 'the drawer open' (with a copula: 'the bowl is on the plate')."""
    cop = f" {copula}" if copula else ""
    if c.state:
        return f"the {o}{cop} {STATE_ADJ[c.state]}"
    return f"the {o}{cop} {c.rel_static} the {t}"


def _render(recipe: Recipe, clauses: list[Said], original: str) -> tuple[str, set]:
    """One paraphrase of the task and its kinds."""
    kinds: set = set()
    named = []
    for c in clauses:
        o = _name(c.names, recipe.obj, max(recipe.alt, 0), kinds)
        if "locator" in c.names and recipe.template not in ("pickplace", "after", "once"):
            # "put the black bowl that is next to the ramekin on the plate": one reading of the attachment
            o = o.replace(c.names["locator"], "that is " + c.names["locator"], 1)
            kinds.add("subordination")
        t = _name(c.places, recipe.tgt, max(recipe.alt, 0), kinds) if c.places else ""
        named.append((c, o, t))
    tpl, alt = recipe.template, recipe.alt
    imps = lambda cs: [_imperative(c, o, t, _verb(c, recipe.verb, alt, kinds)) for c, o, t in cs]  # noqa: E731
    join = (lambda xs: ", then ".join(xs) if alt % 2 else " and ".join(xs))  # noqa: E731
    if tpl == "imperative":
        text = join(imps(named))
        if alt >= 0:
            before, after = ADVERBS[alt % len(ADVERBS)]
            text = " ".join(x for x in (before, text, after) if x)
            kinds.add("modifier_added")
    elif tpl == "question":
        text = f"{QUESTIONS[alt % len(QUESTIONS)]} {join(imps(named))}?"
        kinds.add("question")
    elif tpl == "need":
        text = f"{NEEDS[alt % len(NEEDS)]} " + " and ".join(_result(c, o, t) for c, o, t in named)
        kinds.add("need")
    elif tpl == "hint":
        parts = []
        for c, o, t in named:
            aux = HINTS[alt % len(HINTS)]
            aux = "should be" if c.state and aux == "belongs" else aux
            if c.plural:
                aux = {"belongs": "belong", "needs to be": "need to be"}.get(aux, aux)
            parts.append(_result(c, o, t, aux))
        text = ", and ".join(parts)
        kinds.add("hint")
    elif tpl == "pickplace":
        text = join([f"pick up the {o} and {_verb(c, recipe.verb, alt, kinds)} {c.it} {c.rel} the {t}"
                     if not c.state else f"find the {o} and {_with_it(_verb(c, recipe.verb, alt, kinds), c.it)}"
                     for c, o, t in named])
    else:  # after / once: subordinate the first step
        c, o, t = named[0]
        if len(named) > 1:
            conj = "once" if tpl == "once" else "after"
            text = f"{conj} {_result(c, o, t, c.is_)}, " + join(imps(named[1:]))
        elif c.state:
            text = ("make sure " if tpl == "after" else "see to it that ") + _result(c, o, t, c.is_)
        else:
            lead = "after you pick up" if tpl == "after" else "once you have"
            text = f"{lead} the {o}, {_verb(c, recipe.verb, alt, kinds)} {c.it} {c.rel} the {t}"
        kinds.add("subordination")
    # coordination: the action clauses are joined differently from the original's (kinds.structure counts them);
    # subordinated steps are subordination, not coordination
    if tpl not in ("after", "once") and kinds_structure(text) != kinds_structure(original):
        kinds.add("coordination")
    if len(kinds) > 1:
        kinds.add("composition")
    return text, kinds


def paraphrases(task: TaskSpec, tf: F.TaskFrames) -> list[Candidate]:
    """Every recipe's paraphrase, in RECIPES order rotated by the task (so a suite's kept five cover every kind),
    tagged with its kinds; recipes that change nothing are skipped."""
    clauses = _clauses(task, tf)
    start = zlib.crc32(task.name.encode()) % len(RECIPES)
    out = []
    for i in range(len(RECIPES)):
        r = RECIPES[(start + i) % len(RECIPES)]
        text, kinds = _render(r, clauses, tf.instruction)
        if not kinds:
            continue
        tagged = tuple(k for k in KINDS if k in kinds)
        out.append(Candidate("paraphrase", text, kinds=tagged,
                             provenance=_prov("paraphrase", recipe=r._asdict(), kinds=list(tagged))))
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
