"""Token ids every vocabulary reserves, shared by data, models and search.

PAD_ID marks padding (masked everywhere), BOS_ID starts every decoder input, EOS_ID ends every
target, UNK_ID stands for a symbol outside the vocabulary.
"""

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
NUM_SPECIAL_TOKENS = 4
