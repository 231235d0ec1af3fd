"""A draft head: the verifier's next tokens from the drafter's view of the window, cheaply.

In the EAGLE manner, a small recurrent head replaces the drafter's own autoregressive
decoding: the drafter runs once per window (events -> its language model's last hidden state
at the end of the prompt: what it saw), and from then on each proposed token costs one GRU step
(tens of microseconds) instead of a pass through the drafter's language model. The head reads
that window state and the caption confirmed so far (token embeddings of its own) and predicts
the verifier's next token, in the verifier's ids: it is trained on the verifier's captions
(``crossspec distill --method head``).

Saved as ``head.safetensors`` + ``head.json`` (sizes and the drafter whose state it reads).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from crossspec_ros.models.compile_gate import COMPILE_GATE


@dataclass(frozen=True)
class HeadConfig:
    context_dim: int          # the drafter's hidden size
    vocab_size: int           # the verifier's vocabulary (rows of the logits)
    proposable_ids: int       # ids below this may be proposed (plus EOS)
    eos_token_id: int
    hidden: int = 192
    embed: int = 64


class DraftHead(nn.Module):
    """GRU over the confirmed caption, started from the drafter's window state."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.config = config
        self.start = nn.Linear(config.context_dim, config.hidden)
        self.embed = nn.Embedding(config.vocab_size + 1, config.embed)  # last row: caption start
        self.gru = nn.GRU(config.embed, config.hidden, batch_first=True)
        self.out = nn.Linear(config.hidden + config.context_dim, config.vocab_size)

    @property
    def begin_id(self) -> int:
        return self.config.vocab_size

    def forward(self, context: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits [B, T, vocab] for captions ``tokens`` [B, T] (verifier ids)
        given window states ``context`` [B, context_dim]: row t predicts tokens[:, t]."""
        begin = torch.full((tokens.shape[0], 1), self.begin_id, dtype=torch.long,
                           device=tokens.device)
        inputs = self.embed(torch.cat([begin, tokens[:, :-1]], dim=1))
        states, _ = self.gru(inputs, torch.tanh(self.start(context))[None])
        return self.out(torch.cat([states, context[:, None].expand(-1, states.shape[1], -1)],
                                  dim=-1))

    @torch.inference_mode()
    @COMPILE_GATE.model_work()  # model work: never while another thread compiles
    def propose(self, context: torch.Tensor, confirmed: list[int], limit: int,
                state: HeadState | None = None) -> tuple[list[int], HeadState]:
        """Greedy continuation (at most ``limit`` tokens, ending at EOS) of ``confirmed``;
        ``state``: the GRU state of an earlier call on a prefix of ``confirmed`` (reused, so a
        window's rounds cost only their new tokens). Returns the tokens and the state after
        ``confirmed``."""
        if state is None or state.position > len(confirmed):
            state = HeadState(0, torch.tanh(self.start(context))[None, None], self.begin_id)
        hidden, last = state.hidden, state.last
        for token in confirmed[state.position:]:
            _, hidden = self.gru(self.embed(torch.tensor([[last]])), hidden)
            last = token
        after = HeadState(len(confirmed), hidden, last)
        cfg = self.config
        chain: list[int] = []
        while len(chain) < limit:
            output, hidden = self.gru(self.embed(torch.tensor([[last]])), hidden)
            logits = self.out(torch.cat([output[0, 0], context]))
            allowed = logits[: cfg.proposable_ids]
            last = int(torch.argmax(allowed))
            if cfg.eos_token_id >= cfg.proposable_ids and logits[cfg.eos_token_id] > allowed[last]:
                last = cfg.eos_token_id
            chain.append(last)
            if last == cfg.eos_token_id:
                break
        return chain, after

    def save(self, directory: str | Path, extra: dict[str, Any] | None = None) -> None:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()},
                  str(out / "head.safetensors"))
        (out / "head.json").write_text(json.dumps({**asdict(self.config), **(extra or {})},
                                                  indent=2))

    @classmethod
    def load(cls, directory: str | Path) -> DraftHead:
        """From ``save``'s directory (safetensors only)."""
        directory = Path(directory)
        meta = json.loads((directory / "head.json").read_text())
        fields = HeadConfig.__dataclass_fields__
        head = cls(HeadConfig(**{k: v for k, v in meta.items() if k in fields}))
        head.load_state_dict(load_file(str(directory / "head.safetensors")))
        return head.eval()


@dataclass
class HeadState:
    """The GRU state after ``position`` confirmed tokens; ``last`` is the token not yet fed
    (the caption-start id at position 0)."""

    position: int
    hidden: torch.Tensor
    last: int
