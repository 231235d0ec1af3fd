"""The run record (run_record.py): one status table from Caption.msg's codes, one lossless rule
for every command (exact captions checked, lossy ones apart, never lossless)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from crossspec_ros.run_record import (
    FINISHED,
    LosslessTally,
    checkable,
    lossless_verdict,
    lossy_words,
    status_name,
    verdict,
)

MSG = Path(__file__).resolve().parents[1] / "msg" / "Caption.msg"


def test_status_names_are_caption_msgs_status_codes():
    codes = dict(re.findall(r"^uint8 STATUS_(\w+)\s*=\s*(\d+)", MSG.read_text(), re.M))
    assert codes, "Caption.msg defines no STATUS_* constants"
    for name, code in codes.items():
        assert status_name(int(code)) == name
    assert status_name(9) == "STATUS 9" and FINISHED == ("FINAL", "UNVERIFIED")


def test_a_caption_under_a_relaxed_rule_is_counted_apart_never_as_lossless():
    tally = LosslessTally(keep=1)
    rows = [{"window": 1, **verdict(True)}, {"window": 2, **verdict(False)},
            {"window": 3, **verdict(False)},
            {"window": 4, "acceptance_rule": "top_k:2", **verdict(False, "top_k:2")},
            {"window": 5, "acceptance_rule": "top_k:2", **verdict(True, "top_k:2")},
            {"window": 6}]  # not checked
    for row in rows:
        tally.add(row)
    assert tally.summary() == {
        "lossless": 1, "lossless_checked": 3, "not_lossless": [2],  # the first one kept
        "lossy_windows": 2, "lossy_same_as_verifier": 1, "acceptance_rules": ["top_k:2"]}
    assert not tally.all_lossless


def test_the_verdict_runs_the_verifier_alone_and_compares_tokens():
    class Tokenizer:
        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    engine = SimpleNamespace(verifier_only=lambda window: [1, 2, 3],
                             verifier=SimpleNamespace(tokenizer=Tokenizer()),
                             config=SimpleNamespace(mode="greedy"))
    same = lossless_verdict(engine, object(), [1, 2, 3])
    assert same["lossless"] is True and same["verifier_only_text"] == "1 2 3"
    assert lossless_verdict(engine, object(), [1, 2])["lossless"] is False
    lossy = lossless_verdict(engine, object(), [1, 2, 3], rule="top_k:2")
    assert lossy["lossy_same_as_verifier"] is True and "lossless" not in lossy
    assert checkable(engine) and not checkable(SimpleNamespace(
        config=SimpleNamespace(mode="sample")))


def test_every_command_says_lossy_captions_in_the_same_words():
    tally = LosslessTally()
    for same in (True, False):
        tally.add({"window": 1, "acceptance_rule": "top_k:2", **verdict(same, "top_k:2")})
    assert lossy_words(tally.summary()) == ("LOSSY (top_k:2): 2 captions under a relaxed "
                                            "acceptance rule, 1 of them the verifier's own")
