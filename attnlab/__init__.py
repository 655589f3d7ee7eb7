"""attnlab: attention in sequence-to-sequence models, in JAX/Flax."""

__version__ = '0.1.0'
