"""Bad input, table-driven: each row is one kind of mistake a user makes (issue 18's list), fed to the real CLI or
Python API. Every row asserts the typed error, that it names the field or file at fault, and that nothing was
written or lost (the working folder is byte-for-byte as before; it holds the row's inputs). CLI rows also go through
`main`: exit code 2 and one line on stderr naming the same thing.

Rows that need trained checkpoints, grids or an LLM server live with those (test_resume.py, test_llm.py,
test_lifelong.py); `KINDS_ELSEWHERE` lists them so the count of covered kinds is stated in one place."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from clbench_jax.errors import (BDDLError, ClbenchError, ConfigError, DataFileError, MissingEntityError,
                                OutputError)

REPO = Path(__file__).resolve().parents[1]
SHIPPED_VARIANTS = REPO / "configs" / "variants" / "libero_goal.offline.json"

TINY_POLICY = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, gmm_hidden=[32], gmm_modes=2)
TRAIN = dict(suite="libero_goal", n_tasks=1, epochs=1, eval_every=1, n_eval=1, horizon=5, batch_size=4,
             lang="onehot", policy_kwargs=TINY_POLICY)
RUN = dict(suite="libero_goal", order=0, n_tasks=1, methods=["seqft"], seeds=[0],
           train={k: v for k, v in TRAIN.items() if k not in ("suite", "n_tasks")},
           demos={"dir": "demos", "n": 1}, grid={"n_rollouts": 1, "horizon": 5})


# ------------------------------------------------------------------------------------------------ inputs
def yaml_file(folder: Path, name: str, doc: dict) -> str:
    path = folder / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def train_yaml(folder: Path, **changes) -> str:
    return yaml_file(folder, "train.yaml", {**TRAIN, **changes})


def run_yaml(folder: Path, **changes) -> str:
    doc = {**RUN, **changes}
    for sect in ("train", "grid", "demos"):
        if f"{sect}_" in changes:
            doc[sect] = {**RUN[sect], **changes.pop(f"{sect}_")}
            doc.pop(f"{sect}_", None)
    return yaml_file(folder, "run.yaml", doc)


def demo_file(path: Path, *, actions=True, nan=False, length=6) -> str:
    """A small LIBERO-layout file for state observations (random values)."""
    from clbench_jax.data.hdf5 import write_demos

    rng = np.random.default_rng(0)
    obs = {"joint_states": rng.normal(size=(length, 7)), "gripper_states": rng.normal(size=(length, 2)),
           "ee_pos": rng.normal(size=(length, 3)), "object_tokens": rng.normal(size=(length, 4, 8)).astype(np.float32),
           "object_token_mask": np.ones((length, 4), bool)}
    act = rng.uniform(-1, 1, (length, 7))
    if nan:
        act[3, 2] = np.nan
    demo = {"obs": obs, "actions": act, "states": np.zeros((length, 4)), "robot_states": np.zeros((length, 9)),
            "rewards": np.zeros(length), "dones": np.eye(length)[-1]}
    write_demos(path, [demo], env_name="synthetic", problem_info={}, bddl_file_name="x.bddl", bddl_file_content="",
                env_args={})
    if not actions:
        with h5py.File(path, "r+") as f:
            del f["data/demo_0/actions"]
    return str(path)


def first_task_demos(folder: Path, **kw) -> str:
    from clbench_jax.tasks.suites import ordered_tasks

    folder.mkdir(exist_ok=True)
    demo_file(folder / f"{ordered_tasks('libero_goal', 0)[0].name}_demo.hdf5", **kw)
    return str(folder)


def blocker(folder: Path) -> str:
    """A path that cannot be created, for any user (root too): it lies under a regular file."""
    (folder / "a_file").write_text("x")
    return str(folder / "a_file" / "out")


BDDL = """(define (problem LIBERO_Tabletop_Manipulation)
  (:domain robosuite)
  (:language put the bowl on the plate)
  (:regions
    (plate_region
        (:target main_table)
        (:ranges ((0.0 0.0 0.1 0.1)))
    )
    (rim
        (:target bowl_drainer_1)
        (:ranges ((0.0 0.0 0.1 0.1)))
    )
  )
  (:fixtures main_table - table)
  (:objects akita_black_bowl_1 - akita_black_bowl plate_1 - plate)
  (:init (On akita_black_bowl_1 main_table_plate_region))
  (:goal (And GOAL))
)
"""


def bddl(folder: Path, goal: str) -> str:
    path = folder / "task.bddl"
    path.write_text(BDDL.replace("GOAL", goal))
    return str(path)


# ------------------------------------------------------------------------------------------------ actions
def cli(*argv) -> list[str]:
    """A CLI row's command line (run by `run_cli` the way `main` does, letting the error out, and then by `main`)."""
    return [str(a) for a in argv]


def run_cli(argv: list[str]) -> None:
    from clbench_jax.cli import build_parser

    args = build_parser().parse_args(argv)
    args.fn(args)


def api_train(path):
    """A Python API row: the call to make once the inputs are written."""
    from clbench_jax.lifelong.config import load_config

    return lambda: load_config(path)


def api_run(path):
    from clbench_jax.eval.run import load_run_config

    return lambda: load_run_config(path)


def parse(path):
    from clbench_jax.tasks.bddl import parse_bddl

    return lambda: parse_bddl(path, suite="custom")


def other_suite_variants(folder: Path) -> str:
    import json

    doc = json.loads((REPO / "configs" / "variants" / "libero_spatial.offline.json").read_text())
    (folder / "spatial.json").write_text(json.dumps(doc))
    return str(folder / "spatial.json")


def partial_variants(folder: Path) -> str:
    import json

    doc = json.loads(SHIPPED_VARIANTS.read_text())
    doc["tasks"] = doc["tasks"][1:]
    (folder / "partial.json").write_text(json.dumps(doc))
    return str(folder / "partial.json")


# (id, make the call from the work folder -> callable, error type, substrings the error must name)
ROWS = [
    # train configs (`clbench train`)
    ("train epochs: ten", lambda d: cli("train", "--config", train_yaml(d, epochs="ten"), "--out", d / "o"),
     ConfigError, ["epochs", "train.yaml", "'ten'"]),
    ("train horizon: -5", lambda d: cli("train", "--config", train_yaml(d, horizon=-5), "--out", d / "o"),
     ConfigError, ["horizon", ">= 1"]),
    ("train max_batches: 0", lambda d: cli("train", "--config", train_yaml(d, max_batches=0), "--out", d / "o"),
     ConfigError, ["max_batches"]),
    ("train order: 99", lambda d: cli("train", "--config", train_yaml(d, order=99), "--out", d / "o"),
     ConfigError, ["order", "0..20"]),
    ("train unknown key", lambda d: api_train(train_yaml(d, epoch=3)), ConfigError, ["epoch", "train.yaml"]),
    ("train unknown policy", lambda d: api_train(train_yaml(d, policy="bc_mlp")), ConfigError, ["policy"]),
    ("train unknown suite", lambda d: api_train(train_yaml(d, suite="libero_100")), ConfigError, ["suite"]),
    ("train n_tasks: 0", lambda d: api_train(train_yaml(d, n_tasks=0)), ConfigError, ["n_tasks"]),
    ("train n_tasks past the suite", lambda d: api_train(train_yaml(d, n_tasks=11)), ConfigError,
     ["n_tasks", "at most 10"]),
    ("train seed: -1", lambda d: api_train(train_yaml(d, seed=-1)), ConfigError, ["seed"]),
    ("train lr: fast", lambda d: api_train(train_yaml(d, lr="fast")), ConfigError, ["lr", "a number"]),
    ("train policy_kwargs wrong type", lambda d: api_train(train_yaml(
        d, policy_kwargs=dict(TINY_POLICY, embed_dim="big"))), ConfigError, ["policy_kwargs.embed_dim"]),
    ("train algo_kwargs unknown", lambda d: api_train(train_yaml(d, algo="er", algo_kwargs={"lam": 1})),
     ConfigError, ["algo_kwargs", "lam"]),
    ("train missing demos", lambda d: cli("train", "--config", train_yaml(d), "--demos", d, "--out", d / "o"),
     DataFileError, ["demo file not found", "open_the_middle_drawer_of_the_cabinet_demo.hdf5"]),
    ("train NaN in demo actions", lambda d: cli("train", "--config", train_yaml(d), "--demos",
                                                       first_task_demos(d / "demos", nan=True), "--out", d / "o"),
     DataFileError, ["non-finite", "data/demo_0/actions", "_demo.hdf5"]),
    ("train unwritable --out", lambda d: cli("train", "--config", train_yaml(d), "--demos",
                                                    first_task_demos(d / "demos"), "--out", blocker(d)),
     OutputError, ["a_file"]),
    # run configs (`clbench run`)
    ("run seeds: '0,1'", lambda d: cli("run", run_yaml(d, seeds="0,1"), "--out", d / "o"), ConfigError,
     ["seeds", "a list of integers"]),
    ("run seeds: 5", lambda d: cli("run", run_yaml(d, seeds=5), "--out", d / "o"), ConfigError, ["seeds"]),
    ("run seeds: [-1]", lambda d: api_run(run_yaml(d, seeds=[-1])), ConfigError, ["seeds"]),
    ("run --seeds a,b", lambda d: cli("run", run_yaml(d), "--seeds", "a,b", "--out", d / "o"), ConfigError,
     ["--seeds"]),
    ("run demos: {num: 5}", lambda d: cli("run", run_yaml(d, demos_={"num": 5}), "--out", d / "o"),
     ConfigError, ["demos.num"]),
    ("run demos.n: 0", lambda d: api_run(run_yaml(d, demos_={"n": 0})), ConfigError, ["demos.n"]),
    ("run train epochs: ten", lambda d: api_run(run_yaml(d, train_={"epochs": "ten"})), ConfigError,
     ["train.epochs"]),
    ("run train.lr: -1", lambda d: api_run(run_yaml(d, train_={"lr": -1})),
     ConfigError, ["train.lr"]),
    ("run unknown method", lambda d: api_run(run_yaml(d, methods=["sgd"])), ConfigError, ["methods"]),
    ("run order: 21", lambda d: api_run(run_yaml(d, order=21)), ConfigError, ["order"]),
    ("run given a training config", lambda d: cli("run", train_yaml(d, algo="er"), "--out", d / "o"), ConfigError,
     ["training config", "clbench train", "train.yaml"]),
    ("train given a run config", lambda d: cli("train", "--config", run_yaml(d), "--out", d / "o"), ConfigError,
     ["run config", "clbench run", "run.yaml"]),
    ("report without a grid", lambda d: cli("report", d), ClbenchError, ["episodes.h5"]),
    ("run unknown top key", lambda d: api_run(run_yaml(d, epochs=3)), ConfigError, ["epochs", "unknown"]),
    ("run grid.n_rollouts: -1", lambda d: cli("run", run_yaml(d, grid_={"n_rollouts": -1}), "--out", d / "o"),
     ConfigError, ["grid.n_rollouts"]),
    ("run grid.horizon: -5", lambda d: api_run(run_yaml(d, grid_={"horizon": -5})), ConfigError,
     ["grid.horizon"]),
    ("run grid.chunk: 0", lambda d: api_run(run_yaml(d, grid_={"chunk": 0})), ConfigError, ["grid.chunk"]),
    ("run grid.backend: gpu", lambda d: api_run(run_yaml(d, grid_={"backend": "gpu"})), ConfigError,
     ["grid.backend"]),
    ("run grid.conditions typo", lambda d: api_run(run_yaml(d, grid_={"conditions": ["original", "paraphrse"]})),
     ConfigError, ["grid.conditions"]),
    ("run grid.variants missing", lambda d: cli("run", run_yaml(d, grid_={"variants": str(d / "nope.json")}),
                                                         "--out", d / "o"),
     ConfigError, ["grid.variants", "nope.json", "not found"]),
    ("run grid.variants of another suite", lambda d: api_run(run_yaml(
        d, grid_={"variants": other_suite_variants(d)})), ConfigError, ["grid.variants", "libero_spatial"]),
    ("run grid.variants without a run task", lambda d: api_run(run_yaml(
        d, grid_={"variants": partial_variants(d)})), ConfigError, ["grid.variants", "no variants"]),
    ("run unwritable --out", lambda d: cli("run", run_yaml(d), "--out", blocker(d)), OutputError,
     ["a_file", "--out"]),
    # demos (`clbench demos ...`)
    ("demos collect unwritable --out", lambda d: cli("demos", "collect", "--task", "libero_goal:7", "--n", 1,
                                                             "--out", blocker(d)), OutputError, ["a_file", "--out"]),
    ("demos collect --n 0", lambda d: cli("demos", "collect", "--n", 0, "--out", d / "o"), ConfigError,
     ["--n"]),
    ("demos collect --horizon 0", lambda d: cli("demos", "collect", "--horizon", 0, "--out", d / "o"),
     ConfigError, ["--horizon"]),
    ("demos inspect without actions", lambda d: cli("demos", "inspect", demo_file(d / "x.hdf5", actions=False)),
     DataFileError, ["data/demo_0/actions", "x.hdf5"]),
    ("demos inspect truncated file", lambda d: cli("demos", "inspect", truncated(d / "t.hdf5")),
     DataFileError, ["t.hdf5"]),
    ("demos video --every 0", lambda d: cli("demos", "video", demo_file(d / "x.hdf5"), "--every", 0, "--out",
                                                    d / "v.gif"), ConfigError, ["--every"]),
    ("demos video unwritable --out", lambda d: cli("demos", "video", demo_file(d / "x.hdf5"), "--out",
                                                           blocker(d)), OutputError, ["a_file"]),
    # sim and quickstart (checked in the CLI layer before any scene is built)
    ("sim rollout --n 0", lambda d: cli("sim", "rollout", "--n", 0), ConfigError, ["--n"]),
    ("sim rollout --horizon -3", lambda d: cli("sim", "rollout", "--horizon", -3), ConfigError, ["--horizon"]),
    ("quickstart --n 0", lambda d: cli("quickstart", "--n", 0), ConfigError, ["--n"]),
    ("quickstart --horizon 0", lambda d: cli("quickstart", "--horizon", 0), ConfigError, ["--horizon"]),
    ("sim render --size 0", lambda d: cli("sim", "render", "libero_goal:0", "--size", 0, "--out", d / "x.png"),
     ConfigError, ["--size"]),
    ("sim render unwritable --out", lambda d: cli("sim", "render", "libero_goal:0", "--out", blocker(d)),
     OutputError, ["a_file"]),
    ("sim export unwritable --out", lambda d: cli("sim", "export", "libero_goal:0", "--out", blocker(d)),
     OutputError, ["a_file"]),
    ("tasks show unknown task", lambda d: cli("tasks", "show", "libero_goal:99"), ClbenchError, ["index"]),
    # variants (`clbench variants build`)
    ("variants --tasks a,b", lambda d: cli("variants", "build", "--suite", "libero_goal", "--tasks", "a,b"),
     ConfigError, ["--tasks"]),
    ("variants --tasks 99", lambda d: cli("variants", "build", "--suite", "libero_goal", "--tasks", "99"),
     ConfigError, ["--tasks", "0..9"]),
    ("variants --tasks -1", lambda d: cli("variants", "build", "--suite", "libero_goal", "--tasks", "-1"),
     ConfigError, ["--tasks"]),
    ("variants --n-reset 0", lambda d: cli("variants", "build", "--suite", "libero_goal", "--n-reset", 0),
     ConfigError, ["--n-reset"]),
    ("variants unknown suite", lambda d: cli("variants", "build", "--suite", "libero_100"), ClbenchError,
     ["suite"]),
    ("variants onto a shipped file", lambda d: cli("variants", "build", "--suite", "libero_goal", "--tasks",
                                                           "8", "--no-reset-check", "--out", SHIPPED_VARIANTS),
     OutputError, ["shipped", "libero_goal.offline.json", "--force"]),
    ("variants onto another build's file", lambda d: cli(
        "variants", "build", "--suite", "libero_goal", "--tasks", "8", "--no-reset-check", "--out",
        other_suite_variants(d)), OutputError, ["spatial.json", "another build"]),
    ("variants unwritable --out", lambda d: cli("variants", "build", "--suite", "libero_goal", "--out",
                                                        blocker(d)), OutputError, ["a_file"]),
    ("variants show missing file", lambda d: cli("variants", "show", "--file", d / "none.json"), DataFileError,
     ["none.json", "not found"]),
    # BDDL (parse time)
    ("bddl (On bowl bowl)", lambda d: parse(bddl(d, "(On akita_black_bowl_1 akita_black_bowl_1)")),
     BDDLError, ["task.bddl:17", "itself", "akita_black_bowl_1"]),
    ("bddl region on a missing object", lambda d: parse(bddl(d, "(On plate_1 bowl_drainer_1_rim)")),
     MissingEntityError, ["task.bddl:10", "bowl_drainer_1", "line 17"]),
]


def truncated(path: Path) -> str:
    demo_file(path)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    return str(path)


# Kinds covered by tests in other files (named there with the same typed-error and nothing-lost checks).
KINDS_ELSEWHERE = {
    "test_llm.py": ["LLM 200 with an HTML page", "cache key without the endpoint", "connection refused (fail fast)",
                    "401 echoing the API key (redacted)", "dead server (failure budget)", "LLM config unknown key"],
    "test_lifelong.py": ["NaN loss stops training (stage, epoch)"],
    "test_resume.py": ["truncated orbax checkpoint on resume", "truncated grid chunk", "corrupt grid.json",
                       "SIGKILL mid-stage", "SIGKILL mid-chunk", "SIGKILL mid demo collection"],
    "test_bad_inputs.py (own tests)": ["variants build without --out keeps the shipped file", "NaN in JSON",
                                       "sim rollout --n 1000000", "config folder locked by a failed start",
                                       "lr: 1e-3 read by YAML as a string"],
}


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input(row, tmp_path, monkeypatch, capsys):
    from clbench_jax.cli import main

    name, make, err, named = row
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # default outputs (runs/...) would land here
    call = make(work)  # the row's inputs are written now; a CLI row gives its argv
    shipped = SHIPPED_VARIANTS.read_bytes()
    before = snapshot(work)
    with pytest.raises(err) as e:
        run_cli(call) if isinstance(call, list) else call()
    msg = str(e.value)
    for s in named:
        assert s in msg, f"{name}: {s!r} not named in: {msg}"
    assert snapshot(work) == before, f"{name}: something was written or removed"
    assert SHIPPED_VARIANTS.read_bytes() == shipped
    if isinstance(call, list):  # the same through `main`: exit 2, one line naming it, still nothing written
        capsys.readouterr()
        assert main(call) == 2
        err_text = capsys.readouterr().err.strip()
        assert "\n" not in err_text and err_text.startswith("clbench: error: ") and named[0] in err_text
        assert snapshot(work) == before


def test_row_count():
    """The table plus the kinds covered elsewhere: at least the 40 kinds of issue 18."""
    assert len(ROWS) + sum(len(v) for v in KINDS_ELSEWHERE.values()) >= 40
    assert len({r[0] for r in ROWS}) == len(ROWS)


def test_yaml_float_strings_and_strict_json(tmp_path):
    """`lr: 1e-3` (YAML 1.1 reads a string) is the number 0.001; JSON written by the project never holds NaN."""
    import json

    from clbench_jax.jsonio import write_json
    from clbench_jax.lifelong.config import load_config

    path = tmp_path / "t.yaml"
    path.write_text("lr: 1e-3\nend_lr: 1.0e-5\nepochs: 3\n")
    assert yaml.safe_load(path.read_text())["lr"] == "1e-3"  # what YAML gives
    cfg = load_config(path)
    assert cfg.lr == 0.001 and isinstance(cfg.lr, float) and cfg.end_lr == 1e-5 and cfg.epochs == 3
    write_json(tmp_path / "m.json", {"loss": [float("nan"), 1.5, float("inf")], "x": {"y": float("-inf")}})
    text = (tmp_path / "m.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}")) == {"loss": [None, 1.5, None],
                                                                                    "x": {"y": None}}


def test_variants_build_without_out_keeps_the_shipped_file(tmp_path, monkeypatch, capsys):
    """Without --out a build goes to runs/variants/ (the shipped file, which quickstart reads, is untouched); a rerun
    of the same build may rewrite its own file."""
    from clbench_jax.cli import main

    monkeypatch.chdir(tmp_path)
    shipped = SHIPPED_VARIANTS.read_bytes()
    assert main(["variants", "build", "--suite", "libero_goal", "--tasks", "8", "--no-reset-check"]) == 0
    assert SHIPPED_VARIANTS.read_bytes() == shipped
    out = tmp_path / "runs" / "variants" / "libero_goal.offline.json"
    assert f"wrote {Path('runs/variants/libero_goal.offline.json')}" in capsys.readouterr().out
    from clbench_jax.language.variants import read_variants

    assert [t["index"] for t in read_variants(out)["tasks"]] == [8]
    assert main(["variants", "build", "--suite", "libero_goal", "--tasks", "8", "--no-reset-check"]) == 0  # rerun
    assert main(["variants", "build", "--suite", "libero_goal", "--tasks", "7", "--no-reset-check"]) == 2  # another
    assert "another build" in capsys.readouterr().err


def test_huge_rollout_is_refused_before_it_starts(capsys):
    """`sim rollout --n 1000000` would need far more memory than there is: refused at once (it used to hang)."""
    from clbench_jax.cli import main

    assert main(["sim", "rollout", "--n", "1000000", "--horizon", "5"]) == 2
    err = capsys.readouterr().err
    assert "--n" in err and "GiB" in err and "smaller --n" in err


def test_main_exit_codes_and_debug(tmp_path, capsys, monkeypatch):
    """One line and exit 2 for an expected failure; --debug (anywhere) adds the traceback; a bug is exit 1 with
    one line that points at --debug."""
    from clbench_jax import cli

    assert cli.main(["sim", "rollout", "--n", "0", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("clbench: error:")

    def boom(a):
        raise RuntimeError("unexpected")

    monkeypatch.setattr(cli, "cmd_tasks_list", boom)
    assert cli.main(["tasks", "list"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "clbench: internal error: RuntimeError: unexpected (rerun with --debug for the traceback)"


def test_corrected_rerun_is_not_refused(tmp_path):
    """A start that failed on bad input leaves nothing behind, so the corrected rerun runs in the same folder."""
    from clbench_jax.lifelong.config import make_config
    from clbench_jax.lifelong.loop import _config_to_write

    out = tmp_path / "o"
    out.mkdir()
    cfg = make_config(dict(TRAIN, demos_dir=str(tmp_path)))
    (out / "config.yaml").write_text("epochs: 7\n")  # a folder left by an older, failed start
    assert _config_to_write(str(out), cfg) is not None  # nothing finished there: the new config replaces it
    (out / "checkpoints" / "0").mkdir(parents=True)
    with pytest.raises(ClbenchError, match="different config"):
        _config_to_write(str(out), cfg)


def test_a_folder_made_before_a_field_was_added_resumes(tmp_path):
    """A finished stage's folder whose config.yaml predates a TrainConfig field (here `select`) holds the same run
    when the field has its default; a non-default value is another run."""
    import yaml

    from clbench_jax.lifelong.config import dump_config, make_config
    from clbench_jax.lifelong.loop import _config_to_write

    out = tmp_path / "o"
    (out / "checkpoints" / "0").mkdir(parents=True)
    cfg = make_config(dict(TRAIN, demos_dir=str(tmp_path)))
    old = yaml.safe_load(dump_config(cfg))
    del old["select"]
    (out / "config.yaml").write_text(yaml.safe_dump(old))
    assert _config_to_write(str(out), cfg) is None
    with pytest.raises(ClbenchError, match="different config \\(select: 'best' != 'last'\\)"):
        _config_to_write(str(out), make_config(dict(TRAIN, demos_dir=str(tmp_path), select="last")))
