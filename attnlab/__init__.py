"""attnlab: attention in sequence-to-sequence models, in JAX/Flax.

`attnlab.load_run(workdir)` reads a trained run for decoding new inputs (attnlab/decoding/runs.py);
it is imported on first use, so `import attnlab` stays light.
"""

__version__ = '0.1.0'

__all__ = ['load_run']


def __getattr__(name: str):
  if name == 'load_run':
    from attnlab.decoding.runs import load_run

    return load_run
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
