"""What the exactness tests compare: a verifier's rows decoded one token per pass against the
same tokens fed k per pass (tests import it as `from decoding_rows import teacher_forced_rows`)."""

from __future__ import annotations

import torch


def teacher_forced_rows(verifier, window, k: int, max_tokens: int = 24
                        ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The verifier's greedy caption (at most ``max_tokens``) decoded one token per pass, then
    fed again k tokens per pass after a fresh prefill: (one-token rows, k-token rows), as many
    of each."""
    inputs = verifier.prepare(window)
    session = verifier.prefill(inputs)
    single, tokens = [session.last_logits.clone()], []
    while len(tokens) < max_tokens:
        tokens.append(int(single[-1].argmax()))
        if tokens[-1] == verifier.info.eos_token_id:
            break
        single.append(session.feed([tokens[-1]])[-1].clone())
    del session  # its cache goes back first (a lane holds one window at a time)
    session = verifier.prefill(inputs)
    chunked, fed = [session.last_logits.clone()], tokens[:len(single) - 1]
    for start in range(0, len(fed), k):
        chunked.extend(session.feed(fed[start:start + k]).clone().unbind(0))
    return single, chunked
