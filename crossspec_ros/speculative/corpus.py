"""A caption corpus: the verifier's own captions of earlier drives, for zero-cost proposals.

The suffix trie over the last windows (``history_ngram``) only knows phrases this drive has
already shown; at a drive's start, and whenever the scene changes, the verifier decodes new
phrases one pass per token. Captions of a verifier repeat across drives ("turns left at an
intersection", "a pedestrian crosses the road"), so a trie over its captions of earlier
drives (proposer ``corpus_ngram``) proposes those phrases, as SuffixDecoding's global tree
over earlier outputs does. Proposals only: every confirmed token is still the verifier's.

The file is plain UTF-8 text, one caption per line, repeats kept (a phrase's count weighs its
proposal); ``crossspec corpus`` writes one by running the verifier alone over bags. A
verifier directory may carry its corpus as ``captions.txt``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossspec_ros.text import single_spaced

CORPUS_FILE = "captions.txt"  # a verifier directory's own corpus


class CorpusError(ValueError):
    """A corpus file that cannot be used (the message says which and what to do)."""


@dataclass
class Corpus:
    """Captions in the verifier's ids (each ending in EOS), and what was left out."""

    captions: list[list[int]] = field(default_factory=list)
    source: str = ""
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> lines

    def summary(self) -> str:
        distinct = len({tuple(c) for c in self.captions})
        text = f"{len(self.captions)} captions ({distinct} distinct) from {self.source}"
        if self.skipped:
            text += "; left out: " + ", ".join(f"{n} {why}" for why, n in self.skipped.items())
        return text


def read_corpus(path: str | Path) -> list[str]:
    """The captions of a corpus file (blank lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"caption corpus {path}: no such file; write one with `crossspec "
                          f"corpus BAG --out {path}`, or set caption_corpus to none")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CorpusError(f"caption corpus {path}: cannot read it as UTF-8 text ({err}); it "
                          f"should hold one caption per line") from err
    return [line.strip() for line in text.splitlines() if line.strip()]


def write_corpus(path: str | Path, captions: Iterable[str]) -> int:
    """Write ``captions`` one per line (line breaks inside one become spaces); returns how
    many were written (empty ones are not)."""
    lines = [single_spaced(caption) for caption in captions]
    lines = [line for line in lines if line]
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)


def encode_corpus(lines: Sequence[str], encode: Callable[[str], list[int]], eos: int,
                  proposable: int, source: str = "") -> Corpus:
    """Lines -> captions in the verifier's ids, each with EOS appended (a proposal may end a
    caption). A line holding an id >= ``proposable`` (the image or video placeholder, which
    a pass without pixels cannot take) or no token at all is left out and counted."""
    corpus = Corpus(source=source)
    for line in lines:
        ids = [int(t) for t in encode(line)]
        reason = "empty after tokenization" if not ids else (
            "with a placeholder token" if any(t >= proposable for t in ids) else None)
        if reason is not None:
            corpus.skipped[reason] = corpus.skipped.get(reason, 0) + 1
            continue
        corpus.captions.append([*ids, eos])
    return corpus


def load_corpus(setting: str, verifier: Any) -> Corpus | None:
    """The caption corpus the ``caption_corpus`` parameter
    names for ``verifier``, or None: "none" turns it off, "" takes the verifier directory's
    own ``captions.txt`` when it has one (the bundled tiny verifier does; a verifier built in
    memory has none), else a file path. Raises ``CorpusError`` for a named file that cannot
    be used."""
    if setting == "none":
        return None
    if setting:
        path = Path(setting)
    else:
        directory = getattr(verifier, "directory", None)
        path = Path(directory) / CORPUS_FILE if directory else None
        if path is None or not path.is_file():
            return None
    tokenizer = verifier.tokenizer
    return encode_corpus(read_corpus(path),
                         lambda text: tokenizer(text, add_special_tokens=False).input_ids,
                         verifier.info.eos_token_id, verifier.info.proposable_ids, str(path))
