"""Bible verse pairs: OSIS markup stripping, SWORD module reading, alignment, chapter split.

Markup tests run on excerpts of the modules' own markup (no module needed). The rest read the
installed Debian modules (sword-text-sparv, -web, -kjv; .ci/run installs them) for a few books:
without them those tests skip, and fail under CI (support.parts.require).
"""

import hashlib
import os

import pytest
from support.parts import require

from attnlab.config import run as config_lib
from attnlab.data import bible, osis
from attnlab.data.tasks import DataError
from configs import bible as bible_config

SPA, WEB, KJV = 'spaRV1909eb', 'engWEB2015eb', 'engKJV2006eb'
BOOKS = ('Ruth', 'Ps', 'John')  # small, poetry (titles, lines), gospel (quotes, notes)


def installed(*modules):
  found = {m.lower() for m in bible._installed(bible.sword_paths())}
  return all(m.lower() in found for m in modules)


@pytest.fixture
def sword_modules():
  require(
    f'the SWORD modules {SPA}, {WEB}, {KJV}',
    installed(SPA, WEB, KJV),
    'apt-get install sword-text-sparv sword-text-web sword-text-kjv',
  )


needs_modules = pytest.mark.usefixtures('sword_modules')


# Markup excerpts of real verses (attributes kept), and the text a reader sees.
@pytest.mark.parametrize('markup, text', [
  # WEB John 3:16: a footnote between two words; removing it must not glue 'bornSon'.
  ('<q marker="" who="Jesus"><w lemma="strong:G3439">only</w> born</q><note placement="foot">'
   '<reference type="annotateRef">3:16 </reference>The phrase “only born” is from the Greek '
   'word “μονογενη”.</note><q marker="" who="Jesus"><w lemma="strong:G5207">Son</w>, that</q>',
   'only born Son, that'),
  # WEB Gen 1:1: Strong's numbers live in attributes; a footnote after 'God'.
  ('<w lemma="strong:H0430">In</w> <w lemma="strong:H7225">beginning</w>, <w lemma="strong:'
   'H0430">God</w><note placement="foot"><reference type="annotateRef">1:1 </reference>The '
   'Hebrew word rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note><w lemma="strong:H1254">created'
   '</w> <w lemma="strong:H0776">earth</w>. <div eID="gen25" type="x-p"/>',
   'In beginning, God created earth.'),
  # WEB Exod 30:13: a footnote before punctuation leaves no space; a cross reference too.
  ('twenty <w lemma="strong:H1626">gerahs</w><note placement="foot"><reference type="annotate'
   'Ref">30:13 </reference>a gerah is about 0.5 grams</note>); half<note type="crossReference">'
   '<reference subType="x-origin" type="annotateRef">12:4 </reference><reference>Exodus 30:12'
   '</reference></note>, <w>a</w> shekel',
   'twenty gerahs); half, a shekel'),
  # WEB Ps 3:1: a canonical Psalm title is verse text; poetry lines separate words.
  ('<div type="x-milestone" subType="x-preverse" sID="pv4877"/><title canonical="true" type='
   '"psalm">A Psalm by David.</title><lg sID="gen7860"/><l level="1" sID="gen7861"/><div type='
   '"x-milestone" subType="x-preverse" eID="pv4877"/>Yahweh, how <w lemma="strong:H1732">my'
   '</w> adversaries increased!<l eID="gen7861" level="1"/><l level="2" sID="gen7862"/>Many',
   'A Psalm by David. Yahweh, how my adversaries increased! Many'),
  # KJV Ps 119:9: a heading that is not canonical (an acrostic letter) is dropped.
  ('<title><foreign>ב BETH.</foreign></title> <lg sID="gen4643"/>Wherewithal shall a young '
   '<w lemma="strong:H5288">man</w> cleanse',
   'Wherewithal shall a young man cleanse'),
  # WEB Song 1:2: speaker labels are not text.
  ('<speaker>Beloved</speaker> <lg sID="gen15617"/> <l level="1" sID="gen15618"/>Let <w>him'
   '</w> kiss me', 'Let him kiss me'),
  # RV1909 Judg 4:2: word elements meeting without a space are two words...
  ('<w lemma="strong:H6635">ejército</w><transChange type="added">se llamaba</transChange><w '
   'lemma="strong:H5516">Sísara</w>, y', 'ejército se llamaba Sísara, y'),
  # ...but text running into one is one word: an added clitic (RV1909 1Chr 10:13), a <w>
  # ending inside a word (KJV Mark 4:24).
  ('<w lemma="strong:H0178">al pythón</w>, preguntándo<transChange type="added">le</transChange>'
   ', ', 'al pythón, preguntándole,'),
  ('<w lemma="strong:G4369">shall more be give</w>n.</q> ', 'shall more be given.'),
  # KJV: ¶ paragraph signs, leaked USFM markers (Exod 6:3), entities, runs of spaces.
  ('<q marker="" who="Jesus">¶ <w>For</w>   God</q> \\nd <w>JEHOVAH</w></divineName> &amp; me',
   'For God JEHOVAH & me'),
  # WEB Rev 22:21: the book ends inside the verse; its glossary is not verse text.
  ('saints. Amen.  <chapter eID="Rev.22"/><div eID="gen35836" type="x-p"/> <div canonical='
   '"true" eID="gen35575" osisID="Rev" type="book"/> <div sID="gen35837" type="glossary"/> '
   '<title level="1" type="main">World English Bible Glossary</title> The following words',
   'saints. Amen.'),
  # A glossary or introduction section closed inside the verse: the text after it is kept.
  ('<div sID="i1" type="introduction"/>About this book.<div eID="i1" type="introduction"/>In '
   'the beginning', 'In the beginning'),
])
def test_markup_is_stripped_to_the_text_a_reader_sees(markup, text):
  assert osis.verse_text(markup) == text


def test_alignment_pairs_verses_by_reference_and_counts_what_it_drops():
  source = {('Gen', 1, 1): 'a', ('Gen', 1, 2): '', ('Gen', 1, 3): 'c', ('Gen', 1, 4): 'd',
            ('Gen', 1, 5): 'e'}
  target = {('Gen', 1, 1): 'A', ('Gen', 1, 2): 'B', ('Gen', 1, 3): '', ('Gen', 1, 5): 'E',
            ('Tob', 1, 1): 'T'}
  pairs, counts = bible.align(source, target)
  assert pairs == [{'source': 'a', 'target': 'A', 'ref': 'Gen.1.1'},
                   {'source': 'e', 'target': 'E', 'ref': 'Gen.1.5'}]
  assert counts == {'pairs': 2, 'empty_source': 1, 'empty_target': 1, 'only_source': 1,
                    'only_target': 1}


def test_chapters_are_split_by_md5_about_90_5_5():
  percent = int.from_bytes(hashlib.md5(b'John.3').digest()[:4], 'big') % 100
  assert bible.split_of('John', 3) == ('train' if percent < 90 else
                                       'validation' if percent < 95 else 'test')
  # Golden: a chapter's split never changes between versions (prepared data stays valid).
  assert [bible.split_of('Gen', c) for c in range(1, 8)] == [
    'train', 'train', 'test', 'train', 'train', 'test', 'train']
  assert [bible.split_of('Ps', c) for c in (11, 45, 51)] == ['test', 'validation', 'validation']
  from pysword.canons import canons

  chapters = [(b[1], c) for t in ('ot', 'nt') for b in canons['kjv'][t]
              for c in range(1, len(b[3]) + 1)]
  shares = {s: 0 for s in ('train', 'validation', 'test')}
  for book, chapter in chapters:
    shares[bible.split_of(book, chapter)] += 1
  assert len(chapters) == 1189
  assert 0.87 < shares['train'] / 1189 < 0.93
  assert 0.03 < shares['validation'] / 1189 < 0.07 and 0.03 < shares['test'] / 1189 < 0.07


def test_missing_modules_name_the_debian_packages_and_crosswire(tmp_path):
  library = tmp_path / 'sword'
  (library / 'mods.d').mkdir(parents=True)
  with pytest.raises(DataError) as e:
    bible.open_bible('spaRV1909eb', 'task.source_module', str(library))
  message = str(e.value)
  assert "task.source_module='spaRV1909eb'" in message and str(library) in message
  assert 'apt-get install sword-text-kjv sword-text-sparv sword-text-web' in message
  assert 'crosswire.org' in message and 'task.sword_path' in message
  assert 'installed: none' in message


@needs_modules
def test_a_book_subset_without_a_test_chapter_is_refused(tmp_path):
  builder = bible.Bible(config=bible.builder_config(SPA, WEB, books=('Jonah',)),
                        data_dir=str(tmp_path))
  with pytest.raises(DataError, match='books Jonah give no chapter to the validation split'):
    builder.download_and_prepare(file_format='array_record')


def test_config_variants_parse_and_modules_must_differ():
  cfg = config_lib.parse(bible_config.get_config())
  assert (cfg.task.name, cfg.task.source_module, cfg.task.target_module) == ('bible', SPA, WEB)
  assert (cfg.task.tokenizer, cfg.eval.search, cfg.model.bidirectional) == (
    'sentencepiece', 'beam', True)
  assert config_lib.parse(bible_config.get_config('encdec')).model.attention.timing == 'fixed'
  assert config_lib.parse(bible_config.get_config('kjv')).task.target_module == KJV
  c = bible_config.get_config()
  with c.unlocked():
    c.task.target_module = 'SPARV1909EB'
  with pytest.raises(config_lib.ConfigError, match='choose two different SWORD modules'):
    config_lib.parse(c)


@needs_modules
def test_installed_modules_read_known_verses():
  verses = {m: bible.read_verses(bible.open_bible(m, 'task.source_module'), ('Gen', 'John'))
            for m in (SPA, WEB, KJV)}
  assert verses[SPA]['Gen', 1, 1] == 'EN el principio crió Dios los cielos y la tierra.'
  assert verses[WEB]['Gen', 1, 1] == 'In the beginning, God created the heavens and the earth.'
  assert verses[KJV]['Gen', 1, 1] == 'In the beginning God created the heaven and the earth.'
  assert verses[WEB]['John', 3, 16] == (
    'For God so loved the world, that he gave his only born Son, that whoever believes in him '
    'should not perish, but have eternal life.')
  assert verses[SPA]['John', 3, 16].startswith('Porque de tal manera amó Dios al mundo, que ha')
  assert verses[KJV]['John', 3, 16].startswith('For God so loved the world, that he gave his')
  assert len(verses[SPA]) == 1533 + 879 and len(verses[WEB]) == len(verses[SPA])
  for module in verses.values():
    for text in module.values():
      assert not any(s in text for s in ('<', '>', 'strong:', '¶', '\\', '  '))


@pytest.mark.slow
@needs_modules
def test_dataset_pairs_splits_by_chapter_and_is_deterministic(tmp_path):
  records = {}
  for run in ('a', 'b'):
    builder = bible.Bible(config=bible.builder_config(SPA, WEB, books=BOOKS),
                          data_dir=str(tmp_path / run))
    builder.download_and_prepare(file_format='array_record')
    records[run] = {
      split: list(builder.as_data_source(split=split)) for split in ('train', 'validation', 'test')
    }
    counts = builder.info.metadata['counts']
  assert records['a'] == records['b']  # same order, same ids, same text
  source = bible.read_verses(bible.open_bible(SPA, 'task.source_module'), BOOKS)
  target = bible.read_verses(bible.open_bible(WEB, 'task.target_module'), BOOKS)
  seen = set()
  for split, rows in records['a'].items():
    for row in rows:
      ref = row['ref'].decode()
      book, chapter, verse = ref.split('.')
      key = (book, int(chapter), int(verse))
      assert bible.split_of(book, int(chapter)) == split  # every verse goes with its chapter
      assert row['source'].decode() == source[key] and row['target'].decode() == target[key]
      seen.add(key)
    position = {key: i for i, key in enumerate(source)}
    order = [position[b, int(c), int(v)] for b, c, v in
             (r['ref'].decode().split('.') for r in rows)]
    assert order == sorted(order)  # canonical order within a split
  assert len(seen) == counts['pairs'] == sum(counts[f'{s}_pairs'] for s in records['a'])
  assert counts['pairs'] + counts['empty_source'] + counts['empty_target'] == len(source)
  assert all(s in seen for s in [('John', 3, 16), ('Ruth', 1, 1)])


@pytest.mark.slow
@needs_modules
def test_smoke_config_trains_and_reports_bleu_by_length(tmp_path, monkeypatch):
  import json

  import sacrebleu

  from attnlab.data import tasks
  from attnlab.train import loop as train

  small = lambda config: bible.build_task(config, books=('Ruth', 'Jonah', 'Nah'))
  monkeypatch.setitem(tasks.BUILDERS, 'bible', small)
  c = bible_config.get_config('smoke')
  with c.unlocked():
    c.task.data_dir = str(tmp_path / 'tfds')
    c.eval.num_heatmaps = 0  # an untrained model may emit PAD, which heatmaps.py rejects
  final = train.train_and_evaluate(c, str(tmp_path / 'run'))
  buckets = final['test']['bleu_by_length']
  assert [b['bucket'] for b in buckets] == ['0-9', '10-19', '20-29', '30-39', '40-49', '50+']
  assert sum(b['count'] for b in buckets) == final['test']['num_examples']
  # BLEU and chrF recomputed by sacrebleu from the run's predictions, as final_metrics.json has.
  written = json.loads((tmp_path / 'run' / 'final_metrics.json').read_text())['test']
  lines = (tmp_path / 'run' / 'predictions_test.jsonl').read_text(encoding='utf-8').splitlines()
  predictions = [json.loads(line) for line in lines]
  assert len(predictions) == written['num_examples'] == final['test']['num_examples']
  hyps, refs = [p['hypothesis'] for p in predictions], [p['reference'] for p in predictions]
  for name, score in (('bleu', sacrebleu.corpus_bleu), ('chrf', sacrebleu.corpus_chrf)):
    assert written[name] == final['test'][name]
    assert written[name] == pytest.approx(score(hyps, [refs]).score, abs=1e-9)
  assert os.listdir(tmp_path / 'tfds' / 'attnlab_sentencepiece')
  task = small(config_lib.parse(c))  # prepared and cached above: loads in a second
  assert [len(task.split(s)) for s in ('train', 'eval', 'test')] == [146, 18, 15]
  for vocab in (task.source_vocab, task.target_vocab):  # byte fallback: nothing becomes '⁇'
    assert vocab.decode(vocab.encode('%(n)s → «ü»')) == '%(n)s → «ü»'
