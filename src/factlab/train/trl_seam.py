"""The TRL seam: the one module that touches TRL's (and any third party's) private names.

factlab extends TRL 1.16's ``GRPOTrainer`` where TRL offers no public hook: rollout
generation, reward computation, the scoring of a generation batch and the train sampler are
private methods. ``GRPOSeam`` overrides each of them once, here, and hands it on to a public
hook that ``factlab.train.trainer.FactlabGRPOTrainer`` implements:

==================================  =========================  ==============================
TRL private method (overridden)     public hook                what factlab does there
==================================  =========================  ==============================
``_generate_single_turn``           ``rollouts``               shared-prefix decoding
``_calculate_rewards``              ``rewards_computed``       leave unscorable rows out
``_generate_and_score_completions`` ``generate_and_score``     extensions, advantage logs
``_get_train_sampler``              ``train_sampler``          DAPO's refill sampler
==================================  =========================  ==============================

One TRL module function is replaced, not overridden: ``trl.trainer.utils._use_triton``, which
decides whether the fused LM head scores only the completion tokens (``compact_logprobs_on_cpu``).

TRL's per-step metrics live in the private ``_metrics`` dict, which ``GRPOTrainer.log``
averages and logs; ``log_metric`` is the only writer of it in factlab (the trainer, CorVer's
token-level advantages, DAPO, the completion-health and reward-validity extensions all call
it). ``PRIVATE_NAMES`` lists every private name of TRL, transformers or any other third party
that factlab uses, with the TRL source each one mirrors, why it is used, and the signature it
had when this was written: ``tests/test_trl_seam.py`` checks each one against the installed
release (a TRL release that moves one fails one test that names it), and
``tests/test_private_names.py`` fails on any private name used outside this list.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from trl import GRPOTrainer

__all__ = ["GRPOSeam", "PrivateName", "PRIVATE_NAMES", "compact_logprobs_on_cpu", "log_metric",
           "prefixed_completions"]


@dataclass(frozen=True)
class PrivateName:
    """One third-party private name factlab uses.

    ``owner``: the dotted path of the class (or module) that has it; ``kind``: ``override`` (a
    method ``GRPOSeam`` overrides, ``params`` its parameter names), ``attribute`` (set by
    ``set_in``, a dotted path to the function whose source assigns ``self.<name>``) or
    ``function`` (a module function factlab replaces, ``params`` its parameter names, called in
    ``set_in``'s source);
    ``mirrors``: file and function in the installed package; ``used_in``: the factlab modules
    allowed to use it."""

    name: str
    owner: str
    kind: str  # "override" | "attribute" | "function"
    mirrors: str
    why: str
    used_in: tuple[str, ...] = ("factlab.train.trl_seam",)
    params: tuple[str, ...] | None = None
    set_in: str | None = None


PRIVATE_NAMES: tuple[PrivateName, ...] = (
    PrivateName(
        "_generate_single_turn", "trl.GRPOTrainer", "override",
        "trl/trainer/grpo_trainer.py: GRPOTrainer._generate_single_turn",
        "text-only rollouts without vLLM go through factlab.decoding (a group's prompt prefilled once, finished "
        "rows dropped); TRL has no public generation hook. Returns (completion ids, logprobs or None) as TRL's does.",
        params=("self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images")),
    PrivateName(
        "_calculate_rewards", "trl.GRPOTrainer", "override",
        "trl/trainer/grpo_trainer.py: GRPOTrainer._calculate_rewards",
        "a completion some reward could not score (None -> NaN) is left out of its group in every column; TRL "
        "only drops rows where every reward is NaN. Also times the reward functions.",
        params=("self", "inputs", "prompts", "completions", "completion_ids_list")),
    PrivateName(
        "_generate_and_score_completions", "trl.GRPOTrainer", "override",
        "trl/trainer/grpo_trainer.py: GRPOTrainer._generate_and_score_completions",
        "the scored generation batch goes to factlab's extensions (token-level advantages, DAPO's dynamic "
        "sampling, health and validity metrics) before TRL's loss reads its 'advantages'.",
        params=("self", "inputs")),
    PrivateName(
        "_get_train_sampler", "trl.GRPOTrainer", "override",
        "trl/trainer/grpo_trainer.py: GRPOTrainer._get_train_sampler",
        "DAPO's refills take the dataloader's next batches, so its RepeatSampler is swapped for one that can "
        "hand them out (train.dapo.RefillRepeatSampler).",
        params=("self", "dataset")),
    PrivateName(
        "_use_triton", "trl.trainer.utils", "function",
        "trl/trainer/utils.py: add_fused_lm_head (_fused_forward: compact = _use_triton(device))",
        "TRL's fused LM head scores only the completion tokens where _use_triton says so (CUDA with Triton) and "
        "every position elsewhere, the prompt's included, to keep Neuron's tile shapes fixed. On CPU that made the "
        "LM head half of an organism GRPO step (a 130-token prompt scored for 17 completion tokens), so "
        "compact_logprobs_on_cpu makes the name answer True for CPU too; the kernel's own _use_triton (which picks "
        "Triton over torch tiles) is untouched.",
        params=("device",), set_in="trl.trainer.utils.add_fused_lm_head"),
    PrivateName(
        "_metrics", "trl.GRPOTrainer", "attribute",
        "trl/trainer/grpo_trainer.py: GRPOTrainer.__init__ (self._metrics = {'train': defaultdict(list), ...}); "
        "read by GRPOTrainer.log",
        "TRL averages and logs every list in _metrics[mode] at each logging step: factlab's own per-step metrics "
        "go there (log_metric) so they land in the log history beside TRL's.",
        set_in="trl.GRPOTrainer.__init__"),
    PrivateName(
        "_metrics", "trl.SFTTrainer", "attribute",
        "trl/trainer/sft_trainer.py: SFTTrainer.__init__ (self._metrics = {'train': defaultdict(list), ...}); "
        "read by SFTTrainer.log",
        "train.sft.CompactHeadSFTTrainer's loss logs the entropy and token accuracy TRL's own loss logs there "
        "(log_metric).",
        set_in="trl.SFTTrainer.__init__"),
    PrivateName(
        "_tokenizer", "trl.GRPOTrainer", "attribute",
        "trl/trainer/grpo_trainer.py: GRPOTrainer.__init__ (self._tokenizer = processing_class[.tokenizer])",
        "the pad id factlab.decoding pads rollouts with, the same one TRL's generation uses.",
        set_in="trl.GRPOTrainer.__init__"),
    PrivateName(
        "_actions", "argparse.ArgumentParser", "attribute",
        "argparse.py: _ActionsContainer.__init__ (self._actions = []), the parser accelerate launch builds",
        "every option 'accelerate launch' accepts, to refuse a config key it would silently ignore "
        "(factlab.launch); argparse lists them nowhere public.",
        used_in=("factlab.launch",), set_in="argparse._ActionsContainer.__init__"),
)


def compact_logprobs_on_cpu() -> None:
    """Make TRL's fused LM head score only the completion tokens on CPU too (``PRIVATE_NAMES``:
    ``_use_triton``). Both paths run the same torch tiles on CPU and give the same log-probs; the
    compact one skips the prompt's and the padding's positions. Idempotent; process-wide."""
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    if hasattr(original, "original"):  # replaced already
        return

    def use_compact(device: torch.device) -> bool:
        return device.type == "cpu" or original(device)

    use_compact.original = original  # type: ignore[attr-defined]  # TRL's own, for the seam's tests
    trl_utils._use_triton = use_compact


def prefixed_completions(inputs: Sequence[dict], completions: Sequence[Any]) -> list[Any]:
    """The completions the reward functions score: a row's ``completion_prefix`` column (the part
    of the response its raw prompt already wrote, e.g. KLCF Prompt 5's trailing ``<think>``)
    put back in front of its text completion, so that format and answer rules read the whole
    response. Rows without the column, and chat-message completions, are unchanged."""
    out = []
    for row, completion in zip(inputs, completions, strict=True):
        prefix = row.get("completion_prefix") if isinstance(row, dict) else None
        out.append(prefix + completion if prefix and isinstance(completion, str) else completion)
    return out


def log_metric(trainer: Any, mode: str, name: str, value: float) -> None:
    """Log ``value`` as this step's ``name`` in ``mode``: appended to TRL's ``_metrics``, which
    ``GRPOTrainer.log`` averages over the logging interval. The one writer of ``_metrics``."""
    trainer._metrics[mode][name].append(value)


class GRPOSeam(GRPOTrainer):
    """``GRPOTrainer`` with each private method factlab extends overridden once, handing on to a
    public hook (module docstring); the defaults keep TRL's behaviour."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        compact_logprobs_on_cpu()
        super().__init__(*args, **kwargs)

    # ------------------------------------------------------------ public hooks (defaults: TRL's)

    def rollouts(self, prompt_ids: Sequence[Sequence[int]], images: Any, multimodal_fields: Any
                 ) -> list[list[int]] | None:
        """Completion ids per prompt row, or None for TRL's own generation."""
        return None

    def rewards_computed(self, inputs: list[dict], completions: list[Any], completion_ids_list: list[Any],
                         rewards_per_func: torch.Tensor, seconds: float) -> torch.Tensor:
        """TRL's gathered rewards (one column per reward function, NaN = None) and the seconds the
        reward functions took; returns the rewards TRL turns into advantages."""
        return rewards_per_func

    def generate_and_score(self, inputs: list[dict]) -> dict[str, Any]:
        """One generation batch, generated and scored: TRL's output dict (``trl_generate_and_score``)."""
        return self.trl_generate_and_score(inputs)

    def train_sampler(self, sampler: Any) -> Any:
        """The train sampler TRL built (a ``trl.trainer.utils.RepeatSampler``), or its replacement."""
        return sampler

    def trl_generate_and_score(self, inputs: list[dict]) -> dict[str, Any]:
        """TRL's own generation and scoring of ``inputs`` (calls ``rollouts`` and ``rewards_computed``)."""
        return super()._generate_and_score_completions(inputs)

    @property
    def pad_token_id(self) -> int | None:
        """The pad id TRL pads generations with (its tokenizer's)."""
        return self._tokenizer.pad_token_id

    # ------------------------------------------------------------ the overrides (PRIVATE_NAMES)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        ids = self.rollouts(prompt_ids, images, multimodal_fields)
        if ids is None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        return ids, None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        t0 = time.perf_counter()
        rewards = super()._calculate_rewards(inputs, prompts, prefixed_completions(inputs, completions),
                                             completion_ids_list)
        return self.rewards_computed(inputs, completions, completion_ids_list, rewards, time.perf_counter() - t0)

    def _generate_and_score_completions(self, inputs):
        return self.generate_and_score(inputs)

    def _get_train_sampler(self, dataset=None):
        return self.train_sampler(super()._get_train_sampler(dataset))
