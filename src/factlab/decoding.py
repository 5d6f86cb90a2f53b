"""Batched decoding for frozen models on a small machine: what ``models.generate`` runs.

Measured on the 2-core CPU this project targets (``bench/bench_generate.py``), three costs of
Hugging Face's ``generate`` dominate a batch of chat prompts, and each has a direct fix:

- **Shared prompt prefix.** Evaluation, judge and verifier prompts share a long system prompt
  (CorVer's §A.3 evaluation prompt, SEVA's K.1, the RAR judge instructions), and prefill is
  compute-bound: ``generate`` recomputes that prefix for every row. Here the common token
  prefix of the batch runs once (batch 1) and its keys / values are repeated for every row;
  each row's own suffix follows, left-padded between the two (the padding is masked and the
  suffix keeps its true positions, so the model sees exactly prefix + suffix).
- **Finished rows.** A batch runs until its longest completion stops. Rows that hit a stop
  token are dropped from the batch (and the cache) once a quarter of it has finished, so the
  tail of a batch costs what its live rows cost.
- **The growing cache.** transformers' ``DynamicCache`` concatenates every layer's keys and
  values with the new token's at every step: a copy of the whole cache per token, quadratic in
  the completion's length. Here each layer's keys / values are views of a buffer sized once for
  the prompt plus ``max_new_tokens`` (``ReservedLayer``: the memory a full-length completion's
  cache takes, allocated up front), written in place: the same attention inputs, so the same
  tokens (tested), decoding in 0.67-0.93x the time (``bench/bench_decode_cache.py``).

Only the last position's logits are computed (``logits_to_keep=1``). Greedy decoding is
argmax; sampling applies temperature then top-p (nucleus) and draws with the global torch
RNG, which ``models.generate`` seeds inside a fork. Greedy outputs match ``generate`` from
transformers token for token (tested). A decode step is bound by the linear layers'
matrix products (``bench/bench_generate.py`` prints the ratio to the machine's bound).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["ReservedLayer", "common_prefix_length", "decode", "next_token_logits", "reserved_cache"]


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix every row shares, leaving each row at least one token."""
    if not rows:
        return 0
    n = min(len(r) for r in rows) - 1
    first = rows[0]
    for i in range(max(n, 0)):
        t = first[i]
        if any(r[i] != t for r in rows):
            return i
    return max(n, 0)


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys / values are views of a buffer of ``capacity`` positions,
    allocated at the first update: ``update`` writes in place instead of concatenating (module
    docstring). Past the capacity it grows by doubling; the batch operations decoding uses
    (dropping finished rows, repeating the shared prefix per row) act on the buffer."""

    def __init__(self, capacity: int = 0):
        super().__init__()
        self.capacity = max(int(capacity), 0)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        old = self.get_seq_length()
        new = old + key_states.shape[-2]
        if self._key_buffer is None or new > self._key_buffer.shape[-2]:
            room = max(new, self.capacity) if self._key_buffer is None else 2 * new
            self._key_buffer = self._grown(self._key_buffer, key_states, room, old)
            self._value_buffer = self._grown(self._value_buffer, value_states, room, old)
        self._key_buffer[:, :, old:new] = key_states
        self._value_buffer[:, :, old:new] = value_states
        self._view(new)
        return self.keys, self.values

    @staticmethod
    def _grown(buffer: torch.Tensor | None, states: torch.Tensor, room: int, filled: int) -> torch.Tensor:
        b, h, _, d = states.shape
        out = states.new_empty((b, h, room, d))
        if buffer is not None and filled:
            out[:, :, :filled] = buffer[:, :, :filled]
        return out

    def _view(self, length: int) -> None:
        self.keys = self._key_buffer[:, :, :length]
        self.values = self._value_buffer[:, :, :length]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            length = self.get_seq_length()
            self._key_buffer, self._value_buffer = self._key_buffer[indices], self._value_buffer[indices]
            self._view(length)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            length = self.get_seq_length()
            self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
            self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
            self._view(length)

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        super().reset()


def reserved_cache(config, capacity: int) -> DynamicCache:
    """transformers' ``DynamicCache`` for ``config`` with its full-attention layers as
    ``ReservedLayer`` s of ``capacity`` positions; a sliding-window layer stays as transformers
    builds it."""
    cache = DynamicCache(config=config)
    cache.layers = [ReservedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def _sample(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p  # keep the smallest set reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1).squeeze(-1)


@torch.no_grad()
def _prefill(model, rows: Sequence[Sequence[int]], pad_id: int, max_new_tokens: int = 0):
    """The shared prefix once (batch 1, its cache repeated per row), then every row's own
    suffix, left-padded; returns (last-position logits, cache with room for ``max_new_tokens``
    more, attention mask, next positions)."""
    device = next(model.parameters()).device
    bs = len(rows)
    prefix_len = common_prefix_length(rows)
    suffixes = [list(r[prefix_len:]) for r in rows]
    width = max(len(s) for s in suffixes)
    cache = reserved_cache(model.config, prefix_len + width + max_new_tokens)
    if prefix_len:
        model(input_ids=torch.tensor([list(rows[0][:prefix_len])], device=device), past_key_values=cache,
              use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(bs)
    ids = torch.full((bs, width), pad_id, dtype=torch.long, device=device)
    suffix_mask = torch.zeros((bs, width), dtype=torch.long, device=device)
    for i, s in enumerate(suffixes):
        ids[i, width - len(s):] = torch.tensor(s, device=device)
        suffix_mask[i, width - len(s):] = 1
    mask = torch.cat([torch.ones((bs, prefix_len), dtype=torch.long, device=device), suffix_mask], dim=1)
    positions = (prefix_len + suffix_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                cache_position=torch.arange(prefix_len, prefix_len + width, device=device), use_cache=True,
                logits_to_keep=1)
    return out.logits[:, -1], cache, mask, positions[:, -1] + 1


@torch.inference_mode()
def next_token_logits(model, rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """(rows, vocab) logits of the token after each row, the batch's shared prefix computed
    once (what a constrained-choice judge reads)."""
    return _prefill(model, rows, pad_id)[0].float()


@torch.no_grad()  # the KV cache must not hold an autograd graph: memory and time grow with every step
def decode(model, rows: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int], pad_id: int,
           temperature: float = 0.0, top_p: float = 1.0, on_step: Callable[[int], None] | None = None,
           keep_stop: bool = False) -> list[tuple[list[int], bool]]:
    """Decode every row of prompt token ids together; returns ``(new token ids, finished on a
    stop token)`` per row, in input order (see the module docstring). The stop token itself is
    left out, or kept as the last id with ``keep_stop`` (what TRL's completions hold)."""
    device = next(model.parameters()).device
    bs = len(rows)
    logits, cache, mask, next_pos = _prefill(model, rows, pad_id, max_new_tokens)
    stops = torch.tensor(sorted(set(stop_ids)) or [-1], device=device)
    live = torch.arange(bs, device=device)  # input row of each batch row
    generated: list[list[int]] = [[] for _ in range(bs)]
    finished = [False] * bs
    done = torch.zeros(bs, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        tokens = _sample(logits, temperature, top_p)
        hit = torch.isin(tokens, stops) & ~done
        for b, (t, h) in enumerate(zip(tokens.tolist(), hit.tolist())):
            row = int(live[b])
            if done[b]:
                continue
            if h:
                finished[row] = True
            if not h or keep_stop:
                generated[row].append(t)
        done |= hit
        if on_step is not None:
            on_step(step)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        if int(done.sum()) * 4 >= len(done):  # drop finished rows once a quarter of the batch is done
            keep = (~done).nonzero().squeeze(-1)
            live, tokens, mask, next_pos = live[keep], tokens[keep], mask[keep], next_pos[keep]
            done = done[keep]
            cache.batch_select_indices(keep)
        mask = torch.cat([mask, torch.ones((len(live), 1), dtype=mask.dtype, device=device)], dim=1)
        length = mask.shape[1]
        out = model(input_ids=tokens.unsqueeze(1), attention_mask=mask, position_ids=next_pos.unsqueeze(1),
                    past_key_values=cache, cache_position=torch.tensor([length - 1], device=device), use_cache=True,
                    logits_to_keep=1)
        logits, next_pos = out.logits[:, -1], next_pos + 1
    return [(generated[i], finished[i]) for i in range(bs)]
