"""Each recipe's ``headline`` (issue 44: the paper's claim on the notebook's run is computed by
the recipe, not in a cell): the labels the reports and ``outputs/index.html`` show, and each
value start -> trained from the right side. The truth kernels they call have their own tests;
here they are replaced by counters so that each value is known by hand."""

from types import SimpleNamespace

import pandas as pd
import pytest

from factlab.eval.headline import before_after
from factlab.recipes import corver, k2v, klcf, rar, seva


def test_before_after_formats_both_sides_and_names_a_missing_one():
    assert before_after(0.25, 0.3125) == "0.250 → 0.312"
    assert before_after(None, float("nan")) == "n/a → n/a"
    assert before_after(1, 2, digits=1) == "1.0 → 2.0"


def test_corver_headline_reads_the_full_run_against_the_start(monkeypatch):
    monkeypatch.setattr(corver, "contradicted_per_answer", lambda recs: float(len(recs)))
    records = {"warm": {"set": [1, 2, 3, 4]}, "A1": {"set": [1]}, "full": {"set": [1, 2]}}
    metrics = {"warm": {"set": {"accuracy": 0.5}}, "A1": {"set": {"accuracy": 0.1}}, "full": {"set": {"accuracy": 0.75}}}
    got = corver.headline(records, metrics, "warm", ["A1", "full"], 7, "set")
    assert got == {"contradicted sentences per held-out answer (warm → full, 7 steps, one seed)": "4.000 → 2.000",
                   "held-out accuracy (warm → full, 7 steps, one seed)": "0.500 → 0.750"}
    only = corver.headline(records, metrics, "warm", ["A1"], 7, "set")  # no full run: the first one
    assert only["held-out accuracy (warm → A1, 7 steps, one seed)"] == "0.500 → 0.100"


def test_rar_headline_reads_the_abstain_prompt_and_long_form_precision():
    before = {"base · qa · abstain": {"incorrect": 0.4, "abstained": 0.0}, "base · qa · forced": {"incorrect": 0.9}}
    after = {"RAR · qa · abstain": {"incorrect": 0.25, "abstained": 0.5}}
    lf = lambda p: SimpleNamespace(metrics={"longform": {"precision": p}})  # noqa: E731
    got = rar.headline(before, after, lf(0.6), lf(None), "qa", 3)
    run = "section 4's single run, 3 steps on long-form prompts: base → RAR"
    assert got == {f"wrong answers, abstain prompt ({run})": "0.400 → 0.250", f"abstentions ({run})": "0.000 → 0.500",
                   f"long-form precision, the judge's verifier ({run})": "0.600 → n/a"}


def _run(steps: int, zero_std: list[float]):
    return SimpleNamespace(steps=steps, steps_frame=lambda: pd.DataFrame({"frac_reward_zero_std": zero_std}))


def test_seva_headline_control_to_process_and_sft_to_grpo():
    runs = {"process": _run(4, [0.25, 0.75]), "binary": _run(4, [1.0, 0.5])}
    metrics = {"SFT": {"v": {"accuracy": 0.4, "format_error_rate": 0.2}},
               "GRPO-process": {"v": {"accuracy": 0.6, "format_error_rate": 0.1}}}
    got = seva.headline(runs, metrics, "v")
    run = "this notebook's one run of 4 steps"
    assert got == {f"groups with a nonzero advantage (binary → process, {run})": "0.250 → 0.500",
                   f"held-out verifier accuracy (SFT → GRPO process, {run})": "0.400 → 0.600",
                   f"held-out verdict format errors (SFT → GRPO process, {run})": "0.200 → 0.100"}
    alone = seva.headline({"process": runs["process"]}, metrics, "v")  # no control: no advantage line
    assert len(alone) == 2 and not any("nonzero" in k for k in alone)


def test_k2v_headline():
    got = k2v.headline({"accuracy": 0.1, "format_rate": 0.5}, {"accuracy": 0.3, "format_rate": 1.0})
    assert list(got.values()) == ["0.100 → 0.300", "0.500 → 1.000"]
    assert all("base → K2V" in k for k in got)


@pytest.mark.parametrize("with_rm_and_win", [True, False])
def test_klcf_headline_reads_the_truth_of_each_side(monkeypatch, with_rm_and_win):
    seen = []

    def fake_truth(texts, questions):
        seen.append((list(texts), list(questions)))
        return {"kb_precision": len(texts[0]) / 10, "supported": float(len(texts))}

    monkeypatch.setattr(klcf, "sentence_truth", fake_truth)
    suite = lambda texts, p: SimpleNamespace(records={"longform": {"responses": texts}},  # noqa: E731
                                             metrics={"longform": {"precision": p, "factscore": p / 2}})
    prompts = [SimpleNamespace(prompt="Tell me about A."), SimpleNamespace(prompt="Tell me about B.")]
    cfg = SimpleNamespace(truth_rm=SimpleNamespace(method="SFT"))
    rm = {"base zero-shot": {"accuracy": 0.5}, "SFT": {"accuracy": 0.9}} if with_rm_and_win else {}
    got = klcf.headline(cfg, prompts, suite(["abcd", "x"], 0.2), suite(["abcdefgh", "y"], 0.4), 5, rm,
                        {"win_rate": 0.7} if with_rm_and_win else None)
    run = "section 5's single run, 5 steps"
    assert seen[0] == (["abcd", "x"], ["Tell me about A.", "Tell me about B."])  # the base's answers first
    assert got[f"KB precision of held-out answers ({run}: base → KLCF)"] == "0.400 → 0.800"
    assert got[f"supported sentences per held-out answer ({run}: base → KLCF)"] == "2.000 → 2.000"
    assert got[f"long-form precision, the judge's verifier ({run}: base → KLCF)"] == "0.200 → 0.400"
    assert got[f"FActScore ({run}: base → KLCF)"] == "0.100 → 0.200"
    assert (got.get("truthfulness RM accuracy (zero-shot → SFT)") == "0.500 → 0.900") is with_rm_and_win
    assert (got.get(f"win rate over base ({run})") == 0.7) is with_rm_and_win
