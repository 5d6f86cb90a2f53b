"""Binary RAR's run rules (001 §3.3, App. C): sparse-evidence prompts discarded, the VeriScore
step cap, both from params."""

import json

import pytest

from factlab.config import ConfigError, validate
from factlab.data.longform import LongformPrompt
from factlab.rewards import Resources
from factlab.train.rar import RARConfig, max_steps_for


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
