"""The truthfulness reward model's training pieces (004_4f2ca2d982459bb2.txt §2.3.1 Eq. 8,
Appendix D.1, Table 13), below the recipe that runs them.

- ``fit_answer_readout``: ``truth_rm.method: readout`` (ours, the CPU default): new " True" /
  " False" output rows fitted by L-BFGS on the frozen model's answer-position states, with the
  SFT loss of Prompt 6's answer plus an L2 pull toward the base rows;
- ``save_readout_model``: a copy of the model with those rows, saved as a full causal LM (its
  output layer untied from the input embeddings);
- ``layer_modules``: the peft target list that puts the SFT adapter (``truth_rm.method: sft``)
  on the upper decoder layers only (``truth_rm.lora_from_layer``).

``recipes.klcf`` runs them as a stage (``readout_rm``, ``truth_rm``: resumable, in
``run_dir/truth_rm``); ``rewards.klcf_truth.TruthfulnessScorer`` reads the saved model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..config import ParamError
from ..models import resolve_model

__all__ = ["layer_modules", "fit_answer_readout", "save_readout_model"]


def layer_modules(model: str, target_modules: Sequence[str], first: int) -> list[str]:
    """Full names of the ``target_modules`` projections in decoder layers ``first`` and up of
    ``model`` (built on the meta device from its config: no weights are read), for a peft
    target list (an entry matches the module of that exact name)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(resolve_model(model))
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    found = []
    for full, _ in skeleton.named_modules():
        parts = full.split(".")
        if parts[-1] in target_modules and "layers" in parts[:-1]:
            index = parts[parts.index("layers") + 1]
            if index.isdigit() and int(index) >= first:
                found.append(full)
    if not found:
        raise ParamError("truth_rm.lora_from_layer", f"{model} has no {', '.join(target_modules)} in decoder layers "
                                                     f"{first} and up ({config.num_hidden_layers} layers)")
    return found


def fit_answer_readout(states, labels: Sequence[bool], w_true, w_false, *, l2: float = 1.0e-3,
                       max_iter: int = 300):
    """New " True" / " False" output rows (``method: readout``): minimise the SFT loss of
    Prompt 6's answer, the cross-entropy of softmax(h.w_True, h.w_False) against each claim's
    label, over the answer-position states ``states`` (n, hidden), plus ``l2`` times the squared
    distance to the base rows; full batch, L-BFGS. p(True) = sigmoid(h.(w_True - w_False)), as
    ``TruthfulnessScorer`` reads it (004 §2.3.1, Eq. 8)."""
    import torch

    if len(states) != len(labels) or not len(labels):
        raise ValueError(f"{len(states)} states for {len(labels)} labels")
    h = torch.as_tensor(states, dtype=torch.float64)
    y = torch.tensor([0 if bool(v) else 1 for v in labels])  # index 0 = True, 1 = False
    base = torch.stack([torch.as_tensor(w_true), torch.as_tensor(w_false)]).double()
    w = base.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([w], max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(h @ w.T, y) + l2 * (w - base).pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    w = w.detach().float()
    return w[0], w[1]


def save_readout_model(model, tokenizer, ids: tuple[int, int], rows, folder: str | Path) -> str:
    """Save a copy of ``model`` as a full causal LM whose output rows ``ids`` (True, False) are
    ``rows``, its output layer untied from the input embeddings so the prompt reads as before;
    ``model`` itself is left as it was."""
    import copy

    import torch

    out = copy.deepcopy(model)
    head = out.get_output_embeddings()
    weight = head.weight.detach().clone()
    for i, r in zip(ids, rows):
        weight[i] = torch.as_tensor(r).to(weight.dtype)
    head.weight = torch.nn.Parameter(weight, requires_grad=False)
    out.config.tie_word_embeddings = False
    out.config.get_text_config().tie_word_embeddings = False
    out.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    del out
    return str(folder)
