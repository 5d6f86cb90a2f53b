"""Notebooks 01 and 06 on the knowledge organism (issue 40 item 5): their smoke params name the
organism; CorVer's index over the policy organism's own pretraining corpus (``index: {corpus:
organism}``); 06's per-family headline, each family's exact truth base -> after with a paired
bootstrap interval over seeds and questions."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from factlab import config, organism
from factlab.data.types import QAItem
from factlab.recipes import compare
from factlab.recipes.compare import BASE, CompareConfig
from factlab.recipes.corver import CorVerConfig
from factlab.rewards.resources import index_section
from factlab.stage_cache import StageCache

ROOT = Path(__file__).resolve().parents[1]


def test_corver_smoke_trains_the_organism_on_its_own_corpus():
    cfg = config.load_config(ROOT / "params/01_corver_organism.yaml", CorVerConfig)
    assert cfg.model.name == "organism" and cfg.lora is None and not cfg.warm_start.enabled
    assert cfg.index.corpus == "organism"  # the policy's organism, resolved when params load
    assert (cfg.train_data.name, cfg.train_data.split) == ("organism", "train")
    assert [(e.name, e.split) for e in cfg.eval] == [("organism", "heldout")]
    assert cfg.evidence.hypothesis == "smoke_corver" and [a.name for a in cfg.evidence.arms] == ["full"]
    assert cfg.evidence.seeds == [0, 1, 2] and cfg.evidence.heldout >= 100
    assert cfg.evidence.heldout <= cfg.eval[0].limit  # every evidence question is one the notebook loads
    assert cfg.evidence_grpo(cfg.evidence.arms[0], 0).max_steps >= 10 and cfg.train_data.limit


def test_compare_smoke_judges_with_the_truth_on_the_organism():
    cfg = config.load_config(ROOT / "params/06_compare_organism.yaml", CompareConfig)
    assert cfg.model.name == "organism" and cfg.lora is None and not cfg.warm_start.enabled
    assert cfg.judge.model == "organism" and cfg.index.corpus == "organism"
    assert [(e.name, e.split) for e in cfg.eval] == [("organism", "heldout")]
    assert len(cfg.seeds) >= 3 and cfg.evidence is None
    judged = {"binary_rar", "k2v", "klcf_fact", "seva_claims"}
    for run in cfg.runs:  # every judged reward asks the mini-world's exact truth
        for spec in run.rewards:
            if spec.name in judged:
                assert spec.args.get("verdict") == "kb", (run.name, spec.name)


def test_index_corpus_organism_means_the_policy_organism():
    tiny = config.load_config(ROOT / "params/01_corver_organism.yaml", CorVerConfig, {"model": {"name": "organism-tiny"}})
    assert tiny.index.corpus == "organism-tiny"
    with pytest.raises(config.ConfigError, match=r"index\.corpus.*not an organism"):
        config.load_config(ROOT / "params/01_corver_organism.yaml", CorVerConfig,
                           {"model": {"name": "tiny-random-smollm2"}})
    named = config.load_config(ROOT / "params/01_corver_organism.yaml", CorVerConfig,
                               {"model": {"name": "tiny-random-smollm2"}, "index": {"corpus": "organism-tiny"}})
    assert named.index.corpus == "organism-tiny"  # another organism's corpus, named


def test_index_section_resolves_an_organism_to_its_corpus():
    cfg = config.load_config(ROOT / "params/01_corver_organism.yaml", CorVerConfig, {"model": {"name": "organism-tiny"}})
    resolved = index_section(cfg.index)
    assert resolved.corpus == str(organism.corpus_path("organism-tiny")) and Path(resolved.corpus).is_file()
    assert cfg.index.corpus == "organism-tiny"  # the params stay as written
    plain = cfg.index.model_copy(update={"corpus": "data/x.jsonl"})
    assert index_section(plain) is plain and index_section(plain.model_copy(update={"corpus": None})).corpus is None


def _rec(qid, golds, completion):
    return SimpleNamespace(id=qid, question=f"What is the capital of {qid}?", golds=golds, completion=completion)


def test_question_truth_scores_each_answer_exactly():
    items = {"organism/heldout": [QAItem("A", "q", ["Lima"], meta={"bucket": "known"}),
                                  QAItem("B", "q", ["Quito"], meta={"bucket": "unknown"}),
                                  QAItem("C", "q", ["Oslo"], meta={"bucket": "rare-3"})]}
    recs = {"organism/heldout": [_rec("A", ["Lima"], "<think>x</think><answer>Lima</answer>"),
                                 _rec("B", ["Quito"], "<think>x</think><answer>Lima</answer>"),
                                 _rec("C", ["Oslo"], "<think>x</think><answer>I don't know</answer>")]}
    rows = compare.question_truth(recs, items)
    assert [(r["question"], r["truth"], r["correct"], r["wrong"], r["abstain"], r["bucket"]) for r in rows] == [
        ("A", 1.0, 1.0, 0.0, 0.0, "known"), ("B", -1.0, 0.0, 1.0, 0.0, "unknown"), ("C", 0.0, 0.0, 0.0, 1.0, "rare-3")]


def _records():
    qs = [("q1", "known"), ("q2", "known"), ("q3", "unknown"), ("q4", "unknown")]
    base = {"q1": 1.0, "q2": 1.0, "q3": -1.0, "q4": -1.0}
    abstains = {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}  # the unknown countries abstained on

    def rec(run, seed, truth):
        return {"run": run, "seed": seed, "eval": {"set/accuracy": 0.5, "questions": [
            {"set": "set", "question": q, "bucket": b, "truth": truth[q]} for q, b in qs]}}
    return ([rec(BASE, None, base)] + [rec("abstainer", s, abstains) for s in (0, 1, 2)]
            + [rec("unchanged", s, base) for s in (0, 1, 2)])


def test_family_effects_pair_every_seed_with_the_base():
    eff = compare.family_effects(compare.question_rows(_records()), replicates=200).set_index("run")
    assert list(eff.index) == ["abstainer", "unchanged"]
    a, u = eff.loc["abstainer"], eff.loc["unchanged"]
    assert (a.base, a.after, a.effect, a.seeds, a.questions) == (0.0, 0.5, 0.5, 3, 4)
    assert 0.0 <= a.lo <= a.effect <= a.hi <= 1.0 and a.hi > a.lo  # questions resampled: a spread
    assert (u.effect, u.lo, u.hi) == (0.0, 0.0, 0.0)
    unknown = compare.family_effects(compare.question_rows(_records()), subset="unknown", replicates=50).set_index("run")
    assert (unknown.loc["abstainer", "base"], unknown.loc["abstainer", "effect"]) == (-1.0, 1.0)
    assert unknown.loc["abstainer", "questions"] == 2


def test_family_headline_one_line_per_family():
    eff = compare.family_effects(compare.question_rows(_records()), replicates=50)
    lines = compare.headline(eff, what="truth")
    assert list(lines)[0] == "truth, base → each family" and lines["truth, base → each family"].startswith(
        "3 seeds, 4 questions")
    assert len(lines) == 1 + len(eff) and lines["abstainer"].startswith("0.000 → 0.500; effect +0.500 [")
    assert sum("truth" in k for k in lines) == 1  # the metric is named once, not once per family
    assert compare.headline(eff.iloc[:0], what="truth") == {}


def test_collect_leaves_the_questions_out_of_the_columns(tmp_path):
    for i, rec in enumerate(_records()):
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        StageCache(folder / "compare.json").save_record(rec)
    frame = compare.collect(tmp_path)
    assert "questions" not in frame and "set/accuracy" in frame
