"""steps.token_sums against golden values derived by hand (if you did not mean to change
behaviour and this fails, it is a bug)."""

import math

import numpy as np
import pytest

from attnlab.tokens import BOS_ID, PAD_ID
from attnlab.train import steps

LN2, LN3, LN5 = math.log(2), math.log(3), math.log(5)

# V = 3. Each logit row is chosen so that its softmax is exact: [0, ln 2, 0] -> (1/4, 1/2, 1/4);
# [0, 0, 0] -> 1/3 each; [0, 0, ln 3] -> (1/5, 1/5, 3/5).
HALF_ON_1 = [0.0, LN2, 0.0]
UNIFORM = [0.0, 0.0, 0.0]
THREE_FIFTHS_ON_2 = [0.0, 0.0, LN3]
LOUD = [50.0, -50.0, 9.0]  # on padding only: must not count anywhere

LOGITS_BxTxV = np.array(
  [
    [HALF_ON_1, UNIFORM, LOUD],
    [THREE_FIFTHS_ON_2, HALF_ON_1, LOUD],
  ],
  np.float32,
)
# Row 0: token 1 (argmax 1, right), token 2 (argmax of a tie is 0: wrong), padding.
# Row 1: token 2 (argmax 2, right), token 1 (argmax 1, right), padding.
TARGET_BxT = np.array([[1, 2, PAD_ID], [2, 1, PAD_ID]], np.int32)

# -log p(gold) per real token: ln 2, ln 3 | ln (5/3), ln 2.
NLL = [[LN2, LN3], [LN5 - LN3, LN2]]


def _sums(**kwargs):
  out = steps.token_sums(LOGITS_BxTxV, TARGET_BxT, **kwargs)
  return {k: float(v) for k, v in out.items()}


def test_token_sums_golden_without_smoothing():
  got = _sums()
  assert got == pytest.approx({
    'loss_sum': LN2 + LN3 + (LN5 - LN3) + LN2,  # = ln 20
    'objective_sum': math.log(20),  # no smoothing: the objective is the NLL
    'token_correct': 3.0,
    'token_count': 4.0,  # padding excluded
    'seq_correct': 1.0,  # row 1 only: row 0's second token is wrong
    'seq_count': 2.0,
  }, rel=1e-6)


def test_token_sums_golden_with_label_smoothing():
  # Smoothed target with ls = 0.1 over V = 3: 0.9 on the gold token, 0.05 on each other one.
  # Objective per token = -sum_v q_v log p_v:
  #   (0,0) p = (1/4, 1/2, 1/4), gold 1: 0.9 ln 2 + 2 * 0.05 * ln 4 = 1.1 ln 2
  #   (0,1) uniform:                       ln 3 (whatever q is)
  #   (1,0) p = (1/5, 1/5, 3/5), gold 2: 0.9 ln (5/3) + 2 * 0.05 * ln 5
  #   (1,1) as (0,0):                      1.1 ln 2
  got = _sums(label_smoothing=0.1)
  want_objective = 2.2 * LN2 + LN3 + 0.9 * (LN5 - LN3) + 0.1 * LN5
  assert got['objective_sum'] == pytest.approx(want_objective, rel=1e-6)
  assert got['loss_sum'] == pytest.approx(math.log(20), rel=1e-6)  # reported NLL: unsmoothed
  assert got['token_correct'] == 3.0 and got['token_count'] == 4.0


def test_row_weights_drop_batch_padding_rows():
  # eval batches are padded with rows of weight 0: row 1 must vanish from every sum.
  got = _sums(row_weight_B=np.array([1.0, 0.0], np.float32))
  assert got == pytest.approx({
    'loss_sum': LN2 + LN3,
    'objective_sum': LN2 + LN3,
    'token_correct': 1.0,
    'token_count': 2.0,
    'seq_correct': 0.0,
    'seq_count': 1.0,
  }, rel=1e-6)


def test_padding_logits_do_not_matter():
  other = LOGITS_BxTxV.copy()
  other[:, 2] = [[-7.0, 3.0, 100.0], [0.0, 1e4, 0.0]]
  a = _sums(label_smoothing=0.1)
  b = {k: float(v) for k, v in steps.token_sums(other, TARGET_BxT, label_smoothing=0.1).items()}
  assert a == b


def test_decoder_input_shifts_right_after_bos():
  target = np.array([[5, 6, 2], [7, 2, PAD_ID]], np.int32)
  np.testing.assert_array_equal(
    steps.decoder_input(target), [[BOS_ID, 5, 6], [BOS_ID, 7, 2]]
  )
