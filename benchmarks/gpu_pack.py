"""Pack what benchmarks/gpu.sh needs on a GPU machine that has no network (run here, by benchmarks/gpu_wheels.sh).

A device call carries at most 64 MiB of working tree, the repository's own files included, and the machine has no
package registry. So:

    repack SRC DST        a wheel rewritten with LZMA compression: the same files (so the same RECORD hashes),
                          smaller (warp-lang 1.18.0: 149 MB deflate -> ~100 MB); pip installs it as any wheel
    scenes OUT            LIBERO's libero_goal scene without LIBERO's packages: the scene captures this project
                          caches (libero_source: ~/.cache/clbench_jax/libero_scenes), only the asset files their
                          MJCF names, libero_goal's init files, the five suites' BDDL files, the packages' METADATA
                          (the cache is keyed by their versions) and the cached MiniLM embeddings; a prebuilt native
                          OSC controller for a machine without a C compiler -> OUT (.tar.xz; the packages' 1.2 GB
                          installed -> ~25 MB)
    groups SRC DIR MB     the files of SRC dealt into carry folders DIR/1, DIR/2, ... of at most MB each (a file
                          too large for one folder goes in parts, `NAME.part-KK-of-NN`), with DIR/1/SHA256SUMS of
                          the whole files; prints the folders (one device call each)

benchmarks/gpu.sh joins the parts, checks SHA256SUMS and installs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MB = 10**6
# Where gpu.sh installs the carried wheels on the device: the native controller's cache tag names this path.
DEVICE_SITE = "/tmp/site"


def repack(src: Path, dst: Path) -> None:
    """Rewrite a wheel with every member LZMA-compressed (contents and order unchanged)."""
    tmp = dst.with_name(dst.name + ".tmp")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_LZMA) as zout:
        for info in zin.infolist():
            out = zipfile.ZipInfo(info.filename, info.date_time)
            out.external_attr, out.create_system = info.external_attr, info.create_system
            out.compress_type = zipfile.ZIP_LZMA
            with zin.open(info) as f:
                zout.writestr(out, f.read())
    os.replace(tmp, dst)
    print(f"repacked {src.name}: {src.stat().st_size / MB:.1f} MB -> {dst.stat().st_size / MB:.1f} MB")


def scene_files(suite: str) -> tuple[list, set[str], str]:
    """-> (the suite's TaskSpecs, asset paths its cached scene captures name ({token}/relative), cache tag)."""
    from clbench_jax.sim import libero_source
    from clbench_jax.tasks.suites import suite_tasks

    tasks = suite_tasks(suite)
    libero_source.prepare(tasks)  # capture any uncached task here, where LIBERO is installed
    files: set[str] = set()
    for t in tasks:
        files |= set(re.findall(r'file="(\{[a-z_]+\}/[^"]*)"', libero_source.source(t).xml))
    return tasks, files, libero_source.cache_root().name


def native_osc_prebuilt(out: Path) -> None:
    """native_osc.c compiled for the device's mujoco (DEVICE_SITE/mujoco, same release as here), under the cache
    name native.install_controller looks for there; gpu.sh uses it only where the machine has no C compiler."""
    import mujoco

    from clbench_jax.sim import native

    mj_dir = Path(mujoco.__file__).parent
    lib = sorted(mj_dir.glob("libmujoco.so*"))[0]
    dev_lib = f"{DEVICE_SITE}/mujoco/{lib.name}"
    src = native._SOURCE.read_bytes()
    tag = hashlib.sha256(src + mujoco.__version__.encode() + dev_lib.encode()).hexdigest()[:12]
    out.mkdir(parents=True, exist_ok=True)
    so = out / f"native_osc-{tag}.so"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{mj_dir / 'include'}", str(native._SOURCE), "-o", str(so),
                    f"-L{mj_dir}", f"-l:{lib.name}", f"-Wl,-rpath,{DEVICE_SITE}/mujoco", "-lm"], check=True)


def scenes(out: Path, suite: str) -> None:
    from importlib import metadata

    from clbench_jax.paths import bddl_path, cache_dir, init_states_path, libero_root
    from clbench_jax.sim import libero_source

    tasks, files, tag = scene_files(suite)
    dirs = libero_source._package_dirs()
    stage = out.with_name(out.name + ".staging")
    shutil.rmtree(stage, ignore_errors=True)
    site, cache = stage / "site", stage / "cache"
    # Importable stand-ins for the three packages the cached MJCF points into: find_spec locates each (without
    # importing it; the empty __init__ makes each a regular package, found before any namespace portion) and
    # resolves `{token}/...` under it. Nothing imports them on the device.
    for tok, d in dirs.items():
        mod = libero_source._PATH_PACKAGES[tok]
        (site / mod).mkdir(parents=True, exist_ok=True)
        (site / mod / "__init__.py").write_text("# stand-in: asset files only (benchmarks/gpu_pack.py)\n")
    n_bytes = 0
    for f in sorted(files):
        tok, rel = f[1:].split("}/", 1)
        src = Path(libero_source.resolve_paths(f))
        dst = site / libero_source._PATH_PACKAGES[tok] / os.path.normpath(rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        n_bytes += src.stat().st_size
    # LIBERO's data folder (libero/libero/...): the suite's init-state files, and the BDDL files of all five suites
    # (660 KB: finding a scene's tasks parses every suite, tasks.suites.scene_tasks).
    from clbench_jax.tasks.suites import SUITE_TASK_NAMES

    srcs = [init_states_path(suite, t.name) for t in tasks]
    srcs += [bddl_path(s, n) for s, names in SUITE_TASK_NAMES.items() for n in names]
    for src in srcs:
        dst = site / "libero" / "libero" / src.relative_to(libero_root())
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    # The packages' metadata: libero_source keys its cache by their versions.
    for name in libero_source.versions():
        dist = metadata.distribution(name)
        info = site / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.metadata['Name']}\n"
                                       f"Version: {dist.version}\n")
    # The cache: the suite's scene captures, the MiniLM embeddings of known instructions.
    src_cache = cache_dir()
    shutil.copytree(src_cache / "libero_scenes" / tag / suite, cache / "libero_scenes" / tag / suite)
    emb = src_cache / "minilm_embeddings.npz"
    if emb.is_file():
        shutil.copy2(emb, cache / emb.name)
    native_osc_prebuilt(stage / "prebuilt")
    (stage / "PACK.json").write_text(json.dumps({"suite": suite, "cache_tag": tag, "tasks": [t.name for t in tasks],
                                                 "asset_files": len(files), "asset_bytes": n_bytes,
                                                 "versions": libero_source.versions()}, indent=1))
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        tar.add(stage, arcname="libero_min")
    os.replace(tmp, out)
    shutil.rmtree(stage)
    print(f"{out}: {len(tasks)} tasks, {len(files)} asset files ({n_bytes / MB:.1f} MB) -> "
          f"{out.stat().st_size / MB:.1f} MB (cache tag {tag})")


def groups(src: Path, d: Path, budget_mb: float) -> int:
    """Deal the files of `src` into carry folders d/1, d/2, ... of at most `budget_mb` each: the files that fit a
    folder first (largest first, first fit), then each larger file in parts that fill what is left, in order
    (`NAME.part-KK-of-NN`). d/1/SHA256SUMS holds the whole files' digests. Prints the folders; -> their number."""
    budget = int(budget_mb * MB)
    for g in d.glob("[0-9]*"):
        shutil.rmtree(g)
    files = sorted((p for p in src.iterdir() if p.is_file()), key=lambda p: -p.stat().st_size)
    bins: list[list] = []  # per folder: (file, offset, size, part index or -1)
    free = lambda b: budget - sum(x[2] for x in b)  # noqa: E731
    for p in files:
        size = p.stat().st_size
        if size <= budget:
            b = next((b for b in bins if free(b) >= size), None)
            if b is None:
                bins.append(b := [])
            b.append((p, 0, size, -1))
    parts: dict[Path, list] = {}
    for p in files:
        size, off = p.stat().st_size, 0
        if size <= budget:
            continue
        for b in bins:
            if off < size and free(b) >= MB:
                n = min(free(b), size - off)
                b.append((p, off, n, len(parts.setdefault(p, []))))
                parts[p].append(b[-1])
                off += n
        while off < size:
            n = min(budget, size - off)
            bins.append([(p, off, n, len(parts.setdefault(p, [])))])
            parts[p].append(bins[-1][-1])
            off += n
    for k, b in enumerate(bins, 1):
        g = d / str(k)
        g.mkdir(parents=True)
        for p, off, size, i in b:
            name = p.name if i < 0 else f"{p.name}.part-{i:02d}-of-{len(parts[p]):02d}"
            with open(p, "rb") as f, open(g / name, "wb") as o:
                f.seek(off)
                o.write(f.read(size))
    (d / "1" / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
                                                for p in sorted(files)))
    for k in range(1, len(bins) + 1):
        g = d / str(k)
        total = sum(p.stat().st_size for p in g.iterdir())
        print(f"  {g.relative_to(ROOT) if g.is_relative_to(ROOT) else g}  {total / MB:5.1f} MB: "
              + " ".join(sorted(p.name for p in g.iterdir())))
    return len(bins)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("repack")
    r.add_argument("src", type=Path)
    r.add_argument("dst", type=Path)
    s = sub.add_parser("scenes")
    s.add_argument("out", type=Path)
    s.add_argument("--suite", default="libero_goal")
    g = sub.add_parser("groups")
    g.add_argument("src", type=Path, help="folder of the files to carry")
    g.add_argument("dir", type=Path, help="where the carry folders 1, 2, ... go")
    g.add_argument("budget_mb", type=float)
    a = ap.parse_args(argv)
    if a.cmd == "repack":
        repack(a.src, a.dst)
    elif a.cmd == "scenes":
        scenes(a.out, a.suite)
    else:
        groups(a.src, a.dir, a.budget_mb)


if __name__ == "__main__":
    main()
