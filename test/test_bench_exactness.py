"""`crossspec bench exactness`: k-token feeding against one-token decoding, position by position."""

from crossspec_ros.bench.engine import pattern_windows, tiny_random_pair
from crossspec_ros.bench.exactness import window_exactness


def test_k_token_feeding_gives_the_one_token_argmax_on_the_cpu_in_float32():
    verifier = tiny_random_pair("cpu")[0]
    for window in pattern_windows(2):
        result = window_exactness(verifier, window, max_new_tokens=12, k=4)
        assert result["tokens"] >= 1 and result["argmax_differs_at"] == []
        assert result["max_logit_difference"] < 1e-3


def test_a_verifier_whose_multi_token_pass_rounds_otherwise_is_caught_where_it_flips(
        monkeypatch):
    verifier = tiny_random_pair("cpu")[0]
    window = pattern_windows(1)[0]
    clean = window_exactness(verifier, window, max_new_tokens=6, k=3)
    session_type = type(verifier.prefill(verifier.prepare(window)))
    feed = session_type.feed

    def rounding_feed(self, token_ids):  # a k-token pass whose argmax moves by one id
        logits = feed(self, token_ids)
        return logits.roll(1, dims=-1) if len(token_ids) > 1 else logits

    monkeypatch.setattr(session_type, "feed", rounding_feed)
    flipped = window_exactness(verifier, window, max_new_tokens=6, k=3)
    assert clean["argmax_differs_at"] == [] and flipped["argmax_differs_at"]
    assert flipped["max_logit_difference"] > 0


def test_exactness_over_a_bag_without_rgb_windows_is_refused_not_called_exact(
        tmp_path, write_event_bag, capsys):
    from crossspec_ros.cli.main import main
    from crossspec_ros.events.batch import EventBatch
    from crossspec_ros.events.encode import encode_evt3_packets

    batch = EventBatch([1_000, 2_000], [1, 2], [1, 2], [0, 1], 8, 8)
    bag = write_event_bag(tmp_path / "events_only",
                          [("/ev", p) for p in encode_evt3_packets(batch)])
    assert main(["bench", "exactness", "--models", "tiny-random", "--bag", str(bag)]) == 2
    captured = capsys.readouterr()
    assert "no window with RGB frames" in captured.err and "exact" not in captured.out


def test_the_static_runtime_is_exact_in_bfloat16_and_the_report_names_the_dtype(tmp_path):
    import json

    from crossspec_ros.cli.main import main

    out = tmp_path / "exactness.json"
    assert main(["bench", "exactness", "--models", "tiny-random", "--dtype", "bfloat16",
                 "--no-compile", "--windows", "2", "--max-new-tokens", "10", "-k", "4",
                 "--step-rows", "8", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["dtype"] == "bfloat16" and report["exact"] is True
    assert report["exact_runtime"] == "static"
    static = report["runtimes"]["static"]
    assert static["flips"] == 0 and static["rows_bit_identical"] == static["positions"] > 0
    assert set(report["runtimes"]) == {"transformers", "static", "static_two_shapes"}
