"""The committed tiny pair: it loads, captions held-out scenes well, and crossspec on the
sample bag's windows equals the verifier alone (greedy) and transformers' generate."""

import math
import threading

import pytest

from crossspec_ros.bags.inputs import iter_bag_windows
from crossspec_ros.models.live_prefill import LivePrefill
from crossspec_ros.models.tiny import tiny_verifier
from crossspec_ros.paths import sample_bag
from crossspec_ros.sim.captions import parse_caption
from crossspec_ros.speculative.corpus import CorpusError, load_corpus
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine
from crossspec_ros.speculative.events import EventKind
from crossspec_ros.sync.synchronizer import WindowSynchronizer
from crossspec_ros.train.data import generate_windows, heldout_keys
from crossspec_ros.train.evaluate import evaluate_pair
from crossspec_ros.train.tiny_pair import BUNDLED_DIR, load_pair

pytestmark = pytest.mark.skipif(not (BUNDLED_DIR / "verifier").is_dir(),
                                reason="no bundled pair (run crossspec train-tiny)")


@pytest.fixture(scope="module")
def pair():
    return load_pair()


def test_bundled_weights_are_small_safetensors():
    files = [p for p in BUNDLED_DIR.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 20 * 1024 * 1024
    assert any(p.suffix == ".safetensors" for p in files)
    assert not any(p.suffix in (".bin", ".pt", ".pkl") for p in files)


@pytest.mark.slow
def test_bundled_pair_captions_held_out_scenes(pair):
    # a small held-out sample in CI; `crossspec eval-tiny` measures the full numbers
    verifier, drafter = pair
    # simulated in this process: the same windows as from a pool of 2 (each from its own
    # key), without starting one (under pytest-xdist the other core runs another test file)
    windows = list(generate_windows(heldout_keys(12), (320, 240), workers=1))
    report = evaluate_pair(verifier, drafter, windows, parse_caption)
    # Regression floors for the committed pair, a little below what it measured on these 12
    # windows (verifier 0.90, drafter 0.77, agreement 0.35). The product targets (0.9 / 0.8)
    # are for 100 held-out windows (`crossspec eval-tiny`), where this pair meets them.
    assert report["verifier_attribute_accuracy"] >= 0.85, report
    assert report["drafter_visible_attribute_accuracy"] >= 0.7, report
    assert 0.1 <= report["token_agreement"] <= 0.95, report


@pytest.mark.slow
def test_crossspec_on_sample_bag_windows_equals_the_verifier_alone(pair):
    verifier, drafter = pair
    corpus = load_corpus("", verifier)  # the bundled verifier's captions.txt
    engine = SpeculativeEngine(verifier, drafter, EngineConfig(max_new_tokens=48),
                               corpus=corpus.captions)
    windows = [w for w in iter_bag_windows(sample_bag(), WindowSynchronizer()) if w.has_rgb][:6]
    assert len(windows) == 6
    corpus_accepted = 0
    for window in windows:
        result = engine.run_window(window)
        reference = verifier.reference_generate(verifier.prepare(window), 48)
        assert result.tokens == reference
        corpus_accepted += result.stats.accepted.get("corpus_ngram", 0)
        if window is windows[0]:  # the gate tries drafting first, and measures it whether or
            # not a draft token came before the caption was done
            gate = engine.schedule.gates[None]
            assert gate.ms_per_token[True] is not None and gate.ms_per_token[False] is None
        if not math.isnan(result.stats.draft_first_token_ms):  # the gate let it draft
            assert result.draft_text  # the drafter produced a speculative caption
    assert corpus_accepted > 0


class PrefillAfter:
    """The verifier, its prefill started once ``event`` is set (a slower verifier, made so
    rather than hoped for)."""

    def __init__(self, verifier, event: threading.Event) -> None:
        self.inner, self.event = verifier, event

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def prefill_with_proposal(self, *args, **kwargs):
        assert self.event.wait(30.0), "no draft token in 30 s"
        return self.inner.prefill_with_proposal(*args, **kwargs)


@pytest.mark.slow
def test_the_local_drafter_drafts_the_window_beside_the_verifiers_prefill(pair):
    verifier, drafter = pair
    window = next(w for w in iter_bag_windows(sample_bag(), WindowSynchronizer()) if w.has_rgb)
    drafting = threading.Event()
    engine = SpeculativeEngine(PrefillAfter(verifier, drafting), drafter,
                               EngineConfig(max_new_tokens=48))

    def on_event(event):
        if event.kind is EventKind.DRAFT:
            drafting.set()

    result = engine.run_window(window, on_event=on_event)
    assert result.tokens == verifier.reference_generate(verifier.prepare(window), 48)
    assert not math.isnan(result.stats.draft_first_token_ms) and result.draft_text


def test_a_caption_one_word_off_the_last_one_is_confirmed_in_the_live_prefill_through_a_branch(
        pair):
    verifier, _ = pair
    window = next(w for w in iter_bag_windows(sample_bag(), WindowSynchronizer()) if w.has_rgb)
    engines = [SpeculativeEngine(verifier, None, EngineConfig(proposers=("history_ngram",)))
               for _ in range(2)]
    caption = engines[0].verifier_only(window)
    one_word_off = [*caption[:4], caption[6], *caption[5:]]
    for engine in engines:  # the last caption says another word at position 4; an older
        engine.history.add_source(caption)  # one knows the right word
        engine.history.add_source(one_word_off)
    live = engines[0].run_window(window, live=LivePrefill(verifier))
    assert live.tokens == caption  # lossless
    assert live.stats.rounds == 0  # the whole caption in the prefill's one pass
    assert live.stats.accepted.get("history_branch", 0) > 0
    assert live.stats.prefill_fed > len(caption)  # the spine and its branches
    # a one-shot prefill checks the last caption as a chain: a round fixes the word
    one_shot = engines[1].run_window(window)
    assert one_shot.tokens == caption
    assert one_shot.stats.prefill_fed == len(one_word_off)
    assert one_shot.stats.rounds >= 1 and "history_branch" not in one_shot.stats.proposed


def test_the_bundled_verifier_carries_a_caption_corpus_and_none_turns_it_off(pair, tmp_path):
    verifier = pair[0]
    corpus = load_corpus("", verifier)
    assert len(corpus.captions) >= 500 and not corpus.skipped
    assert all(c[-1] == verifier.info.eos_token_id for c in corpus.captions)
    assert load_corpus("none", verifier) is None
    assert load_corpus("", tiny_verifier(seed=0)) is None  # built in memory: no directory
    with pytest.raises(CorpusError, match="crossspec corpus"):
        load_corpus(str(tmp_path / "missing.txt"), verifier)
