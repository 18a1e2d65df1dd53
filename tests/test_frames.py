"""Semantic frames read from LIBERO's real BDDL files and instructions."""

import pytest

from clbench_jax.language import frames as F
from clbench_jax.tasks.spec import Atom
from clbench_jax.tasks.suites import get_task, suite_tasks

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")


def _slots(f):
    return {k: (f.slot(k).value, f.slot(k).text) if f.slot(k) else None for k in F.SLOTS}


@pytest.mark.parametrize("suite", SUITES + ("libero_90",))
def test_every_frame_round_trips_to_its_goal_atom(suite):
    for t in suite_tasks(suite):
        tf = F.task_frames(t)
        assert len(tf.frames) == len(t.goal)
        for f, atom in zip(tf.frames, t.goal):
            assert f.atom == atom
            assert F.frame_atom(t, f) == Atom(atom.pred, atom.args)  # the frame says exactly the goal
            for k in F.SLOTS:
                s = f.slot(k)
                if s is not None and s.span is not None:
                    assert t.instruction[s.span[0]:s.span[1]] == s.text, (t.name, k)


def test_simple_frame_by_hand():
    f = F.task_frames(get_task("libero_goal:1")).frames[0]  # put the bowl on the stove
    assert _slots(f) == {"action": ("place", "put"), "object": ("akita_black_bowl_1", "bowl"),
                         "relation": ("on", "on"), "target": ("flat_stove_1", "stove"), "attribute": None}


def test_spatial_locator_is_the_attribute():
    f = F.task_frames(get_task("libero_spatial:0")).frames[0]
    assert f.object.text == "black bowl" and f.attribute_of == "object"
    assert f.attribute.text == "between the plate and the ramekin"
    f6 = F.task_frames(get_task("libero_spatial:6")).frames[0]
    assert f6.attribute.text == "next to the cookie box"
    # the other bowl's locator, read from its :init region
    assert F.locator_phrases(get_task("libero_spatial:0"), "akita_black_bowl_2")[0] == "next to the ramekin"


def test_state_frames_and_drawer_attribute():
    f = F.task_frames(get_task("libero_goal:0")).frames[0]  # open the middle drawer of the cabinet
    assert _slots(f)["action"] == ("open", "open")
    assert f.object.value == "wooden_cabinet_1_middle_region" and f.object.text == "middle drawer of the cabinet"
    assert f.attribute.text == "middle" and f.relation is None and f.target is None


def test_long_horizon_sub_goal_frames():
    tf = F.task_frames(get_task("libero_10:4"))  # white mug -> left plate, yellow and white mug -> right plate
    a, b = tf.frames
    assert (a.object.value, a.attribute.text, a.target.text) == ("porcelain_mug_1", "white", "left plate")
    assert (b.object.value, b.attribute.text, b.target.text) == ("white_yellow_mug_1", "yellow and white",
                                                                 "right plate")
    tf = F.task_frames(get_task("libero_10:2"))  # turn on the stove and put the moka pot on it
    assert tf.frames[0].action.text == "turn on" and tf.frames[1].target.text == "it"
    tf = F.task_frames(get_task("libero_10:3"))  # ... and close it
    assert tf.frames[0].atom.pred == "close" and tf.frames[0].object.text == "it"
    assert tf.frames[1].attribute.text == "bottom" and tf.frames[1].attribute_of == "target"


def test_unsaid_goal_atom_is_implicit():
    tf = F.task_frames(get_task("libero_10:8"))  # put both moka pots on the stove; the stove must stay on
    stove = [f for f in tf.frames if f.atom.pred == "turnon"][0]
    assert stove.implicit
    assert all(not f.implicit and f.object.text == "moka pots" for f in tf.frames if f.atom.pred == "on")


def test_places_and_edited_frames():
    t = get_task("libero_goal:4")  # put the bowl on top of the cabinet
    f = F.task_frames(t).frames[0]
    assert F.frame_atom(t, f, relation="in", part="top drawer") == Atom("in", ("akita_black_bowl_1",
                                                                               "wooden_cabinet_1_top_region"))
    assert F.frame_atom(t, f, relation="front of", target="flat_stove_1") == Atom(
        "on", ("akita_black_bowl_1", "main_table_stove_front_region"))
    with pytest.raises(F.FrameError, match="no such place"):
        F.frame_atom(t, f, relation="under")
    # where the plates stand at the start is not a free "left of the plate" place (libero_10:4) ...
    assert not any(p.relation in ("left of", "right of") for p in F.places(get_task("libero_10:4")))
    # ... but libero_10:6's free region right of the plate is
    assert F.Place("right of", "plate_1", None, "on", "living_room_table_plate_right_region") in F.places(
        get_task("libero_10:6"))


def test_state_predicate_support_comes_from_the_stand_ins():
    t = get_task("libero_goal:7")
    assert F.predicate_supported_by(t, "turnon", "flat_stove_1")
    assert not F.predicate_supported_by(t, "open", "flat_stove_1")
    assert F.predicate_supported_by(t, "open", "wooden_cabinet_1_top_region")
