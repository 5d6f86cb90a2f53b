"""KLCF's long-form queries (004 App. C.1, Table 7): a Hugging Face dataset source by id, read
through ``datasets.load_dataset`` as the full params do. No hub is reachable here, so a local
dataset folder (FActScore's public biography prompts, ``../shared/data/factscore_labeled``)
stands in for the hub id: the same ``load_dataset(hf_id, config, split=...)`` call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factlab import config
from factlab.data.longform import HFPromptsSource, LongformPromptsSection, hf_prompts, load_prompts
from factlab.recipes.klcf import KLCFConfig

ROOT = Path(__file__).resolve().parent.parent.parent
BIOS = ROOT.parent / "shared" / "data" / "factscore_labeled" / "ChatGPT.jsonl"


@pytest.fixture()
def bios_folder(tmp_path):
    """A dataset folder with a ``test`` split: FActScore bios (input, topic) when the shared
    data is present, else three rows of the same shape."""
    rows = ([json.loads(line) for line in BIOS.read_text(encoding="utf-8").splitlines()[:6]] if BIOS.exists() else
            [{"input": f"Question: Tell me a bio of {t}.", "topic": t, "output": ""}
             for t in ("Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov",
                       "Donald Knuth")])
    folder = tmp_path / "factscore_bios"
    folder.mkdir()
    with (folder / "test.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"input": r["input"], "topic": r["topic"], "output": r.get("output") or ""}) + "\n")
    (folder / "train.jsonl").write_text(json.dumps({"input": "Question: Tell me a bio of Nobody.", "topic": "Nobody",
                                                    "output": ""}) + "\n", encoding="utf-8")
    return folder, rows


def test_hf_source_reads_prompt_id_and_reference_fields(bios_folder):
    folder, rows = bios_folder
    got = hf_prompts(HFPromptsSource(hf_id=str(folder), split="test", prompt_field="input", id_field="topic",
                                     reference_field="output"))
    assert [p.prompt for p in got] == [r["input"] for r in rows]  # the test split, in order, nothing else
    assert [p.id for p in got] == [r["topic"] for r in rows]
    assert [p.reference for p in got] == [r.get("output") or "" for r in rows] and got[0].doc_id is None
    # a bare entity field through FActScore's prompt template; ids default to the row index
    named = hf_prompts(HFPromptsSource(hf_id=str(folder), split="train", prompt_field="topic",
                                       template="Tell me a bio of {prompt}."))
    assert [(p.id, p.prompt) for p in named] == [("0", "Tell me a bio of Nobody.")]


def test_hf_source_errors_name_the_dataset_split_and_field(bios_folder, tmp_path):
    folder, _ = bios_folder
    with pytest.raises(ValueError, match=r"factscore_bios\[test\]: row 0 has no text in prompt_field 'question'"):
        hf_prompts(HFPromptsSource(hf_id=str(folder), split="test", prompt_field="question"))
    with pytest.raises(ValueError, match=r"could not be loaded.*heldout_path"):
        hf_prompts(HFPromptsSource(hf_id=str(tmp_path / "missing"), split="test"))
    with pytest.raises(ValueError, match=r"could not be loaded"):
        hf_prompts(HFPromptsSource(hf_id=str(folder), split="validation"))  # no such split


def test_load_prompts_takes_the_heldout_set_from_the_dataset(bios_folder, tmp_path):
    folder, rows = bios_folder
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Tell me about topic {i}."}) + "\n"
                                  for i in range(4)), encoding="utf-8")
    cfg = LongformPromptsSection(path=str(train_file), eval_limit=4, seed=1,
                                 heldout_hf=HFPromptsSource(hf_id=str(folder), prompt_field="input", id_field="topic"))
    train, held = load_prompts(cfg)
    assert [p.id for p in train] == ["q0", "q1", "q2", "q3"]
    assert len(held) == 4 and {p.id for p in held} <= {r["topic"] for r in rows}  # sampled to eval_limit
    assert load_prompts(cfg)[1] == held  # seeded


def test_sources_are_checked_when_params_load():
    with pytest.raises(config.ConfigError, match=r"'queries.heldout_hf'.*not both"):
        config.validate({"queries": {"heldout_path": "a.jsonl", "heldout_hf": {"hf_id": "x/y"}}}, KLCFConfig)
    with pytest.raises(config.ConfigError, match=r"'queries.hf'.*not both"):
        config.validate({"queries": {"path": "a.jsonl", "hf": {"hf_id": "x/y"}}}, KLCFConfig)
    with pytest.raises(config.ConfigError, match=r"template"):
        config.validate({"queries": {"heldout_hf": {"hf_id": "x/y", "template": "Tell me a bio."}}}, KLCFConfig)
    with pytest.raises(config.ConfigError, match=r"'checklist_fallback'.*mini-world queries"):
        config.validate({"checklist_fallback": "miniworld", "queries": {"heldout_hf": {"hf_id": "x/y"}}}, KLCFConfig)
    with pytest.raises(config.ConfigError, match=r"unknown key 'queries.heldout_hf.prompt_fields'"):
        config.validate({"queries": {"heldout_hf": {"hf_id": "x/y", "prompt_fields": "q"}}}, KLCFConfig)
    # the full params name a Table 7 test set by hub id
    full = config.load_config(ROOT / "params" / "05_klcf.yaml", KLCFConfig)
    assert (full.queries.heldout_hf.hf_id, full.queries.heldout_hf.split, full.queries.heldout_hf.prompt_field) == (
        "facebook/FACTORY", "hard", "question")
    assert full.queries.eval_limit == 250  # App. C.1: 250 random Factory-Hard prompts


def test_countries_split_the_miniworld_prompts_by_the_organisms_qa_split():
    """``queries.countries: organism-tiny``: "Tell me about X." for the QA set's train and heldout
    countries, disjoint, each prompt carrying its exposure bucket, which the GRPO / evidence rows
    copy (the held-out long-form queries are about countries no RL run trains on)."""
    from factlab import organism
    from factlab.recipes.klcf import klcf_rows

    train, held = load_prompts(LongformPromptsSection(countries="organism-tiny"))
    split = organism.qa_split("organism-tiny")
    names = lambda ps: {p.prompt.removeprefix("Tell me about ").removesuffix(".") for p in ps}  # noqa: E731
    assert names(train) == set(split["train"]) and names(held) == set(split["heldout"])
    assert not names(train) & names(held)
    ex = organism.exposures("organism-tiny")
    for p in train + held:
        name = p.prompt.removeprefix("Tell me about ").removesuffix(".")
        assert p.meta["bucket"] == organism.exposure_bucket(ex[name], organism.TINY.known_exposures)
    assert {p.meta["bucket"] for p in held} >= {"known", "unknown"}
    rows = klcf_rows(held[:2], {p.id: ["f"] for p in held[:2]})
    assert [r["bucket"] for r in rows] == [p.meta["bucket"] for p in held[:2]]
    with pytest.raises(ValueError, match="unknown QA set 'nope'"):
        load_prompts(LongformPromptsSection(countries="nope"))
    with pytest.raises(config.ConfigError, match=r"'queries.countries'.*mini-world prompts"):
        config.validate({"queries": {"countries": "organism", "path": "x.jsonl"}}, KLCFConfig)
