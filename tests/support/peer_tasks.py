"""Hand-made tasks for benchmarks/peers' tests: attnlab's own split of a few dictionary entries
(G2P, one letter a token) and four Bible verses with SentencePiece vocabularies (no TFDS)."""

import dataclasses

from attnlab.data import cmudict_g2p
from attnlab.data.sentencepiece_vocab import train_sentencepiece
from attnlab.data.tasks import Task
from attnlab.data.vocab import Vocab
from benchmarks.peers import recipes, tasks

G2P, BIBLE = tasks.TASKS['g2p'], tasks.TASKS['bible']

PLAN = recipes.Plan(max_steps=300, every=100, log_every=20, seed=3)
WORDS = [
  'tomato',
  "o'brien",
  'read',
  'cat',
  'dog',
  'bird',
  'fish',
  'lamp',
  'desk',
  'chair',
  'table',
  'sofa',
  'rug',
  'door',
  'wall',
  'roof',
  'tree',
  'leaf',
  'root',
  'stem',
  'seed',
  'rain',
  'snow',
  'wind',
  'cloud',
  'storm',
  'sun',
  'moon',
  'star',
  'sky',
  'hill',
  'lake',
  'river',
  'sea',
  'sand',
  'rock',
  'stone',
  'clay',
  'iron',
  'gold',
]


def with_data(task: tasks.PeerTask, data: Task) -> tasks.PeerTask:
  """`task` reading `data` instead of its recipe's records."""
  copy = dataclasses.replace(task)
  copy.__dict__['data'] = data  # the cached_property's slot
  return copy


def g2p_task() -> tasks.PeerTask:
  """A G2P task made by attnlab's own split of hand-made entries (no TFDS)."""
  entries = {w: [[c.upper() + '1' for c in w if c != "'"]] for w in WORDS}
  entries['tomato'] = [['T', 'AH0', 'M', 'EY1', 'T', 'OW2'], ['T', 'AH0', 'M', 'AA1', 'T', 'OW2']]
  entries['read'] = [['R', 'IY1', 'D'], ['R', 'EH1', 'D']]
  records, _ = cmudict_g2p.split_records(entries)
  splits = {'train': 'train', 'eval': 'validation', 'test': 'test'}
  vocab = Vocab.from_symbols(list("abcdefghijklmnopqrstuvwxyz'"), 'char')
  return with_data(G2P, Task(
    'cmudict_g2p',
    vocab,
    vocab,
    {ours: (lambda r=records[theirs]: r) for ours, theirs in splits.items()},
  ))


SPANISH = ['En el principio creó Dios los cielos y la tierra.', 'Y la tierra estaba desordenada.',
           'Y dijo Dios: Sea la luz; y fue la luz.', 'Y vio Dios que la luz era buena.']
ENGLISH = ['In the beginning, God created the heavens and the earth.',
           'The earth was formless and empty.',
           'God said, "Let there be light," and there was light.',
           'God saw the light, and saw that it was good.']


def bible_task() -> tasks.PeerTask:
  """A translation task of four hand-written verses, with SentencePiece vocabularies."""
  records = [{'source': s, 'target': t, 'index': i}
             for i, (s, t) in enumerate(zip(SPANISH, ENGLISH, strict=True))]
  splits = {'train': records[:2], 'eval': records[2:3], 'test': records[3:]}
  return with_data(BIBLE, Task(
    'bible',
    train_sentencepiece(SPANISH * 20, 300),
    train_sentencepiece(ENGLISH * 20, 300),
    {name: (lambda r=rows: r) for name, rows in splits.items()},
  ))

