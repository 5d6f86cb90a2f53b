"""Binary RAR's run rules (001 §3.3, App. C): sparse-evidence prompts discarded, the VeriScore
step cap, both from params."""

import json

import pytest

from factlab.config import ConfigError, validate
from factlab.data.longform import LongformPrompt
from factlab.rewards import Resources
from factlab.recipes.rar import RARConfig, max_steps_for


def test_veriscore_is_capped_at_1000_steps():
    cfg = validate({"grpo": {"max_steps": 2000, "per_device_train_batch_size": 16, "num_generations": 8,
                             "gradient_accumulation_steps": 8}}, RARConfig)
    assert max_steps_for(cfg, ["binary_rar"]) == 2000 and max_steps_for(cfg, ["veriscore"]) == 1000
    assert max_steps_for(cfg, ["binary_rar", "veriscore"]) == 1000
    with pytest.raises(ConfigError, match=r"'max_steps_by_reward'.*unknown reward 'veriscor'"):
        validate({"max_steps_by_reward": {"veriscor": 10}}, RARConfig)


def test_prompts_with_fewer_than_three_documents_are_discarded(tmp_path):
    docs = [{"id": f"d{i}", "title": t, "text": f"{t} is a country in Europe. {t} borders France and Spain."}
            for i, t in enumerate(["Andorra", "Monaco", "Portugal", "Belgium", "Italy"])]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    cfg = validate({"datastore": {"corpus": str(corpus), "dir": str(tmp_path / "ds"), "chunk_tokens": 64,
                                  "veriscore_chunk_tokens": 32, "precache_docs": 3}}, RARConfig)
    res = Resources(cfg)
    prompts = [LongformPrompt("p1", "Tell me about Andorra.", "Andorra borders France and Spain in Europe."),
               LongformPrompt("p2", "Tell me about Xanadu.", "Xanadu was Kublai Khan's summer capital.")]
    kept = res.precache(prompts)
    assert [p.id for p in kept] == ["p1"]
    assert res.datastore("rar").cached_documents("p1") == 3 and res.datastore("rar").cached_documents("p2") == 0
    lenient = Resources(cfg.model_copy(update={"datastore": cfg.datastore.model_copy(update={"min_precache_docs": 0})}))
    assert len(lenient.precache(prompts)) == 2
    with pytest.raises(ConfigError, match=r"'datastore.min_precache_docs'"):
        validate({"datastore": {"precache_docs": 2}}, RARConfig)


def test_early_stop_evaluates_the_last_checkpoint_that_passed(tmp_path, monkeypatch, tiny_model_and_tokenizer):
    """001 §4.3: when utility drops > 10% the model evaluated is the one saved at the last check
    that passed, and the run records which step that was (a real callback on a real model; the
    GRPO steps are replaced by a loop that calls the callback as the trainer would)."""
    from types import SimpleNamespace

    from transformers import TrainerControl

    import factlab.recipes.rar as rar

    model, tok = tiny_model_and_tokenizer
    utilities = iter([0.80, 0.78, 0.60])  # baseline, step 1 passes (-2.5%), step 2 drops 25%
    monkeypatch.setattr(rar, "utility_fn", lambda cfg, tokenizer, items: lambda m: {"qa": next(utilities)})

    def fake_run(cfg, rows, rewards, out, *, name, grpo, callbacks):
        (stopper,) = callbacks
        state, control = SimpleNamespace(global_step=0, is_world_process_zero=True), TrainerControl()
        stopper.on_train_begin(None, state, control, model=model, processing_class=tok)
        for step in (1, 2, 3):
            state.global_step = step
            stopper.on_step_end(None, state, control, model=model, processing_class=tok)
            if control.should_training_stop:
                break
        out.mkdir(parents=True, exist_ok=True)
        return rar.TrainResult(name=name, output_dir=str(out), model_dir=str(out / "checkpoint-2"), is_adapter=False,
                               base_model=cfg.model.name, steps=state.global_step)

    monkeypatch.setattr(rar, "run", fake_run)
    monkeypatch.setattr(rar, "build_rewards", lambda specs, res: SimpleNamespace(names=["binary_rar"]))
    cfg = validate({"early_stopping": {"eval_every": 1}}, RARConfig)
    prompts = [LongformPrompt("p1", "Tell me about Andorra.", "Andorra is in Europe.")]
    result, stopper = rar.train_run(cfg, prompts, None, tmp_path, utility_items=["q"])
    assert stopper.stopped_at == 2 and stopper.kept_step == 1
    assert result.model_dir == str(tmp_path / "binary_rar" / "last_passed")  # not the degraded checkpoint-2
    assert (tmp_path / "binary_rar" / "last_passed" / "config.json").exists()
    assert result.metrics == {"stopped_at": 2, "evaluated_step": 1}


def test_selective_abstention_is_measured_beside_each_abstain_breakdown():
    """001 §6.2: the abstain-mode breakdown carries the forced-mode error rate over all questions
    and on the questions abstained; ``selectivity_table`` shows it, one row per breakdown."""
    from types import SimpleNamespace

    from factlab import text
    from factlab.eval.suites import SuiteResult
    from factlab.recipes.rar import _with_selectivity, selectivity_table

    def recs(labels):
        return [SimpleNamespace(id=f"q{i}", label=lab) for i, lab in enumerate(labels)]

    bd = SuiteResult("abstention",
                     records={"mw · abstain": recs([text.NA, text.NA, text.GOOD, text.GOOD]),
                              "mw · forced": recs([text.BAD, text.BAD, text.GOOD, text.BAD])},
                     metrics={"mw · abstain": {"n": 4}, "mw · forced": {"n": 4}})
    metrics = _with_selectivity(bd, "RAR")
    sel = metrics["RAR · mw · abstain"]
    assert sel["selectivity/forced_incorrect_rate"] == 0.75 and sel["selectivity/forced_incorrect_when_abstained"] == 1.0
    assert not any(k.startswith("selectivity/") for k in metrics["RAR · mw · forced"])
    assert bd.metrics["mw · abstain"] == {"n": 4}  # the suite's own metrics are not changed
    table = selectivity_table({**metrics, "raw · mw · abstain": {"n": 4}})
    assert list(table.index) == ["RAR · mw · abstain"] and table.loc["RAR · mw · abstain", "n_abstained"] == 2
