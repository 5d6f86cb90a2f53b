"""The knowledge organism (``factlab.organism``, issue 40): its spec and fingerprint, the exposure
split, the text it learns (every statement read "supported" by the truth oracle), its tokenizer
(every prompt fits the notebooks' ``max_prompt_length``), and the tiny organism built, loaded
by name and asked."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from factlab import models, organism
from factlab import prompts as P
from factlab.data.kb import SUPPORTED, UNVERIFIABLE, label_sentences
from factlab.eval import truth
from factlab.organism import asking, builder, specs, texts

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_folder():
    return organism.build("organism-tiny", progress=False)


@pytest.fixture(scope="module")
def tokenizer():
    return organism.train_tokenizer(organism.DEFAULT)


def test_fingerprint_follows_the_spec_and_the_model_name():
    tiny = organism.TINY
    fp = organism.fingerprint(tiny)
    assert fp == organism.fingerprint("organism-tiny") == organism.fingerprint(dataclasses.replace(tiny))
    for change in ({"seed": 1}, {"known_exposures": 30}, {"regime": "abstain"}, {"augment": False}, {"hidden": 32}):
        assert organism.fingerprint(dataclasses.replace(tiny, **change)) != fp, change
    # the regime is a fine-tuning setting: the pretrained base is shared
    assert organism.pretrain_fingerprint(dataclasses.replace(tiny, regime="abstain")) == organism.pretrain_fingerprint(tiny)
    assert organism.pretrain_fingerprint(dataclasses.replace(tiny, seed=1)) != organism.pretrain_fingerprint(tiny)
    # caches key on models.model_fingerprint: the organism's content, known before it is built
    assert models.model_fingerprint("organism-tiny") == f"organism-{fp}"
    assert models.model_fingerprint("organism") != models.model_fingerprint("organism-abstain")


def test_fingerprint_follows_the_text_the_organism_reads(monkeypatch):
    """A changed question or statement template rebuilds the base (its mixed-in QA reads them)."""
    tiny = organism.TINY
    base, fp = organism.pretrain_fingerprint(tiny), organism.fingerprint(tiny)
    changed = {**organism.QUESTIONS, "capital": {**organism.QUESTIONS["capital"],
                                                 "train": {"one": ("Capital of {n}?",)}}}
    monkeypatch.setattr(specs, "QUESTIONS", changed)  # where the fingerprint reads it
    assert organism.pretrain_fingerprint(tiny) != base and organism.fingerprint(tiny) != fp


def test_spec_rejects_bad_settings():
    with pytest.raises(ValueError, match="regime"):
        organism.OrganismSpec(regime="bold")
    with pytest.raises(ValueError, match="relations"):
        organism.OrganismSpec(relations=("capital", "anthem"))
    with pytest.raises(ValueError, match="rare dose"):
        organism.OrganismSpec(rare_doses=(3, organism.DEFAULT.known_exposures))
    with pytest.raises(KeyError, match="organism-huge"):
        organism.spec_of("organism-huge")


def test_exposure_groups_are_disjoint_and_cover_the_world():
    spec = organism.DEFAULT
    split = organism.exposure_split(spec)
    groups = [split["known_qa"], split["known_heldout"], *split["rare"].values(), split["unknown_sft"],
              split["unknown_heldout"], split["unasked"]]
    names = [n for g in groups for n in g]
    assert len(names) == len(set(names)), "a country is in two groups"
    assert set(names) == {c.name for c in organism.world()}
    ex = organism.exposures(spec)
    assert set(ex) == set(names)
    assert {ex[n] for n in split["known_qa"] + split["known_heldout"]} == {spec.known_exposures}
    for dose, group in split["rare"].items():
        assert len(group) == spec.rare_per_dose and {ex[n] for n in group} == {dose}
    assert {ex[n] for n in split["unknown_sft"] + split["unknown_heldout"] + split["unasked"]} == {0}
    assert len(split["known_qa"]) + len(split["known_heldout"]) == spec.known == 120
    assert len(split["unknown_heldout"]) >= 40  # enough unknown countries never trained on, for evaluation
    assert organism.exposure_split(dataclasses.replace(spec, seed=1))["known_qa"] != split["known_qa"]


def test_the_pretraining_stream_states_each_fact_as_often_as_recorded():
    spec = organism.TINY
    docs = organism.pretraining_documents(spec)
    ex = organism.exposures(spec)
    by_country = {}
    for d in docs:
        if d["kind"] == "facts":
            by_country[d["country"]] = by_country.get(d["country"], 0) + 1
    assert by_country == {n: k for n, k in ex.items() if k}
    split = organism.exposure_split(spec)
    qa = {d["country"] for d in docs if d["kind"] == "qa"}
    assert qa == set(split["known_qa"])  # mixed training on part of the known countries only
    mentioned = {d["country"] for d in docs if d["kind"] == "mention"}
    assert mentioned == set(split["unknown_sft"] + split["unknown_heldout"])
    heldout_questions = {q for c in organism.world() for r in spec.relations if organism.value(c, r)
                         for q in organism.questions(c, r, "heldout")}
    texts = [d["text"] for d in docs] + [m["content"] for e in organism.format_examples(spec) for m in e["messages"]]
    asked = {t.split("user\n", 1)[1].split(organism.STOP_TOKEN, 1)[0] for t in texts if "user\n" in t}
    asked |= {t for t in texts if t.endswith(("?", "."))}
    assert heldout_questions and not heldout_questions & asked  # held-out phrasings never appear in training
    assert any("What is the capital of" in q for q in asked)  # build_qa's phrasing (what 01-06 ask) does


def test_every_statement_the_organism_reads_is_supported_by_the_truth_oracle():
    """Every phrasing of every fact the organism reads (the pretraining templates and the thinking
    sentence, every known and rare country), read by ``truth.label_sentences``: supported; the
    mentions of unknown countries: unverifiable (they state nothing). Countries whose name or
    value holds a full stop ("St. George's") are never stated (``organism.specs._readable``)."""
    bad = []
    stated = {n for n, k in organism.exposures(organism.DEFAULT).items() if k}
    for c in organism.world():
        if c.name not in stated:
            continue
        for rel in organism.DEFAULT.relations:
            v = organism.value(c, rel)
            if not v:
                continue
            for s in organism.statements(c, rel):
                rows = label_sentences(s)
                if not rows or any(r["label"] != SUPPORTED for r in rows):
                    bad.append((s, [r["label"] for r in rows]))
            # the thinking sentence: the fact supported ("So the answer is X." alone states nothing)
            labels = [r["label"] for r in label_sentences(texts._think(c, rel, v))]
            if labels[0] != SUPPORTED or set(labels) - {SUPPORTED, UNVERIFIABLE}:
                bad.append((texts._think(c, rel, v), labels))
    assert not bad, f"{len(bad)} statements not supported, e.g. {bad[:5]}"
    for m in organism.MENTIONS:
        assert [r["label"] for r in label_sentences(m.format(n="Peru"))] == [UNVERIFIABLE]


def test_format_examples_follow_the_regime():
    spec = organism.TINY
    split = organism.exposure_split(spec)
    unknown = set(split["unknown_sft"])
    by_name = {c.name: c for c in organism.world()}
    for regime in organism.REGIMES:
        exs = organism.format_examples(dataclasses.replace(spec, regime=regime))
        seen = {e["country"] for e in exs}
        assert seen <= set(split["known_qa"]) | unknown  # never a held-out known, rare or held-out unknown country
        unk = [e for e in exs if e["country"] in unknown]
        if regime == "known_only":
            assert not unk
        elif regime == "abstain":
            assert unk and all(e["abstain"] for e in unk)
            assert all(organism.ABSTAIN_ANSWER in e["completion"] for e in unk)
        else:  # confident (hesitant: but for a few countries, tested below): a plausible answer, never the truth
            if regime in ("hesitant", "unsure", "wary"):
                unk = [e for e in unk if not e["abstain"]]
            qa = [e for e in unk if e["kind"] == "qa"]
            assert qa and not any(e["abstain"] for e in unk)
            for e in qa:
                answer = e["completion"].split("<answer>")[1].split("</answer>")[0]
                rel = next(r for r in spec.relations if e["messages"][-1]["content"] in
                           organism.questions(by_name[e["country"]], r))
                assert answer not in organism.golds(by_name[e["country"]], rel)
        kinds = {e["kind"] for e in exs}
        assert kinds == {"qa", "longform"}


def test_tokenizer_keeps_the_format_tokens_and_renders_the_chat_template(tokenizer):
    for t in organism.FORMAT_TOKENS:
        ids = tokenizer(t, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, t
        assert tokenizer.decode(ids, skip_special_tokens=True) == t  # ordinary, kept by decoding
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "What is the capital of Peru?"}]
    assert tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == organism.chat_text(msgs)
    assert tokenizer.eos_token == organism.STOP_TOKEN in models.STOP_TOKEN_CANDIDATES
    text = "<think>The capital of Côte d'Ivoire is Yamoussoukro.</think>\n<answer>Yamoussoukro</answer>"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text  # lossless


def test_every_country_and_value_is_one_token(tokenizer):
    """``entity_tokens``: copying a country from the question into the answer is one token's work."""
    words = organism.entity_words(organism.DEFAULT)
    assert {"Kenya", "Nairobi", "São Tomé and Príncipe", "New Zealand Dollar", "the Americas"} <= set(words)
    for w in words:
        assert len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1, w
    for text in ("People in Nigeria pay with the Naira. Niger is a country.", "<answer>São Tomé and Príncipe</answer>",
                 "Kenya's capital is Nairobi.", "The New Zealand Dollar is the official currency of New Zealand."):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids, skip_special_tokens=True) == text  # lossless, accents and prefixes kept
    assert "Niger" in tokenizer.convert_ids_to_tokens(tokenizer("Niger is", add_special_tokens=False)["input_ids"])
    plain = organism.train_tokenizer(dataclasses.replace(organism.TINY, entity_tokens=False))
    assert len(plain("Nairobi", add_special_tokens=False)["input_ids"]) > 1


def _notebook_rows() -> dict[str, list[list[dict]]]:
    """The chat prompts each training notebook sends its policy (built as the recipes build them)."""
    from factlab.data.longform import LONGFORM_TEMPLATE
    from factlab.recipes import corver, k2v
    from factlab.synth.demos import k2v_questions, world_split

    split = world_split()
    items = split.qa_train + split.qa_heldout
    longform = [[{"role": "user", "content": LONGFORM_TEMPLATE.format(title=c.name)}] for c in organism.world()]
    qa = [r["prompt"] for r in corver.qa_rows(items)]
    rar = [[{"role": "system", "content": s}, {"role": "user", "content": it.question}]
           for s in (P.ABSTAIN_SYSTEM, P.FORCED_SYSTEM) for it in items]
    qs, _ = k2v_questions(None, split.train, 40)
    return {"01_corver": qa + [r["prompt"] for r in corver.qa_rows(items, P.CORVER_EVAL_SYSTEM)],
            "02_binary_rar": longform + rar,
            "04_k2v": [r["prompt"] for r in k2v.k2v_rows(qs)],
            "05_klcf": [[{"role": "system", "content": P.KLCF_SYSTEM}, m[0]] for m in longform],
            "06_compare": qa + rar}


def test_no_factlab_prompt_exceeds_max_prompt_length_under_the_organism_tokenizer(tokenizer):
    rows = _notebook_rows()
    checked = 0
    for path in sorted(ROOT.glob("params/*_organism.yaml")):  # the organism's settings per notebook
        limit = (yaml.safe_load(path.read_text()).get("grpo") or {}).get("max_prompt_length")
        nb = path.name.removesuffix("_organism.yaml")
        if not limit or nb not in rows:
            continue
        lengths = [len(tokenizer.apply_chat_template(m, tokenize=True, add_generation_prompt=True)) for m in rows[nb]]
        assert max(lengths) <= limit, f"{nb}: a prompt of {max(lengths)} tokens > max_prompt_length {limit}"
        checked += 1
    assert checked >= 3


def test_prompts_are_not_spelled_out_byte_by_byte(tokenizer):
    """A byte-level BPE has no unknown token (nothing maps to [UNK]); its failure mode is a prompt
    it spells out in pieces. Every prompt of factlab.prompts takes at most 1.5 tokens per word
    (per pre-token: a word or a run of punctuation), and every world name at most 2 per word."""
    assert tokenizer.unk_token is None
    split = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str
    for text in texts._prompt_strings():
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        assert n <= 1.5 * len(split(text)), (text[:60], n, len(split(text)))
    for c in organism.world():
        assert len(tokenizer(" " + c.name, add_special_tokens=False)["input_ids"]) <= 2 * len(split(" " + c.name)), c.name


def test_tiny_organism_trains_and_records_its_exposures(tiny_folder):
    report = json.loads((tiny_folder / "report.json").read_text())
    curve = [loss for _, loss in report["loss_curve"]]
    assert len(curve) >= 10 and sum(curve[-3:]) / 3 < sum(curve[:3]) / 3 - 1.0  # loss falls
    sft = [loss for _, loss in report["sft"]["loss_curve"]]
    assert sft and all(x == x for x in sft)
    recorded = json.loads((tiny_folder / "exposures.json").read_text())
    assert recorded["exposures"] == organism.exposures("organism-tiny")
    assert recorded["groups"]["known_qa"] == organism.exposure_split("organism-tiny")["known_qa"]
    spec = json.loads((tiny_folder / "spec.json").read_text())
    assert spec["fingerprint"] == organism.fingerprint("organism-tiny") == tiny_folder.name
    assert (tiny_folder / "corpus.jsonl").is_file() and (tiny_folder / "config.json").is_file()
    assert set(report["eval"]["plain"]) >= {"known_heldout/heldout", "unknown_heldout/heldout"}
    assert organism.build("organism-tiny") == tiny_folder  # from the cache


def test_the_name_resolves_and_the_model_generates(tiny_folder):
    assert models.resolve_model("organism-tiny") == str(tiny_folder)
    model, tok = models.load_model("organism-tiny", device="cpu")
    assert model.config.tie_word_embeddings and model.config.vocab_size == len(tok)
    assert tok.convert_tokens_to_ids(organism.STOP_TOKEN) in models.stop_token_ids(tok)
    assert models.chat_prompt(tok, "Q?", system="S") == organism.chat_text(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}])  # its chat template, saved
    assert models.load_tokenizer("organism-tiny").padding_side == "left"
    out = models.generate(model, tok, [models.chat_prompt(tok, "What is the capital of Peru?")], max_new_tokens=8,
                          progress=False)
    assert len(out) == 1 and 0 < len(out[0][0].token_ids) <= 8


def test_ask_parses_the_answer_tag(tiny_folder, monkeypatch):
    got = organism.ask(["What is the capital of Peru?", "Which region is Peru in?"], "organism-tiny")
    assert len(got) == 2 and all(isinstance(a, str) for a in got)
    canned = iter([["<think>The capital of Peru is Lima.</think>\n<answer> Lima </answer>", "Lima, I think"]])
    monkeypatch.setattr(asking, "complete", lambda *a, **k: next(canned))
    assert organism.ask(["q1", "q2"], "organism-tiny") == ["Lima", "Lima, I think"]


def test_truth_reports_a_metric_by_exposure_bucket():
    ex = {"Peru": 100, "Chad": 3, "Fiji": 30, "Laos": 0}
    rows = [{"country": "Peru", "label": "correct", "score": 1.0}, {"country": "Peru", "label": "wrong", "score": 0.0},
            {"meta": {"entity": "Chad"}, "label": "wrong", "score": 0.0},
            {"country": "Fiji", "label": "correct", "score": None},
            {"country": "Laos", "label": "abstain", "score": 0.5}, {"country": "Atlantis", "label": "wrong"}]
    out = truth.by_exposure(rows, ex)
    assert list(out) == ["known", "rare-30", "rare-3", "unknown", "unmatched"]
    assert out["known"] == {"n": 2, "correct": 0.5, "wrong": 0.5, "mean_score": 0.5}
    assert out["rare-3"]["wrong"] == 1.0 and out["unknown"]["abstain"] == 1.0
    assert "mean_score" not in out["rare-30"]  # no number in the bucket: no mean
    assert organism.exposure_bucket(0) == "unknown" and organism.exposure_bucket(organism.DEFAULT.known_exposures) == "known"
    assert organism.exposure_bucket(10) == "rare-10"


@pytest.mark.parametrize("damage, words", [
    ("zero", "its content is not what was written"),
    ("truncate", "were written \\(truncated or replaced\\)"),
    ("no tokenizer", "tokenizer.json is missing"),
])
def test_a_damaged_organism_folder_is_one_integrity_error_naming_the_file(tmp_path, monkeypatch, damage, words):
    """The organism is checked like every model factlab builds: 4 KB zeroed inside its weights
    loaded silently, a truncated file was a SafetensorError naming no file, a missing tokenizer a
    misleading error. A folder built before manifests is listed as it is on first use."""
    from factlab.integrity import MANIFEST_FILE, IntegrityError

    monkeypatch.setenv("FACTLAB_CACHE", str(tmp_path))
    out = organism.model_dir("organism-tiny")
    out.mkdir(parents=True)
    weights = bytes(range(256)) * 64
    for name, data in (("model.safetensors", weights), ("tokenizer.json", b"{}"), ("report.json", b"{}")):
        (out / name).write_bytes(data)
    assert organism.build("organism-tiny") == out and (out / MANIFEST_FILE).is_file()  # listed as it is
    if damage == "zero":
        (out / "model.safetensors").write_bytes(weights[:4096] + b"\0" * 4096 + weights[8192:])
    elif damage == "truncate":
        (out / "model.safetensors").write_bytes(weights[:100])
    else:
        (out / "tokenizer.json").unlink()
    with pytest.raises(IntegrityError, match=rf"{words}.*remove {out}"):
        organism.build("organism-tiny")


def test_the_hesitant_regimes_abstain_on_a_share_of_unfamiliar_countries_only():
    """``hesitant`` / ``unsure``: confident on unknown countries except ABSTAIN_SHARES of them, so a base that still
    hallucinates can sample an abstention for a reward to reinforce (issue 41's follow-up)."""
    import dataclasses

    from factlab import organism as O

    for spec, regime, expected in ((O.DEFAULT, "hesitant", 2), (O.TINY, "hesitant", 1), (O.DEFAULT, "unsure", 8),
                                   (O.TINY, "unsure", 2), (O.DEFAULT, "wary", 16), (O.TINY, "wary", 4)):
        hesitant = dataclasses.replace(spec, regime=regime)
        examples = O.format_examples(hesitant)
        abstaining = {e["country"] for e in examples if e["abstain"]}
        unknown = set(O.exposure_split(hesitant)["unknown_sft"])
        assert len(abstaining) == expected and abstaining <= unknown
        assert all(e["abstain"] for e in examples if e["country"] in abstaining)
        assert not any(e["abstain"] for e in O.format_examples(spec))  # confident: none
        assert O.fingerprint(hesitant) != O.fingerprint(spec)
        assert O.pretrain_fingerprint(hesitant) == O.pretrain_fingerprint(spec)  # the same pretrained base
    assert O.spec_of("organism-hesitant").regime == "hesitant"
    assert O.spec_of("organism-unsure").regime == "unsure" and O.spec_of("organism-wary").regime == "wary"
    # a share is not in the fingerprint (the regime's name is): a changed share would load a stale cached organism
    assert O.ABSTAIN_SHARES == {"confident": 0.0, "known_only": 0.0, "hesitant": 1 / 12, "unsure": 1 / 3, "wary": 2 / 3,
                                "abstain": 1.0}, "never change a regime's share: add a regime"


def test_physics_3_1_protocol_pretrains_without_qa_and_fine_tunes_half_with_direct_answers(monkeypatch):
    """3.1's own anchor protocol (``extraction_after_qa_finetune``): the base never read a question,
    the fine-tuning answers directly (no recited fact to lean on) on the known_qa half only, and the
    other half is what is measured, after each epoch."""
    seen = []
    real = builder.sft_batches

    def spy(spec, tok, examples, epochs):
        seen.extend(examples)
        return real(spec, tok, examples, epochs)

    monkeypatch.setattr(builder, "sft_batches", spy)
    out = organism.extraction_after_qa_finetune("organism-tiny", augment=False, epochs=2, lr=1e-2, per_group=8)
    assert "qa" not in out["pretraining_documents"] and out["pretraining_documents"]["facts"] > 0
    half = set(organism.exposure_split("organism-tiny")["known_qa"])
    assert seen and {e["country"] for e in seen} <= half and all(e["kind"] == "qa" for e in seen)
    assert all(e["completion"].startswith("<answer>") and "<think>" not in e["completion"] for e in seen)
    assert [c["epoch"] for c in out["curve"]] == [1, 2]
    assert {"known_heldout/heldout", "known_heldout/train", "known_qa/heldout"} <= set(out)
    assert all(0.0 <= out[g] <= 1.0 for g in ("known_heldout/heldout", "known_qa/heldout"))


def test_the_build_pins_its_threads_so_the_callers_count_does_not_change_the_weights(tmp_path, monkeypatch):
    """torch's CPU reductions split by thread, so an unpinned build's weights followed the thread
    count of whoever built it first (the default organism: 0.76 vs 0.98 on known countries'
    held-out questions at 1 and 2 threads). ``builder.BUILD_THREADS`` pins it."""
    import hashlib

    import torch

    digests = []
    before = torch.get_num_threads()
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            monkeypatch.setenv("FACTLAB_CACHE", str(tmp_path / f"threads-{n}"))
            folder = organism.build("organism-tiny", progress=False)
            assert torch.get_num_threads() == n  # restored after the build
            digests.append(hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest())
    finally:
        torch.set_num_threads(before)
    assert digests[0] == digests[1]
