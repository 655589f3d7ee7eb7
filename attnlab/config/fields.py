"""The checks every config group shares: `ConfigError`, a value among its choices, a positive
integer, and building a group's dataclass from its mapping (an unknown or missing key names the
dotted key). attnlab/config/run.py and attnlab/config/model.py define the groups."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from attnlab.errors import UserError


class ConfigError(UserError):
  """A config key or value that attnlab cannot run with."""


def check_choice(key: str, value: Any, choices) -> None:
  if value not in choices:
    listed = ', '.join(sorted(str(c) for c in choices))
    raise ConfigError(f'{key}={value!r} is not valid; choose from {listed}')


def check_positive(key: str, value: Any, allow_zero: bool = False) -> None:
  ok = isinstance(value, int) and not isinstance(value, bool)
  ok = ok and (value >= 0 if allow_zero else value > 0)
  if not ok:
    raise ConfigError(f'{key}={value!r} must be a {"non-negative" if allow_zero else "positive"}'
                      ' integer')


def from_group(cls, group: Mapping[str, Any], prefix: str):
  """Builds dataclass `cls` from a config group; an unknown or missing key names the dotted key."""
  values = dict(group.items()) if hasattr(group, 'items') else dict(group)
  fields = {f.name: f for f in dataclasses.fields(cls)}
  join = lambda name: f'{prefix}.{name}' if prefix else name
  unknown = sorted(set(values) - set(fields))
  if unknown:
    where = f'{prefix} has' if prefix else 'top-level keys are'
    raise ConfigError(f'unknown config key {join(unknown[0])}; {where} '
                      f'{", ".join(sorted(fields))}')
  kwargs = {}
  for name in fields:
    if name not in values:  # every default lives in configs/base.py, nowhere else
      raise ConfigError(f'missing config key {join(name)}; configs/base.py defines every key')
    value = values[name]
    nested = getattr(cls, '_nested', {}).get(name)
    if nested is not None:
      value = from_group(nested, value, join(name))
    elif isinstance(value, list):
      value = tuple(value)
    kwargs[name] = value
  obj = cls(**kwargs)
  obj.validate(prefix)
  return obj
