"""Parts from outside Python that some tests need (chromium, shellcheck, the SWORD modules,
PyTorch): without one of them such a test skips, naming it; under CI it fails."""

import os

import pytest


def under_ci() -> bool:
  """CI sets CI=true (GitHub Actions, GitLab and .ci/run all do)."""
  return os.environ.get('CI', '').lower() in ('true', '1', 'yes')


def require(part: str, found: bool, install: str) -> None:
  """A test (or, called at import, a test module) that needs an outside part: without it the
  test skips, naming the part and `install`, the command that installs it; under CI it fails
  instead, so that a CI which lost a package cannot pass on skips."""
  __tracebackhide__ = True  # reports name the caller's line, not this one
  if found:
    return
  if under_ci():
    pytest.fail(
      f'{part} not found: {install}; under CI (CI=true) its tests fail, not skip', pytrace=False
    )
  pytest.skip(f'{part} not found: {install}', allow_module_level=True)
