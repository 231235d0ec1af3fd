"""`crossspec bench engine`'s measurement: every mode, paired ratios, lossless checks."""

import gc

from crossspec_ros.bench.engine import (
    CollectorPauses,
    markdown_table,
    paired,
    pattern_windows,
    run_engine_bench,
    tiny_random_pair,
)


def test_paired_speedup_is_the_median_of_per_window_ratios_not_a_ratio_of_medians():
    baseline = [10.0, 100.0, 30.0]
    mode = [5.0, 100.0, 10.0]  # ratios 2, 1, 3; medians 30 / 10 would say 3
    assert paired(baseline, mode) == {"median": 2.0, "q25": 1.5, "q75": 2.5}


def test_every_mode_runs_on_every_counted_window_and_matches_the_verifier():
    verifier, drafter, _ = tiny_random_pair("cpu")
    logged = []
    report = run_engine_bench(verifier, drafter, pattern_windows(4), max_new_tokens=6,
                              oracle_acceptances=(0.5,), warmup=1, log=logged.append)
    assert set(report["modes"]) == {"hf_generate", "verifier_alone", "prompt_lookup",
                                    "history_only", "draft_only", "crossspec", "oracle@a=0.5",
                                    "crossspec_event", "crossspec_event_acceptance",
                                    "crossspec_event_cascade"}
    assert report["windows"] == 3 and len(logged) == 4 and "warm-up" in logged[0]
    assert report["lossless"] is True
    for mode, entry in report["modes"].items():
        assert entry["lossless_windows"] == "3/3", mode
        assert entry["paired_speedup_vs_verifier_alone"]["q25"] <= \
            entry["paired_speedup_median"] <= \
            entry["paired_speedup_vs_verifier_alone"]["q75"]
    assert report["modes"]["verifier_alone"]["paired_speedup_median"] == 1.0
    assert report["modes"]["crossspec"]["passes_per_window"] > 0
    assert report["paired_speedup_median"] == report["modes"]["crossspec"][
        "paired_speedup_median"]
    assert report["modes"]["history_only"]["paired_speedup_vs_history_only"]["median"] == 1.0
    table = markdown_table(report)
    assert table.count("\n| ") == 2 + len(report["modes"]) - 1  # header, rule, one per mode
    vs = report["modes"]["crossspec"]["paired_speedup_vs_history_only"]
    assert f"crossspec against history_only, paired: {vs['median']:.2f}x" in table
    # the event-aware ablation: paired with crossspec, its windows by change level (the
    # pattern's windows follow one another: all but the first have a level)
    event = report["modes"]["crossspec_event"]
    levels = event["by_change_level"]
    assert sum(v["windows"] for v in levels.values()) == 3 and set(levels) <= {
        "", "steady", "changed"}
    assert f"crossspec_event against crossspec, paired: " \
        f"{event['paired_speedup_vs_crossspec']['median']:.2f}x" in table
    assert "event-aware: acceptance + cascade; by level: " in table
    pauses = report["collector_pauses"]
    assert pauses["collections"] >= pauses["full_collections"] >= 0
    assert f"{pauses['collections']} collections, {pauses['full_collections']} full" in table


def test_free_oracles_run_beside_the_paced_ones_and_save_verifier_passes():
    verifier, drafter, _ = tiny_random_pair("cpu")
    report = run_engine_bench(verifier, drafter, pattern_windows(3), max_new_tokens=6,
                              oracle_acceptances=(1.0,), warmup=1, prompt_lookup=False,
                              free_oracles=True, log=lambda _: None)
    modes = report["modes"]
    assert {"oracle@a=1", "oracle_free@a=1"} <= set(modes) and report["lossless"] is True
    # always right and there at once: the whole caption goes into fewer verifier passes
    assert modes["oracle_free@a=1"]["passes_per_window"] < \
        modes["verifier_alone"]["passes_per_window"]


def test_collector_pauses_counts_each_collection_by_generation_while_installed():
    with CollectorPauses() as pauses:
        gc.collect(0)
        gc.collect()
    gc.collect()  # after the with: not counted
    summary = pauses.summary()
    assert summary["collections"] == 2 and summary["full_collections"] == 1
    assert [gen for gen, _ in pauses.pauses] == [0, 2]
    assert 0.0 <= summary["longest_pause_ms"] <= summary["total_pause_ms"] + 0.1


def test_live_graphs_run_the_products_loops_over_the_replayed_messages_losslessly():
    from crossspec_ros.bench.live_replay import LIVE_GRAPHS, replay_messages

    verifier, drafter, _ = tiny_random_pair("cpu")
    windows = pattern_windows(3)
    messages = replay_messages(windows)
    stamps = [stamp for stamp, _, _ in messages]
    assert stamps == sorted(stamps)  # in stamp order, every frame once, events in packets
    assert sum(kind == "rgb" for _, kind, _ in messages) == 3 * 8 + 1  # + the closing frame
    assert messages[-1][0] > windows[-1].t1  # past the last window: it closes by data
    report = run_engine_bench(verifier, drafter, windows, max_new_tokens=6, warmup=1,
                              prompt_lookup=False, live=True, live_rounds=1,
                              log=lambda _: None)
    for mode in LIVE_GRAPHS:
        assert report["modes"][mode]["lossless_windows"] == "2/2", mode
        graph = report["live"]["graphs"][mode]
        assert graph["windows"] == 2 and graph["not_final"] == 0 and not graph["errors"]
    # the verifier alone after the close decodes after the close; early start does not have to
    after = report["live"]["graphs"]["after_close_alone"]["confirmed_after_close_ms"]
    assert after["median"] > 0
    vs = report["live"]["graphs"]["crossspec_live"]["vs_live_alone_ms"]
    assert vs["median"] is not None
    assert report["live"]["graphs"]["live_alone"]["vs_live_alone_ms"]["median"] == 0.0
    table = markdown_table(report)
    assert "| crossspec_live | **" in table and "minus live_alone, paired ms" in table


def test_a_4bit_pair_runs_every_mode_losslessly_and_reports_the_verifier_costs():
    from crossspec_ros.bench.engine import quantized_4bit

    verifier, drafter, label = quantized_4bit(*tiny_random_pair("cpu"))
    assert label.endswith(", 4-bit NF4")
    report = run_engine_bench(verifier, drafter, pattern_windows(3), max_new_tokens=6,
                              oracle_acceptances=(), warmup=1, prompt_lookup=False,
                              log=lambda _: None)
    assert report["lossless"] is True
    alone = report["modes"]["verifier_alone"]
    assert alone["verifier_prefill_ms_median"] > 0 and alone["decode_ms_per_pass_median"] > 0
    assert (f"prefill {alone['verifier_prefill_ms_median']:.2f} ms, then "
            f"{alone['decode_ms_per_pass_median']:.2f} ms per decoded token") in \
        markdown_table(report)


def test_on_the_static_runtime_the_modes_equal_its_plain_decoding_beside_todays_runtime():
    from crossspec_ros.models.static_runtime import RuntimeOptions

    verifier, drafter, _ = tiny_random_pair("cpu")
    report = run_engine_bench(verifier, drafter, pattern_windows(3), max_new_tokens=6,
                              warmup=1, prompt_lookup=False, live=True, live_rounds=1,
                              oracle_acceptances=(),
                              runtime=RuntimeOptions(compile=False, step_rows=(8,)),
                              log=lambda _: None)
    modes = report["modes"]
    assert {"verifier_alone", "verifier_alone_exact", "crossspec", "crossspec_live",
            "crossspec_live_transformers"} <= set(modes)
    assert "verifier_alone_compiled" not in modes  # nothing compiled: the eager baseline
    assert report["baseline"] == "verifier_alone" and report["lossless"] is True
    assert "steps of 8 rows" in report["runtime"]
    # comparison.py's step-shape rule, as drive's nodes keep it: the baselines decode in
    # one-row steps (losslessly, against that runtime's own decoding), the others in 8 rows
    graphs = report["live"]["graphs"]
    assert {name: graphs[name]["step_rows"] for name in graphs} == {
        "after_close_alone": 1, "live_alone": 1, "text_only": 8, "crossspec_live": 8,
        "crossspec_live_transformers": None}
    assert all(modes[name]["lossless_windows"] == "2/2" for name in graphs)
    assert modes["verifier_alone_exact"]["decode_ms_per_pass_median"] > 0
    assert "Runtime of the speculative modes: video-llava: static runtime" in \
        markdown_table(report)
