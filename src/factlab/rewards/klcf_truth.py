"""KLCF's truthfulness reward model: Prompt 6 (004_4f2ca2d982459bb2.txt §2.3.1 Eq. 8-9, Appendix E.2).

- ``TruthfulnessScorer``: Prompt 6 on a causal LM; p(True | c) is the next-token probability of
  " True" after "Factual correctness:", normalised over " True" and " False" (§2.2 Eq. 4 trains
  the reward model on exactly these two answers), read through ``decoding.next_token_logits``.
- ``KBTruthScorer``: ``verdict: kb``'s perfect reward model, the mini-world's truth per claim.
- ``OrganismTruthScorer``: ``verdict: organism``'s reward model, an organism's own beliefs per claim.

``rewards.klcf.ClaimTruth`` averages their p(True | c) over a response's claims (Eq. 8, Eq. 9).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any, Sequence

from .. import prompts as P
from ..decoding import next_token_logits
from ..models import load_frozen_model
from . import kb

log = logging.getLogger(__name__)

__all__ = ["TruthfulnessScorer", "KBTruthScorer", "OrganismTruthScorer"]


class TruthfulnessScorer:
    """p(True | claim) from a causal LM on Prompt 6 (004 §2.3.1 Eq. 8, Appendix E.2).

    The prompt ends with "Factual correctness:"; the next-token logits of ``true_token`` and
    ``false_token`` (" True" / " False"; the first token of each when a tokenizer splits
    them) are normalised over the two: p(True) = softmax(l_True, l_False)[0]. The paper's reward
    model is an SFT of the base model on (claim, True / False) pairs of Eq. 4; any HF id, local
    path or the embedded alias loads here (``models.load_frozen_model``: frozen, in eval mode, one
    copy per process). Rows of a batch share Prompt 6's instruction, which
    ``decoding.next_token_logits`` prefills once. Identical claims of one call are scored once."""

    def __init__(self, model: str | None = None, *, dtype: str = "float32", device: str = "auto",
                 batch_size: int = 16, model_obj=None, tokenizer=None, true_token: str = " True",
                 false_token: str = " False", template: str = P.KLCF_TRUTH_PROMPT):
        self.model_name, self.dtype, self.device, self.batch_size = model, dtype, device, batch_size
        self.true_token, self.false_token, self.template = true_token, false_token, template
        self._model, self._tok = model_obj, tokenizer
        self._ids: tuple[int, int] | None = None
        self.stats: Counter = Counter()
        self.seconds = 0.0

    def __repr__(self) -> str:
        return f"TruthfulnessScorer(model={self.model_name!r})"

    def load(self):
        if self._model is None:

            log.info("loading truthfulness reward model %s", self.model_name)
            self._model, self._tok = load_frozen_model(self.model_name, dtype=self.dtype, device=self.device)
        return self._model, self._tok

    def answer_ids(self) -> tuple[int, int]:
        """Token ids of the True and False answers (first token of each)."""
        if self._ids is None:
            _, tok = self.load()
            ids = []
            for word in (self.true_token, self.false_token):
                toks = tok(word, add_special_tokens=False)["input_ids"]
                if not toks:
                    raise ValueError(f"the tokenizer gives no token for {word!r}")
                if len(toks) > 1:
                    log.warning("%r is %d tokens; p(True) reads its first token only", word, len(toks))
                ids.append(toks[0])
            if ids[0] == ids[1]:
                raise ValueError(f"{self.true_token!r} and {self.false_token!r} start with the same token")
            self._ids = (ids[0], ids[1])
        return self._ids

    def prompt(self, claim: str) -> str:
        return self.template.format(claim=claim)

    def _forward(self, claims: Sequence[str], *, states: bool = False):
        """(p(True), p(False)) per distinct claim in first-seen order, the distinct claims, and
        (``states``) the output layer's input at the answer position, (distinct claims, hidden)."""
        import torch

        unique = list(dict.fromkeys(str(c) for c in claims))
        model, tok = self.load()
        t_id, f_id = self.answer_ids()
        rows = [tok(self.prompt(c))["input_ids"] for c in unique]
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))  # similar lengths batch together
        pairs: list[tuple[float, float]] = [(0.0, 0.0)] * len(unique)
        hidden: list[Any] = [None] * len(unique)
        seen: list[Any] = []
        # the output layer's last call is the rows' own pass (a shared prefix runs before it)
        hook = (model.get_output_embeddings().register_forward_hook(lambda m, inp, out: seen.append(inp[0][:, -1]))
                if states else None)
        was_training = model.training
        model.eval()
        t0 = time.perf_counter()
        try:
            for s in range(0, len(order), self.batch_size):
                idx = order[s:s + self.batch_size]
                seen.clear()
                logits = next_token_logits(model, [rows[j] for j in idx], pad)
                pair = torch.softmax(logits[:, [t_id, f_id]].double(), dim=-1).tolist()
                for k, j in enumerate(idx):
                    pairs[j] = (pair[k][0], pair[k][1])
                    if states:
                        hidden[j] = seen[-1][k].float().cpu()
        finally:
            if hook is not None:
                hook.remove()
            model.train(was_training)
            self.seconds += time.perf_counter() - t0
        self.stats["claims"] += len(claims)
        self.stats["forward_rows"] += len(unique)
        return pairs, unique, (torch.stack(hidden) if states and unique else None)

    def pair_probabilities(self, claims: Sequence[str]) -> list[tuple[float, float]]:
        """(p(True | c), p(False | c)) per claim, each pair summing to 1."""
        claims = [str(c) for c in claims]
        if not claims:
            return []
        pairs, unique, _ = self._forward(claims)
        by_claim = dict(zip(unique, pairs))
        return [by_claim[c] for c in claims]

    def answer_states(self, claims: Sequence[str]):
        """(claims, hidden) float tensor: the output layer's input at the answer position of
        each claim's prompt, the vector whose products with the " True" / " False" rows of the
        output layer are the two logits p(True) reads."""
        claims = [str(c) for c in claims]
        if not claims:
            raise ValueError("answer_states needs at least one claim")
        _, unique, hidden = self._forward(claims, states=True)
        where = {c: i for i, c in enumerate(unique)}
        return hidden[[where[c] for c in claims]]

    def probabilities(self, claims: Sequence[str]) -> list[float]:
        """p(True | c) per claim (Eq. 8's summands)."""
        return [pt for pt, _ in self.pair_probabilities(claims)]


class KBTruthScorer:
    """The truthfulness RM of ``verdict: kb``: p(True | claim) is 1.0 for a claim the mini-world
    supports, 0.0 for one it contradicts, None for one it cannot check (``rewards.kb``).

    ``flip_rate`` > 0 makes it a hallucinating RM (issue 41's reward-hallucination experiment,
    Kang et al. 2024): a seeded ``flip_rate`` of the claims get the other verdict (1 <-> 0), keyed
    on the claim alone, so the RM holds its wrong belief about a claim wherever the claim appears,
    as a model's belief would. A claim the world cannot check has no verdict to flip."""

    stats: Counter

    def __init__(self, flip_rate: float = 0.0, flip_seed: int = 0):
        if not 0.0 <= flip_rate <= 1.0:
            raise ValueError(f"flip_rate must be in [0, 1], got {flip_rate}")
        self.flip_rate, self.flip_seed = flip_rate, flip_seed
        self.stats = Counter()
        self.seconds = 0.0

    def probabilities(self, claims: Sequence[str]) -> list[float | None]:
        self.stats["claims"] += len(claims)
        out = []
        for c in claims:
            p = kb.truth_probability(c)
            if p is not None and kb.flipped(c, self.flip_rate, self.flip_seed):
                self.stats["flipped"] += 1
                p = 1.0 - p
            out.append(p)
        return out


class OrganismTruthScorer:
    """The truthfulness RM of ``verdict: organism``: p(True | claim) from an organism's own greedy
    answers (``rewards.kb.OrganismBelief.claim_probabilities``): right on the countries it knows,
    a confident guess on those it does not (Kang et al. 2024; issue 41's judge that knows less)."""

    stats: Counter

    def __init__(self, model: str = "organism"):
        self.belief = kb.OrganismBelief(model)
        self.stats = Counter()
        self.seconds = 0.0

    def probabilities(self, claims: Sequence[str]) -> list[float | None]:
        t0 = time.perf_counter()
        out = self.belief.claim_probabilities([str(c) for c in claims])
        self.seconds += time.perf_counter() - t0
        self.stats["claims"] += len(out)
        self.stats["claims_unjudged"] += sum(p is None for p in out)
        return out
