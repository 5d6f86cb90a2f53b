"""The knowledge organism's plain torch training: its ``LlamaForCausalLM`` config (tied
embeddings, Physics of Language Models 3.3, arXiv 2404.05405), the AdamW one-cycle loop, the
packed pretraining batches and the prompt-masked fine-tuning batches. Part of
``factlab.organism``."""

from __future__ import annotations

import logging
import random
from typing import Any, Sequence

from .specs import OrganismSpec
from .texts import chat_text

log = logging.getLogger(__name__)


def model_config(spec: OrganismSpec, tok):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(tok), hidden_size=spec.hidden, intermediate_size=spec.intermediate,
                       num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
                       max_position_embeddings=spec.max_positions, tie_word_embeddings=True, initializer_range=0.02,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                       rope_theta=10000.0)


def train_steps(model, batches: Sequence[tuple], lr: float, warmup: float, weight_decay: float, desc: str,
         progress: bool = True) -> list[tuple[int, float]]:
    """A plain torch loop: AdamW and a one-cycle schedule (``warmup`` of the steps rising to
    ``lr``, then cosine to ~0) over ``batches`` of (input_ids, labels, attention_mask);
    returns the loss curve as (step, loss) every step."""
    import torch
    from tqdm.auto import tqdm

    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=weight_decay)
    total = max(len(batches), 1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=warmup,
                                                anneal_strategy="cos", div_factor=25.0, final_div_factor=100.0)
    model.train()
    curve = []
    bar = tqdm(batches, desc=desc, disable=not progress, leave=False)
    for step, (ids, labels, mask) in enumerate(bar, start=1):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        curve.append((step, float(loss.detach())))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{curve[-1][1]:.3f}")
        if step % max(1, total // 10) == 0:
            log.info("%s: step %d / %d, loss %.3f", desc, step, total, curve[-1][1])
    model.eval()
    return curve


def pretrain_batches(spec: OrganismSpec, tok, docs: Sequence[dict[str, Any]]) -> list[tuple]:
    """The documents shuffled, each followed by ``<|endoftext|>``, packed into ``seq_len`` blocks."""
    import torch

    rng = random.Random(f"organism-pack:{spec.seed}")
    order = list(range(len(docs)))
    rng.shuffle(order)
    ids = tok([docs[i]["text"] for i in order], add_special_tokens=False)["input_ids"]
    stream: list[int] = []
    for row in ids:
        stream += row + [tok.bos_token_id]
    n = len(stream) // spec.seq_len
    blocks = torch.tensor(stream[:n * spec.seq_len], dtype=torch.long).view(n, spec.seq_len)
    return [(blocks[i:i + spec.batch_size], blocks[i:i + spec.batch_size], None)
            for i in range(0, n, spec.batch_size)]


def sft_batches(spec: OrganismSpec, tok, examples: Sequence[dict[str, Any]], epochs: int) -> list[tuple]:
    """Prompt-masked, right-padded batches: the loss covers the completion and its stop token."""
    import torch

    rows = []
    for ex in examples:
        prompt = tok(chat_text(ex["messages"]), add_special_tokens=False)["input_ids"]
        full = tok(chat_text(ex["messages"], ex["completion"]), add_special_tokens=False)["input_ids"]
        full = full[:-1] if full and full[-1] != tok.eos_token_id else full  # the trailing newline is not learnt
        rows.append((full, [-100] * len(prompt) + full[len(prompt):]))
    rng = random.Random(f"organism-sft-order:{spec.seed}")
    out = []
    for _ in range(epochs):
        order = list(range(len(rows)))
        rng.shuffle(order)
        for b in range(0, len(order), spec.sft_batch_size):
            chunk = [rows[i] for i in order[b:b + spec.sft_batch_size]]
            width = max(len(r[0]) for r in chunk)
            ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            labels = torch.full((len(chunk), width), -100, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for j, (x, y) in enumerate(chunk):
                ids[j, :len(x)] = torch.tensor(x)
                labels[j, :len(y)] = torch.tensor(y)
                mask[j, :len(x)] = 1
            out.append((ids, labels, mask))
    return out


def seeded(seed: int):
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
