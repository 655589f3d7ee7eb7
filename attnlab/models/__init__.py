"""Models: the attention story from scores to the Transformer.

Shape letters used in names (`enc_BxSxH`) and einsum strings throughout `attnlab/models`:
  B batch          S source length     T target length      H model / hidden size
  V vocabulary     N attention heads   D per-head size (H/N)  K key size   E embedding size
  L layers         W beams (search)

Token ids (PAD_ID, BOS_ID, ...) are in attnlab/tokens.py.
"""
