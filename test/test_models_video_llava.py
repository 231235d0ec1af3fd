"""Video-LLaVA verifier: preprocessing, placeholders, frame sampling, loading, greedy reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import VideoLlavaImageProcessor

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.models.loading import accelerate_available, bitsandbytes_available
from crossspec_ros.models.preprocess import ClipPreprocess, uniform_indices
from crossspec_ros.models.tiny import tiny_verifier
from crossspec_ros.models.video_llava import VideoLlavaVerifier
from crossspec_ros.sync.window import Window


def _frames(n: int, shape=(36, 48, 3), seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def verifier() -> VideoLlavaVerifier:
    return tiny_verifier(seed=5, init_range=0.3)


@pytest.mark.parametrize("size, shape", [(28, (36, 48, 3)), (28, (50, 30, 3)),
                                         (224, (180, 320, 3)), (224, (300, 200, 3))])
def test_preprocessing_equals_videollava_image_processor(size, shape):
    frames = _frames(3, shape, seed=size)
    processor = VideoLlavaImageProcessor(size={"shortest_edge": size},
                                         crop_size={"height": size, "width": size})
    theirs = processor(frames, return_tensors="pt", return_legacy_image_output=False)
    ours = ClipPreprocess(size)(frames)
    assert ours.shape == (3, 3, size, size)
    assert torch.allclose(ours, theirs["pixel_values"], atol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 9])
def test_frames_shared_among_threads_keep_their_order_and_values(n):
    frames = _frames(n, (40, 60, 3), seed=n)
    preprocess = ClipPreprocess(28)
    together = preprocess(frames)
    assert torch.equal(together, torch.from_numpy(np.stack([preprocess.one(f) for f in frames])))


def test_normalization_table_gives_the_arithmetic_values_for_every_byte():
    every_byte = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, axis=3)
    preprocess = ClipPreprocess(16)
    rescaled = (every_byte.astype(np.float64) * (1 / 255)).astype(np.float32)
    arithmetic = (rescaled - np.asarray(preprocess.mean, np.float32)) / np.asarray(
        preprocess.std, np.float32)
    assert np.array_equal(preprocess.normalized(every_byte), arithmetic.transpose(0, 3, 1, 2))


def test_no_frames_to_preprocess_is_refused():
    with pytest.raises(ValueError, match="no images"):
        ClipPreprocess(28)([])


def test_prompt_is_the_video_llava_template(verifier):
    assert verifier.prompt("What is ahead?") == "USER: <video>\nWhat is ahead? ASSISTANT:"


def test_video_placeholders_equal_the_feature_count(verifier):
    inputs = verifier.prepare_frames(_frames(8))
    video_id = verifier.model.config.video_token_id
    n_placeholders = int((inputs.input_ids == video_id).sum())
    with torch.inference_mode():
        features = verifier.model.model.get_video_features(
            pixel_values_videos=inputs.pixel_values, return_dict=True).pooler_output
    assert features.shape[:2] == (8, verifier.tokens_per_frame)  # CLS kept per frame
    assert n_placeholders == features.shape[0] * features.shape[1] == 8 * (2 * 2 + 1)


def test_fewer_frames_than_eight_are_repeated_uniformly(verifier):
    frames = _frames(3)
    inputs = verifier.prepare_frames(frames)
    assert uniform_indices(3, 8) == [0, 0, 0, 1, 1, 2, 2, 2]
    expected = verifier.preprocess([frames[i] for i in uniform_indices(3, 8)])
    assert inputs.pixel_values.shape == (1, 8, 3, 28, 28)
    assert torch.equal(inputs.pixel_values[0], expected)
    assert verifier.prefill(inputs).last_logits.shape == (verifier.info.vocab_size,)


def test_window_without_frames_is_refused(verifier):
    empty = Window(0, 0, 1, EventBatch.empty(4, 4), [], n_distinct_frames=0)
    with pytest.raises(ValueError, match="no RGB frames"):
        verifier.prepare(empty)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_session_greedy_equals_hf_generate_on_random_models(seed):
    model = tiny_verifier(seed=seed, init_range=0.5, hidden=48, layers=2)
    inputs = model.prepare_frames(_frames(5, seed=seed), question="What is ahead ?")
    assert model.generate_greedy(inputs, 16) == model.reference_generate(inputs, 16)


def _save(verifier: VideoLlavaVerifier, directory) -> None:
    verifier.model.save_pretrained(directory)
    verifier.tokenizer.save_pretrained(directory)


def test_load_from_directory_gives_identical_logits_and_dtype(verifier, tmp_path):
    _save(verifier, tmp_path)
    inputs = verifier.prepare_frames(_frames(8))
    loaded = VideoLlavaVerifier.load(tmp_path, dtype="fp32")
    ours, theirs = loaded.prefill(inputs).last_logits, verifier.prefill(inputs).last_logits
    assert torch.allclose(ours, theirs, atol=1e-5) and ours.argmax() == theirs.argmax()
    assert loaded.info == verifier.info
    half = VideoLlavaVerifier.load(tmp_path, dtype="bf16")
    assert half.model.lm_head.weight.dtype == torch.bfloat16
    assert half.generate_greedy(inputs, 4) == half.reference_generate(inputs, 4)


@pytest.mark.skipif(not (bitsandbytes_available() and accelerate_available()),
                    reason="bitsandbytes/accelerate not installed")
def test_four_bit_nf4_load_decodes_like_its_own_generate(tmp_path):
    import bitsandbytes as bnb

    # bitsandbytes' CPU 4-bit kernels need dimensions of at least 64
    _save(tiny_verifier(seed=6, init_range=0.3, hidden=64, vision_hidden=64), tmp_path)
    quantized = VideoLlavaVerifier.load(tmp_path, dtype="fp32", quantization="4bit")
    layer = quantized.model.model.language_model.layers[0].self_attn.q_proj
    assert isinstance(layer, bnb.nn.Linear4bit)
    inputs = quantized.prepare_frames(_frames(8))
    assert quantized.generate_greedy(inputs, 6) == quantized.reference_generate(inputs, 6)


def test_preprocessing_settings_are_read_from_preprocessor_config(tmp_path):
    processor = VideoLlavaImageProcessor(size={"shortest_edge": 40},
                                         crop_size={"height": 32, "width": 32},
                                         image_mean=[0.5, 0.5, 0.5], image_std=[0.25, 0.5, 1.0])
    processor.save_pretrained(tmp_path)
    ours = ClipPreprocess.from_dir(tmp_path, default_size=224)
    assert (ours.size, ours.crop, ours.mean, ours.std) == (40, 32, (0.5,) * 3, (0.25, 0.5, 1.0))
    frames = _frames(2, (45, 70, 3))
    theirs = processor(frames, return_tensors="pt", return_legacy_image_output=False)
    assert torch.allclose(ours(frames), theirs["pixel_values"], atol=1e-5)
    assert ClipPreprocess.from_dir(tmp_path / "none", default_size=28) == ClipPreprocess(28)
