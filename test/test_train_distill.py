"""crossspec distill: labels from the verifier, deterministic and resumable training, bad
input, and a distilled drafter that never changes a confirmed caption."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from interruption import SimulatedInterruptError, interrupt_at
from synthetic_windows import random_window
from toy_models import ToyModel, ToyWindow

from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine
from crossspec_ros.train.distill import (
    DistillConfig,
    DistillError,
    Labels,
    batch_indices,
    finetune,
    label_windows,
    load_labels,
    publish_directory,
    save_labels,
    to_drafter_ids,
)
from crossspec_ros.train.evaluate import draft_rounds


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_labels_are_the_verifiers_greedy_captions_and_unusable_windows_are_counted(distill_pair):
    verifier, drafter = distill_pair
    windows = [random_window(0), random_window(1, events=False),
               random_window(2, frames=False), random_window(3)]
    got = label_windows(verifier, drafter, windows, max_new_tokens=6)
    assert len(got) == 2
    assert got.skipped == {"no events": 1, "no RGB frames": 1}
    for caption, window in zip(got.captions, (windows[0], windows[3]), strict=True):
        own = verifier.generate_greedy(verifier.prepare(window), 6)
        assert caption == to_drafter_ids(verifier, drafter, own)
    assert got.drafter_pixels.dtype == torch.float16
    assert got.drafter_pixels.shape[0] == 2


def test_labels_at_leads_are_each_window_cut_before_its_close_with_the_whole_windows_caption(
        distill_pair):
    from crossspec_ros.train.evaluate import events_before_lead

    verifier, drafter = distill_pair
    windows = [random_window(0), random_window(1)]
    whole = label_windows(verifier, drafter, windows, max_new_tokens=6)
    # a lead of the window's whole length (1 s) leaves no event: counted, not an example
    got = label_windows(verifier, drafter, windows, max_new_tokens=6,
                        leads_ms=(0.0, 400.0, 1000.0))
    assert len(got) == 4 and got.labelled_windows == 2
    assert got.skipped == {"no events before a lead": 2}
    assert got.captions == [whole.captions[0]] * 2 + [whole.captions[1]] * 2
    assert got.verifier_tokens == [whole.verifier_tokens[0]] * 2 + \
        [whole.verifier_tokens[1]] * 2
    for i, window in enumerate(windows):
        assert torch.equal(got.drafter_pixels[2 * i], whole.drafter_pixels[i])
        cut = drafter.prepare(events_before_lead(window, 400.0)).pixel_values.half()
        assert torch.equal(got.drafter_pixels[2 * i + 1], cut)
        assert not torch.equal(got.drafter_pixels[2 * i + 1], whole.drafter_pixels[i])


def test_the_label_cache_key_names_the_leads_and_whole_windows_keep_their_key(tmp_path):
    from crossspec_ros.train.distill import labels_key

    args = (["sim:16:0"], str(tmp_path), str(tmp_path), 8)
    assert labels_key(*args) == labels_key(*args, leads_ms=(0,))
    assert labels_key(*args, leads_ms=(0.0, 300.0)) != labels_key(*args)
    assert labels_key(*args, leads_ms=(0.0, 300.0)) != labels_key(*args, leads_ms=(0.0, 600.0))


def test_labels_at_leads_round_trip_the_cache_with_their_window_count(distill_pair, tmp_path):
    verifier, drafter = distill_pair
    labels = label_windows(verifier, drafter, [random_window(0), random_window(1)],
                           max_new_tokens=6, leads_ms=(0.0, 300.0))
    save_labels(labels, tmp_path / "labels.safetensors", key="k")
    back = load_labels(tmp_path / "labels.safetensors", "k")
    assert back is not None and len(back) == 4 and back.labelled_windows == 2


def test_the_label_cache_round_trips_and_another_key_misses(distill_labels, tmp_path):
    path = tmp_path / "labels.safetensors"
    save_labels(distill_labels, path, key="abc")
    back = load_labels(path, "abc")
    assert back is not None and back.captions == distill_labels.captions
    assert torch.equal(back.drafter_pixels, distill_labels.drafter_pixels)
    assert load_labels(path, "another") is None
    assert not list(tmp_path.glob("*.tmp"))


def test_batches_depend_on_seed_and_step_only_and_cover_every_window_each_epoch():
    first_epoch = [i for step in range(4) for i in batch_indices(step, 64, 16, seed=3)]
    assert sorted(first_epoch) == list(range(64))
    assert batch_indices(5, 64, 16, seed=3) == batch_indices(5, 64, 16, seed=3)
    assert batch_indices(5, 64, 16, seed=3) != batch_indices(5, 64, 16, seed=4)


def test_distillation_is_deterministic_from_the_seed(distill_pair, distill_labels):
    _, drafter = distill_pair
    config = DistillConfig(seed=5, steps=4, batch_size=4, warmup_steps=1)
    a, b = copy.deepcopy(drafter), copy.deepcopy(drafter)
    losses_a, losses_b = finetune(a, distill_labels, config), finetune(b, distill_labels, config)
    assert losses_a == losses_b
    wa, wb = _weights(a.model), _weights(b.model)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], v) for k, v in _weights(drafter.model).items())


def test_an_interrupted_distillation_resumes_to_the_same_weights(distill_pair, distill_labels,
                                                                 tmp_path):
    _, drafter = distill_pair
    config = DistillConfig(seed=1, steps=6, batch_size=4, warmup_steps=1, checkpoint_every=2)
    whole = copy.deepcopy(drafter)
    whole_losses = finetune(whole, distill_labels, config)

    checkpoint = tmp_path / "checkpoint.safetensors"
    with pytest.raises(SimulatedInterruptError):
        finetune(copy.deepcopy(drafter), distill_labels, config, checkpoint, interrupt_at(3))
    resumed = copy.deepcopy(drafter)  # a fresh process: the initial weights again
    seen: list[int] = []
    losses = finetune(resumed, distill_labels, config, checkpoint, lambda s, _l: seen.append(s))
    assert seen == [2, 3, 4, 5]  # steps 0-1 came from the checkpoint written after step 2
    assert losses == pytest.approx(whole_losses, rel=1e-6)
    ours, reference = _weights(resumed.model), _weights(whole.model)
    assert all(torch.allclose(ours[k], reference[k], atol=1e-6) for k in ours)


def test_too_few_windows_are_refused_with_the_count(distill_pair):
    _, drafter = distill_pair
    few = Labels(torch.zeros((3, 5, 3, 4, 4), dtype=torch.float16), [[5, 2]] * 3)
    with pytest.raises(DistillError, match="3 labelled windows; distillation needs at least"):
        finetune(drafter, few, DistillConfig(steps=1))


def test_a_distilled_drafter_never_changes_the_confirmed_caption(distill_pair, distill_labels):
    verifier, drafter = distill_pair
    distilled = copy.deepcopy(drafter)
    finetune(distilled, distill_labels, DistillConfig(seed=0, steps=3, batch_size=4,
                                                      warmup_steps=1))
    engine = SpeculativeEngine(verifier, distilled, EngineConfig(
        max_new_tokens=10, drafter_gate=False))
    for seed in range(4):
        window = random_window(100 + seed)
        reference = verifier.reference_generate(verifier.prepare(window), 10)
        assert engine.run_window(window).tokens == reference


def test_draft_rounds_count_what_the_engine_would_accept():
    verifier = ToyModel()
    window = ToyWindow(0, 7)
    session = verifier.prefill(verifier.prepare(window))
    reference, logits = [], session.last_logits
    while len(reference) < 12:
        reference.append(int(torch.argmax(logits)))
        if reference[-1] == verifier.info.eos_token_id:
            break
        logits = session.feed([reference[-1]])[-1]
    # the verifier as its own drafter: every draft token accepted, 3 + 1 per pass
    proposed, accepted, passes = draft_rounds(verifier, window, reference, proposal=3)
    assert accepted == proposed and passes == -(-len(reference) // 4)
    noisy = ToyModel(noise=3.0)
    proposed, accepted, passes = draft_rounds(noisy, window, reference, proposal=3)
    assert accepted < proposed and passes > -(-len(reference) // 4)


def test_publishing_replaces_the_output_only_when_complete(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")

    def broken(directory):
        directory.mkdir()
        (directory / "half.txt").write_text("half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        publish_directory(broken, out)
    assert (out / "old.txt").read_text() == "old"

    def complete(directory):
        directory.mkdir()
        (directory / "new.txt").write_text("new")

    publish_directory(complete, out)
    assert [p.name for p in out.iterdir()] == ["new.txt"]


def test_distill_without_input_or_with_a_missing_bag_exits_with_one_line(tmp_path, capsys):
    from crossspec_ros.cli.main import main

    assert main(["distill", "--out", str(tmp_path / "d")]) == 2
    assert "nothing to learn from" in capsys.readouterr().err
    assert main(["distill", "--bag", str(tmp_path / "nope"), "--out",
                 str(tmp_path / "d")]) == 2  # an exception would have escaped main
    err = capsys.readouterr().err
    assert "no such bag" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert main(["distill", "--sim-windows", "16", "--leads", "0,-300", "--out",
                 str(tmp_path / "d")]) == 2  # refused before anything is simulated
    err = capsys.readouterr().err
    assert "--leads" in err and "-300" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "d").exists()


def test_eval_draft_compares_the_default_undistilled_and_distilled_drafters_in_one_run(capsys):
    from crossspec_ros.cli.main import main

    # the held-out windows simulated in this process (--workers 1): the same windows as
    # from a pool, without starting one
    assert main(["eval-draft", "--windows", "3", "--workers", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["windows"] == 3
    for name in ("default", "undistilled", "distilled", "lora", "head"):
        assert 0.0 <= report[name]["acceptance"] <= 1.0
        assert report[name]["accepted_per_pass"] >= 0.0
    # the bundled distilled drafter learnt the verifier's phrasing (held out: 0.79 vs 0.08)
    assert report["distilled"]["acceptance"] > report["undistilled"]["acceptance"] + 0.3
    assert report["default"]["acceptance"] > report["undistilled"]["acceptance"] + 0.3
    assert report["head"]["acceptance"] > report["undistilled"]["acceptance"] + 0.3
    assert report["lora"]["acceptance"] > report["undistilled"]["acceptance"] + 0.3


def test_the_bundled_distilled_drafters_load_with_the_question_they_learnt():
    from crossspec_ros.models.pair import BUNDLED_PAIR, load_drafter

    for name in ("distilled", "distilled_leads"):
        drafter = load_drafter(str(BUNDLED_PAIR / name / "drafter"))
        assert drafter.query == "Describe the driving scene."


def test_the_bundled_head_finds_the_drafter_it_reads_inside_the_package():
    from crossspec_ros.models.pair import BUNDLED_PAIR, head_drafter_source, load_head

    directory = BUNDLED_PAIR / "distilled_head" / "head"
    assert head_drafter_source(directory) == str(BUNDLED_PAIR / "distilled" / "drafter")
    head, drafter = load_head(directory)
    assert head.config.context_dim == drafter.model.config.text.hidden_size


def test_distill_head_writes_a_head_and_a_second_run_reuses_the_labels(tmp_path, capsys):
    from crossspec_ros.cli.main import main

    out = tmp_path / "head_out"
    # labels of 8 tokens at most: fewer verifier steps per window than the default
    # 48 (the bundled verifier's captions run ~18 tokens)
    args = ["distill", "--method", "head", "--sim-windows", "16", "--steps", "3",
            "--max-new-tokens", "8", "--eval-windows", "0", "--workers", "1", "--out",
            str(out)]
    assert main(args) == 0
    first = capsys.readouterr()
    assert (out / "head" / "head.safetensors").is_file() and (out / "distill.json").is_file()
    assert (out / "loss.png").is_file()
    # a summary on stdout, the whole card in the file
    assert first.out.startswith("distilled (head) on 16 windows at leads 0, 300, 600 ms (48 "
                                "examples), 3 steps")
    assert f"{out}/distill.json" in first.err and "{" not in first.out
    assert main(args) == 0  # again: the labels come from the cache on disk
    assert "16 windows from the cache" in capsys.readouterr().err


def test_distill_at_leads_reports_both_drafters_drafting_before_the_close(tmp_path, capsys):
    from crossspec_ros.cli.main import main

    out = tmp_path / "leads_out"
    assert main(["distill", "--sim-windows", "16", "--steps", "2", "--max-new-tokens", "8",
                 "--eval-windows", "3", "--workers", "1", "--leads", "0,300", "--out",
                 str(out)]) == 0
    card = json.loads((out / "distill.json").read_text())
    assert card["leads_ms"] == [0.0, 300.0] and card["windows"] == 16
    assert card["examples"] == 32 - card["left_out"].get("no events before a lead", 0)
    at_leads = card["heldout"]["at_leads"]
    assert set(at_leads) == {"distilled", "undistilled"}
    for rows in at_leads.values():
        assert [row["lead_ms"] for row in rows] == [300.0]
        assert rows[0]["windows"] == 3 and 0.0 <= rows[0]["acceptance"] <= 1.0
    printed = capsys.readouterr().out
    assert printed.startswith("distilled (finetune) on 16 windows at leads 0, 300 ms")
    assert "distilled drafting before the close: 300 ms" in printed


def test_the_nodes_default_drafter_is_the_one_distilled_at_leads_and_adapters_keep_their_base():
    from crossspec_ros.models.lora import adapter_base
    from crossspec_ros.models.pair import BUNDLED_PAIR, drafter_source
    from crossspec_ros.paths import DEFAULT_DRAFTER

    assert DEFAULT_DRAFTER == BUNDLED_PAIR / "distilled_leads" / "drafter"
    card = json.loads((DEFAULT_DRAFTER.parent / "distill.json").read_text())
    assert card["leads_ms"] == [0.0, 300.0, 600.0] and card["examples"] == 3 * card["windows"]
    assert drafter_source({"drafter_model": "", "draft_head": ""}) == str(DEFAULT_DRAFTER)
    assert drafter_source({"drafter_model": "/x", "draft_head": ""}) == "/x"
    # "" inside a result still names the undistilled bundled drafter (the LoRA's base)
    assert adapter_base(BUNDLED_PAIR / "distilled_lora" / "adapter") == ""
