"""Semantic frames of LIBERO instructions: (action v, object o, relation r, target d, attribute q) per goal atom.

A frame is read from the BDDL goal (what must become true) and anchored in the instruction text (which words say
it), so that a one-slot edit of the frame gives both a new goal atom (`frame_atom`) and a minimal text edit (the
slot's character span). Long-horizon tasks (libero_10) get one frame per sub-goal; a goal atom that already holds in
the task's :init and is never mentioned (libero_10 "put both moka pots on the stove" also requires the stove, on at
the start, to stay on) is an implicit frame: evaluated, never perturbed.

Places: the second argument of On/In is read as a *place* = (relation, landmark, part), e.g.
`wooden_cabinet_1_top_region` with In is ("in", wooden_cabinet_1, "top drawer"), `plate_1` with On is ("on",
plate_1, None), `main_table_stove_front_region` is ("front of", flat_stove_1, None). `places(task)` lists every place
of a task, which is what target, relation and attribute contrasts choose from.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from clbench_jax.errors import ClbenchError
from clbench_jax.tasks.spec import Atom, TaskSpec

SLOTS = ("action", "object", "relation", "target", "attribute")
STATE_PREDICATES = {"open": "open", "close": "close", "turnon": "turn on", "turnoff": "turn off"}


class FrameError(ClbenchError):
    """An instruction or goal this module cannot read as a semantic frame."""


@dataclass(frozen=True)
class Noun:
    phrases: tuple[str, ...]   # longest / instruction form first
    head: str                  # the word a paraphrase must keep
    color: str | None = None


# Category -> how LIBERO's instructions name it.
LEXICON: dict[str, Noun] = {
    "akita_black_bowl": Noun(("black bowl", "akita black bowl", "bowl"), "bowl", "black"),
    "white_bowl": Noun(("white bowl", "bowl"), "bowl", "white"),
    "plate": Noun(("plate",), "plate"),
    "glazed_rim_porcelain_ramekin": Noun(("ramekin",), "ramekin"),
    "cookies": Noun(("cookie box", "cookies box", "cookies"), "box"),
    "wooden_cabinet": Noun(("wooden cabinet", "cabinet"), "cabinet"),
    "white_cabinet": Noun(("white cabinet", "cabinet"), "cabinet"),
    "flat_stove": Noun(("stove",), "stove"),
    "wine_bottle": Noun(("wine bottle", "bottle"), "bottle"),
    "wine_rack": Noun(("wine rack", "rack"), "rack"),
    "basket": Noun(("basket",), "basket"),
    "alphabet_soup": Noun(("alphabet soup",), "soup"),
    "cream_cheese": Noun(("cream cheese box", "cream cheese"), "cheese"),
    "salad_dressing": Noun(("salad dressing",), "dressing"),
    "new_salad_dressing": Noun(("salad dressing",), "dressing"),
    "bbq_sauce": Noun(("bbq sauce",), "bbq"),
    "ketchup": Noun(("ketchup",), "ketchup"),
    "tomato_sauce": Noun(("tomato sauce",), "tomato"),
    "butter": Noun(("butter",), "butter"),
    "milk": Noun(("milk",), "milk"),
    "chocolate_pudding": Noun(("chocolate pudding",), "pudding"),
    "orange_juice": Noun(("orange juice",), "juice"),
    "chefmate_8_frypan": Noun(("frying pan", "pan"), "pan"),
    "moka_pot": Noun(("moka pot",), "moka"),
    "porcelain_mug": Noun(("white mug", "mug"), "mug", "white"),
    "white_yellow_mug": Noun(("yellow and white mug", "mug"), "mug", "yellow and white"),
    "red_coffee_mug": Noun(("red mug", "red coffee mug", "mug"), "mug", "red"),
    "black_book": Noun(("black book", "book"), "book", "black"),
    "yellow_book": Noun(("yellow book", "book"), "book", "yellow"),
    "desk_caddy": Noun(("desk caddy", "caddy"), "caddy"),
    "microwave": Noun(("microwave",), "microwave"),
    "wooden_tray": Noun(("wooden tray", "tray"), "tray"),
    "wooden_two_layer_shelf": Noun(("cabinet shelf", "shelf"), "shelf"),
}
# Other names people use for a category's objects (same referent, other words) and more general names
# (hypernyms). Paraphrases use a name only where it names one entity of the task (`unique_names`): "the sauce" for the
# ketchup only when no other sauce is in the scene.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "akita_black_bowl": ("black dish", "dark bowl"),
    "white_bowl": ("white dish",),
    "plate": ("dinner plate", "platter"),
    "glazed_rim_porcelain_ramekin": ("porcelain ramekin", "small ramekin"),
    "cookies": ("box of cookies", "cookie package"),
    "wooden_cabinet": ("cupboard", "wooden cupboard", "chest of drawers"),
    "white_cabinet": ("cupboard", "white cupboard", "chest of drawers"),
    "flat_stove": ("cooktop", "stovetop", "hob"),
    "wine_bottle": ("bottle of wine",),
    "wine_rack": ("bottle rack", "wine holder"),
    "basket": ("bin", "wicker basket"),
    "alphabet_soup": ("can of alphabet soup", "alphabet soup can", "soup can"),
    "cream_cheese": ("package of cream cheese", "cream cheese pack"),
    "salad_dressing": ("bottle of salad dressing", "dressing bottle"),
    "new_salad_dressing": ("bottle of salad dressing", "dressing bottle"),
    "bbq_sauce": ("barbecue sauce", "bottle of barbecue sauce"),
    "ketchup": ("tomato ketchup", "ketchup bottle"),
    "tomato_sauce": ("can of tomato sauce", "tomato sauce can"),
    "butter": ("stick of butter", "butter pack"),
    "milk": ("milk carton", "carton of milk"),
    "chocolate_pudding": ("pudding cup", "chocolate pudding cup"),
    "orange_juice": ("carton of orange juice", "orange juice carton"),
    "chefmate_8_frypan": ("skillet", "frypan"),
    "moka_pot": ("coffee pot", "espresso pot", "stovetop coffee maker"),
    "porcelain_mug": ("white cup", "white coffee mug"),
    "white_yellow_mug": ("yellow and white cup",),
    "red_coffee_mug": ("red cup",),
    "black_book": ("dark book", "black volume"),
    "yellow_book": ("yellow volume",),
    "desk_caddy": ("desk organizer", "pen caddy"),
    "microwave": ("microwave oven",),
    "wooden_tray": ("serving tray",),
    "wooden_two_layer_shelf": ("wooden shelf", "two-layer shelf", "shelving unit"),
}
HYPERNYMS: dict[str, tuple[str, ...]] = {
    "akita_black_bowl": ("dish", "container"), "white_bowl": ("dish", "container"), "plate": ("dish",),
    "glazed_rim_porcelain_ramekin": ("dish", "container"), "cookies": ("snack", "box"),
    "wooden_cabinet": ("furniture",), "white_cabinet": ("furniture",), "flat_stove": ("appliance",),
    "wine_bottle": ("bottle", "drink"), "wine_rack": ("rack",), "basket": ("container",),
    "alphabet_soup": ("soup", "canned food"), "cream_cheese": ("dairy product", "cheese"),
    "salad_dressing": ("condiment", "bottle"), "new_salad_dressing": ("condiment", "bottle"),
    "bbq_sauce": ("sauce", "condiment", "bottle"), "ketchup": ("sauce", "condiment", "bottle"),
    "tomato_sauce": ("sauce", "canned food"), "butter": ("dairy product",), "milk": ("dairy product", "carton", "drink"),
    "chocolate_pudding": ("dessert", "snack"), "orange_juice": ("juice", "drink", "carton"),
    "chefmate_8_frypan": ("pan", "cookware"), "moka_pot": ("pot", "cookware"), "porcelain_mug": ("mug", "cup"),
    "white_yellow_mug": ("mug", "cup"), "red_coffee_mug": ("mug", "cup"), "black_book": ("book",),
    "yellow_book": ("book",), "desk_caddy": ("organizer", "container"), "microwave": ("appliance", "oven"),
    "wooden_tray": ("tray",), "wooden_two_layer_shelf": ("shelf", "furniture"),
}
# Things a scene can lack: collisions name one of these when the task has none of its head noun.
ABSENT_CANDIDATES = ("microwave", "basket", "frying pan", "ketchup", "wine bottle", "plate", "book", "stove")
ABSENT_COLORS = ("red", "green", "blue", "purple", "orange")

# Relation label -> phrases an instruction uses for it (first: canonical).
RELATION_PHRASES: dict[str, tuple[str, ...]] = {
    "on": ("on", "onto", "on top of", "in"),  # LIBERO: "put the cream cheese in the bowl" is On
    "on top of": ("on top of", "on the top of", "on"),
    "in": ("in", "inside", "into"),
    "front of": ("to the front of", "in front of"),
    "right of": ("to the right of",),
    "left of": ("to the left of",),
    "under": ("under",),
    "next to": ("next to",),
}
# Relations no LIBERO predicate expresses (collisions).
UNSUPPORTED_RELATIONS = ("behind", "underneath", "beside", "above")
# Action verbs with no goal predicate (collisions).
UNSUPPORTED_ACTIONS = ("shake", "fold", "pour out", "wipe", "throw")
PLACE_VERBS = ("pick up", "put", "place", "push", "stack", "move", "set")
STATE_VERBS = {"open": ("open",), "close": ("close", "shut"), "turnon": ("turn on", "switch on"),
               "turnoff": ("turn off", "switch off")}
OPPOSITE = {"open": "close", "close": "open", "turnon": "turnoff", "turnoff": "turnon"}
TABLE_CATEGORIES = ("table", "kitchen_table", "living_room_table", "study_table", "floor")


@dataclass(frozen=True)
class Place:
    """Where On/In puts an object: (relation, landmark entity, part) -> goal predicate and argument."""

    relation: str
    landmark: str
    part: str | None
    pred: str
    arg: str


@dataclass(frozen=True)
class Slot:
    value: str                          # verb / predicate label, entity name, relation label or qualifier
    text: str | None                    # the words in the instruction (None: implied or unstated)
    span: tuple[int, int] | None = None  # character span of `text` in the instruction


@dataclass(frozen=True)
class Frame:
    atom: Atom
    action: Slot
    object: Slot
    relation: Slot | None = None        # None for state goals (Open, TurnOn, ...)
    target: Slot | None = None
    attribute: Slot | None = None
    attribute_of: str | None = None     # "object" or "target"
    implicit: bool = False              # holds at :init and is never said: not perturbed

    def slot(self, k: str) -> Slot | None:
        return getattr(self, k)


@dataclass(frozen=True)
class TaskFrames:
    task: str
    instruction: str
    frames: tuple[Frame, ...]


def noun(task: TaskSpec, entity: str) -> Noun:
    cat = task.category(entity)
    if cat is None:
        raise FrameError("entity is not an object or fixture of the task", task=task.name, token=entity)
    return LEXICON.get(cat) or Noun((cat.replace("_", " "),), cat.split("_")[-1])


def _find(text: str, phrases, start: int = 0, end: int | None = None) -> tuple[int, int] | None:
    """Whole-word occurrence in text[start:end] of the first phrase (in the given order) that occurs at all."""
    for p in phrases:
        m = re.compile(r"\b" + re.escape(p) + r"\b").search(text, start, len(text) if end is None else end)
        if m:
            return (m.start(), m.end())
    return None


def _slot(text: str, value: str, span) -> Slot:
    return Slot(value, text[span[0]:span[1]] if span else None, span)


# ---------------------------------------------------------------------------------------------------- places
_SIDE = re.compile(r"^(.+)_(front|right|left)_region$")
_NEXT_TO = re.compile(r"^next_to_(.+)_region$")
_LEVEL = re.compile(r"^(top|middle|bottom)_region$")
_COMPARTMENT = re.compile(r"^(front|back|left|right)_contain_region$")


def _landmark_for(task: TaskSpec, stem: str) -> str | None:
    """The single task entity whose category ends with `stem` (e.g. 'stove' -> flat_stove_1)."""
    ents = list(task.objects) + list(task.fixtures)
    hits = [e for e in ents if (task.category(e) or "").endswith(stem)] or [
        e for e in ents if e in task.objects and noun(task, e).head == stem]
    return hits[0] if len(hits) == 1 else None


def place_of_region(task: TaskSpec, region: str, pred: str) -> Place | None:
    """Read a region used as On/In's second argument as a place; None for table init regions and the like."""
    r = task.regions.get(region)
    if r is None:
        return None
    owner, local = r.target, r.local_name
    cat = task.category(owner) or ""
    if cat in TABLE_CATEGORIES:
        m = _NEXT_TO.match(local)
        if m and (lm := _landmark_for(task, m.group(1))) is not None:
            return Place("next to", lm, None, pred, region)
        m = _SIDE.match(local)
        if m and not local.endswith("init_region"):
            lm = _landmark_for(task, m.group(1))
            if lm is not None:
                return Place(f"{m.group(2)} of", lm, None, pred, region)
        return None
    if local == "top_side":
        return Place("on top of", owner, None, pred, region)
    if m := _LEVEL.match(local):
        if "shelf" in cat:
            return Place("on" if m.group(1) == "top" else "under", owner, None, pred, region)
        if "wine_rack" in cat:
            return Place("on", owner, None, pred, region)
        return Place("in", owner, f"{m.group(1)} drawer", pred, region)
    if m := _COMPARTMENT.match(local):
        return Place("in", owner, f"{m.group(1)} compartment", pred, region)
    if local in ("contain_region", "heating_region"):
        return Place("in", owner, None, pred, region)
    if local == "cook_region":
        return Place("on", owner, None, pred, region)
    return None


def places(task: TaskSpec) -> list[Place]:
    """Every place of the task: its regions read as places (with the predicate LIBERO uses for each kind),
    plus On every object (objects are places too: a bowl on a plate)."""
    out = []
    starts = {a.args[1] for a in task.init if a.pred in ("on", "in") and len(a.args) == 2}
    for name in task.regions:
        if name in starts and (task.category(task.regions[name].target) or "") in TABLE_CATEGORIES:
            continue  # where something stands at the start (the left plate's spot) is not a free place
        p = place_of_region(task, name, "on")
        if p is not None:
            out.append(replace(p, pred=_region_predicate(task, p)))
    out += [Place("on", o, None, "on", o) for o in task.objects]
    return out


def _region_predicate(task: TaskSpec, p: Place) -> str:
    """LIBERO's predicate for a region place: In for containment (drawer, basket, compartment, microwave, shelf
    layer), On for every other place."""
    shelf = "shelf" in (task.category(p.landmark) or "")
    return "in" if p.relation in ("in", "under") or (shelf and p.relation == "on") else "on"


def place_phrases(task: TaskSpec, place: Place) -> tuple[str, ...]:
    """Words naming the place's landmark (with its part), e.g. 'top drawer of the cabinet', 'top drawer', 'plate'."""
    names = noun(task, place.landmark).phrases
    if place.part is None:
        return names
    return tuple(f"{place.part} of the {n}" for n in names) + (place.part,)


def resolve_place(task: TaskSpec, pred: str, arg: str) -> Place | None:
    if arg in task.objects and pred == "on":
        return Place("on", arg, None, "on", arg)
    return place_of_region(task, arg, pred)


def find_place(task: TaskSpec, relation: str, landmark: str, part: str | None) -> Place | None:
    for p in places(task):
        if (p.relation, p.landmark, p.part) == (relation, landmark, part):
            return p
    return None


# ---------------------------------------------------------------------------------------------------- frames
def same_head(task: TaskSpec, entity: str) -> list[str]:
    """Other objects of the task with the same head noun (look-alikes: two bowls, three mugs)."""
    h = noun(task, entity).head
    return [e for e in task.objects if e != entity and noun(task, e).head == h]


def locator_phrases(task: TaskSpec, entity: str) -> tuple[str, ...]:
    """How an instruction tells this object from its look-alikes by where it starts (spatial suite)."""
    atom = next((a for a in task.init if a.args and a.args[0] == entity and a.pred in ("on", "in")), None)
    if atom is None:
        return ()
    where = atom.args[1]
    if where in task.objects:
        return tuple(f"on the {n}" for n in noun(task, where).phrases)
    r = task.regions.get(where)
    if r is None:
        return ()
    local = r.local_name
    if (task.category(r.target) or "") in TABLE_CATEGORIES:
        if local == "table_center":
            return ("from table center", "at the table center")
        m = _NEXT_TO.match(local)
        if m and (lm := _landmark_for(task, m.group(1))):
            return tuple(f"next to the {n}" for n in noun(task, lm).phrases)
        m = re.match(r"^between_(.+)_(.+)_region$", local)
        if m:
            a, b = (_landmark_for(task, s) for s in m.groups())
            if a and b:
                return (f"between the {noun(task, a).phrases[0]} and the {noun(task, b).phrases[0]}",)
        return ()
    p = place_of_region(task, where, atom.pred)
    if p is None:
        return ()
    rel = "on" if p.relation == "on top of" else p.relation
    return tuple(f"{rel} the {ph}" for ph in place_phrases(task, p))


def object_attribute(task: TaskSpec, entity: str, text: str, span) -> tuple[Slot | None, tuple[int, int] | None]:
    """The qualifier that tells `entity` from same-head objects: a locator after it, or a colour / position word
    in its phrase. -> (attribute slot, span of the object's own noun)."""
    if not same_head(task, entity) or span is None:
        return None, span
    loc = _find(text, locator_phrases(task, entity), span[1], span[1] + 1 + max(
        [len(p) for p in locator_phrases(task, entity)] + [0]))
    if loc is not None:
        return _slot(text, text[loc[0]:loc[1]], loc), span
    color = noun(task, entity).color
    if color and text[span[0]:span[1]].startswith(color + " "):
        cs = (span[0], span[0] + len(color))
        return _slot(text, color, cs), (cs[1] + 1, span[1])
    for word in ("left", "right", "middle", "front", "back"):
        w = _find(text, (word,), max(0, span[0] - 8), span[1] + 16)
        if w:
            return _slot(text, word, w), span
    return None, span


def position_word(task: TaskSpec, entity: str) -> str | None:
    """left / right / front / back / middle, read off the init region an object starts in (two plates)."""
    atom = next((a for a in task.init if a.args and a.args[0] == entity and a.pred == "on"), None)
    if atom is None:
        return None
    m = re.search(r"(left|right|front|back|middle)", atom.args[1].removeprefix(task.regions[atom.args[1]].target)
                  if atom.args[1] in task.regions else "")
    return m.group(1) if m else None


def _action_before(text: str, pos: int, verbs) -> tuple[int, int] | None:
    hits = [m for v in verbs for m in re.finditer(r"\b" + re.escape(v) + r"\b", text[:pos])]
    if not hits:
        return None
    m = max(hits, key=lambda m: m.start())
    return (m.start(), m.end())


def _implicit(task: TaskSpec, atom: Atom) -> bool:
    return any(a.pred == atom.pred and a.args == atom.args for a in task.init)


def _state_object_phrases(task: TaskSpec, arg: str) -> tuple[str, ...]:
    if arg in task.regions:
        p = place_of_region(task, arg, "in")
        if p is not None:
            return place_phrases(task, p) + ("it",)
    if task.category(arg):
        return noun(task, arg).phrases + ("it",)
    return ("it",)


def atom_frame(task: TaskSpec, atom: Atom, text: str, cursor: int = 0) -> Frame:
    """The frame of one goal atom, anchored in `text` (the instruction) at or after `cursor` where possible."""
    if atom.pred in STATE_PREDICATES:
        verb = _find(text, STATE_VERBS[atom.pred])
        obj = _find(text, _state_object_phrases(task, atom.args[0]), verb[1]) if verb else None
        attr = None
        if obj is not None and atom.args[0] in task.regions:
            p = place_of_region(task, atom.args[0], "in")
            if p is not None and p.part and text[obj[0]:obj[1]].startswith(p.part.split()[0]):
                w = p.part.split()[0]
                attr = _slot(text, w, (obj[0], obj[0] + len(w)))
        return Frame(atom, _slot(text, atom.pred, verb), _slot(text, atom.args[0], obj), attribute=attr,
                     attribute_of="object" if attr else None, implicit=verb is None and _implicit(task, atom))
    if atom.pred not in ("on", "in"):
        raise FrameError("no frame for this goal predicate", task=task.name, field="goal", line=atom.line,
                         token=atom.pred)
    x, arg = atom.args
    place = resolve_place(task, atom.pred, arg)
    if place is None:
        raise FrameError("goal place is not a known region kind", task=task.name, field="goal", line=atom.line,
                         token=arg)
    names = noun(task, x).phrases
    ospan = _find(text, names, cursor) or _find(text, names) or _find(text, [n + "s" for n in names])
    attr, ospan_noun = object_attribute(task, x, text, ospan)
    attr_of = "object" if attr else None
    after = ospan[1] if ospan else cursor
    if attr is not None and attr.span[0] >= after:
        after = attr.span[1]
    # "... put the moka pot on it": the landmark was named earlier
    tspan = _find(text, place_phrases(task, place), after) or _find(text, ("it",), after) or _find(
        text, place_phrases(task, place))
    if tspan is not None and place.landmark in task.objects and same_head(task, place.landmark):
        w = _find(text, (position_word(task, place.landmark) or "-",), max(0, tspan[0] - 7), tspan[0])
        if w:  # "the left plate": the position word belongs to the target's name
            tspan = (w[0], tspan[1])
    rspan = None
    if tspan is not None:
        rel_phr = RELATION_PHRASES.get(place.relation, (place.relation,))
        hits = [h for h in (_find(text, (p,), after, tspan[0]) for p in rel_phr) if h is not None]
        if not hits and place.relation == "in":
            hits = [h for h in [_find(text, ("inside",), after)] if h]
        if hits:
            rspan = max(hits, key=lambda h: (h[0], h[1]))
    elif place.relation == "in":
        rspan = _find(text, ("inside",), after)
    if attr is None and place.part and tspan is not None and text[tspan[0]:tspan[1]].startswith(place.part):
        w = place.part.split()[0]
        attr, attr_of = _slot(text, w, (tspan[0], tspan[0] + len(w))), "target"
    verb = _action_before(text, ospan[0] if ospan else len(text), PLACE_VERBS)
    return Frame(atom, _slot(text, "place", verb), _slot(text, x, ospan_noun),
                 _slot(text, place.relation, rspan), _slot(text, place.landmark, tspan), attr, attr_of,
                 implicit=ospan is None and _implicit(task, atom))


def task_frames(task: TaskSpec) -> TaskFrames:
    """Frames of a task's instruction, one per goal atom, in goal order."""
    text = task.instruction
    frames, cursor = [], 0
    # Anchor sub-goals in the order the instruction says them (libero_10 goals list them in any order).
    order = sorted(range(len(task.goal)), key=lambda i: _mention(task, task.goal[i], text))
    by_atom = {}
    for i in order:
        f = atom_frame(task, task.goal[i], text, cursor)
        by_atom[i] = f
        if f.object.span:
            cursor = max(cursor, f.object.span[1])
    frames = [by_atom[i] for i in range(len(task.goal))]
    return TaskFrames(task.name, text, tuple(frames))


def _mention(task: TaskSpec, atom: Atom, text: str) -> int:
    phr = STATE_VERBS[atom.pred] if atom.pred in STATE_PREDICATES else noun(task, atom.args[0]).phrases
    s = _find(text, phr)
    return s[0] if s else len(text)


def frame_atom(task: TaskSpec, frame: Frame, **changes: str) -> Atom:
    """The goal atom a frame asks for, after replacing slot values (action=, object=, relation=, target=, part=).

    Raises FrameError when the changed frame names no place of the task (the relation/target pair is absent)."""
    a = frame.atom
    action = changes.get("action", a.pred if a.pred in STATE_PREDICATES else "place")
    obj = changes.get("object", a.args[0])
    if action in STATE_PREDICATES:
        if a.pred not in STATE_PREDICATES and "object" not in changes:
            raise FrameError("a state action needs a state object", task=task.name, token=action)
        return Atom(action, (obj,))
    if action != "place":
        raise FrameError("action has no goal predicate", task=task.name, field="action", token=action)
    place = resolve_place(task, a.pred, a.args[1])
    rel = changes.get("relation", place.relation)
    lm = changes.get("target", place.landmark)
    part = changes.get("part", place.part if lm == place.landmark else None)
    p = find_place(task, rel, lm, part)
    if p is None:
        raise FrameError("no such place in the task", task=task.name, field="relation/target",
                         token=f"{rel} {lm} {part or ''}".strip())
    return Atom(p.pred, (obj, p.arg))


def predicate_supported_by(task: TaskSpec, pred: str, entity: str) -> bool:
    """Can the entity (or the fixture owning a region) be tested for a state predicate (a stove has no Open)?"""
    from clbench_jax.sim import entities

    owner = task.regions[entity].target if entity in task.regions else entity
    cat = task.category(owner)
    return bool(cat) and entities.supports(cat, pred)


def edit_text(text: str, span: tuple[int, int], new: str) -> str:
    return text[:span[0]] + new + text[span[1]:]


def with_slot(frame: Frame, k: str, slot: Slot) -> Frame:
    return replace(frame, **{k: slot})


# ---------------------------------------------------------------------------------------------------- mentions
NAME_KINDS = ("lexicon", "synonym", "hypernym")


def _names(task: TaskSpec, entity: str) -> dict[str, str]:
    """phrase -> kind ("lexicon" / "synonym" / "hypernym") of every name of the entity, ambiguous ones included."""
    cat = task.category(entity) or ""
    out = {p: "lexicon" for p in noun(task, entity).phrases}
    for kind, table in (("synonym", SYNONYMS), ("hypernym", HYPERNYMS)):
        for p in table.get(cat, ()):
            out.setdefault(p, kind)
    return out


@functools.lru_cache(maxsize=None)
def phrase_index(task: TaskSpec) -> dict[str, tuple[frozenset, str | None]]:
    """Every phrase that names something of the task -> (the entities it may name, the part it names or None):
    lexicon names, synonyms and hypernyms (and their plurals), a look-alike's position-qualified names ("left
    plate"), and the parts of places ("top drawer", "back compartment", which name their fixture's part)."""
    index: dict[str, set] = {}
    for e in list(task.objects) + list(task.fixtures):
        if (task.category(e) or "") in TABLE_CATEGORIES:
            continue
        pos = position_word(task, e) if e in task.objects and same_head(task, e) else None
        for p in _names(task, e):
            for q in (p, p + "s") + ((f"{pos} {p}",) if pos else ()):
                index.setdefault(q, set()).add(e)
    out = {p: (frozenset(es), None) for p, es in index.items()}
    for pl in places(task):
        if pl.part:
            out[pl.part] = (frozenset({pl.landmark}), pl.part)
    return out


def mention_phrases(task: TaskSpec, text: str) -> list[tuple[str, frozenset, str | None]]:
    """The naming phrases of a text, in text order: (phrase, entities it may name, part), longest phrases first and
    without overlap."""
    index = phrase_index(task)
    t = " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower()).split())
    taken = [False] * len(t)
    found = []
    for p in sorted(index, key=len, reverse=True):
        for m in re.finditer(r"\b" + re.escape(p) + r"\b", t):
            if not any(taken[m.start():m.end()]):
                taken[m.start():m.end()] = [True] * (m.end() - m.start())
                found.append((m.start(), p, *index[p]))
    return [f[1:] for f in sorted(found)]


def mentions(task: TaskSpec, text: str) -> set[tuple[frozenset, str | None]]:
    """What a text names: (entities a phrase may name, part) for each naming phrase; a part also mentions its
    fixture. Two texts that mention the same set name the same things."""
    found = set()
    for _, ents, part in mention_phrases(task, text):
        found.add((ents, part))
        if part:
            found.add((ents, None))
    return found


def name_kind(task: TaskSpec, phrase: str, entities) -> str | None:
    """"lexicon" / "synonym" / "hypernym": how `phrase` names the entities (None for a part or an unknown phrase)."""
    kinds = {_names(task, e).get(phrase.removesuffix("s")) or _names(task, e).get(phrase) for e in entities}
    kinds.discard(None)
    return min(kinds, key=NAME_KINDS.index) if kinds else None


def unique_names(task: TaskSpec, entity: str, kind: str) -> list[str]:
    """The entity's names of one kind (NAME_KINDS) that name it alone in the task, in lexicon order."""
    index = phrase_index(task)
    return [p for p, k in _names(task, entity).items() if k == kind and index[p][0] == frozenset({entity})]
