"""General reward R_g: a sequence-classification reward model's score of the answer
(004_4f2ca2d982459bb2.txt §2.3.3 Eq. 12, "a general reward R_g(A_i) from
Skywork-Reward-V2-Llama-3.2-1B ... to incentivize" overall quality; weight 0.1 in every case
of Eq. 12; Appendix F: it "steadily increases from 0.1 to 0.8" during training).

The reward model reads the conversation (the query as the user turn, the answer part A_i as
the assistant turn) through its own chat template and returns the single logit of its
classification head, the Skywork-Reward-V2 convention (``num_labels == 1``). Any HF id or
local folder whose ``config.architectures`` names a ``*ForSequenceClassification`` loads.

On the CPU default there is no preference model to run: ``stand_in: true`` accepts a causal
LM (the embedded SmolLM2-135M) and gives it a freshly initialised, seeded score head. Its
scores are real forward passes but carry no preference signal; the smoke params keep the
reward off and the report labels it "stand-in" whenever it is on. Without ``stand_in`` a
model that is not a sequence classifier is refused when the reward is built.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal, Sequence

from pydantic import Field

from ..config import MAX_TOKENS, Dtype, Section
from ..models import pick_device, resolve_model
from .base import RewardFunction, completion_text, prompt_text
from .qa import answer_of
from .registry import register
from ..prompts import chat_messages

log = logging.getLogger(__name__)

SKYWORK_V2_1B = "Skywork/Skywork-Reward-V2-Llama-3.2-1B"  # 004 §2.3.3


class GeneralRMArgs(Section):
    """``general_rm`` arguments. The params entry's ``weight`` is Eq. 12's 0.1."""

    model: str = SKYWORK_V2_1B
    stand_in: bool = False  # accept a causal LM with a new, untrained score head (no preference signal)
    stand_in_seed: int = 0
    dtype: Dtype = "float32"
    device: str = "auto"
    batch_size: int = Field(8, ge=1)
    max_length: int = Field(2048, ge=16, le=MAX_TOKENS)  # tokens of the templated conversation; longer ones keep their end
    answer_parsing: Literal["strict", "lenient"] = "lenient"


def is_sequence_classifier(config: Any) -> bool:
    """Whether an HF model config declares a sequence-classification architecture."""
    return any(str(a).endswith("ForSequenceClassification") for a in (getattr(config, "architectures", None) or []))


class GeneralRewardModel(RewardFunction):
    """R_g per response: the score head's logit on (query, answer) in the model's chat format."""

    __name__ = "general_rm"

    def __init__(self, args: GeneralRMArgs | None = None, *, model_obj=None, tokenizer=None):
        super().__init__()
        self.args = args or GeneralRMArgs()
        self._model, self._tok = model_obj, tokenizer

    def models(self) -> list[Any]:
        """Itself: a sequence-classification model loaded in this process (``load``)."""
        return [self]

    def __repr__(self) -> str:
        return f"GeneralRewardModel(model={self.args.model!r}{', stand-in' if self.args.stand_in else ''})"

    def load(self):
        if self._model is not None:
            return self._model, self._tok
        import torch
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        a = self.args
        path = resolve_model(a.model)
        config = AutoConfig.from_pretrained(path)
        if not is_sequence_classifier(config):
            if not a.stand_in:
                raise ValueError(
                    f"general_rm: {a.model!r} is not a sequence-classification reward model (architectures "
                    f"{getattr(config, 'architectures', None)}); use one such as {SKYWORK_V2_1B!r}, or set "
                    "args.stand_in: true to give a causal LM an untrained score head (no preference signal)")
            log.warning("general_rm: %s is a stand-in: a causal LM with a new, untrained score head (seed %d); "
                        "its scores carry no preference signal", a.model, a.stand_in_seed)
            torch.manual_seed(a.stand_in_seed)
        dtype = "auto" if a.dtype == "auto" else getattr(torch, a.dtype)
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=dtype)
        tok = AutoTokenizer.from_pretrained(path)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model.config.pad_token_id = tok.pad_token_id
        tok.padding_side, tok.truncation_side = "right", "left"
        model.to(pick_device(a.device)).eval().requires_grad_(False)
        self._model, self._tok = model, tok
        return model, tok

    def conversation(self, question: str, answer: str) -> str:
        _, tok = self.load()
        msgs = chat_messages(question) + [{"role": "assistant", "content": answer}]
        return tok.apply_chat_template(msgs, tokenize=False)

    def scores(self, questions: Sequence[str], answers: Sequence[str]) -> list[float]:
        """The head's logit per (question, answer) pair."""
        import torch

        model, tok = self.load()
        texts = [self.conversation(q, a) for q, a in zip(questions, answers, strict=True)]
        out: list[float] = []
        t0 = time.perf_counter()
        try:
            for s in range(0, len(texts), self.args.batch_size):
                batch = tok(texts[s:s + self.args.batch_size], return_tensors="pt", padding=True, truncation=True,
                            max_length=self.args.max_length, add_special_tokens=False).to(model.device)
                with torch.inference_mode():
                    logits = model(**batch).logits
                out.extend(logits[:, 0].float().tolist())
        finally:
            self.seconds += time.perf_counter() - t0
        self.stats["responses"] += len(texts)
        return out

    def __call__(self, prompts=None, completions=(), question=None, log_metric=None, **_: Any) -> list[float]:
        n = len(completions)
        answers = [answer_of(completion_text(c), self.args.answer_parsing) or "" for c in completions]
        if question is not None:
            questions = [str(q) for q in question]
        else:
            questions = [prompt_text(p) for p in prompts] if prompts is not None else [""] * n
        out = self.scores(questions, answers) if n else []
        if log_metric is not None and out:
            log_metric("general_rm/mean", sum(out) / len(out))
        return out


@register("general_rm", args=GeneralRMArgs,
          summary="score of a sequence-classification reward model, weight 0.1 (004 §2.3.3, Eq. 12)")
def _build_general_rm(args: GeneralRMArgs, resources) -> GeneralRewardModel:
    reward = GeneralRewardModel(args)
    reward.load()  # a model that is not a reward model fails here, before training starts
    return reward
