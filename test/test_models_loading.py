"""Loading errors are specific and say what, where and what to do."""

from __future__ import annotations

import json

import pytest
import torch

from crossspec_ros.models import loading
from crossspec_ros.models.errors import (
    CheckpointLayoutError,
    DeviceUnavailableError,
    ModelLoadError,
    ModelNotFoundError,
    QuantizationUnavailableError,
    UnsupportedDtypeError,
)
from crossspec_ros.models.eventgpt_checkpoint import load_eventgpt, save_eventgpt
from crossspec_ros.models.eventgpt_drafter import EventGPTDrafter
from crossspec_ros.models.llava_drafter import LlavaEventDrafter
from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier
from crossspec_ros.models.video_llava import HUB_ID, VideoLlavaVerifier

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.fixture(scope="module")
def verifier_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("verifier")
    verifier = tiny_verifier(seed=0)
    verifier.model.save_pretrained(directory)
    verifier.tokenizer.save_pretrained(directory)
    return directory


def test_missing_directory_is_named(tmp_path):
    missing = tmp_path / "nowhere" / "model"
    with pytest.raises(ModelNotFoundError, match=r"nowhere/model does not exist"):
        VideoLlavaVerifier.load(missing)
    with pytest.raises(ModelNotFoundError, match=r"nowhere/model does not exist"):
        load_eventgpt(missing)


def test_hub_id_not_in_the_offline_cache_says_how_to_get_it(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError) as err:
        VideoLlavaVerifier.load(HUB_ID)
    message = str(err.value)
    assert HUB_ID in message and str(tmp_path) in message
    assert f"hf download {HUB_ID}" in message and "crossspec never downloads" in message
    assert "allow downloads" not in message  # no option allows them: never suggest one


def test_directory_without_config_lists_what_is_there(tmp_path):
    (tmp_path / "weights.txt").write_text("x")
    with pytest.raises(ModelNotFoundError, match=r"no config\.json \(found: weights\.txt\)"):
        LlavaEventDrafter.load(tmp_path)


def test_directory_without_weights_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"mm_visual_tower": "x"}))
    with pytest.raises(ModelNotFoundError, match=r"holds no weights \(\*\.safetensors or \*\.bin"):
        load_eventgpt(tmp_path)


def test_directory_without_tokenizer_is_refused(tmp_path):
    drafter = tiny_eventgpt_drafter(seed=0)
    save_eventgpt(drafter.model, tmp_path)  # no tokenizer
    with pytest.raises(ModelNotFoundError, match="no usable tokenizer"):
        EventGPTDrafter.load(tmp_path, dtype="fp32")


@NO_CUDA
def test_cuda_without_a_gpu_is_a_clear_error(verifier_dir):
    with pytest.raises(DeviceUnavailableError, match=r"CUDA is not available.*use device 'cpu'"):
        loading.resolve_device("cuda")
    with pytest.raises(DeviceUnavailableError):
        VideoLlavaVerifier.load(verifier_dir, device="cuda:0")


def test_unknown_device_type_is_refused():
    with pytest.raises(DeviceUnavailableError, match="'meta' is not supported"):
        loading.resolve_device("meta")


def test_missing_bitsandbytes_for_4bit_says_what_to_install(verifier_dir, monkeypatch):
    monkeypatch.setattr(loading, "bitsandbytes_available", lambda: False)
    with pytest.raises(QuantizationUnavailableError, match="pip install bitsandbytes"):
        VideoLlavaVerifier.load(verifier_dir, quantization="4bit")
    with pytest.raises(QuantizationUnavailableError, match="needs bitsandbytes"):
        loading.quantization_config("8bit", torch.float16)


def test_unknown_quantization_is_refused():
    with pytest.raises(ModelLoadError, match="'3bit' is not supported"):
        loading.quantization_config("3bit", torch.float16)


@pytest.mark.parametrize("name", ["int4", "float64", "half-ish"])
def test_unsupported_dtype_is_refused_with_the_choices(verifier_dir, name):
    with pytest.raises(UnsupportedDtypeError, match="use one of fp32, bf16, fp16"):
        VideoLlavaVerifier.load(verifier_dir, dtype=name)


@pytest.mark.parametrize("name, dtype", [("fp32", torch.float32), ("bfloat16", torch.bfloat16),
                                         ("fp16", torch.float16), (torch.float16, torch.float16)])
def test_supported_dtypes_resolve(name, dtype):
    assert loading.resolve_dtype(name) is dtype


class _NotATensor:
    pass


def test_bin_holding_arbitrary_objects_is_refused(tmp_path):
    torch.save({"model.norm.weight": _NotATensor()}, tmp_path / "pytorch_model.bin")
    pattern = r"weights_only=True refuses.*_NotATensor.*safetensors"
    with pytest.raises(ModelLoadError, match=pattern):
        loading.read_state_dict(tmp_path)


def test_video_llava_checkpoint_missing_a_key_names_it(verifier_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    for item in verifier_dir.iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    state = load_file(tmp_path / "model.safetensors")
    dropped = next(k for k in sorted(state) if "multi_modal_projector.linear_1.weight" in k)
    del state[dropped]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointLayoutError, match=r"1 missing key\(s\), first: "
                                                    r"model\.multi_modal_projector\.linear_1"):
        VideoLlavaVerifier.load(tmp_path, dtype="fp32")


class _RunsCode:
    def __reduce__(self):
        return (print, ("this must never run",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("kind", ["verifier", "drafter"])
def test_a_pickle_that_runs_code_is_refused_alike_for_verifier_and_drafter(kind, tmp_path,
                                                                            capsys):
    import pickle
    import shutil

    from crossspec_ros.models.pair import BUNDLED_PAIR, load_drafter, load_verifier

    directory = tmp_path / kind
    shutil.copytree(BUNDLED_PAIR / kind, directory)
    (directory / "model.safetensors").unlink()
    with open(directory / "pytorch_model.bin", "wb") as f:
        pickle.dump({"weights": _RunsCode()}, f)
    load = load_verifier if kind == "verifier" else load_drafter
    with pytest.raises(ModelLoadError) as info:
        load(str(directory))
    message = str(info.value)
    assert message.startswith(f"cannot read {directory / 'pytorch_model.bin'} as plain tensors")
    assert message.endswith("Convert the checkpoint to safetensors from a trusted copy.")
    assert "this must never run" not in capsys.readouterr().out


def _array_config(file):
    file.write_text("[1, 2]")


def _cut_in_half(file):
    data = file.read_bytes()
    file.write_bytes(data[:len(data) // 2])


def _cut_in_header(file):
    file.write_bytes(file.read_bytes()[:100])


# (bundled directory, its JSON file, its weights file, loader name) per kind of model
# directory a user passes: every loader goes through the same checks
MODEL_DIRECTORIES = {
    "verifier": ("verifier", "config.json", "model.safetensors", "load_verifier"),
    "drafter": ("drafter", "config.json", "model.safetensors", "load_drafter"),
    "draft head": ("distilled_head/head", "head.json", "head.safetensors", "load_draft_head"),
    "lora adapter": ("distilled_lora/adapter", "adapter_config.json",
                     "adapter_model.safetensors", "load_drafter"),
}
DAMAGE = {"json array": (1, _array_config), "weights cut in half": (2, _cut_in_half),
          "weights cut in the header": (2, _cut_in_header)}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("kind", sorted(MODEL_DIRECTORIES))
def test_a_broken_model_directory_is_one_line_naming_the_file_and_what_to_do(kind, damage,
                                                                             tmp_path):
    import shutil

    from crossspec_ros.models import pair

    bundled, json_file, weights_file, loader = MODEL_DIRECTORIES[kind]
    directory = tmp_path / "model"
    shutil.copytree(pair.BUNDLED_PAIR / bundled, directory)
    which, damage_file = DAMAGE[damage]
    broken = directory / (json_file if which == 1 else weights_file)
    damage_file(broken)
    with pytest.raises(ModelLoadError) as info:
        getattr(pair, loader)(str(directory))
    message = str(info.value)
    assert str(broken) in message and "\n" not in message
    expected = "must hold a JSON object" if which == 1 else "is not a whole safetensors file"
    assert expected in message and ("copy" in message or "pass" in message)


def test_a_draft_head_with_its_drafter_is_checked_the_same_way(tmp_path):
    import shutil

    from crossspec_ros.models.pair import BUNDLED_PAIR, load_head

    directory = tmp_path / "head"
    shutil.copytree(BUNDLED_PAIR / "distilled_head" / "head", directory)
    _cut_in_half(directory / "head.safetensors")
    with pytest.raises(ModelLoadError, match=r"head\.safetensors is not a whole safetensors"):
        load_head(directory)


def test_a_drafter_process_reports_a_broken_drafter_as_a_model_load_error(tmp_path):
    import shutil

    from crossspec_ros.models.pair import BUNDLED_PAIR
    from crossspec_ros.speculative.drafter_process import DrafterProcess

    directory = tmp_path / "drafter"
    shutil.copytree(BUNDLED_PAIR / "drafter", directory)
    _array_config(directory / "config.json")
    with pytest.raises(ModelLoadError) as info:
        DrafterProcess(str(directory))
    assert str(directory / "config.json") in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("part", ["verifier", "drafter"])
def test_a_config_value_of_the_wrong_kind_or_a_foreign_tokenizer_is_one_line_too(part,
                                                                                 tmp_path):
    import shutil

    from crossspec_ros.models import pair

    wrong_value = tmp_path / "wrong_value"
    shutil.copytree(pair.BUNDLED_PAIR / part, wrong_value)
    config = json.loads((wrong_value / "config.json").read_text())
    config["text_config" if part == "verifier" else "hidden_size"] = "big"
    (wrong_value / "config.json").write_text(json.dumps(config))
    foreign_tokenizer = tmp_path / "foreign_tokenizer"
    shutil.copytree(pair.BUNDLED_PAIR / part, foreign_tokenizer)
    (foreign_tokenizer / "tokenizer.json").write_text('{"version": "1.0"}')
    load = pair.load_verifier if part == "verifier" else pair.load_drafter
    with pytest.raises(ModelLoadError) as info:
        load(str(wrong_value))
    assert str(info.value).startswith(f"{wrong_value / 'config.json'} does not describe")
    with pytest.raises(ModelLoadError, match=f"no usable tokenizer in {foreign_tokenizer}"):
        load(str(foreign_tokenizer))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("part", ["verifier", "drafter"])
def test_a_pytorch_checkpoint_cut_short_is_named_as_such_not_as_refused_pickle(part, tmp_path):
    import shutil

    from safetensors.torch import load_file

    from crossspec_ros.models import pair

    directory = tmp_path / part
    shutil.copytree(pair.BUNDLED_PAIR / part, directory)
    state = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    torch.save(state, directory / "pytorch_model.bin")
    _cut_in_half(directory / "pytorch_model.bin")
    load = pair.load_verifier if part == "verifier" else pair.load_drafter
    with pytest.raises(ModelLoadError) as info:
        load(str(directory))
    assert str(info.value).startswith(f"{directory / 'pytorch_model.bin'} is not a whole "
                                      "PyTorch checkpoint")
