"""K2V (003_5e9813e66e6ba19a.txt): the record parser on hostile output, gleaning rounds, entity
merging (unicode names), the mini-world's gold graph, the extraction check's Appendix G
quality, quintuple sampling and question rules, the Table 13 rephraser, checklists and their
Appendix F scoring, synthesis cost, leakage, every reward formula and ablation, the overlong
penalty, DAPO's group filter, and params errors. MCQ: tests/eval/test_mcq.py."""

import math
import re
from pathlib import Path

import networkx as nx
import pytest

from factlab import config
from factlab import prompts as P
from factlab import sections
from factlab import text
from factlab.data.miniworld import ensure_world
from factlab.judges import Judge, make_judge
from factlab.rewards import Resources, RewardSpec, build_rewards
from factlab.rewards.k2v import (ChecklistJudge, K2VArgs, K2VReward, answer_gated_reward, format_score, parse_yes_no,
                                 reasoning_of)
from factlab.rewards.length import OverlongArgs, OverlongPenalty
from factlab.synth import kg
from factlab.synth.k2v import (BLANK, ChecklistSection, K2VQuestion, Quintuple, SynthesisSection, blank_candidates,
                               leakage, make_checklists, make_question, sample_quintuples, score_checklists,
                               synthesize_questions, template_checklist, validate_checklist,
                               mask_mentions, masked_ftext_prompt, template_checklist)
from factlab.recipes import k2v as k2v_train
from factlab.train.dapo import keep_groups
from factlab.recipes.k2v import (K2VConfig, constructed_responses, k2v_rows, knowledge_graph, reward_ablation,
                               split_questions, synthesis_cost)

GOOD_THINK = "<think>Paris is the capital of France, so France fills the blank.</think>"


class CountingJudge(Judge):
    """A scripted backend behind the real ``Judge`` front (cache off, accounting on): answers
    ``script(prompt)`` and counts its tokens (words) as a real backend counts its own."""

    backend = "scripted"

    def __init__(self, script):
        super().__init__("scripted", cache=None)
        self.script, self.asked = script, []

    def _generate(self, prompts, prefix=""):
        self.asked += prompts
        out = [self.script(p) for p in prompts]
        self.stats["prompt_tokens"] += sum(len(p.split()) for p in prompts)
        self.stats["completion_tokens"] += sum(len(a.split()) for a in out)
        return out


# ---------------------------------------------------------------- the record parser (Table 14)


def test_parser_reads_clean_records_and_the_completion_marker():
    text = ('("entity"<|>Paris<|>location<|>Capital of France.)##'
            '("entity"<|>France<|>location<|>A country in Europe.)##'
            '("relationship"<|>France<|>Paris<|>Paris is the capital of France.<|>9)##'
            '("content_keywords"<|>capital, geography)<|COMPLETE|>')
    r = kg.parse_records(text, "c1")
    assert [e.name for e in r.entities] == ["Paris", "France"]
    assert [(x.source, x.target) for x in r.relations] == [("France", "Paris")]
    assert r.keywords == ["capital", "geography"] and r.complete and not r.dropped


@pytest.mark.parametrize("delim", ["<||>", "< | >", "<| >", " <|> "])
def test_parser_repairs_tuple_delimiter_variants(delim):
    text = f'("entity"{delim}Nile{delim}nature{delim}A river.)****("entity"{delim}Egypt{delim}location{delim}A country.)'
    r = kg.parse_records(text)
    assert [e.name for e in r.entities] == ["Nile", "Egypt"]
    assert [e.type for e in r.entities] == ["nature", "location"]


def test_parser_survives_parentheses_quotes_fences_and_counts_what_it_drops():
    text = ("```\n"
            '("entity"<|>"Congo (Kinshasa)"<|>location<|>Also called DR Congo (DRC).)\n'
            '("entity"<|>Kinshasa<|>location<|>Its capital\n'  # no closing parenthesis
            '("relationship"<|>Congo (Kinshasa)<|>Kinshasa<|>has capital)\n'
            '("entity"<|>only-a-name)\n'  # too few fields
            '("weather"<|>sunny<|>today)\n'  # unknown record type
            "I think that's all.\n```")
    r = kg.parse_records(text, "c9")
    names = [e.name for e in r.entities]
    assert names == ["Congo (Kinshasa)", "Kinshasa"]
    assert r.relations and r.relations[0].source == "Congo (Kinshasa)"
    assert sum(r.dropped.values()) >= 2 and not r.complete
    assert kg.parse_records("", "c0").n_records == 0


def test_names_holding_a_list_delimiter_or_parentheses_survive():
    text = ('("entity"<|>C##<|>concept<|>A programming language.)##'
            '("entity"<|>F#<|>concept<|>Another one.)##'
            '("entity"<|>Congo (Kinshasa)<|>location<|>Also called DR Congo (DRC).)##'
            '("relationship"<|>C##<|>Congo (Kinshasa)<|>is taught in)**** trailing chatter (sure)\n<|COMPLETE|>')
    r = kg.parse_records(text, "c1")
    assert [e.name for e in r.entities] == ["C##", "F#", "Congo (Kinshasa)"]
    assert r.entities[0].summary == "A programming language" and r.entities[2].summary == "Also called DR Congo (DRC)"
    assert [(x.source, x.target, x.summary) for x in r.relations] == [("C##", "Congo (Kinshasa)", "is taught in")]
    assert r.dropped == {"text after a record (ignored)": 1} and r.complete
    merged = kg.merge([r])
    assert set(merged.nodes) == {"c##", "f#", "congo (kinshasa)"} and merged.dangling == 0


def test_merge_normalizes_unicode_spellings_of_one_name():
    spellings = [("K\u00f6ln", "Ko\u0308ln"),  # composed / decomposed umlaut (NFKC)
                 ("Paris", "\uff30\uff21\uff32\uff29\uff33"),  # fullwidth PARIS
                 ("S\u00e3o Tom\u00e9", "S\u00e3o\u00a0Tom\u00e9"),  # no-break space
                 ("Stra\u00dfe", "STRASSE")]  # case folding of the sharp s
    a = kg.ParseResult(entities=[kg.Entity(x, "location", f"{x} one", "c1") for x, _ in spellings])
    b = kg.ParseResult(entities=[kg.Entity(y, "location", f"{y} two", "c2") for _, y in spellings],
                       relations=[kg.Relation("Ko\u0308ln", "\uff30\uff21\uff32\uff29\uff33", "near", "c2")])
    merged = kg.merge([a, b])
    assert len(merged.nodes) == 4 and merged.dangling == 0
    assert sorted(sorted(n["names"]) for n in merged.nodes.values()) == sorted(sorted(x) for x in spellings)
    assert all(len(n["chunks"]) == 2 for n in merged.nodes.values())
    assert list(merged.edges) == [("k\u00f6ln", "paris")]
    # smart quotes are straightened by the parser before the merge
    c = kg.parse_records('("entity"<|>C\u00f4te d\u2019Ivoire<|>location<|>x)##("entity"<|>C\u00f4te d\'Ivoire<|>location<|>y)')
    assert list(kg.merge([c]).nodes) == ["c\u00f4te d'ivoire"]


def test_gleaning_rounds_add_missed_records_until_the_model_says_no():
    first = '("entity"<|>France<|>location<|>A country.)<|COMPLETE|>'
    missed = ('("entity"<|>Paris<|>location<|>Its capital.)##("relationship"<|>France<|>Paris<|>has capital)'
              '<|COMPLETE|>')

    def script(p):
        if p.endswith("Answer YES or NO only."):  # K2V_GLEANING_CHECK: more to add while Paris is missing
            return "YES" if "Paris<|>" not in p.rsplit("Records extracted so far:", 1)[1] else "NO"
        return missed if "Add them below" in p else first

    chunks = [{"id": "c1", "text": "France is a country in Europe. Its capital is Paris."}]
    judge = CountingJudge(script)
    ex = kg.extract(judge, chunks, gleaning=3)
    assert [e.name for e in ex.results[0].entities] == ["France", "Paris"]
    assert ("france", "paris") in ex.merged.edges
    kinds = ["check" if p.endswith("Answer YES or NO only.") else "continue" if "Add them below" in p else "ner"
             for p in judge.asked]
    assert kinds == ["ner", "check", "continue", "check"]  # the second "no" ends the rounds before the third
    assert ex.calls == 4 and ex.prompt_tokens == sum(len(p.split()) for p in judge.asked)
    assert judge.asked[2].startswith(P.K2V_NER_RE_PROMPT.format(input_text=chunks[0]["text"]))
    plain = kg.extract(CountingJudge(script), chunks, gleaning=0)
    assert [e.name for e in plain.results[0].entities] == ["France"] and plain.calls == 1


def test_merge_joins_normalized_names_votes_types_and_keeps_descriptions():
    a = kg.parse_records('("entity"<|>The Nile<|>nature<|>A long river.)##("entity"<|>Egypt<|>location<|>Country.)'
                         '##("relationship"<|>Nile<|>Egypt<|>flows through)', "c1")
    b = kg.parse_records('("entity"<|>nile.<|>nature<|>Flows north.)##("entity"<|>NILE<|>location<|>River in Africa.)',
                         "c2")
    merged = kg.merge([a, b])
    assert kg.normalize_name("The  Nile.") == "nile"
    node = merged.nodes["nile"]
    assert node["types"].most_common(1)[0][0] == "nature"
    assert {"A long river", "Flows north", "River in Africa"} <= set(node["descriptions"])
    assert ("nile", "egypt") in merged.edges
    graph = kg.to_networkx(merged)
    assert graph.nodes["nile"]["type"] == "nature"
    q = kg.quality(merged, graph)
    assert q["multi_source_entities"] == 1 and q["type_conflict_rate"] == 1.0


def test_alias_merge_reports_each_join():
    r = kg.parse_records('("entity"<|>Kyrgyzstan<|>location<|>x)##("entity"<|>Kyrgyzstann<|>location<|>y)'
                         '##("entity"<|>Peru<|>location<|>z)')
    merged = kg.merge_aliases(kg.merge([r]), threshold=90)
    assert len(merged.nodes) == 2 and len(merged.alias_merges) == 1
    assert {merged.alias_merges[0][0], merged.alias_merges[0][1]} == {"kyrgyzstan", "kyrgyzstann"}


def test_an_empty_extraction_stops_with_the_parse_failure_rate():
    results = [kg.parse_records("Sorry, I cannot help.", f"c{i}") for i in range(4)]
    ex = kg.Extraction(results, kg.merge(results), calls=4, seconds=0.0)
    assert ex.parse_failure_rate == 1.0
    with pytest.raises(kg.KGBuildError, match="parse-failure rate 100%"):
        kg.build_graph(ex, kg.KGSection(min_entities=3))
    _, graph = kg.build_graph(ex, kg.KGSection(min_entities=3, allow_sparse=True))
    assert graph.number_of_nodes() == 0


# ---------------------------------------------------------------- the mini-world's gold graph


@pytest.fixture(scope="module")
def gold():
    graph, triples = kg.gold_graph(ensure_world())
    return graph, triples


def test_gold_graph_holds_the_structured_facts(gold):
    graph, triples = gold
    assert graph.number_of_nodes() > 300 and graph.number_of_edges() > 800
    assert ("France", "has capital", "Paris") in triples
    assert graph.edges["france", "paris"]["relation"] == "has capital"
    assert graph.nodes["paris"]["type"] == "location"


def test_extraction_accuracy_against_gold(gold):
    graph, _ = gold
    perfect = kg.parse_records('("entity"<|>France<|>location<|>x)##("entity"<|>Paris<|>location<|>y)'
                               '##("relationship"<|>France<|>Paris<|>capital)')
    bad = kg.parse_records('("entity"<|>Atlantis<|>location<|>x)##("entity"<|>Paris<|>location<|>y)'
                           '##("relationship"<|>Atlantis<|>Paris<|>capital)')
    covered = {"c": kg.gold_mentions(graph, "Paris is the capital of France.")}
    assert covered["c"] == {"paris", "france"}
    good = kg.extraction_accuracy(kg.merge([perfect]), graph, covered)
    assert good["entity_precision"] == 1.0 and good["entity_recall"] == 1.0 and good["relation_f1"] == 1.0
    worse = kg.extraction_accuracy(kg.merge([bad]), graph, covered)
    assert worse["entity_precision"] == 0.5 and worse["relation_precision"] == 0.0 and worse["entity_recall"] == 0.5


# ---------------------------------------------------------------- quintuples and questions (§3.1)


def _toy_graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for key, name in [("france", "France"), ("paris", "Paris"), ("euro", "euro"), ("spain", "Spain"),
                      ("madrid", "Madrid"), ("lonely", "Lonely")]:
        g.add_node(key, name=name, type="location", aliases="")
    g.add_edge("france", "paris", relation="has capital")
    g.add_edge("france", "euro", relation="uses the currency")
    g.add_edge("spain", "madrid", relation="has capital")
    g.add_edge("spain", "euro", relation="uses the currency")
    return g


def test_sampled_quintuples_are_paths_of_the_graph(gold):
    graph, _ = gold
    quints = sample_quintuples(graph, 30, seed=1)
    assert len(quints) == 30 and len(set(quints)) == 30
    for q in quints:
        first = (q.e1, q.e2) if q.forward1 else (q.e2, q.e1)
        second = (q.e2, q.e3) if q.forward2 else (q.e3, q.e2)
        assert graph.edges[first]["relation"] == q.r1 and graph.edges[second]["relation"] == q.r2
        assert len({q.e1, q.e2, q.e3}) == 3
    g = nx.DiGraph()
    g.add_edge("a", "b", relation="r")
    with pytest.raises(ValueError, match="no path of two relations"):
        sample_quintuples(g, 5)


def test_question_rules_reject_leaks_ambiguity_and_missing_blanks():
    g = _toy_graph()
    q = Quintuple("paris", "has capital", "france", "uses the currency", "euro", forward1=False, forward2=True)
    # masking France: only France has capital Paris and uses the euro
    assert blank_candidates(g, q, "e2") == ["france"]
    ok, why = make_question(g, q, "e2", f"The capital of {BLANK} is Paris; {BLANK} uses the euro.", "q1")
    assert why == "" and ok.answer == "France" and ok.golds == ["France"]
    _, why = make_question(g, q, "e2", "The capital of France is Paris; { } uses the euro.", "q2")
    assert why == "the text names the answer"
    # masking the euro: France has one currency, but the path (France, uses the currency, x) has one fit only
    _, why = make_question(g, q, "e1", "Which city is the capital? No blank here.", "q3")
    assert why == "no blank in the text"
    # masking France in (France uses the euro) alone is ambiguous: Spain too
    amb = Quintuple("euro", "uses the currency", "france", "uses the currency", "euro", False, True)
    assert sorted(blank_candidates(g, amb, "e2")) == ["france", "spain"]
    _, why = make_question(g, amb, "e2", f"{BLANK} uses the euro.", "q4")
    assert why == "more than one entity fits the blank"


def test_ftext_prompt_blanks_every_mention_of_the_hidden_entity():
    """003 Eq. 2: F_text sees the masked quintuple. GraphGen's relation summaries and the other
    entities' descriptions often name the answer; every mention (name or alias, any case,
    whole words only) is blanked, and counted."""
    g = _toy_graph()
    g.nodes["france"]["aliases"] = "French Republic"
    g.nodes["paris"]["description"] = "Paris is the capital of FRANCE, the French Republic."
    g.nodes["euro"]["description"] = "The currency of Frenchland and France."
    q = Quintuple("paris", "is the capital of France", "france", "uses the currency", "euro", forward1=True)
    prompt, n = masked_ftext_prompt(g, q, "e2")
    assert "france" not in prompt.lower().replace("frenchland", "") and "French Republic" not in prompt
    assert "Frenchland" in prompt  # a longer word that merely starts with the name is kept
    assert n == 4  # FRANCE and French Republic in Paris's description, France in the euro's, in r1
    assert mask_mentions("No mention here.", ["France"]) == ("No mention here.", 0)
    _, report = synthesize_questions(g, SynthesisSection(questions=2, rephraser="template", seed=0))
    assert report["prompts_masked"] == report["mentions_masked"] == 0  # the template path shows nothing


def test_synthesis_counts_every_rejection_and_keeps_answerable_questions(gold):
    graph, _ = gold
    kept, report = synthesize_questions(graph, SynthesisSection(questions=40, rephraser="template", seed=3))
    assert report["sampled"] == 40 and report["kept"] == len(kept) > 0
    assert report["kept"] + sum(report["rejected"].values()) == 40
    for q in kept:
        assert BLANK in q.question and q.answer.lower() not in q.question.lower().replace(BLANK, "")
        assert len(blank_candidates(graph, Quintuple(**q.quintuple), q.masked)) == 1
    with pytest.raises(ValueError, match="needs a generator"):
        synthesize_questions(graph, SynthesisSection(questions=2, rephraser="llm"))


# ---------------------------------------------------------------- checklists (§3.2)


@pytest.mark.parametrize("answer, why", [
    ({"not": "a list"}, "not a JSON list"), ("just text", "not a JSON list"), (["a", "", "b"], "an empty item"),
    (["Names France.", "names  france.", "x"], "duplicate items"), (["a", "b"], "2 items (expected 3-12)"),
    (["a", 3, "b"], "an item is not a string")])
def test_checklist_validation_says_why(answer, why):
    assert validate_checklist(answer) == (None, why)


def test_checklist_validation_accepts_a_clean_list_and_a_wrapped_one():
    items = ["States the capital.", "Links the two facts.", "Names the country."]
    assert validate_checklist(items) == (items, "")
    assert validate_checklist({"checklist": items}) == (items, "")


class ScriptedWriter:
    """A writer whose answers are given: the test controls what the LLM 'wrote'."""

    def __init__(self, answers):
        self.answers, self.seed, self.prompts = list(answers), 0, []

    def judge(self, prompts, prefix=None):
        self.prompts += prompts
        return [self.answers.pop(0) for _ in prompts]


def test_checklists_retry_then_fall_back_or_drop(gold):
    graph, _ = gold
    questions, _ = synthesize_questions(graph, SynthesisSection(questions=20, rephraser="template", seed=3))
    qs = questions[:2]
    writer = ScriptedWriter(['["a", "b", "c"]', "not json", 'still not a list'])
    out, report = make_checklists([K2VQuestion(**q.to_dict()) for q in qs], graph,
                                  ChecklistSection(writer="llm", attempts=2, fallback="drop"), writer)
    assert len(out) == 1 and out[0].checklist == ["a", "b", "c"] and report["dropped"] == 1
    assert report["writer_calls"] == 3 and report["rejections"] == {"not a JSON list": 2}
    writer = ScriptedWriter(["no", "no"])
    out, report = make_checklists([K2VQuestion(**q.to_dict()) for q in qs], graph,
                                  ChecklistSection(writer="llm", attempts=1, fallback="template"), writer)
    assert len(out) == 2 and report["template_fallbacks"] == 2 and all(q.checklist_source == "template" for q in out)
    # the criteria set reaches the writer: Table 16 filled with the law set (Table 19), not the default
    writer = ScriptedWriter(['["a", "b", "c"]'])
    make_checklists([K2VQuestion(**qs[0].to_dict())], graph, ChecklistSection(writer="llm", criteria="law"), writer)
    expert, field = P.K2V_DOMAINS["law"]
    assert P.K2V_CRITERIA["law"] in writer.prompts[0] and P.K2V_CRITERIA["general"] not in writer.prompts[0]
    assert f"expert in {expert}" in writer.prompts[0] and qs[0].question in writer.prompts[0]
    assert template_checklist(graph, qs[0])[-2] == f"Names {qs[0].answer} as the entity that fills the blank."


def _rewrite(prompt: str) -> str:
    """A Table 13 writer: the two RELATIONSHIPS lines "(a -> b: r)" as one sentence each."""
    rels = re.findall(r"^\((.*) -> (.*): (.*)\)$", prompt.split("-RELATIONSHIPS-\n#####\n", 1)[1], re.M)
    return " ".join(f"{a} {r} {b}." for a, b, r in rels) + " Which entity is { }?"


def test_llm_rephraser_checklist_writer_and_quality_pass_record_their_cost(gold):
    graph, _ = gold
    asked = []

    def script(p):
        asked.append(p)
        if p.startswith(P.K2V_TEXT_PROMPT[:40]):  # F_text: every third answer is a refusal (no blank)
            return "I cannot help with that." if len(asked) % 3 == 0 else _rewrite(p)
        if "[General Criteria]" in p:  # Table 16
            return '["States the first fact.", "States the second fact.", "Names the answer."]'
        return '{"relevance": 5, "verifiability": 4, "necessity": 3}'

    gen = CountingJudge(script)
    kept, q_rep = synthesize_questions(graph, SynthesisSection(questions=12, rephraser="llm", seed=2), gen)
    # Table 13 was asked once per quintuple, the masked entity shown as the blank
    assert len(gen.asked) == q_rep["sampled"] == q_rep["generator_calls"] == 12
    for q in kept:
        i = int(q.id.rsplit("/", 1)[1])
        prompt = gen.asked[i]
        assert prompt.startswith(P.K2V_TEXT_PROMPT[:40]) and f"({BLANK}, " in prompt and f"({q.answer}, " not in prompt
        assert q.question == " ".join(_rewrite(prompt).split()) and q.meta["rephraser"] == "llm"
    assert q_rep["rejected"].get("no blank in the text") == 4 and q_rep["kept"] + sum(q_rep["rejected"].values()) == 12
    assert q_rep["prompt_tokens"] == sum(len(p.split()) for p in gen.asked) > 0 and q_rep["completion_tokens"] > 0

    with_lists, c_rep = make_checklists(kept, graph, ChecklistSection(writer="llm"), gen)
    assert c_rep["writer_calls"] == len(kept) and c_rep["prompt_tokens"] > 0 and c_rep["completion_tokens"] > 0
    quality = score_checklists(with_lists, gen)
    assert quality["calls"] == len(kept) and quality["prompt_tokens"] > 0
    kg_report = {"source": "gold", "seconds": 0.1}
    rows = synthesis_cost(kg_report, {"questions": q_rep, "checklists": c_rep, "quality": quality}, None)
    by = {r["stage"].split(" (")[0]: r for r in rows}
    assert by["questions"]["prompt_tokens"] == q_rep["prompt_tokens"] and by["checklists"]["completion_tokens"] > 0
    assert by["checklist quality pass"]["calls"] == len(kept) and by["knowledge graph"]["calls"] == 0
    # template stages cost nothing, and say so with zeros (not None: no judge was involved)
    _, t_rep = synthesize_questions(graph, SynthesisSection(questions=4, rephraser="template"))
    assert (t_rep["generator_calls"], t_rep["prompt_tokens"]) == (0, 0)


def test_checklist_quality_scores_count_unreadable_answers():
    answers = ['{"relevance": 5, "verifiability": 4, "necessity": 3}',
               '```json\n{"Relevance": "3", "verifiability": 2, "necessity": 1}\n```',
               "relevance: 4, verifiability: 3, necessity: 2",  # plain text read too
               '{"relevance": 6, "verifiability": 4, "necessity": 3}',  # outside 1-5
               '{"relevance": 5, "verifiability": 4}',  # a dimension missing
               "A fine checklist."]
    script = iter(answers)
    judge = CountingJudge(lambda p: next(script))
    qs = [K2VQuestion(f"q{i}", f"The capital of {BLANK} is Paris ({i}).", "France", ["France"], {}, "e1",
                      checklist=["States the capital.", "Names France."]) for i in range(len(answers))]
    out = score_checklists(qs, judge)
    assert out["scored"] == 3 and out["unreadable"] == 3
    assert out["relevance"] == pytest.approx(4.0) and out["verifiability"] == pytest.approx(3.0)
    assert out["necessity"] == pytest.approx(2.0)
    assert "- Names France." in judge.asked[0] and "The capital of { } is Paris (0)." in judge.asked[0]
    assert out["calls"] == 6 and out["prompt_tokens"] == sum(len(p.split()) for p in judge.asked)


def test_extraction_check_reports_the_extracted_graphs_appendix_g_quality(monkeypatch):
    answers = iter([  # chunk 1, chunk 2: France's type and description disagree, Atlantis stands alone
        '("entity"<|>France<|>location<|>A country in Europe.)##("entity"<|>Paris<|>location<|>Capital of France.)'
        '##("entity"<|>Atlantis<|>location<|>A myth.)##("relationship"<|>France<|>Paris<|>has capital)<|COMPLETE|>',
        '("entity"<|>France<|>organization<|>Member of the United Nations.)##("entity"<|>Paris<|>location<|>'
        'Capital of France.)##("relationship"<|>France<|>Paris<|>has capital)<|COMPLETE|>'])
    judge = CountingJudge(lambda p: next(answers))
    monkeypatch.setattr(k2v_train, "make_judge", lambda section: judge)
    cfg = config.load_config("params/04_k2v_lm.yaml", K2VConfig, {"extraction_check": {"chunks": 2}})
    out = k2v_train.extraction_check(cfg, Resources(cfg))
    assert out["chunks"] == 2 and out["calls"] == 2 and out["entities"] == 3 and out["relations"] == 1
    assert out["noise_ratio"] == pytest.approx(1 / 3) and out["lcc_ratio"] == pytest.approx(2 / 3)
    assert out["multi_source_entities"] == 2  # France and Paris, seen in both chunks
    assert out["type_conflict_rate"] == 0.5 and out["description_conflict_rate"] == 0.5  # France only
    assert out["entity_precision"] == pytest.approx(2 / 3)  # Atlantis is no gold node


def test_leakage_counts_shared_ngrams(tokenizer):
    synth = ["The capital of { } is Paris and { } uses the euro as its currency in western Europe today."]
    rows = leakage(tokenizer, synth, {"copy": [synth[0], "Something else entirely different here."],
                                      "clean": ["What is the capital of Peru?"]}, ns=(4, 8))
    by = {r["benchmark"]: r for r in rows}
    assert by["copy"]["n=4"] == 1 and by["copy"]["n=8"] == 1 and by["copy"]["total_samples"] == 2
    assert by["clean"]["n=4"] == 0


# ---------------------------------------------------------------- rewards (Eq. 4-5, 8; §4.3)


def test_answer_gated_reward_and_each_ablation():
    assert answer_gated_reward(0.75, True, 0.6) == pytest.approx(0.75 + 6 + 0.6)
    assert answer_gated_reward(0.75, False, 0.9) == pytest.approx(0.75)  # the gate: no reasoning reward
    assert answer_gated_reward(0.0, True, 1.0, alpha=2.0) == pytest.approx(3.0)
    assert answer_gated_reward(0.75, False, 0.9, ablation="no_gate") == pytest.approx(0.75 + 0.9)
    assert answer_gated_reward(0.75, True, 0.9, ablation="no_gate") == pytest.approx(0.75 + 6 + 0.9)
    assert answer_gated_reward(0.75, True, 0.9, ablation="no_reasoning") == pytest.approx(6.75)
    assert answer_gated_reward(0.75, False, 0.9, ablation="no_answer") == pytest.approx(1.65)
    assert answer_gated_reward(0.75, True, 0.9, ablation="no_answer") == pytest.approx(1.65)
    with pytest.raises(ValueError, match="ablation must be one of"):
        answer_gated_reward(0.75, True, 0.9, ablation="no_format")


def test_format_score_and_reasoning_of():
    good = GOOD_THINK + "<answer>France</answer>"
    assert format_score(good) == 0.75 and format_score("<answer>France</answer>") == 0.0
    assert format_score("<think>short</think><answer>France</answer>") == 0.0
    assert reasoning_of(good).startswith("Paris is the capital") and reasoning_of("plain text") == "plain text"


@pytest.mark.parametrize("answer, verdict", [("yes", True), ("NO", False), ("  \"Yes.\"", True), ("no, because", False),
                                             ("**yes**", True), ("maybe", None), ("", None), ("yesterday", None)])
def test_yes_no_parsing(answer, verdict):
    assert parse_yes_no(answer) is verdict


class ScriptedJudge:
    """Answers each checklist prompt by a rule on its criterion; counts the prompts."""

    def __init__(self, rule):
        self.rule, self.asked = rule, 0

    def judge(self, prompts, prefix=None):
        self.asked += len(prompts)
        return [self.rule(p) for p in prompts]

    def choose(self, prompts, options):
        return self.judge(prompts)


def _rows(n_items=3):
    checklist = [f"criterion {i}" for i in range(n_items)]
    return dict(golds=[["France"]] * 3, question=["The capital of { } is Paris."] * 3, checklist=[checklist] * 3)


def test_k2v_reward_gates_the_judge_and_counts_unreadable_answers():
    completions = [GOOD_THINK + "<answer>France</answer>", GOOD_THINK + "<answer>Spain</answer>",
                   "<answer>france</answer>"]
    judge = ScriptedJudge(lambda p: "yes" if "criterion 0" in p or "criterion 1" in p else "NO")
    logged = {}
    out = K2VReward(judge, K2VArgs())(completions=completions, log_metric=logged.__setitem__, **_rows())
    assert out == pytest.approx([0.75 + 6 + 2 / 3, 0.75, 0.0 + 6 + 2 / 3])
    assert judge.asked == 6  # the wrong answer's checklist is never judged (the gate)
    assert logged["k2v/answer_accuracy"] == pytest.approx(2 / 3) and logged["k2v/failure_rate"] == 0.0
    unreadable = ScriptedJudge(lambda p: "I cannot say")
    out = K2VReward(unreadable, K2VArgs())(completions=completions, log_metric=logged.__setitem__, **_rows())
    assert out[0] is None and out[2] is None and out[1] == pytest.approx(0.75)  # counted, never a silent 0
    assert logged["k2v/failure_rate"] == pytest.approx(2 / 3) and logged["k2v/judge_unreadable"] == 6
    no_gate = K2VReward(judge, K2VArgs(ablation="no_gate"))(completions=completions, **_rows())
    assert no_gate[1] == pytest.approx(0.75 + 2 / 3)


def test_k2v_answer_check_is_exact_match_not_substring():
    """Issue 26.1: Eq. 8's 1(y_hat = y) is equality after normalization against the gold and its
    aliases. Under CorVer's substring rule every one of these earned alpha = 6 and opened the gate."""
    gamed = ["T", "RPV", "TRPV1, TRPV4, PMP22, MFN2", "It is not TRPV4"]
    right = ["TRPV4", "the trpv4.", "Transient receptor potential vanilloid 4"]
    completions = [GOOD_THINK + f"<answer>{a}</answer>" for a in gamed + right]
    n = len(completions)
    judge = ScriptedJudge(lambda p: "yes")
    out = K2VReward(judge, K2VArgs())(completions=completions,
                                      golds=[["TRPV4", "Transient receptor potential vanilloid 4"]] * n,
                                      question=["{ } is a calcium channel."] * n, checklist=[["a", "b"]] * n)
    assert out == pytest.approx([0.75] * len(gamed) + [0.75 + 6 + 1] * len(right))
    assert judge.asked == 2 * len(right)  # the gate stays shut for every gamed answer


def test_k2v_heldout_accuracy_grades_exactly(monkeypatch):
    """Issue 26.1: the held-out K2V accuracy uses the same exact rule as the reward."""
    from factlab.models import Generation

    said = ["<answer>T</answer>", "<answer>It is not TRPV4</answer>", "<answer>TRPV4</answer>", "TRPV4"]
    from factlab.eval import suites

    monkeypatch.setattr(suites, "generate", lambda *a, **k: [[Generation(t, [1], True)] for t in said])
    monkeypatch.setattr(suites, "chat_prompt", lambda tok, q, system=None: q)
    qs = [K2VQuestion(id=str(i), question="{ } is a channel.", answer="TRPV4", golds=["TRPV4"], quintuple={},
                      masked="e1", checklist=["a"]) for i in range(4)]
    cfg = config.load_config("params/04_k2v_lm.yaml", K2VConfig)
    acc = k2v_train.answer_accuracy(None, None, qs, cfg)
    assert acc["accuracy"] == pytest.approx(1 / 4) and acc["lenient_accuracy"] == pytest.approx(2 / 4)
    assert acc["responses"] == said and acc["n"] == 4  # the answer_accuracy suite's numbers (eval.suites)


def test_pass_rate_divides_by_k_as_eq5_says():
    """Issue 26.3: three "yes" and four unreadable replies give p = 3/7 (Eq. 5: p = (1/k) sum v_i),
    not 3/3; ``pass_rate_over: readable`` keeps the old rule as an option; all unreadable is None."""
    checklist = [f"criterion {i}" for i in range(7)]
    judge = ScriptedJudge(lambda p: "yes" if any(f"criterion {i}" in p for i in range(3)) else "hmm")
    args = dict(questions=["q"], answers=["a"], checklists=[checklist], reasonings=["r"])
    assert ChecklistJudge(judge).pass_rates(**args) == [pytest.approx(3 / 7)]
    assert ChecklistJudge(judge, pass_rate_over="readable").pass_rates(**args) == [pytest.approx(1.0)]
    silent = ScriptedJudge(lambda p: "hmm")
    assert ChecklistJudge(silent).pass_rates(**args) == [None]
    assert K2VArgs().pass_rate_over == "k"


def test_k2v_reward_needs_its_columns():
    with pytest.raises(KeyError, match=r"needs the dataset columns \['checklist'\]"):
        K2VReward(ScriptedJudge(lambda p: "yes"))(completions=["x"], golds=[["a"]], question=["q"])


def test_registered_rewards_build_from_params():
    class Res(Resources):
        def judge(self, max_new_tokens=None):
            return ScriptedJudge(lambda p: "yes")

    rs = build_rewards([RewardSpec(name="k2v", args={"alpha": 4.0}), RewardSpec(name="k2v_checklist"),
                        RewardSpec(name="overlong", args={"max_len": 32, "buffer": 8})], Res(None))
    assert rs.names == ["k2v", "k2v_checklist", "overlong"]
    out = rs.funcs[0](completions=[GOOD_THINK + "<answer>France</answer>"], golds=[["France"]],
                      question=["q"], checklist=[["a", "b"]])
    assert out == pytest.approx([0.75 + 4 + 1])


def test_overlong_penalty_is_zero_then_linear_then_full():
    pen = OverlongPenalty(OverlongArgs(max_len=20, buffer=10, factor=2.0))
    got = pen(completion_ids=[[0] * 5, [0] * 10, [0] * 15, [0] * 20, [0] * 30])
    assert got == pytest.approx([0.0, 0.0, -1.0, -2.0, -2.0])


def test_choice_verdicts_come_from_the_real_judge_model():
    # the real model: the test is what the 135M judge's next-token scores say
    judge = make_judge(sections.JudgeSection(backend="transformers", model="smollm2-135m-instruct", dtype="float32",
                                           base_url=None, max_new_tokens=4, enable_thinking=None), cache=False)
    # the 135M model's next-token scores follow a plain instruction (measured): a choice that ignores
    # the model, or maps its scores to the wrong option, cannot give this alternation
    assert judge.choose(["Answer yes.", "Answer no.", "Say yes.", "Say no."], ("yes", "no")) == ["yes", "no", "yes", "no"]
    # Table 15 prompts: measured, it answers "no" to every criterion, however good the reasoning
    # (why the notebook adds reference-rule verdicts); one model call per checklist item
    rates = ChecklistJudge(judge, "choice").pass_rates(
        ["The capital of { } is Paris."] * 2, ["France"] * 2,
        [["Names France as the answer."], ["States that Paris is the capital of France.", "Answer yes."]],
        ["Paris is the capital of France, so the blank is France.", "yes"])
    assert rates == [0.0, 0.0] and judge.stats["calls"] == 4 + 3


# ---------------------------------------------------------------- DAPO's group filter


def test_keep_groups_uses_a_tolerance_judges_scored_rewards_and_keeps_single_samples():
    assert keep_groups([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.5], 4) == [False, True]
    assert keep_groups([0.3, 0.1 + 0.2, 0.5, 0.5 + 1e-9], 2) == [False, False]  # float noise agrees
    assert keep_groups([0.0, 1e-3, 2.0, 2.0], 2, tol=1e-2) == [False, False]
    nan = float("nan")
    # a left-out (NaN) completion does not count: the group is judged on its scored ones (issue 26.4)
    assert keep_groups([1.0, nan, 1.0, 1.0], 2) == [False, False]
    assert keep_groups([1.0, nan, 0.0, nan, 0.0, 1.0], 3) == [True, True]
    assert keep_groups([nan, nan, nan, 1.0], 2) == [False, False]
    assert keep_groups([1.0, 1.0, nan], 1) == [True, True, False]  # G = 1: verl keeps a single sample
    with pytest.raises(ValueError, match="do not split into groups of 4"):
        keep_groups([1.0] * 6, 4)


# ---------------------------------------------------------------- the notebook's wiring


def test_rows_split_and_constructed_responses(gold):
    graph, _ = gold
    questions, _ = synthesize_questions(graph, SynthesisSection(questions=30, rephraser="template", seed=3))
    questions, _ = make_checklists(questions, graph, ChecklistSection(writer="template"))
    train, held = split_questions(questions, 0.25)
    assert len(train) + len(held) == len(questions) and held and not {q.id for q in train} & {q.id for q in held}
    rows = k2v_rows(train[:2])
    assert rows[0]["prompt"][1]["content"] == train[0].question and rows[0]["checklist"] == train[0].checklist
    resp = constructed_responses(questions[0], "Atlantis", pad_tokens=60)
    assert format_score(resp["correct + good reasoning"]) == 0.75
    assert "Atlantis" in resp["wrong + good reasoning"] and len(resp["padded + correct"].split()) >= 60
    judge = ScriptedJudge(lambda p: "yes")
    table, stats = reward_ablation(held[:2], judge, alpha=6.0, ablations=[None, "no_gate", "no_answer"])
    by = {(r["response"], r["reward"]): r["mean"] for r in table}
    assert by[("correct + good reasoning", "K2V (Eq. 8)")] == pytest.approx(0.75 + 6 + 1)
    assert by[("wrong + good reasoning", "K2V (Eq. 8)")] == pytest.approx(0.75)
    assert by[("wrong + good reasoning", "no_gate")] == pytest.approx(0.75 + 1)
    assert by[("wrong + good reasoning", "no_answer")] == by[("correct + good reasoning", "no_answer")]
    assert stats["judge_calls"] == 2 * 4 * len(held[0].checklist)


def test_params_errors_name_the_key():
    def load(**over):
        return config.load_config("params/04_k2v_lm.yaml", K2VConfig, over)

    assert load().grpo.loss_type == "dapo"
    with pytest.raises(config.ConfigError, match=r"rewards.0.args.alpha"):
        load(rewards=[{"name": "k2v", "args": {"alpha": -1}}])
    with pytest.raises(config.ConfigError, match=r"buffer"):
        load(rewards=[{"name": "overlong", "args": {"max_len": 32, "buffer": 64}}])
    with pytest.raises(config.ConfigError, match=r"rewards.1.args.max_len.*grpo.max_completion_length"):
        load(rewards=[{"name": "k2v"}, {"name": "overlong", "args": {"max_len": 4096, "buffer": 512}}])
    with pytest.raises(config.ConfigError, match=r"checklist.criteria.*unknown criteria set 'astrology'"):
        load(checklist={"criteria": "astrology"})
    with pytest.raises(config.ConfigError, match=r"grpo.max_steps"):
        load(grpo={"max_steps": -7})
    assert math.isclose(load().rewards[0].args["alpha"], 6.0)


def test_an_empty_corpus_is_a_clear_error(tmp_path):
    empty = tmp_path / "corpus.jsonl"
    empty.write_text("")
    cfg = config.load_config("params/04_k2v_lm.yaml", K2VConfig, {"kg": {"source": "extracted",
                                                                             "corpus": str(empty)}})
    with pytest.raises(ValueError, match=r"kg.corpus: .*corpus.jsonl has no documents"):
        knowledge_graph(cfg, Resources(cfg), tmp_path)


def test_restrict_relations_keeps_only_those_edges(gold):
    graph, _ = gold
    kept = kg.restrict_relations(graph, ["has capital", "uses the currency"])
    assert {d["relation"] for _, _, d in kept.edges(data=True)} == {"has capital", "uses the currency"}
    assert all(kept.degree(v) > 0 for v in kept.nodes) and kept.has_edge("france", "paris")
    assert graph.has_edge("france", "germany") and not kept.has_node("english")  # the original is untouched
    assert kg.restrict_relations(graph, None) is graph


def test_organism_split_by_country_with_buckets(gold):
    """On the organism, held-out questions name only held-out countries (none excluded), train
    ones only train countries, and each carries its exposure bucket into its GRPO row."""
    from factlab import organism

    graph = kg.restrict_relations(gold[0], ["has capital", "uses the currency", "has the official language"])
    qs, _ = synthesize_questions(graph, SynthesisSection(questions=400, rephraser="template"))
    split = organism.qa_split("organism")
    ex = organism.exposures("organism")
    excluded = sorted(split["heldout"])[:5]
    train, held, report = k2v_train.organism_split(qs, graph, "organism", exclude=excluded)
    assert train and held and report["heldout"] == len(held) and report["train"] == len(train)
    assert report["dropped"] and len(train) + len(held) < len(qs)
    for q in held:
        names = k2v_train.question_countries(graph, q)
        assert set(names) <= set(split["heldout"]) and not set(names) & set(excluded)
        hidden = graph.nodes[q.quintuple[q.masked]]
        n = ex[hidden["name"]] if hidden["kind"] == "country" else max(ex[c] for c in names)
        assert q.meta["bucket"] == organism.exposure_bucket(n)
    assert all(set(k2v_train.question_countries(graph, q)) <= set(split["train"]) for q in train)
    assert {q.meta["bucket"] for q in held} >= {"known", "unknown"} and any(q.meta["bucket"].startswith("rare-")
                                                                            for q in held)
    rows = k2v_rows(held)
    assert [r["bucket"] for r in rows] == [q.meta["bucket"] for q in held]
    assert "bucket" not in k2v_rows([K2VQuestion("x", "q", "a", ["a"], {}, "e1")])[0]


def test_format_demo_states_the_two_facts_and_names_the_entity(gold):
    graph = kg.restrict_relations(gold[0], ["has capital", "uses the currency"])
    (q, *_), _ = synthesize_questions(graph, SynthesisSection(questions=20, rephraser="template"))
    demo = k2v_train.format_demo(graph, q)
    facts = [c.split(": ", 1)[1] for c in template_checklist(graph, q)[:2]]
    assert demo == f"<think>{' '.join(facts)}</think>\n<answer>{q.answer}</answer>"
    assert text.grade_answer_exact(text.extract_answer(demo), q.golds) == text.GOOD


def test_format_step_trains_once_then_reuses_and_points_the_policy(gold, tmp_path, monkeypatch):
    """``format_sft`` on the tiny organism: the policy name moves to the fine-tuned folder; a
    second call finds it in the cache; disabled, nothing changes."""
    monkeypatch.setattr(k2v_train, "cache_dir", lambda: tmp_path / "cache")  # the tiny organism: the shared cache
    graph = kg.restrict_relations(gold[0], ["has capital", "uses the currency", "has the official language"])
    qs, _ = synthesize_questions(graph, SynthesisSection(questions=200, rephraser="template"))
    train, _, _ = k2v_train.organism_split(qs, graph, "organism-tiny")

    def cfg(enabled=True):
        return K2VConfig.model_validate({"model": {"name": "organism-tiny", "dtype": "float32"}, "lora": None,
                                         "rewards": [{"name": "k2v", "args": {"verdict": "kb"}}],
                                         "format_sft": {"enabled": enabled, "buckets": ["known"],
                                                        "sft": {"max_steps": 1, "report_to": "none"}}})
    off = cfg(False)
    assert k2v_train.format_step(off, train, graph) == {"enabled": False} and off.model.name == "organism-tiny"
    first, c1 = k2v_train.format_step(c := cfg(), train, graph), c
    assert first["enabled"] and not first["cached"] and first["steps"] == 1
    assert first["examples"] == sum(q.meta["bucket"] == "known" for q in train) > 0
    assert c1.model.name == first["model"] != "organism-tiny" and (tmp_path / "cache" / "k2v-format") in \
        Path(first["model"]).parents
    again = k2v_train.format_step(cfg(), train, graph)
    assert again["cached"] and again["model"] == first["model"]


def test_smoke_params_train_the_organism_without_a_135m_model():
    """04's smoke (issue 40 item 5): the organism as policy, kb verdicts, no extractor run, the
    smoke_k2v evidence on held-out questions; its organism evidence file holds both arms."""
    root = Path(__file__).resolve().parents[2]
    cfg = config.load_config(root / "params/04_k2v_organism.yaml", K2VConfig)
    assert cfg.model.name == "organism" and cfg.lora is None and cfg.format_sft.enabled
    assert all((s.args or {}).get("verdict") == "kb" for s in cfg.rewards if s.name == "k2v")
    assert cfg.extraction_check.chunks == 0 and cfg.synthesis.rephraser == "template" and cfg.judge.model == "organism"
    assert cfg.evidence.hypothesis == "smoke_k2v" and [a.name for a in cfg.evidence.arms] == ["gated"]
    assert cfg.evidence.seeds == [0, 1, 2] and cfg.evidence.heldout >= 100
    full = config.load_config(root / "params/04_k2v_organism_evidence.yaml", K2VConfig)
    assert full.evidence.hypothesis == "organism_k2v" and len(full.evidence.seeds) == 5
    assert {a.name for a in full.evidence.arms} == {"gated", "no_gate"}
