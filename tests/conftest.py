"""Test-wide JAX settings: CPU, strict rank promotion, 8 host devices for parallel tests."""

import os

# Must happen before jax is imported anywhere: parallel tests need 8 CPU devices.
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import jax  # noqa: E402

jax.config.update('jax_numpy_rank_promotion', 'raise')
