"""Models: the attention story from scores to the Transformer.

Shape letters used in names (`enc_BxSxH`) and einsum strings throughout `attnlab/models`:
  B batch          S source length     T target length      H model / hidden size
  V vocabulary     N attention heads   D per-head size (H/N)  K key size   E embedding size
  L layers         W beams (search)

Token ids shared by models, data and search: PAD_ID marks padding (masked everywhere),
BOS_ID starts every decoder input, EOS_ID ends every target.
"""

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
NUM_SPECIAL_TOKENS = 4
