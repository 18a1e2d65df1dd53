"""Human-readable summaries for `clbench tasks show/list`."""

from __future__ import annotations

from clbench_jax.tasks.spec import SUITES, TaskSpec


def _num(x: float) -> str:
    return f"{x:.4g}"


def format_task(spec: TaskSpec) -> str:
    lines = [
        f"task:        {spec.name}",
        f"suite:       {spec.suite}",
        f"scene:       {spec.scene}",
        f"problem:     {spec.problem}",
        f"instruction: {spec.instruction}",
        f"language:    {spec.language}",
        f"file:        {spec.file}",
        "fixtures:",
        *(f"  {n} - {c}" for n, c in spec.fixtures.items()),
        "objects:",
        *(f"  {n} - {c}" for n, c in spec.objects.items()),
        "regions:",
    ]
    for r in spec.regions.values():
        desc = "  ".join("(" + " ".join(_num(v) for v in box) + ")" for box in r.ranges) or "(site on target)"
        yaw = "  yaw " + " ".join(f"[{_num(lo)}, {_num(hi)}]" for lo, hi in r.yaw_ranges) if r.yaw_ranges else ""
        lines.append(f"  {r.name}  on {r.target}: {desc}{yaw}")
    if spec.dangling_regions:
        lines.append(f"  (ignored, target absent: {', '.join(spec.dangling_regions)})")
    lines += ["init:", *(f"  {a}" for a in spec.init),
              "goal (all must hold):", *(f"  {a}" for a in spec.goal),
              f"obj_of_interest: {', '.join(spec.obj_of_interest)}"]
    return "\n".join(lines)


def format_suite_table(suite: str | None = None) -> str:
    """Index / name / instruction for one suite, or for all five when `suite` is None."""
    from clbench_jax.tasks.suites import suite_tasks  # late import: parsing needs the LIBERO data

    rows = []
    for s in ([suite] if suite else list(SUITES)):
        rows += [(f"{s}:{i}", t.name, t.instruction) for i, t in enumerate(suite_tasks(s))]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    head = f"{'index':<{w0}}  {'name':<{w1}}  language"
    return "\n".join([head, "-" * len(head)] + [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows])
