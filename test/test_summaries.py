"""Summaries over measurements that may be empty (issue 36: `caption` died computing the
median of no draft latencies): None, printed as "n/a", never an exception."""

import math
import random

import numpy as np

from crossspec_ros import summaries


def test_a_summary_of_nothing_is_none_and_prints_as_n_a():
    for values in ([], [None], [math.nan, None]):
        assert summaries.median(values) is None
        assert summaries.percentile(values, 95) is None
        assert summaries.quartiles(values) is None
    assert summaries.shown(None, unit=" ms") == "n/a"
    assert summaries.shown(math.nan) == "n/a"
    assert summaries.shown(12.345, unit=" ms") == "12.3 ms"
    assert summaries.rounded(math.nan) is None and summaries.rounded(1.23456, 3) == 1.235


def test_percentiles_leave_out_missing_values_and_agree_with_numpy():
    rng = random.Random(0)
    for n in (1, 2, 3, 10, 101):
        values = [rng.uniform(0, 100) for _ in range(n)]
        for q in (0, 25, 50, 75, 95, 100):
            assert math.isclose(summaries.percentile([*values, None, math.nan], q),
                                float(np.percentile(values, q)), rel_tol=1e-12)
    assert summaries.median([3.0, 1.0, 2.0, 10.0]) == 2.5


def test_bench_summary_of_modes_without_measured_windows_says_n_a():
    from crossspec_ros.bench.engine import ModeRun, markdown_table, paired, summarize

    assert paired([], []) == {"median": None, "q25": None, "q75": None}
    runs = {mode: ModeRun() for mode in ("hf_generate", "verifier_alone", "crossspec")}
    report = summarize(runs, max_new_tokens=8, windows=0)
    entry = report["modes"]["crossspec"]
    assert entry["latency_ms_median"] is None and entry["paired_speedup_median"] is None
    assert report["ceiling_speedup_median"] is None
    table = markdown_table(report)
    assert "| crossspec | n/a | n/a | **n/a** (n/a-n/a) | n/a |" in table


def test_a_bounded_sample_keeps_every_value_up_to_its_capacity_then_a_uniform_sample():
    sample = summaries.BoundedSample(capacity=1000)
    for value in (*range(1000), None, math.nan):
        sample.add(value)
    assert sample.count == 1000 and not sample.sampled
    assert summaries.median(sample.values) == 499.5  # exact while it fits
    for value in range(1000, 100_000):
        sample.add(value)
    assert (sample.count, len(sample.values), sample.sampled) == (100_000, 1000, True)
    # a uniform sample of 0..99999: its median near the true one, values from the whole range
    assert abs(summaries.median(sample.values) - 50_000) < 5_000
    assert min(sample.values) < 5_000 and max(sample.values) > 95_000


def test_a_latency_is_given_to_a_tenth_of_a_millisecond_and_a_share_as_a_whole_percentage():
    assert summaries.median_ms([10.04, None, 20.0, math.nan]) == 15.0
    assert summaries.median_ms([]) is None and summaries.percentile_ms([None], 95) is None
    assert summaries.percentile_ms([1.0, 2.0, 3.0, 4.0, 5.0], 95) == 4.8
    assert summaries.shown_ms(12.34) == "12.3 ms" and summaries.shown_ms(None) == "n/a"
    assert summaries.shown_percent(0.5) == "50%" and summaries.shown_percent(math.nan) == "--"
