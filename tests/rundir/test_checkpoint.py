"""checkpoint.Checkpointer: round trip, keep-N, cadence, corrupted-latest fallback, empty dir."""

import logging
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import attnlab
from attnlab.rundir import checkpoint_params
from attnlab.rundir.checkpoint import Checkpointer, MissingCheckpointError
from attnlab.rundir.checkpoint_params import UnreadableCheckpointError


def _state(seed: float):
  params = {
    'dense': {'kernel': jnp.full((3, 2), seed, jnp.float32), 'bias': jnp.arange(2.0) + seed},
    'embed': jnp.full((4,), seed, jnp.bfloat16),
  }
  tx = optax.adam(1e-3)
  opt_state = tx.init(params)
  # One real update so that mu/nu/count are not all zeros.
  grads = jax.tree.map(lambda p: jnp.ones_like(p) * seed, params)
  _, opt_state = tx.update(grads, opt_state, params)
  return {'params': params, 'opt_state': opt_state, 'step': jnp.array(int(seed), jnp.int32)}


def _assert_same(got, want):
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))


@pytest.mark.slow
def test_round_trip_in_a_fresh_checkpointer(tmp_path):
  state = _state(3.0)
  config = {'model': {'kind': 'rnn', 'lengths': [5, 20]}, 'seed': 0}
  with Checkpointer(tmp_path / 'ckpt', keep=2) as ckpt:
    assert ckpt.save(7, state, {'step': 7, 'epoch': 1}, config)
  # A new instance (as after a restart) sees the step and restores into a zero target.
  with Checkpointer(tmp_path / 'ckpt', keep=2) as ckpt:
    assert ckpt.latest_step() == 7
    target = jax.tree.map(jnp.zeros_like, _state(1.0))
    got, data_state, step = ckpt.restore(target_state=target)
    assert step == 7 and data_state == {'step': 7, 'epoch': 1}
    _assert_same(got, state)
    assert isinstance(got['opt_state'][0], optax.ScaleByAdamState)
    assert got['params']['embed'].dtype == jnp.bfloat16
    assert ckpt.restore_config() == config
    # ShapeDtypeStruct targets work too, and an explicit step.
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
    got, _, step = ckpt.restore(7, target_state=abstract)
    assert step == 7
    _assert_same(got, state)


def test_keeps_only_the_newest_steps(tmp_path):
  with Checkpointer(tmp_path, keep=2) as ckpt:
    for step in (1, 2, 3, 4):
      assert ckpt.save(step, _state(float(step)), {'step': step}, {})
    ckpt.wait()
    assert ckpt.all_steps() == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ['3', '4']
    got, _, step = ckpt.restore(3, target_state=_state(0.0))
    assert step == 3
    _assert_same(got, _state(3.0))


def test_interval_force_and_no_overwrite(tmp_path):
  with Checkpointer(tmp_path, keep=10, save_interval_steps=3) as ckpt:
    saved = [s for s in range(1, 8) if ckpt.save(s, _state(float(s)), {'step': s}, {})]
    assert saved == [3, 6]
    assert ckpt.save(7, _state(7.0), {'step': 7}, {}, force=True)  # e.g. the last step
    assert not ckpt.save(6, _state(6.0), {'step': 6}, {})  # not newer than the latest
    ckpt.wait()
    assert ckpt.all_steps() == [3, 6, 7]


_READ_ERROR = 'JSONDecodeError: Expecting value: line 1 column 1 (char 0)'  # what _corrupt causes


def _corrupt(step_dir: pathlib.Path) -> None:
  files = [f for f in step_dir.rglob('*') if f.is_file()]
  assert files
  for f in files:
    f.write_bytes(b'\x00not a checkpoint')


def test_corrupted_latest_falls_back_to_previous(tmp_path, caplog):
  with Checkpointer(tmp_path, keep=3) as ckpt:
    for step in (10, 20, 30):
      ckpt.save(step, _state(float(step)), {'step': step}, {'at': step})
  _corrupt(tmp_path / '30')
  with Checkpointer(tmp_path, keep=3) as ckpt:
    assert ckpt.latest_step() == 30
    with caplog.at_level(logging.INFO), caplog.at_level(logging.INFO, logger='absl'):
      got, data_state, step = ckpt.restore_or_none(target_state=_state(0.0))
    assert step == 20 and data_state == {'step': 20}
    _assert_same(got, _state(20.0))
    # One warning: which step, why (one line), where it went; the detail is INFO (log file).
    ours = [r for r in caplog.records if r.pathname.startswith(os.path.dirname(attnlab.__file__))]
    (warning,) = [r for r in ours if r.levelno >= logging.WARNING]
    assert warning.getMessage() == (
      f'checkpoint step 30 in {tmp_path} is unreadable ({_READ_ERROR}); moved to '
      f'{tmp_path}/30.unreadable; using step 20 instead (details in the log file)')
    assert warning.exc_info is None
    (detail,) = [r for r in caplog.records if r.getMessage().startswith('reading checkpoint')]
    assert detail.levelno == logging.INFO and detail.exc_info is not None
    # The unreadable step is set aside, so training can save step 30 again.
    assert (tmp_path / '30.unreadable').is_dir()
    assert ckpt.all_steps() == [10, 20]
    assert ckpt.save(30, _state(31.0), {'step': 30}, {})
    ckpt.wait()
    got, _, step = ckpt.restore(target_state=_state(0.0))
    assert step == 30
    _assert_same(got, _state(31.0))


def test_explicit_corrupted_step_does_not_fall_back(tmp_path):
  with Checkpointer(tmp_path, keep=3) as ckpt:
    for step in (1, 2):
      ckpt.save(step, _state(float(step)), {'step': step}, {})
  _corrupt(tmp_path / '2' / 'state')
  with Checkpointer(tmp_path, keep=3) as ckpt:
    with pytest.raises(Exception):  # noqa: B017 - orbax/tensorstore decide the type
      ckpt.restore(2, target_state=_state(0.0))
    assert ckpt.all_steps() == [1, 2]


def test_wrong_target_moves_nothing(tmp_path):
  with Checkpointer(tmp_path, keep=3) as ckpt:
    for step in (1, 2):
      ckpt.save(step, _state(float(step)), {'step': step}, {})
    wrong = {'params': {'other': jnp.zeros((5,))}}
    with pytest.raises(RuntimeError, match='nothing was moved'):
      ckpt.restore(target_state=wrong)
    assert ckpt.all_steps() == [1, 2]
  assert not list(tmp_path.glob('*.unreadable*'))


def test_empty_directory(tmp_path):
  with Checkpointer(tmp_path / 'new', keep=1) as ckpt:
    assert ckpt.latest_step() is None
    assert ckpt.restore_or_none(target_state=_state(0.0)) is None
    with pytest.raises(FileNotFoundError, match='no checkpoint in'):
      ckpt.restore(target_state=_state(0.0))
    with pytest.raises(FileNotFoundError, match='no checkpoint for step 5'):
      ckpt.restore(5, target_state=_state(0.0))


def test_bad_arguments(tmp_path):
  with pytest.raises(ValueError, match='keep=0 must be a positive integer'):
    Checkpointer(tmp_path, keep=0)
  with Checkpointer(tmp_path, keep=1) as ckpt:
    with pytest.raises(TypeError, match='data_state must be JSON-serialisable'):
      ckpt.save(1, _state(1.0), {'rng': np.zeros(2)}, {})
    assert ckpt.latest_step() is None


def test_best_checkpoint_is_kept_apart_and_pruned_only_when_superseded(tmp_path):
  params = lambda v: {'w': np.full((2,), v, np.float32)}
  with Checkpointer(tmp_path, keep=1) as ckpt:
    assert ckpt.best_step() is None
    with pytest.raises(MissingCheckpointError, match="no 'best' checkpoint"):
      checkpoint_params.restore(ckpt, 'best')
    ckpt.save_best(2, params(2.0), {'value': 0.5})
    ckpt.save(2, _state(2.0), {'step': 2}, {}, best_step=2)
    ckpt.save(3, _state(3.0), {'step': 3}, {}, best_step=2)  # keep=1 deletes latest step 2
    ckpt.save_best(4, params(4.0), {'value': 0.7})
    ckpt.save(4, _state(4.0), {'step': 4}, {}, best_step=4)
    # Best step 2 stays until the save that refers to step 4 is committed (at close here).
    assert ckpt.best_steps() == [2, 4] and ckpt.all_steps() == [4]
  with Checkpointer(tmp_path, keep=1) as ckpt:
    assert ckpt.best_steps() == [4] and ckpt.best_info() == {'value': 0.7}
    got, step = checkpoint_params.restore(ckpt, 'best')
    assert step == 4 and isinstance(got['w'], np.ndarray)
    np.testing.assert_array_equal(got['w'], [4.0, 4.0])
    got, step = checkpoint_params.restore(ckpt, 'latest', target_params=_state(0.0)['params'])
    assert step == 4
    _assert_same(got, _state(4.0)['params'])
    assert checkpoint_params.restore(ckpt, 4)[1] == 4
    with pytest.raises(MissingCheckpointError, match=r'latest steps \[4\], best 4'):
      checkpoint_params.restore(ckpt, 7)
    # Resuming from step 3 (say step 4 was unreadable) drops the best of the dead future.
    assert not ckpt.resume_best(3, best_step=2)
    assert ckpt.best_steps() == []


def test_unreadable_params_name_the_damaged_file_and_the_checkpoints_that_read(tmp_path):
  params = lambda v: {'w': np.full((2,), v, np.float32)}
  with Checkpointer(tmp_path, keep=3) as ckpt:
    for step in (1, 2, 3):
      ckpt.save(step, {'params': params(float(step))}, {'step': step}, {})
    ckpt.save_best(3, params(3.0), {'value': 1.0})
  manifest = tmp_path / '3' / 'state' / 'manifest.ocdbt'
  manifest.write_bytes(manifest.read_bytes()[:20])  # truncated, as by a full disk
  with Checkpointer(tmp_path, keep=3) as ckpt:
    # Step 3 is kept in best/ too: offered as `best`, since the number finds the latest folder.
    with pytest.raises(UnreadableCheckpointError, match=(
        rf'^checkpoint {tmp_path}/3 cannot be read: state/manifest.ocdbt is damaged \(Error '
        r'decoding manifest: Length in header \(\d+\) does not match actual length \(20\); at '
        r'byte 12\); these read: --checkpoint=best \(step 3\), --checkpoint=2, --checkpoint=1$')):
      checkpoint_params.restore(ckpt, 3)
    shutil.rmtree(tmp_path / 'best' / '3' / 'state')
    (tmp_path / '2' / 'state' / 'manifest.ocdbt').write_bytes(b'garbage')
    with pytest.raises(UnreadableCheckpointError, match=(
        rf'^checkpoint {tmp_path}/best/3 cannot be read: state is missing; these read: '
        r'--checkpoint=1$')):
      checkpoint_params.restore(ckpt, 'best')
    for data in (tmp_path / '1' / 'state' / 'd').iterdir():
      data.unlink()
    with pytest.raises(UnreadableCheckpointError, match=(
        rf'^checkpoint {tmp_path}/1 cannot be read: state/d/\w+ is missing; no other checkpoint '
        rf'in {tmp_path} reads either$')):
      checkpoint_params.restore(ckpt, 1)


def test_damaged_save_records_are_listed_and_do_not_stop_a_read(tmp_path):
  with Checkpointer(tmp_path, keep=2) as ckpt:
    ckpt.save(1, {'params': {'w': np.ones(2, np.float32)}}, {'step': 1}, {})
  (tmp_path / '1' / '_CHECKPOINT_METADATA').write_text('garbage')
  with Checkpointer(tmp_path, keep=2) as ckpt:
    assert checkpoint_params.damaged_metadata(ckpt) == [tmp_path / '1' / '_CHECKPOINT_METADATA']
    np.testing.assert_array_equal(checkpoint_params.restore(ckpt, 1)[0]['w'], [1.0, 1.0])


def test_a_failed_reads_orphaned_error_is_dropped_even_before_the_read_raises(
    tmp_path, monkeypatch, caplog):
  # asyncio reports a task's unretrieved exception when the task is collected, which can be
  # while orbax's restore is still raising: the report must be dropped then too.
  with Checkpointer(tmp_path, keep=2) as ckpt:
    ckpt.save(1, {'params': {'w': np.ones(2, np.float32)}}, {'step': 1}, {})

  def failing_restore(self, directory, *args, **kwargs):
    orphan = ValueError(f'Error reading "{directory}/d/0123": byte range not valid')
    logging.getLogger('asyncio').error(
      'Task exception was never retrieved', exc_info=(ValueError, orphan, None))
    logging.getLogger('asyncio').error('an unrelated loop error')
    raise orphan

  monkeypatch.setattr(checkpoint_params.ocp.PyTreeCheckpointHandler, 'restore', failing_restore)
  with Checkpointer(tmp_path, keep=2) as ckpt, caplog.at_level(logging.ERROR, 'asyncio'):
    with pytest.raises(UnreadableCheckpointError, match='byte range not valid'):
      checkpoint_params.restore(ckpt, 1, target_params={'w': np.ones(2, np.float32)})
  assert [r.getMessage() for r in caplog.records if r.name == 'asyncio'] == [
    'an unrelated loop error']
