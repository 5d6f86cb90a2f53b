"""The TRL seam factlab's trainer extends (``factlab.train.trl_seam``), pinned: if a TRL or
transformers release moves a private name factlab uses, one test fails and names it.

Every such name is listed once, in ``trl_seam.PRIVATE_NAMES``; each is checked here against the
installed release (its signature, or the function that sets it). An AST scan of ``src`` finds
every private name used on a trainer (or any third-party object) and every private
``GRPOTrainer`` method a factlab class defines, and checks they are all listed, overridden
only in the seam, and that ``_metrics`` is written only there (``log_metric``)."""

import ast
import dataclasses
import importlib
import inspect
import re
import tomllib
from pathlib import Path

import pytest
import trl
import transformers
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from trl import GRPOConfig, GRPOTrainer

from factlab.train.trl_seam import PRIVATE_NAMES, GRPOSeam, PrivateName, log_metric
from test_private_names import SRC, module_of, scan

ROOT = Path(__file__).resolve().parents[1]
SEAM = "factlab.train.trl_seam"


def _pins() -> dict[str, SpecifierSet]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for d in deps:
        name = re.split(r"[<>=!~ ]", d, maxsplit=1)[0]
        out[name] = SpecifierSet(d[len(name):])
    return out


def test_installed_trl_and_transformers_are_the_pinned_ones():
    pins = _pins()
    for name, mod in (("trl", trl), ("transformers", transformers)):
        assert pins[name].contains(Version(mod.__version__)), (name, mod.__version__, str(pins[name]))
        assert "<" in str(pins[name]), f"{name} needs an upper bound: the trainer overrides private methods"


def resolve(dotted: str):
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("p", PRIVATE_NAMES, ids=lambda p: f"{p.owner}.{p.name}")
def test_each_private_name_is_where_the_seam_says_with_its_signature(p: PrivateName):
    """One test per private name: a TRL release that moves, renames or re-signs it fails here."""
    owner = resolve(p.owner)
    source_file = p.mirrors.split(":")[0]
    if p.kind == "override":
        assert hasattr(owner, p.name), f"{p.owner}.{p.name} is gone (factlab's GRPOSeam overrides it)"
        method = getattr(owner, p.name)
        assert tuple(inspect.signature(method).parameters) == p.params, (
            f"{p.owner}.{p.name} changed its signature to {inspect.signature(method)}; GRPOSeam mirrors {p.params}")
        where = inspect.getsourcefile(inspect.unwrap(method))  # through TRL's profiling decorator
        assert where.endswith(source_file), (p.name, where, p.mirrors)
        assert p.name in GRPOSeam.__dict__, f"GRPOSeam no longer overrides {p.name}: drop it from PRIVATE_NAMES"
        ours = tuple(inspect.signature(GRPOSeam.__dict__[p.name]).parameters)
        assert ours == p.params, f"GRPOSeam.{p.name}{ours} differs from TRL's {p.params}"
    elif p.kind == "function":
        function = getattr(owner, p.name)
        function = getattr(function, "original", function)  # compact_logprobs_on_cpu may have replaced it
        assert tuple(inspect.signature(function).parameters) == p.params, (
            f"{p.owner}.{p.name} changed its signature to {inspect.signature(function)}")
        assert re.search(rf"\b{p.name}\(", inspect.getsource(resolve(p.set_in))), (
            f"{p.set_in} no longer calls {p.name} ({p.mirrors})")
    else:
        assert p.kind == "attribute" and p.set_in, p
        setter = resolve(p.set_in)
        assert inspect.getsourcefile(setter).endswith(source_file), (p.name, inspect.getsourcefile(setter))
        assert re.search(rf"self\.{p.name}\s*(:[^=]*)?=[^=]", inspect.getsource(setter)), (
            f"{p.set_in} no longer sets self.{p.name} ({p.mirrors})")
    assert p.why and p.used_in


def _classes_defining_private_methods():
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("_") \
                            and not item.name.endswith("__"):
                        yield module_of(path), node.name, item.name


def test_only_the_seam_overrides_private_trainer_methods_and_each_is_listed():
    """A private method of TRL's GRPOTrainer (or transformers' Trainer) defined by any factlab
    class other than GRPOSeam fails here, as does a seam override missing from PRIVATE_NAMES."""
    listed = {p.name for p in PRIVATE_NAMES if p.kind == "override"}
    outside = [(m, c, name) for m, c, name in _classes_defining_private_methods()
               if hasattr(GRPOTrainer, name) and (m, c) != (SEAM, "GRPOSeam")
               and issubclass(getattr(importlib.import_module(m), c), transformers.Trainer)]
    assert not outside, f"private GRPOTrainer methods overridden outside train.trl_seam.GRPOSeam: {outside}"
    overridden = {n for n in GRPOSeam.__dict__ if n.startswith("_") and not n.endswith("__") and hasattr(GRPOTrainer, n)}
    assert overridden == listed, f"GRPOSeam overrides {sorted(overridden)}; PRIVATE_NAMES lists {sorted(listed)}"


def test_every_third_party_private_name_used_in_src_is_listed_for_its_module():
    """Private names read on trainers (``self._metrics``, ``trainer._metrics``) or any third-party
    object, found by AST: each must be in PRIVATE_NAMES for the module that uses it."""
    listed = {p.name: set(p.used_in) for p in PRIVATE_NAMES}
    uses = [u for u, kind in scan() if kind == "third-party"]
    assert uses, "the scan found no third-party private name at all: is it still scanning src?"
    unlisted = [str(u) for u in uses if u.module not in listed.get(u.name, ())]
    assert not unlisted, "third-party private names not in trl_seam.PRIVATE_NAMES:\n  " + "\n  ".join(unlisted)
    on_trainers = {u.name for u in uses if u.module.startswith("factlab.train.")}
    assert on_trainers <= {p.name for p in PRIVATE_NAMES if p.owner == "trl.GRPOTrainer"}, on_trainers


def test_metrics_are_written_only_by_log_metric():
    writers = sorted({u.module for u, _ in scan() if u.name == "_metrics"})
    assert writers == [SEAM], f"TRL's _metrics is touched outside trl_seam.log_metric: {writers}"
    from collections import defaultdict
    from types import SimpleNamespace

    trainer = SimpleNamespace(_metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    log_metric(trainer, "train", "x/y", 0.5)
    log_metric(trainer, "train", "x/y", 1.5)
    assert trainer._metrics["train"]["x/y"] == [0.5, 1.5] and not trainer._metrics["eval"]
    # GRPOTrainer.log averages each list of _metrics[mode] into the logs: what log_metric relies on
    assert "self._metrics[mode].items()" in inspect.getsource(GRPOTrainer.log)


def test_the_private_methods_factlab_overrides_behave_as_the_seam_expects():
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for key in ('"advantages"', '"completion_mask"', '"completion_ids"', "self._calculate_rewards("):
        assert key in src, key
    assert "multi_objective_aggregation" in inspect.getsource(GRPOTrainer.__init__)
    # TRL's own generation returns (completion ids, logprobs); GRPOSeam returns (ids, None)
    assert "completion_ids, logprobs = self._generate_single_turn(" in inspect.getsource(GRPOTrainer._generate)
    # DAPO's refills (train.dapo.RefillRepeatSampler) rebuild TRL's RepeatSampler from these attributes
    from trl.trainer.utils import RepeatSampler
    assert list(inspect.signature(RepeatSampler.__init__).parameters) == [
        "self", "data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed"]
    assert "RepeatSampler(" in inspect.getsource(GRPOTrainer._get_train_sampler)
    init = inspect.getsource(GRPOTrainer.__init__)
    for attr in ("self.eos_token_ids", "self.top_k", "self.min_p", "self.repetition_penalty", "self.temperature",
                 "self.top_p", "self.max_completion_length", "self.use_transformers_continuous_batching"):
        assert attr in init, attr


def test_grpo_config_fields_factlab_sets():
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert {"loss_type", "epsilon", "epsilon_high", "beta", "scale_rewards", "reward_weights", "num_generations",
            "max_completion_length", "mask_truncated_completions", "importance_sampling_level", "use_vllm",
            "vllm_mode", "vllm_gpu_memory_utilization", "warmup_steps", "steps_per_generation"} <= fields


def test_fused_lm_head_scores_only_completion_tokens_on_cpu_with_the_same_logprobs(tiny_model_and_tokenizer,
                                                                                  monkeypatch):
    """``compact_logprobs_on_cpu``: TRL's fused LM head on CPU scored every position, the prompt's
    included; after it, only the completion's (the kernel gets one row per scored token), with
    the same log-probs and the same gradients as scoring everything."""
    import copy

    import torch
    import trl.trainer.utils as trl_utils
    from trl.kernels import ChunkedLogProbFunction

    from factlab.train.trl_seam import compact_logprobs_on_cpu

    model = copy.deepcopy(tiny_model_and_tokenizer[0]).float()
    trl_utils.add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    torch.manual_seed(0)
    ids = torch.randint(5, 400, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-5] = -100  # the completion: the last 5 tokens
    rows_scored = []
    apply = ChunkedLogProbFunction.apply
    monkeypatch.setattr(ChunkedLogProbFunction, "apply",
                        lambda hidden, *a: rows_scored.append(hidden.shape[0]) or apply(hidden, *a))

    def score():
        model.zero_grad()
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        (out.log_probs[:, -5:] * torch.linspace(-1, 1, 5)).sum().backward()
        return out.log_probs[:, -5:].detach(), out.entropy[:, -5:].detach(), model.lm_head.weight.grad.clone(), \
            model.model.layers[0].mlp.up_proj.weight.grad.clone()

    # TRL's own (an earlier test's trainer may have replaced it), restored after the test
    monkeypatch.setattr(trl_utils, "_use_triton", getattr(trl_utils._use_triton, "original", trl_utils._use_triton))
    full = score()
    compact_logprobs_on_cpu()
    compact = score()
    assert rows_scored == [3 * 11, 3 * 5]  # every shifted position, then the completion tokens alone
    for a, b in zip(full, compact):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
