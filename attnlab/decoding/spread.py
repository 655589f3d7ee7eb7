"""Searching batch after batch on every local device, with the devices never waiting for the host.

`SpreadSearch(search_fn)` runs `search_fn(params, src_BxS, max_length=...)` as a shard_map over
the process's local devices: each device searches its slice of the rows in its own while loop
(no collective: a device whose rows finish early stops early), one compilation per padded shape
whatever the number of devices. `results` keeps up to `AHEAD` batches dispatched before it
fetches the oldest: JAX returns from a call before the devices finish it, so the host
turns one batch's tokens into text while the devices search the next ones instead of idling.

Used by `attnlab.decode` / `load_run` (inference.Decoder) and by training's evaluation.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = 'rows'
AHEAD = 2  # batches in flight beyond the one being fetched


class SpreadSearch:
  """`search_fn(params, src_BxS, *, max_length)` over the rows of a batch on every local device."""

  def __init__(self, search_fn: Callable[..., Any], devices=None):
    self.devices = list(devices or jax.local_devices())
    self.mesh = Mesh(np.array(self.devices), (AXIS,))

    @functools.partial(jax.jit, static_argnames=('max_length',))
    def spread(params, src_BxS, *, max_length: int):
      # check_vma=False: the search's loop carries start device-invariant (zeros, BOS) and
      # become per-device inside the loop, which the check would reject.
      per_device = jax.shard_map(functools.partial(search_fn, max_length=max_length),
                                 mesh=self.mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS),
                                 check_vma=False)
      return per_device(params, src_BxS)

    self._spread = spread

  @property
  def num_devices(self) -> int:
    return len(self.devices)

  def replicate(self, params: Any) -> Any:
    """`params` on every device of the search, once per set of parameters."""
    return jax.device_put(params, NamedSharding(self.mesh, P()))

  def results(self, params: Any, batches: Iterable[tuple[Any, np.ndarray, int]]
              ) -> Iterator[tuple[Any, Any]]:
    """(tag, the search's result on the host) for each (tag, src_BxS, max_length) of `batches`,
    in their order; `params` from `replicate`, every src_BxS's rows a multiple of
    `num_devices`."""
    pending = collections.deque()
    for tag, src_BxS, max_length in batches:
      if src_BxS.shape[0] % self.num_devices:
        raise ValueError(f'{src_BxS.shape[0]} rows do not split over {self.num_devices} devices')
      pending.append((tag, self._spread(params, src_BxS, max_length=max_length)))
      if len(pending) > AHEAD:
        tag, found = pending.popleft()
        yield tag, jax.device_get(found)
    while pending:
      tag, found = pending.popleft()
      yield tag, jax.device_get(found)
