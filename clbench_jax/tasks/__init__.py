"""Task layer: BDDL parsing, LIBERO suites and task orders, adapter view, summaries."""

from clbench_jax.tasks.adapter import SUPPORTED_GOAL_PREDICATES, AdapterView, adapter_view, check_goal, parse_goal_text
from clbench_jax.tasks.bddl import parse_bddl, parse_bddl_text
from clbench_jax.tasks.format import format_suite_table, format_task
from clbench_jax.tasks.spec import Atom, Region, TaskSpec, grab_language_from_filename
from clbench_jax.tasks.suites import (SUITE_TASK_NAMES, TASK_ORDERS, all_tasks, get_task, ordered_tasks, scene_tasks,
                                      scenes, suite_tasks, task_order)

__all__ = ["SUPPORTED_GOAL_PREDICATES", "AdapterView", "adapter_view", "check_goal", "parse_goal_text", "parse_bddl",
           "parse_bddl_text", "format_suite_table", "format_task", "Atom", "Region", "TaskSpec",
           "grab_language_from_filename", "SUITE_TASK_NAMES", "TASK_ORDERS", "all_tasks", "get_task",
           "ordered_tasks", "scene_tasks", "scenes", "suite_tasks", "task_order"]
