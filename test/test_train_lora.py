"""crossspec distill --method lora: peft adapters on the drafter's language model (what a 7B
drafter needs on one GPU), deterministic, resumable, saved in peft's layout and merged on
load, and never changing a confirmed caption."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from interruption import SimulatedInterruptError, interrupt_at
from safetensors.torch import load_file
from synthetic_windows import random_window

from crossspec_ros.models.errors import ModelLoadError, ModelNotFoundError
from crossspec_ros.models.eventgpt_checkpoint import save_eventgpt
from crossspec_ros.models.lora import is_lora_adapter, save_adapter
from crossspec_ros.models.pair import load_drafter
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine
from crossspec_ros.train.distill import DistillConfig, finetune_lora

LORA = dict(lora_rank=4, lora_alpha=8.0)


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _prefill_logits(drafter, window) -> torch.Tensor:
    return drafter.prefill(drafter.prepare(window)).last_logits


def test_lora_trains_the_adapters_and_the_projector_and_leaves_the_base_weights(
        distill_pair, distill_labels):
    _, drafter = distill_pair
    adapted = copy.deepcopy(drafter)
    before = {k: v.detach().clone() for k, v in drafter.model.named_parameters()}
    peft_model, losses = finetune_lora(adapted, distill_labels, DistillConfig(
        seed=0, steps=4, batch_size=4, warmup_steps=1, **LORA))
    assert len(losses) == 4
    trainable, total = peft_model.get_nb_trainable_parameters()
    assert 0 < trainable < total
    after = _params(adapted.model)
    q_proj = "language_model.model.layers.0.self_attn.q_proj"
    assert torch.equal(after[f"{q_proj}.base_layer.weight"], before[f"{q_proj}.weight"])
    assert not torch.equal(after[f"{q_proj}.lora_B.default.weight"],
                           torch.zeros_like(after[f"{q_proj}.lora_B.default.weight"]))
    tower = "visual_tower.encoder.layers.0.self_attn.q_proj.weight"
    assert torch.equal(after[tower], before[tower])  # the vision tower is not adapted
    projector = [k for k in after if "visual_projector.modules_to_save" in k]
    assert projector and any(not torch.equal(after[k], before[k.replace(
        "modules_to_save.default.", "")]) for k in projector)


def test_lora_distillation_is_deterministic_from_the_seed(distill_pair, distill_labels):
    _, drafter = distill_pair
    config = DistillConfig(seed=3, steps=3, batch_size=4, warmup_steps=1, **LORA)
    a, b = copy.deepcopy(drafter), copy.deepcopy(drafter)
    (_, losses_a), (_, losses_b) = finetune_lora(a, distill_labels, config), finetune_lora(
        b, distill_labels, config)
    assert losses_a == losses_b
    pa, pb = _params(a.model), _params(b.model)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_an_interrupted_lora_run_resumes_from_a_checkpoint_of_only_the_trained_weights(
        distill_pair, distill_labels, tmp_path):
    _, drafter = distill_pair
    config = DistillConfig(seed=1, steps=5, batch_size=4, warmup_steps=1, checkpoint_every=2,
                           **LORA)
    whole = copy.deepcopy(drafter)
    _, whole_losses = finetune_lora(whole, distill_labels, config)

    checkpoint = tmp_path / "checkpoint.safetensors"
    with pytest.raises(SimulatedInterruptError):
        finetune_lora(copy.deepcopy(drafter), distill_labels, config, checkpoint, interrupt_at(3))
    weights = [k for k in load_file(str(checkpoint)) if k.startswith("model.")]
    assert weights and all("lora_" in k or "modules_to_save" in k for k in weights)
    resumed = copy.deepcopy(drafter)
    seen: list[int] = []
    _, losses = finetune_lora(resumed, distill_labels, config, checkpoint,
                              lambda s, _l: seen.append(s))
    assert seen == [2, 3, 4]
    assert losses == pytest.approx(whole_losses, rel=1e-6)
    ours, reference = _params(resumed.model), _params(whole.model)
    assert all(torch.allclose(ours[k], reference[k], atol=1e-6) for k in ours)


def test_a_saved_adapter_loads_onto_its_base_merged_and_gives_the_trained_logits(
        distill_pair, distill_labels, tmp_path):
    _, drafter = distill_pair
    base_dir = tmp_path / "base"
    save_eventgpt(drafter.model, base_dir, tokenizer=drafter.tokenizer)
    adapted = copy.deepcopy(drafter)
    peft_model, _ = finetune_lora(adapted, distill_labels, DistillConfig(
        seed=0, steps=4, batch_size=4, warmup_steps=1, **LORA))
    save_adapter(peft_model, tmp_path / "adapter", base=str(base_dir))
    assert is_lora_adapter(tmp_path / "adapter")
    assert not (tmp_path / "adapter" / "README.md").exists()
    recorded = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert recorded["base_model_name_or_path"] == str(base_dir)

    loaded = load_drafter(str(tmp_path / "adapter"))
    assert not any("lora_" in k for k, _ in loaded.model.named_parameters())  # merged
    for seed in range(3):
        window = random_window(200 + seed)
        trained = _prefill_logits(adapted, window)
        assert torch.allclose(_prefill_logits(loaded, window), trained, atol=1e-4)
        assert not torch.allclose(_prefill_logits(drafter, window), trained, atol=1e-4)


def test_an_adapter_whose_base_is_missing_or_unreadable_is_refused_with_a_message(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match=r"adapter_config\.json is not valid JSON"):
        load_drafter(str(adapter))
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(ModelNotFoundError, match="gone"):
        load_drafter(str(adapter))


def test_a_lora_distilled_drafter_never_changes_the_confirmed_caption(distill_pair, distill_labels):
    verifier, drafter = distill_pair
    adapted = copy.deepcopy(drafter)
    finetune_lora(adapted, distill_labels, DistillConfig(seed=0, steps=3, batch_size=4,
                                                 warmup_steps=1, **LORA))
    engine = SpeculativeEngine(verifier, adapted, EngineConfig(
        max_new_tokens=10, drafter_gate=False))
    for seed in range(4):
        window = random_window(100 + seed)
        reference = verifier.reference_generate(verifier.prepare(window), 10)
        assert engine.run_window(window).tokens == reference


def test_distill_lora_writes_an_adapter_of_the_bundled_drafter_that_loads(tmp_path, capsys):
    import os
    import subprocess
    import sys

    from crossspec_ros.cli.main import main

    out = tmp_path / "lora_out"
    # refused before anything is written (an exception would have escaped main)
    assert main(["distill", "--method", "lora", "--lora-rank", "0", "--sim-windows", "16",
                 "--out", str(out)]) == 2
    assert "--lora-rank >= 1" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["distill", "--method", "lora", "--device", "cuda", "--sim-windows", "16",
                     "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "CUDA is not available" in err and "Traceback" not in err
        assert not out.exists()
    # the run itself in a fresh process: its stderr is what a user sees (no 4-bit warning);
    # labels of 8 tokens at most: fewer verifier steps per window than the default 48
    run = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "distill",
                          "--method", "lora", "--lora-rank", "2", "--sim-windows", "16",
                          "--steps", "3", "--max-new-tokens", "8", "--eval-windows", "0",
                          "--workers", "1", "--out", str(out)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "wrote" in run.stderr and "gemm_4bit" not in run.stderr
    card = json.loads((out / "distill.json").read_text())
    assert card["method"] == "lora" and card["lora"]["rank"] == 2
    assert 0 < card["lora"]["trainable_parameters"] < card["lora"]["all_parameters"]
    recorded = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert recorded["base_model_name_or_path"] == ""  # the bundled drafter
    drafter = load_drafter(str(out / "adapter"))
    assert drafter.query == card["question"]


def test_the_distillation_bench_times_lora_and_whole_steps_with_their_parameter_counts(
        distill_pair):
    from crossspec_ros.bench.distill import time_steps

    _, drafter = distill_pair
    lora = time_steps(copy.deepcopy(drafter), "lora", steps=2, warmup=1, batch_size=2,
                      caption_tokens=6, lora_rank=2)
    whole = time_steps(copy.deepcopy(drafter), "finetune", steps=2, warmup=1, batch_size=2,
                       caption_tokens=6, lora_rank=2)
    assert lora["trainable_parameters"] < lora["all_parameters"]
    assert whole["trainable_parameters"] == whole["all_parameters"]
    for report in (lora, whole):
        assert 0 < report["step_ms_min"] <= report["step_ms_median"] <= report["step_ms_max"]
        assert report["peak_memory_mb"] > 0 and report["final_loss"] > 0
