"""Vocabulary bridging: shared ids never propose special tokens; text bridging re-tokenizes."""

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from crossspec_ros.speculative.vocab import SharedVocabulary, TextBridge

WORDS = ["a", "red", "car", "turns", "left", "the", "road", "curves", "right", "."]


def word_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["<unk>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def char_tokenizer() -> PreTrainedTokenizerFast:
    chars = sorted(set("".join(WORDS)) | {"▁"})
    vocab = {c: i for i, c in enumerate(["<unk>", *chars])}
    tok = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def test_shared_vocabulary_cuts_proposals_at_the_first_special_id():
    bridge = SharedVocabulary(proposable_ids=100)
    assert bridge.to_target([5, 6, 7], [], draft_done=False) == ([5, 6, 7], 0)
    assert bridge.to_target([5, 100, 7], [], draft_done=True) == ([5], 0)
    assert bridge.to_target([-1, 5], [], draft_done=True) == ([], 0)


def test_shared_vocabulary_hands_the_drafter_the_confirmed_ids_up_to_the_first_special():
    bridge = SharedVocabulary(proposable_ids=100)
    assert bridge.to_drafter([5, 6, 7], "") == [5, 6, 7]
    # an id past the shared range (random weights do emit the verifier's padding rows)
    # would index past the drafter's embedding: the drafter re-syncs to the part before it
    assert bridge.to_drafter([5, 6, 130, 7], "") == [5, 6]


def test_text_bridge_proposes_the_verifier_tokens_of_the_draft_remainder():
    draft, target = word_tokenizer(), char_tokenizer()
    bridge = TextBridge(draft, target)
    draft_ids = draft.encode("a red car turns left", add_special_tokens=False)
    confirmed = target.encode("a red", add_special_tokens=False)
    proposal, base = bridge.to_target(draft_ids, confirmed, draft_done=True)
    assert base == len(confirmed)
    assert target.decode(confirmed + proposal).replace("▁", " ").strip() == "a red car turns left"


def test_text_bridge_holds_back_the_last_word_while_the_draft_grows():
    draft, target = word_tokenizer(), char_tokenizer()
    bridge = TextBridge(draft, target)
    draft_ids = draft.encode("a red car turns", add_special_tokens=False)
    proposal, _ = bridge.to_target(draft_ids, [], draft_done=False)
    assert target.decode(proposal).strip() == "a red car"


def test_text_bridge_proposes_nothing_when_the_draft_contradicts_the_confirmed_text():
    draft, target = word_tokenizer(), char_tokenizer()
    bridge = TextBridge(draft, target)
    draft_ids = draft.encode("a red car", add_special_tokens=False)
    confirmed = target.encode("the road", add_special_tokens=False)
    assert bridge.to_target(draft_ids, confirmed, draft_done=True) == ([], len(confirmed))


def test_both_bridges_give_the_drafter_the_confirmed_caption_in_its_own_ids():
    draft, target = word_tokenizer(), char_tokenizer()
    confirmed = target.encode("a red car", add_special_tokens=False)
    text_bridge = TextBridge(draft, target)
    assert draft.decode(text_bridge.to_drafter(confirmed, "a red car")) == "a red car"
    assert SharedVocabulary(100, draft).to_drafter([3, 4, 5], "ignored") == [3, 4, 5]


def test_make_bridge_shares_ids_only_between_tokenizers_that_agree():
    from types import SimpleNamespace

    from crossspec_ros.speculative.vocab import make_bridge

    def model(tokenizer):
        return SimpleNamespace(tokenizer=tokenizer, info=SimpleNamespace(proposable_ids=8))

    words = model(word_tokenizer())
    assert isinstance(make_bridge(words, None), SharedVocabulary)  # remote drafts
    assert isinstance(make_bridge(words, model(word_tokenizer())), SharedVocabulary)
    assert isinstance(make_bridge(words, model(char_tokenizer())), TextBridge)
