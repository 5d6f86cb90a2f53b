"""The countryinfo mini-world: real facts only, answerable from its corpus, deterministic."""

from __future__ import annotations

import collections
import os

import pytest

from factlab.data import miniworld as mw
from factlab.data.types import QAItem, read_jsonl
from factlab.text import grade_answer, normalize_answer


def _mentioned(text: str, phrase: str) -> bool:
    n = normalize_answer(phrase)
    return bool(n) and f" {n} " in f" {normalize_answer(text)} "


@pytest.fixture(scope="module")
def countries():
    return mw.load_countries()


@pytest.fixture(scope="module")
def by_name(countries):
    return {c.name: c for c in countries}


@pytest.fixture(scope="module")
def corpus(countries):
    return {d["id"]: d for d in mw.build_corpus(countries)}


@pytest.fixture(scope="module")
def qa(countries):
    return mw.build_qa(countries)


@pytest.fixture(scope="module")
def claims(countries):
    return mw.build_claims(countries, seed=0)


def test_france_facts_and_article(by_name):
    fr = by_name["France"]
    assert fr.capital == "Paris"
    assert fr.region == "Europe" and fr.subregion == "Western Europe"
    assert {"Spain", "Germany", "Belgium", "Italy", "Switzerland"} <= set(fr.borders)
    assert fr.currencies == ["Euro"] and fr.currency_codes == ["EUR"]
    assert fr.languages == ["French"]
    assert fr.demonym == "French"
    text = mw.article_text(fr)
    assert "The capital of France is Paris." in text
    assert "France is located in Western Europe, a subregion of Europe." in text
    assert "The official currency of France is the Euro (EUR)." in text
    assert "The official language of France is French." in text
    assert "France borders Andorra, Belgium, Germany, Italy, Luxembourg, Monaco, Spain and Switzerland." in text


def test_other_known_facts(by_name):
    assert by_name["Japan"].capital == "Tokyo"
    assert "France" in by_name["Germany"].borders
    assert by_name["Brazil"].currencies == ["Brazilian Real"]
    assert {"Dutch", "French", "German"} <= set(by_name["Belgium"].languages)
    # ISO 4217 fund codes (USN, USS) listed by countryinfo are not the currency of the US
    assert by_name["United States"].currencies == ["US Dollar"]
    # Scotland lists language names, not codes
    assert "Scottish Gaelic" in by_name["Scotland"].languages


def test_facts_come_from_countryinfo(countries):
    from countryinfo import CountryInfo

    raw = {r["name"]: r for r in CountryInfo.all().values()}
    for c in countries:
        r = raw[c.name]
        cap = r.get("capital")
        if isinstance(cap, list):
            cap = " / ".join(cap)
        assert c.capital == (cap.strip() if cap else None)
        assert c.population == r.get("population")
        if c.demonym:
            assert c.demonym == r["demonym"].strip()
        assert len(c.currencies) == len(c.currency_codes) <= len(r.get("currencies") or [])
        for code in c.currency_codes:
            assert code in r["currencies"]
        assert len(c.languages) <= len(r.get("languages") or [])
        assert c.name not in c.borders and c.borders == sorted(set(c.borders))


def test_duplicates_resolved(countries, by_name):
    names = [c.name for c in countries]
    assert len(names) == len(set(names))
    assert names == sorted(names, key=lambda n: (mw.slugify(n), n))
    assert "Myanmar" in by_name and "Burma" not in by_name
    assert "Burma" in by_name["Myanmar"].aliases
    assert "Wales" not in by_name  # countryinfo gives it the UK's ISO codes and no facts
    assert "Wales" not in by_name["United Kingdom"].aliases
    assert not any(n in by_name for n in ("Palestine, State of", "Holy See (Vatican City State)"))


def test_missing_facts_are_skipped_not_invented():
    c = mw.CountryFacts(name="Testland", capital="Testville")
    text = mw.article_text(c)
    assert text == "The capital of Testland is Testville."
    items = mw.build_qa([c])
    assert [(i.id, i.meta["relation"]) for i in items] == [("capital/testland", "capital")]
    assert items[0].popularity is None
    claims = mw.build_claims([c])
    assert [cl["label"] for cl in claims] == ["attributable"]  # no other capital to swap in


def test_counts_and_corpus(countries, corpus, qa):
    assert len(countries) >= 200
    assert len(corpus) == len(countries)
    assert all(d["id"].startswith("country/") and d["title"] and d["text"] for d in corpus.values())
    assert not any("None" in d["text"].split() or "nan" in d["text"].split() for d in corpus.values())
    assert len(qa) >= 800
    assert len({i.id for i in qa}) == len(qa)
    per_rel = collections.Counter(i.meta["relation"] for i in qa)
    assert set(per_rel) == set(mw.RELATIONS)
    assert all(n >= 100 for n in per_rel.values()), per_rel


def test_qa_golds_answerable_from_corpus(by_name, corpus, qa):
    for item in qa:
        assert item.source == "miniworld"
        assert item.golds and all(isinstance(g, str) and g.strip() for g in item.golds), item
        entity = item.meta["entity"]
        assert entity in item.question
        assert item.id == f"{item.meta['relation']}/{mw.slugify(entity)}"
        doc = corpus[f"country/{mw.slugify(entity)}"]
        for g in item.golds:
            assert _mentioned(doc["text"], g), (item.id, g)
        assert grade_answer(item.golds[0], item.golds) == "GOOD"
        pop = by_name[entity].population
        assert item.popularity == (float(pop) if pop is not None else None)


def test_qa_examples(qa):
    items = {i.id: i for i in qa}
    cap = items["capital/france"]
    assert cap.question == "What is the capital of France?" and cap.golds[0] == "Paris"
    assert items["currency/france"].golds == ["Euro", "EUR"]
    assert "Spain" in items["borders/france"].golds
    assert set(items["language/belgium"].golds) >= {"Dutch", "French", "German"}
    assert "Washington" in items["capital/united-states"].golds
    assert items["region/france"].golds == ["Europe"]
    # a fact the record lacks gets no question (Antarctica has no capital in countryinfo)
    assert "capital/antarctica" not in items


def test_split_by_entity(qa):
    train, held = mw.split_qa(qa, heldout_fraction=0.2, seed=0)
    assert len(train) + len(held) == len(qa)
    ents_train = {i.meta["entity"] for i in train}
    ents_held = {i.meta["entity"] for i in held}
    assert ents_train.isdisjoint(ents_held)
    n_ent = len(ents_train | ents_held)
    assert len(ents_held) == round(0.2 * n_ent)
    again = mw.split_qa(list(qa), heldout_fraction=0.2, seed=0)
    assert [i.id for i in again[1]] == [i.id for i in held]
    assert [i.id for i in mw.split_qa(list(reversed(qa)), 0.2, 0)[1]] == [i.id for i in reversed(held)]
    other = mw.split_qa(qa, heldout_fraction=0.2, seed=1)[1]
    assert {i.meta["entity"] for i in other} != ents_held
    assert mw.split_qa(qa, heldout_fraction=0.0)[1] == []
    with pytest.raises(ValueError):
        mw.split_qa([QAItem(id="x", question="q?", golds=["a"])])
    with pytest.raises(ValueError):
        mw.split_qa(qa, heldout_fraction=1.5)


def test_claims(by_name, claims):
    by_id = {c["id"]: c for c in claims}
    assert len(by_id) == len(claims)
    labels = collections.Counter(c["label"] for c in claims)
    assert labels["attributable"] >= 800 and labels["not_attributable"] >= 800
    for c in claims:
        facts = by_name[c["entity"]]
        values = mw.relation_values(facts, c["relation"])
        assert c["source"] == mw.article_text(facts)
        assert c["entity"] in c["claim"] and c["object"] in c["claim"]
        if c["label"] == "attributable":
            assert c["perturbation"] is None
            assert c["object"] in values
            assert _mentioned(c["source"], c["object"])
        else:
            assert c["label"] == "not_attributable" and c["perturbation"] == "entity_swap"
            true = by_id[c["id"].rsplit("/", 1)[0] + "/true"]
            assert c["true_object"] == true["object"]
            assert c["claim"] != true["claim"]
            assert c["object"] not in values
            assert not any(normalize_answer(c["object"]) == normalize_answer(v) for v in values)
            assert not _mentioned(c["source"], c["object"])
            # the swapped-in value is a real value of the same relation elsewhere
            assert any(c["object"] in mw.relation_values(o, c["relation"])
                       for o in by_name.values() if o.name != c["entity"])
    assert by_id["capital/france/true"]["claim"] == "The capital of France is Paris."
    assert by_id["capital/france/entity_swap"]["object"] != "Paris"


def test_claims_deterministic(countries, claims):
    assert mw.build_claims(countries, seed=0) == claims
    assert mw.build_claims(countries, seed=1) != claims


def test_build_world_byte_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    pa = mw.build_world(a)
    pb = mw.build_world(b)
    assert set(pa) == {"corpus", "qa_train", "qa_heldout", "claims", "facts"}
    for k in pa:
        assert pa[k].read_bytes() == pb[k].read_bytes(), k
    first = {k: p.read_bytes() for k, p in pa.items()}
    mw.build_world(a)  # rerun in place
    assert {k: p.read_bytes() for k, p in pa.items()} == first
    assert not [p for p in a.iterdir() if p.name.endswith(".tmp")]

    facts = [mw.CountryFacts.from_dict(d) for d in read_jsonl(pa["facts"])]
    assert facts == mw.load_countries()
    held = [QAItem.from_dict(d) for d in read_jsonl(pa["qa_heldout"])]
    train = [QAItem.from_dict(d) for d in read_jsonl(pa["qa_train"])]
    assert held and train
    assert {i.meta["entity"] for i in held}.isdisjoint({i.meta["entity"] for i in train})


def test_ensure_world_and_default_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FACTLAB_CACHE", str(tmp_path / "cache"))
    assert mw.default_world_dir() == tmp_path / "cache" / "miniworld-v1"
    monkeypatch.delenv("FACTLAB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert mw.default_world_dir() == tmp_path / "xdg" / "factlab" / "miniworld-v1"
    monkeypatch.setenv("FACTLAB_CACHE", str(tmp_path / "cache"))

    paths = mw.ensure_world()
    assert all(p.is_file() and p.parent == tmp_path / "cache" / "miniworld-v1" for p in paths.values())
    mtimes = {k: os.stat(p).st_mtime_ns for k, p in paths.items()}
    assert mw.ensure_world() == paths
    assert {k: os.stat(p).st_mtime_ns for k, p in paths.items()} == mtimes  # not rebuilt
    paths["claims"].unlink()
    assert mw.ensure_world()["claims"].is_file()


def test_a_world_folder_of_another_split_is_refused_not_returned(tmp_path):
    """``world: {dir: D, heldout_fraction: 0.5}`` over a folder built at the default split returned the
    default split's files: 20% held out where 50% was asked (issue 43 round-3b probe)."""
    from factlab.data.miniworld import WorldConfig, build_world, ensure_world

    build_world(tmp_path / "w")
    assert ensure_world(WorldConfig(dir=str(tmp_path / "w")))["qa_heldout"].is_file()  # the same split: read back
    with pytest.raises(ValueError, match=r"holds the mini-world split .*'heldout_fraction': 0.2.* asks .*0.5"):
        ensure_world(WorldConfig(dir=str(tmp_path / "w"), heldout_fraction=0.5))
    with pytest.raises(ValueError, match=r"'seed': 0.* asks .*'seed': 3"):
        ensure_world(WorldConfig(dir=str(tmp_path / "w"), seed=3))
