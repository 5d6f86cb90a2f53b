"""Reward validity on every GRPO step: how well each reward agrees with the exact truth.

On the mini-world the truth of a completion is known (``factlab.eval.truth.completion_truth``:
a short answer's correctness, a verdict's label, a long answer's KB precision), so every
scored batch can say how well its rewards track it. ``RewardValidity`` is a trainer extension
every GRPO run gets (``train.run``); per step it logs

- ``truth/score``: the mean truth score of the step's completions (short answers: net accuracy
  +1 / 0 / -1 for correct / abstain / wrong; verdicts: label accuracy; long answers: KB
  precision), with ``truth/correct``, ``truth/wrong``, ``truth/abstain`` for short answers and
  ``truth/contradicted`` (contradicted sentences per completion) for long ones;
- ``validity/<reward>/auroc``: the AUROC of each reward function's values for "the completion
  is truthful" (truthful 1 against 0; abstentions and completions with nothing verifiable are
  left out), and ``validity/reward/auroc`` for the weighted sum TRL trains on. 0.5 is a reward
  blind to the truth, 1.0 a reward that ranks every truthful completion above every untruthful
  one, NaN a step where one class is missing.

The ``reward_vs_truth`` alarm (``eval.alarms``) fires when the reward rises while
``truth/score`` falls: reward hacking, measured exactly. Off the mini-world the oracle checks
nothing: the metrics are NaN and the alarm is n/a.
"""

from __future__ import annotations

import math

import torch

from ..eval.alarms import TRUTH_KEY
from ..eval.calibration import auroc
from ..eval.truth import completion_truth
from .health import completion_text
from .trainer import ScoredBatch, TrainerExtension
from .trl_seam import log_metric

__all__ = ["RewardValidity", "TRUTH_KEY"]

_NAN = float("nan")


def _nanmean(values: torch.Tensor) -> float:
    kept = values[~torch.isnan(values)]
    return float(kept.mean()) if kept.numel() else _NAN


class RewardValidity(TrainerExtension):
    """Logs the step's truth metrics and each reward's AUROC against the truth (module docstring)."""

    def on_scored(self, trainer, batch: ScoredBatch) -> None:
        truths = [completion_truth(row, completion_text(c)) for row, c in zip(batch.rows, batch.completions)]
        kind = {"short": 0.0, "verdict": 1.0, "long": 2.0}
        local = torch.tensor([[_NAN if t["truthful"] is None else float(t["truthful"]),
                               _NAN if t["score"] is None else float(t["score"]),
                               kind[t["kind"]], float(t.get("contradicted", 0))] for t in truths],
                             dtype=torch.float32, device=batch.rewards_per_func.device)
        everyone = trainer.accelerator.gather(local)
        truthful, score, kinds, contradicted = everyone.unbind(dim=1)
        def log(name: str, value: float) -> None:
            log_metric(trainer, batch.mode, name, value)

        log(TRUTH_KEY, _nanmean(score))
        short = kinds == 0
        if short.any():
            s = score[short]
            for name, value in (("correct", 1.0), ("abstain", 0.0), ("wrong", -1.0)):
                log(f"truth/{name}", float((s == value).float().mean()))
        if (kinds == 2).any():
            log("truth/contradicted", float(contradicted[kinds == 2].mean()))
        labels = [None if math.isnan(x) else int(x) for x in truthful.tolist()]
        rewards = batch.rewards_per_func
        # an AUROC is logged only where defined (both classes in the step): TRL turns an all-NaN interval
        # into None, which the TensorBoard writer drops with a warning per key and step
        weighted = (rewards * trainer.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        weighted[torch.isnan(rewards).all(dim=1)] = _NAN
        columns = [(f"validity/{name}/auroc", rewards[:, i]) for i, name in enumerate(trainer.reward_func_names)]
        for key, values in columns + [("validity/reward/auroc", weighted)]:
            value = auroc(values.tolist(), labels)
            if value is not None and not math.isnan(value):
                log(key, value)
