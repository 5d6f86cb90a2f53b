"""The smoke params of 02_binary_rar and 05_klcf run on the knowledge organism (issue 40 item 5):
no 135M model anywhere, the smoke hypothesis's treatment arm on >= 100 held-out questions of
countries no RL run trains on, and the organism evidence params with every arm on all held-out
questions. Loading params only: nothing is built or trained."""

from __future__ import annotations

from pathlib import Path

import pytest

from factlab import organism  # noqa: F401  (registers the organism's QA sets)
from factlab.config import dump_config, load_config
from factlab.data import load_eval_set
from factlab.data.longform import load_prompts
from factlab.evidence import HYPOTHESES
from factlab.recipes.klcf import KLCFConfig
from factlab.recipes.rar import RARConfig

ROOT = Path(__file__).resolve().parent.parent


def _no_lm(cfg) -> None:
    text = dump_config(cfg).lower()
    assert "smollm" not in text and "qwen" not in text, "a real LM is named in the organism smoke"
    assert cfg.model.name == "organism" and cfg.judge.model == "organism"
    assert cfg.lora is None and not cfg.warm_start.enabled


def test_binary_rar_smoke_on_the_organism():
    cfg = load_config(ROOT / "params/02_binary_rar_organism.yaml", RARConfig)
    _no_lm(cfg)
    assert all((s.args or {}).get("verdict") == "kb" for s in cfg.rewards)  # the perfect judge trains
    assert [(e.name, e.split) for e in cfg.eval] == [("organism", "heldout")]
    ev = cfg.evidence
    h = HYPOTHESES[ev.hypothesis]
    assert (ev.hypothesis, h.kind, ev.seeds) == ("smoke_binary_rar", "smoke", [0, 1, 2])
    assert [a.name for a in ev.arms] == [h.comparisons[0].treatment]
    assert all((s.args or {}).get("verdict") == "kb" for a in ev.arms for s in a.rewards)
    assert (ev.train_data.name, ev.train_data.split) == ("organism", "train")
    held = load_eval_set(cfg.eval[0], cfg.world)
    assert ev.heldout >= 100 and len(held) == ev.heldout  # the evidence answers the whole stratified sample
    assert {it.meta["bucket"] for it in held} >= {"known", "unknown"}
    train = {it.meta["entity"] for it in load_eval_set(ev.train_data, cfg.world)}
    assert not train & {it.meta["entity"] for it in held}  # held-out countries: never trained on in RL
    assert cfg.evidence_grpo(ev.arms[0], 0).max_steps >= 20


def test_klcf_smoke_on_the_organism():
    cfg = load_config(ROOT / "params/05_klcf_organism.yaml", KLCFConfig)
    _no_lm(cfg)
    assert cfg.truth_rm.model is None  # the policy's base model: the organism
    assert cfg.queries.countries == "organism" and cfg.prompt_form == "chat"
    ev = cfg.evidence
    assert (ev.hypothesis, ev.seeds, [a.name for a in ev.arms]) == ("smoke_klcf", [0, 1, 2], ["klcf"])
    train, held = load_prompts(cfg.queries, cfg.world)
    assert ev.heldout >= 100 and len(held) == ev.heldout
    assert not {p.prompt for p in train} & {p.prompt for p in held}
    lp = next(s for s in cfg.rewards if s.name == "length_penalty")
    assert lp.args["max_len"] <= cfg.grpo.max_completion_length


@pytest.mark.parametrize("name, cls, heldout", [("organism_binary_rar", RARConfig, 300),
                                                 ("organism_klcf", KLCFConfig, 100)])
def test_organism_evidence_params(name, cls, heldout):
    h = HYPOTHESES[name]
    cfg = load_config(ROOT / h.params, cls)
    _no_lm(cfg)
    ev = cfg.evidence
    assert ev.hypothesis == name and ev.seeds == [0, 1, 2, 3, 4] and ev.heldout >= heldout
    arms = {a.name for a in ev.arms}
    assert {c.treatment for c in h.comparisons} | {c.control for c in h.comparisons} <= arms | {"base"}
    n = (len(load_eval_set(cfg.eval[0], cfg.world)) if cls is RARConfig
         else len(load_prompts(cfg.queries, cfg.world)[1]))
    assert ev.heldout == n  # every held-out question there is
    assert all(cfg.evidence_grpo(a, 0).max_steps >= 50 for a in ev.arms) and cfg.grpo.max_steps == 1
