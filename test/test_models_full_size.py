"""The full-size architectures the GPU benchmark builds: right sizes, built without memory."""

import torch

from crossspec_ros.models.full_size import full_size_eventgpt_drafter, full_size_verifier


def billions(module: torch.nn.Module) -> float:
    return sum(p.numel() for p in module.parameters()) / 1e9


def test_full_size_video_llava_has_7b_parameters_and_2056_visual_tokens():
    verifier = full_size_verifier(device="meta")
    assert 7.0 < billions(verifier.model) < 7.5
    assert verifier.num_frames * verifier.tokens_per_frame == 2056
    assert verifier.info.proposable_ids == 32000
    assert verifier.tokenizer.convert_tokens_to_ids("<video>") == 32001


def test_full_size_eventgpt_has_7b_parameters_and_582_event_tokens():
    drafter = full_size_eventgpt_drafter(device="meta")
    assert 6.9 < billions(drafter.model) < 7.6
    assert drafter.model.config.event_tokens == 582
    assert drafter.info.proposable_ids == 32000


def test_full_size_pair_builds_in_the_float_type_asked_for():
    # float32 is the type in which k tokens verified at once give the plain decode's logits
    verifier = full_size_verifier(device="meta", dtype=torch.float32)
    drafter = full_size_eventgpt_drafter(device="meta", dtype=torch.float32)
    assert verifier.model.dtype == drafter.model.dtype == torch.float32


def test_load_drafter_builds_the_full_size_random_drafter_by_its_name():
    from crossspec_ros.models.pair import FULL_SIZE_RANDOM, load_drafter

    drafter = load_drafter(FULL_SIZE_RANDOM, device="meta", dtype="bf16")
    assert 6.9 < billions(drafter.model) < 7.6 and drafter.model.dtype == torch.bfloat16
