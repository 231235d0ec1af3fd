"""The caption corpus file: reading, writing, tokenizing, and what is left out."""

import pytest

from crossspec_ros.speculative.corpus import (
    CorpusError,
    encode_corpus,
    read_corpus,
    write_corpus,
)

EOS, PLACEHOLDER = 2, 90


def encode(text: str) -> list[int]:
    """A toy tokenizer: one id per word (its length + 10), "<video>" the placeholder."""
    return [PLACEHOLDER if w == "<video>" else len(w) + 10 for w in text.split()]


def test_captions_written_one_per_line_read_back_with_line_breaks_inside_flattened(tmp_path):
    path = tmp_path / "captions.txt"
    assert write_corpus(path, ["The car drives.", "A cyclist\ncrosses.", "  ", "The car drives."]
                        ) == 3
    assert read_corpus(path) == ["The car drives.", "A cyclist crosses.", "The car drives."]


def test_each_caption_ends_in_eos_and_unusable_lines_are_counted_not_kept():
    corpus = encode_corpus(["the car drives", "a <video> here", "   "], encode, EOS,
                           proposable=PLACEHOLDER, source="test")
    assert corpus.captions == [[13, 13, 16, EOS]]
    assert corpus.skipped == {"with a placeholder token": 1, "empty after tokenization": 1}
    assert "1 captions (1 distinct) from test" in corpus.summary()
    assert "1 with a placeholder token" in corpus.summary()


def test_a_missing_corpus_says_how_to_make_one(tmp_path):
    with pytest.raises(CorpusError, match="crossspec corpus"):
        read_corpus(tmp_path / "nope.txt")


def test_a_corpus_that_is_not_text_is_refused_with_what_it_should_hold(tmp_path):
    path = tmp_path / "captions.txt"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(CorpusError, match="one caption per line"):
        read_corpus(path)
