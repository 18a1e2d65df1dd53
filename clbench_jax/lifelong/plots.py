"""Result plots: the success matrix c[i][j] and the per-stage learning curves (PNG, written atomically)."""

from __future__ import annotations

import numpy as np

from clbench_jax.jsonio import save_figure


def plot_success_matrix(c, labels: list[str], path: str, title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = np.asarray(c, float)
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * c.shape[1], 1.0 + 0.6 * c.shape[0]))
    ax.imshow(np.ma.masked_invalid(c), vmin=0.0, vmax=1.0, cmap="viridis")
    for i in range(c.shape[0]):
        for j in range(c.shape[1]):
            if np.isfinite(c[i, j]):
                ax.text(j, i, f"{c[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if c[i, j] < 0.6 else "black")
    ax.set_xlabel("task j (evaluated)")
    ax.set_ylabel("after stage i")
    ax.set_xticks(range(c.shape[1]), [str(x) for x in labels], rotation=90, fontsize=6)
    ax.set_yticks(range(c.shape[0]))
    ax.set_title(title or "success c[i][j]", fontsize=9)
    save_figure(fig, path)
    plt.close(fig)


def plot_learning_curves(curves: list[list[float]], epochs: list[list[int]], labels: list[str], path: str,
                         title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for c, e, lab in zip(curves, epochs, labels):
        ax.plot(e, c, marker="o", ms=3, label=lab)
    ax.set_xlabel("epoch")
    ax.set_ylabel("success")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title or "learning curves (success on the stage's task)", fontsize=9)
    if len(labels) <= 12:
        ax.legend(fontsize=6)
    save_figure(fig, path)
    plt.close(fig)
