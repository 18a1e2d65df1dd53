"""Language conditioning: all-MiniLM-L6-v2 in Flax, an embedding cache, one-hot ablation.

``load_minilm`` imports JAX/Flax and reads the weights, so it is loaded lazily; ``minilm_embeddings`` goes through
the persistent embedding cache and loads the model only for texts it has not seen.
"""

from clbench_jax.language.cache import EmbeddingCache, one_hot_task_embedding

__all__ = ["EmbeddingCache", "one_hot_task_embedding", "load_minilm", "minilm_embeddings", "Encoder", "EMBED_DIM"]

EMBED_DIM = 384


def __getattr__(name):
    if name in ("load_minilm", "minilm_embeddings", "Encoder", "MiniLM", "MinilmNotFoundError", "find_minilm_dir"):
        from clbench_jax.language import encoder

        return getattr(encoder, name)
    raise AttributeError(name)
