"""`clbench variants build|show|coverage`: instruction-variant files (clbench_jax/language/variants.py)."""

from __future__ import annotations

from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "variants"
BUILT = Path("runs") / "variants"  # where `variants build` writes unless told otherwise


def default_path(suite: str, generator: str) -> Path:
    """The shipped variant file of a suite (what configs name and `variants show` reads)."""
    return SHIPPED / f"{suite}.{generator}.json"


def parse_tasks(text: str | None, n: int) -> list[int] | None:
    """`--tasks 1,3` -> [1, 3]: distinct task indices in 0..n-1 (ConfigError naming --tasks otherwise)."""
    from clbench_jax.errors import ConfigError

    if text is None:
        return None
    try:
        idx = [int(i) for i in text.split(",")]
    except ValueError:
        raise ConfigError(f"must be comma-separated task indices, not {text!r}", field="--tasks") from None
    bad = [i for i in idx if not 0 <= i < n]
    if bad or len(set(idx)) != len(idx):
        raise ConfigError(f"task indices must be distinct, in 0..{n - 1}, not {text!r}", field="--tasks")
    return idx


def check_variants_out(out: Path, suite: str, generator: str, tasks: list[int] | None, force: bool) -> None:
    """Never overwrite what someone made by default: a shipped file (configs/variants) or a file of another build
    (another suite, generator or task list) needs --force; a rerun of the same build may rewrite its own file."""
    from clbench_jax.errors import OutputError
    from clbench_jax.jsonio import check_writable

    check_writable(out, field="--out")
    if force or not out.exists():
        return
    if out.resolve().parent == SHIPPED:
        raise OutputError("refusing to overwrite a shipped variant file (configs and the quickstart read it); write "
                          "elsewhere with --out, or pass --force", file=str(out), field="--out")
    from clbench_jax.errors import ClbenchError
    from clbench_jax.language.variants import read_variants

    try:
        old = read_variants(out)
        same = (old["suite"], old["generator"].get("name"), [t["index"] for t in old["tasks"]]) == (
            suite, generator, tasks if tasks is not None else [t["index"] for t in old["tasks"]])
        if tasks is None:
            from clbench_jax.tasks.suites import suite_tasks

            same = same and len(old["tasks"]) == len(suite_tasks(suite))
    except ClbenchError:
        same = False
    if not same:
        raise OutputError("refusing to overwrite a file of another build (suite, generator or tasks differ); "
                          "use another --out, or pass --force", file=str(out), field="--out")


def cmd_build(a):
    from clbench_jax.cli import check_args
    from clbench_jax.language import variants as V
    from clbench_jax.tasks.suites import suite_tasks

    check_args(a, n_reset=1, seed=0)
    tasks = parse_tasks(a.tasks, len(suite_tasks(a.suite)))
    out = Path(a.out) if a.out else BUILT / f"{a.suite}.{a.generator}.json"
    check_variants_out(out, a.suite, a.generator, tasks, a.force)
    if a.generator == "llm":
        from clbench_jax.language.llm import LLMConfig, LLMGenerator, load_config

        kw = {k: v for k, v in (("model", a.model), ("base_url", a.base_url), ("cache_dir", a.cache_dir))
              if v is not None}
        gen = LLMGenerator(load_config(a.config, **kw) if a.config else LLMConfig(**kw))
    else:
        from clbench_jax.language.offline import OfflineGenerator

        gen = OfflineGenerator()
    doc = V.build_suite(a.suite, gen, n_reset=a.n_reset, seed=a.seed, check_reset=not a.no_reset_check,
                        tasks=tasks)
    V.write_variants(out, doc)
    print(V.coverage_table([V.coverage(doc)]))
    print(f"wrote {out}")
    failed = [t for t in doc["tasks"] if t.get("error")]
    if failed:  # the file is written (the other tasks are kept); the run still reports failure
        from clbench_jax.errors import ClbenchError

        raise ClbenchError(f"{len(failed)} task(s) failed; rerun to retry them (cached responses are reused): "
                           + "; ".join(t["error"] for t in failed), file=str(out))


def _files(a) -> list[Path]:
    if a.file:
        return [Path(f) for f in a.file]
    suites = [a.suite] if a.suite else ["libero_spatial", "libero_object", "libero_goal", "libero_10"]
    return [default_path(s, a.generator) for s in suites]


def cmd_show(a):
    from clbench_jax.language import variants as V

    docs = [V.read_variants(p) for p in _files(a)]
    print(V.coverage_table([V.coverage(d) for d in docs]))
    if a.task is None and len(docs) > 1:
        return
    for d in docs:
        for t in d["tasks"]:
            if a.task is not None and t["index"] != a.task:
                continue
            print(f"\n{d['suite']}:{t['index']} {t['task']}\n  goal {t['goal']}")
            for v in t["variants"]:
                if not (v["retained"] or a.all):
                    continue
                mark = "+" if v["retained"] else "-"
                extra = f" goal={v['goal']}" if v["condition"] in ("contrast", "swap") and v["retained"] else ""
                extra += " [trivially reachable]" if v.get("trivial") else ""
                extra += f" ({', '.join(v['kinds'])})" if v.get("kinds") else ""
                why = f"  [{'; '.join(v['reasons'])}]" if v["reasons"] else ""
                print(f"  {mark} {v['condition']:10s} {v.get('slot') or '':9s} {v['text']}{extra}{why}")
            for u in t["unavailable"]:
                print(f"  unavailable contrast {u['slot']}: {'; '.join(u['reasons'][:3])}")


def cmd_coverage(a):
    from clbench_jax.language import variants as V

    if a.out:
        from clbench_jax.cli import check_out

        check_out(a.out)
    covs = [V.coverage(V.read_variants(p)) for p in _files(a)]
    print(V.coverage_table(covs))
    if a.out:
        V.plot_coverage(covs, a.out)
        print(f"wrote {a.out}")


def register(sub) -> None:
    p = sub.add_parser("variants", help="instruction variants: paraphrases, minimal contrasts, collisions")
    vs = p.add_subparsers(dest="variants_cmd", required=True)
    b = vs.add_parser("build", help="generate and validate a suite's variants, write the JSON file")
    b.add_argument("--suite", required=True)
    b.add_argument("--generator", choices=["offline", "llm"], default="offline")
    b.add_argument("--out", default=None, help="default: runs/variants/SUITE.GENERATOR.json (the shipped files in "
                                               "configs/variants are only rewritten with --force)")
    b.add_argument("--force", action="store_true", help="overwrite a shipped file or another build's file")
    b.add_argument("--tasks", default=None, help="comma-separated task indices (default: all)")
    b.add_argument("--n-reset", type=int, default=4, help="initial states a contrast must not already satisfy")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--no-reset-check", action="store_true", help="skip the simulator checks (static only)")
    b.add_argument("--config", default=None, help="YAML of LLMConfig fields (language/llm.py); flags override")
    b.add_argument("--model", default=None, help="LLM model (default gpt-4.1-mini)")
    b.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (or $CLBENCH_LLM_BASE_URL)")
    b.add_argument("--cache-dir", default=None, help="raw-response cache (default runs/llm_cache)")
    b.set_defaults(fn=cmd_build)
    for name, fn, hlp in (("show", cmd_show, "print a variant file (coverage, then the variants)"),
                          ("coverage", cmd_coverage, "retained vs excluded per condition and suite")):
        s = vs.add_parser(name, help=hlp)
        s.add_argument("--suite", default=None)
        s.add_argument("--generator", choices=["offline", "llm"], default="offline")
        s.add_argument("--file", nargs="*", default=None, help="variant files instead of the shipped ones")
        if name == "show":
            s.add_argument("--task", type=int, default=None)
            s.add_argument("--all", action="store_true", help="also the excluded candidates")
        else:
            s.add_argument("--out", default=None, help="PNG of the coverage figure")
        s.set_defaults(fn=fn)
