"""Adapters for the BC policies: LoRA and full weight deltas on named Dense layers, attached without touching the
policies' code, so a frozen (pretrained) base is steered by few parameters (TAIL, L2M, IsCiL, DMPEL use this).

LoRA (Hu et al., ICLR 2022, Eq. 3: h = W0 x + B A x, the update scaled by alpha / r; A random and B zero at init, so
a new adapter leaves the base's function unchanged). With row vectors as here: y = x W0 + b + s (x A) B, A (d_in, r),
B (r, d_out). A `full` adapter is a dense delta, y = x W0 + b + x dW + db: what a trainable copy of the layer
amounts to (TAIL's and IsCiL's per-task fusion and head layers).

An adapter tree mirrors the policy's module paths, one entry per adapted part:
    {"layer_0": {"qkv": {"q": {"A", "B"}, "v": {"A", "B"}}}, "gmm": {"mlp_0": {"all": {"W", "b"}}}}
Attention projections (`qkv`: one Dense for queries, keys and values) are adapted on their q and v columns only, as
TAIL, L2M and DMPEL adapt q and v. A leaf may carry a leading axis N: one adapter per sample (retrieval and routing
pick adapters per input); the layer's input then has N, or a multiple of N (B*T frames), as its leading axis.

Layers are chosen by selectors, a group name or a module path ('gmm/logits', globs allowed):
    attn       temporal-decoder attention q, v (layer_i/qkv)      attn_out  temporal-decoder attention outputs
    mlp        temporal-decoder MLPs                               head      the GMM head (gmm/*)
    encoder    observation encoders: object tokens, ResNet-T FiLM and keypoint projections, BC-ViLT's object /
               patch projections and its spatial attention q, v    encoder_mlp  BC-ViLT's spatial MLPs and outputs
    fusion     language projections (lang_proj, lang_temporal, lang_spatial)
    proprio    proprioception projections (proprio_proj, joint_proj, gripper_proj)
A spec is ((selector, rank), ...): rank an int (LoRA) or "full"; the first selector matching a layer wins. BC-RNN's
LSTM gates are fused inside flax's OptimizedLSTMCell (no Dense call to intercept): its encoders, fusion and head take
adapters, its recurrence cannot (asking for it is an AdapterError).

The adapters are added by a flax method interceptor around the base policy's own apply: with no adapter attached the
policy runs exactly its own code (bit-identical outputs, tests/test_adapters.py).
"""

from __future__ import annotations

import abc
import fnmatch
import re
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.traverse_util import flatten_dict

from clbench_jax.errors import AdapterError
from clbench_jax.policies.gmm import GMMHead, nll_loss

GROUPS = ("attn", "attn_out", "mlp", "head", "encoder", "encoder_mlp", "fusion", "proprio", "rnn")
FUSION = ("lang_proj", "lang_temporal", "lang_spatial")
PROPRIO = ("proprio_proj", "joint_proj", "gripper_proj")


def layer_group(path: tuple[str, ...]) -> str:
    """The group of the Dense layer at module `path` (see the module docstring)."""
    top = path[0]
    if top == "gmm":
        return "head"
    if top in FUSION:
        return "fusion"
    if top in PROPRIO:
        return "proprio"
    if re.fullmatch(r"layer_\d+", top):
        return {"qkv": "attn", "out": "attn_out"}.get(path[1], "mlp")
    if re.fullmatch(r"spatial_\d+", top):
        return "encoder" if path[1] == "qkv" else "encoder_mlp"
    if top.startswith("OptimizedLSTMCell") or top.startswith("lstm_"):
        return "rnn"
    return "encoder"


@dataclass(frozen=True)
class Layer:
    """One adapted part of a Dense layer: its module path, which output columns it adds to, and its adapter kind."""

    path: tuple[str, ...]
    part: str                 # "q", "v" (columns of an attention qkv projection) or "all"
    cols: tuple[int, int]     # the output columns of the Dense this part adds to
    d_in: int
    rank: int | None          # None: a full delta
    bias: bool                # a full delta with a bias (the base layer has one)
    group: int                # index of the spec entry that chose this layer

    @property
    def name(self) -> str:
        return "/".join(self.path) + ("" if self.part == "all" else f":{self.part}")

    @property
    def d_out(self) -> int:
        return self.cols[1] - self.cols[0]

    @property
    def key(self) -> tuple[str, ...]:
        return self.path + (self.part,)


def normalize_spec(spec) -> tuple[tuple[str, int | str], ...]:
    """((selector, rank), ...) from YAML lists too; a rank is a positive int or 'full'."""
    out = []
    for entry in spec:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise AdapterError(f"an adapter entry is [selector, rank], got {entry!r}", field="adapters")
        sel, rank = entry
        if rank != "full" and not (isinstance(rank, (int, np.integer)) and not isinstance(rank, bool) and rank >= 1):
            raise AdapterError(f"adapter rank for {sel!r} must be a positive integer or 'full', got {rank!r}",
                               field="adapters")
        out.append((str(sel), rank if rank == "full" else int(rank)))
    if not out:
        raise AdapterError("the adapter spec names no layer", field="adapters")
    return tuple(out)


def _matches(selector: str, path: tuple[str, ...]) -> bool:
    if selector in GROUPS:
        return layer_group(path) == selector
    return fnmatch.fnmatchcase("/".join(path), selector)


def adapter_layout(base_params, spec) -> tuple[Layer, ...]:
    """The adapted parts of `base_params`' Dense layers under `spec`. A LoRA rank larger than a layer's input or
    output width, or a selector that matches nothing, is an AdapterError naming the layer / selector."""
    spec = normalize_spec(spec)
    flat = flatten_dict(base_params)
    dense = sorted(k[:-1] for k, v in flat.items() if k[-1] == "kernel" and np.ndim(v) == 2)
    layers, used = [], set()
    for path in dense:
        gi = next((i for i, (sel, _) in enumerate(spec) if _matches(sel, path)), None)
        if gi is None:
            continue
        used.add(gi)
        d_in, d_out = np.shape(flat[path + ("kernel",)])
        bias = path + ("bias",) in flat
        rank = spec[gi][1]
        if path[-1] == "qkv":  # q and v columns of the fused projection
            inner = d_out // 3
            parts = [("q", (0, inner)), ("v", (2 * inner, 3 * inner))]
        else:
            parts = [("all", (0, d_out))]
        for part, cols in parts:
            layer = Layer(path, part, cols, int(d_in), None if rank == "full" else rank, bias, gi)
            if layer.rank is not None and layer.rank > min(layer.d_in, layer.d_out):
                raise AdapterError(f"LoRA rank {layer.rank} is larger than layer {layer.name} "
                                   f"({layer.d_in} -> {layer.d_out}); use a rank <= "
                                   f"{min(layer.d_in, layer.d_out)} or 'full'", field="adapters", token=layer.name)
            layers.append(layer)
    for i, (sel, _) in enumerate(spec):
        if i not in used:
            known = sorted({layer_group(p) for p in dense})
            raise AdapterError(f"adapter selector {sel!r} matches no Dense layer of this policy (its groups: "
                               f"{known}; or give a module path such as 'gmm/mlp_0')", field="adapters", token=sel)
    return tuple(layers)


def get_leaf(tree, layer: Layer):
    for k in layer.key:
        tree = tree[k]
    return tree


def build(layout: Sequence[Layer], fn: Callable[[Layer], Any]) -> dict:
    """An adapter tree with fn(layer) at each layer's place."""
    tree: dict = {}
    for layer in layout:
        node = tree
        for k in layer.key[:-1]:
            node = node.setdefault(k, {})
        node[layer.key[-1]] = fn(layer)
    return tree


def init_adapters(key, layout: Sequence[Layer], lead: tuple[int, ...] = ()) -> dict:
    """Fresh adapters (optionally `lead`-stacked, e.g. a pool): LoRA A ~ U(-1/sqrt(d_in), 1/sqrt(d_in)) (torch's
    Linear init, as LoRA's reference code), B = 0; full deltas 0. Every adapter starts as a zero change. Numpy
    arrays drawn on the host from a generator seeded by `key` and the layer's name (no compile per leaf shape)."""
    try:
        seed = np.asarray(jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key)
    except jax.errors.TracerArrayConversionError:  # abstract evaluation (jax.eval_shape): only shapes matter
        seed = np.zeros(2, np.uint32)
    lead = tuple(lead)

    def one(layer):
        if layer.rank is None:
            leaf = {"W": np.zeros(lead + (layer.d_in, layer.d_out), np.float32)}
            if layer.bias:
                leaf["b"] = np.zeros(lead + (layer.d_out,), np.float32)
            return leaf
        rng = np.random.default_rng([*seed.ravel().tolist(), zlib.crc32(layer.name.encode())])
        bound = 1.0 / np.sqrt(layer.d_in)
        a = rng.uniform(-bound, bound, lead + (layer.d_in, layer.rank)).astype(np.float32)
        return {"A": a, "B": np.zeros(lead + (layer.rank, layer.d_out), np.float32)}
    return build(layout, one)


def _delta(x: jax.Array, leaf: dict, scale: float, d_out: int) -> jax.Array:
    """The adapter's addition to a Dense output for input x (..., d_in); per-sample leaves (leading N) act on the
    N consecutive blocks of x's leading axis."""
    x = x.astype(jnp.float32)
    lora = "A" in leaf
    first = leaf["A"] if lora else leaf["W"]
    if first.ndim == 2:  # one adapter for every input
        out = scale * ((x @ leaf["A"]) @ leaf["B"]) if lora else x @ leaf["W"]
        return out + leaf["b"] if "b" in leaf else out
    n = first.shape[0]
    if x.shape[0] % n:
        raise AdapterError(f"per-sample adapters for {n} samples, but the layer's input has leading axis "
                           f"{x.shape[0]}", field="adapters")
    xs = x.reshape(n, -1, x.shape[-1])
    if lora:
        out = scale * jnp.einsum("nlr,nro->nlo", jnp.einsum("nli,nir->nlr", xs, leaf["A"]), leaf["B"])
    else:
        out = jnp.einsum("nli,nio->nlo", xs, leaf["W"])
        if "b" in leaf:
            out = out + leaf["b"][:, None]
    return out.reshape(x.shape[:-1] + (d_out,))


@contextmanager
def attached(adapters: dict, layout: Sequence[Layer], scale: float = 1.0):
    """Within this context every policy apply adds `adapters` to the layers of `layout`; yields the set of module
    paths that were hit (a layer never called means the adapter would silently do nothing: the caller checks)."""
    by_path: dict[tuple, list] = {}
    for layer in layout:
        by_path.setdefault(layer.path, []).append((layer, get_leaf(adapters, layer)))
    hit: set = set()

    def interceptor(next_fun, args, kwargs, context):
        y = next_fun(*args, **kwargs)
        if context.method_name != "__call__" or not isinstance(context.module, nn.Dense):
            return y
        entries = by_path.get(tuple(context.module.path))
        if not entries:
            return y
        hit.add(tuple(context.module.path))
        x = args[0] if args else kwargs["inputs"]
        for layer, leaf in entries:
            d = _delta(x, leaf, scale, layer.d_out).astype(y.dtype)
            y = y + d if layer.part == "all" else y.at[..., layer.cols[0]:layer.cols[1]].add(d)
        return y

    with nn.intercept_methods(interceptor):
        yield hit
    missing = sorted(set(by_path) - hit)
    if missing:
        raise AdapterError(f"layer {'/'.join(missing[0])} was never called as a Dense layer, so its adapter would "
                           "do nothing (BC-RNN's LSTM gates cannot take adapters)", field="adapters",
                           token="/".join(missing[0]))


def gather(pool: dict, idx: jax.Array) -> dict:
    """Per-sample adapters: pool leaves (P, ...) indexed by idx (N,) -> (N, ...)."""
    return jax.tree.map(lambda a: a[idx], pool)


def freeze_mask(tree, trainable: bool = False):
    """A grad_mask subtree: one scalar per leaf (1 trains, 0 frozen: the update is multiplied by it)."""
    return jax.tree.map(lambda _: jnp.asarray(trainable), tree)


def step_mean(x: jax.Array, obs) -> jax.Array:
    """Mean of x (B, T, ...) over the steps of the window that hold observations. Acting windows fill left to right
    (obs["step_mask"], set by policies.act); training windows are whole."""
    mask = obs.get("step_mask") if hasattr(obs, "get") else None
    if mask is None:
        return jnp.mean(x, axis=1)
    w = mask.astype(x.dtype).reshape(mask.shape + (1,) * (x.ndim - 2))
    return jnp.sum(x * w, axis=1) / jnp.maximum(jnp.sum(w, axis=1), 1.0)


def _split(batch):
    obs = batch["obs"] if "obs" in batch else batch
    return obs, batch["lang"]


@dataclass(frozen=True)
class AdaptedPolicy(abc.ABC):
    """A frozen base policy run with adapters. Subclasses (one per method, in clbench_jax.algos) say what the extra
    parameters are (`init_own`) and how a forward pass chooses the adapters (`forward` -> (GMMDist, aux loss)).
    params = {"base": <the base policy's params>, ...the method's parameters...}; the base never gets a gradient
    (stop_gradient here; the algorithm's grad_mask keeps it bit-identical, weight decay included).
    Same interface as policies.bc.Policy (init / apply / loss / cfg), so the loop, acting and evaluation use it
    unchanged; frozen and hashable by value, so compiled steps are reused across runs."""

    base: Any
    adapters: tuple = ()
    scale: float = 1.0

    @property
    def cfg(self):
        return self.base.cfg

    def layout(self, base_params) -> tuple[Layer, ...]:
        return adapter_layout(base_params, self.adapters)

    def init(self, key, example_batch) -> dict:
        k_base, k_own = jax.random.split(key)
        base = self.base.init(k_base, example_batch)
        return {"base": base, **self.init_own(k_own, base, example_batch)}

    @abc.abstractmethod
    def init_own(self, key, base_params, example_batch) -> dict:
        """The method's own parameters (everything in params but "base")."""

    def query_dim(self, base_params, example_batch) -> int:
        """Width of the subclass's `query(params, obs, lang)` (abstract evaluation, no compute)."""
        obs, lang = _split(example_batch)
        return jax.eval_shape(self.query, {"base": base_params}, obs, lang).shape[-1]

    @abc.abstractmethod
    def forward(self, params, obs, lang, key, train: bool):
        """-> (GMMDist of the action, auxiliary loss) with the adapters the method chooses for this input."""

    def apply(self, params, obs_window, lang_embedding, key=None, train: bool = False):
        return self.forward(params, obs_window, lang_embedding, key, train)[0]

    def loss(self, params, batch, key=None, train: bool = True) -> jax.Array:
        """Mean GMM NLL of batch['actions'] (masked like Policy.loss) plus the method's auxiliary loss."""
        obs, lang = _split(batch)
        dist, aux = self.forward(params, obs, lang, key, train)
        return nll_loss(dist, batch["actions"], batch.get("mask")) + aux

    def run(self, base_params, obs, lang, adapters, key=None, train: bool = False):
        """The frozen base with `adapters` attached -> GMMDist (gradients reach the adapters only)."""
        base_params = jax.lax.stop_gradient(base_params)
        with attached(adapters, self.layout(base_params), self.scale):
            return self.base.apply(base_params, obs, lang, key, train)

    def features(self, base_params, obs, lang) -> jax.Array:
        """The frozen base's features entering its GMM head, (B, T, E), without adapters and without dropout (the
        head itself is dead code under jit). The query of the retrieval methods is built from these."""
        got = []

        def grab(next_fun, args, kwargs, context):
            if context.method_name == "__call__" and isinstance(context.module, GMMHead):
                got.append(args[0])
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(grab):
            self.base.apply(jax.lax.stop_gradient(base_params), obs, lang, None, False)
        return jax.lax.stop_gradient(got[0])
