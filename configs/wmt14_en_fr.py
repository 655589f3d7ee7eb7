"""WMT'14 English -> French (TFDS `wmt14_translate/fr-en`), the model of configs/wmt14_de_en.py.

Same Luong-2015-sized model, SentencePiece subwords, beam search and sacrebleu scoring as
configs/wmt14_de_en.py (~40M training pairs: TFDS download and preparation take hours). For
users with internet and accelerators; here only tested under `tfds.testing.mock_data`.

COMMAND: python -m attnlab.main --config=configs/wmt14_en_fr.py --workdir=runs/wmt14_en_fr
Expected: not measured.
Variants (`configs/wmt14_en_fr.py:NAME`): smoke, local_p (as in configs/wmt14_de_en.py).
"""

from configs import wmt14_de_en

VARIANTS = wmt14_de_en.VARIANTS


def get_config(arg: str = ''):
  return wmt14_de_en.wmt_config('en', 'fr', arg, 'wmt14_en_fr.py')
