"""The suffix trie over earlier captions: what it proposes and how it forgets."""

from crossspec_ros.speculative.suffix import SuffixIndex
from crossspec_ros.speculative.tree import DraftTree

EOS = 2
DRIVES = [10, 11, 12, 13, 14, EOS]        # "the car drives on road </s>"
SLOWS = [10, 11, 20, 21, 13, 14, EOS]     # "the car slows down on road </s>"


def test_a_whole_earlier_caption_is_proposed_after_its_first_token_eos_included():
    index = SuffixIndex()
    index.add_source(DRIVES)
    tree = DraftTree()
    chain = index.propose([10], tree, "history_ngram", max_nodes=32, max_depth=32)
    assert chain == DRIVES[1:]
    assert tree.tokens == DRIVES[1:]


def test_captions_that_differ_give_branches_and_the_newest_counts_most():
    index = SuffixIndex(recent_weight=3.0)
    index.add_source(DRIVES)
    index.add_source(SLOWS)
    tree = DraftTree()
    chain = index.propose([10, 11], tree, "history_ngram", max_nodes=32, max_depth=32)
    assert chain[:2] == [20, 21]  # the newest caption is the best single guess
    first_level = {t for t, p in zip(tree.tokens, tree.parents, strict=True) if p == -1}
    assert first_level == {12, 20}
    slow, drive = tree.child(-1, 20), tree.child(-1, 12)
    assert tree.probs[slow] > tree.probs[drive]


def test_after_a_mismatch_the_lookup_re_aligns_on_the_new_context():
    index = SuffixIndex()
    index.add_source(DRIVES)
    # the verifier said "the car stops" (99): no match; then "on" (13) matches again
    assert index.propose([10, 11, 99], DraftTree(), "h", max_nodes=8, max_depth=8) == []
    assert index.propose([10, 11, 99, 13], DraftTree(), "h", max_nodes=8,
                         max_depth=8) == [14, EOS]


def test_the_oldest_caption_is_forgotten():
    index = SuffixIndex(max_sources=1)
    index.add_source(DRIVES)
    index.add_source(SLOWS)
    assert len(index) == 1
    _, matched = index.match([11, 12])  # "drives" occurred only in the forgotten one
    assert matched == 0
    tree = DraftTree()
    assert index.propose([10, 11], tree, "h", max_nodes=8, max_depth=8)[0] == 20
    assert tree.child(-1, 12) is None


def test_node_and_depth_budgets_are_kept_and_probabilities_shrink_with_depth():
    index = SuffixIndex()
    index.add_source(SLOWS)
    tree = DraftTree()
    index.propose([10], tree, "h", max_nodes=3, max_depth=8, per_token=0.5)
    assert len(tree) == 3
    assert tree.probs == [0.5, 0.25, 0.125]
    deep = DraftTree()
    index.propose([10], deep, "h", max_nodes=32, max_depth=2)
    assert len(deep) == 2


def test_an_empty_context_proposes_the_newest_caption_from_its_start():
    index = SuffixIndex()
    index.add_source(DRIVES)
    index.add_source(SLOWS)
    tree = DraftTree()
    assert index.propose([], tree, "h", max_nodes=32, max_depth=32) == SLOWS
    # caption starts only, not every suffix: both captions begin with 10
    assert {t for t, p in zip(tree.tokens, tree.parents, strict=True) if p == -1} == {10}


def test_a_short_context_is_matched_where_captions_begin():
    index = SuffixIndex()
    index.add_source([10, 30, 31, EOS])      # "the bus stops"
    index.add_source([40, 10, 11, 12, EOS])  # "behind the car drives"
    # a caption that begins with 10 continues like the caption that began with it
    assert index.propose([10], DraftTree(), "h", max_nodes=8, max_depth=8) == [30, 31, EOS]


def test_a_corpus_counts_each_caption_as_often_as_it_occurs():
    corpus = SuffixIndex.of_captions([SLOWS, SLOWS, DRIVES, [], SLOWS])
    assert len(corpus) == 2  # distinct captions; the empty one is no caption
    tree = DraftTree()
    assert corpus.propose([10, 11], tree, "corpus_ngram", max_nodes=32,
                          max_depth=32)[:2] == [20, 21]
    slow, drive = tree.child(-1, 20), tree.child(-1, 12)
    assert tree.probs[slow] == 3 * tree.probs[drive]  # three "slows" to one "drives"
