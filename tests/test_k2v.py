"""K2V (003_5e9813e66e6ba19a.txt): the record parser on hostile output, entity merging, the
mini-world's gold graph, quintuple sampling and question rules, checklists, leakage, every
reward formula and ablation, the overlong penalty, DAPO's group filter, and params errors."""

import math

import networkx as nx
import pytest

from factlab import config
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl
from factlab.rewards import RewardSpec, build_rewards
from factlab.rewards.k2v import (ChecklistJudge, K2VArgs, K2VReward, answer_gated_reward, format_score, parse_yes_no,
                                 reasoning_of)
from factlab.rewards.length import OverlongArgs, OverlongPenalty
from factlab.synth import kg
from factlab.synth.k2v import (BLANK, ChecklistSection, K2VQuestion, Quintuple, SynthesisSection, blank_candidates,
                               leakage, make_checklists, make_question, sample_quintuples, synthesize_questions,
                               template_checklist, validate_checklist)
from factlab.train.dapo import keep_groups
from factlab.train.k2v import K2VConfig, constructed_responses, k2v_rows, reward_ablation, split_questions

GOOD_THINK = "<think>Paris is the capital of France, so France fills the blank.</think>"


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
    assert "general" in ChecklistSection().criteria and template_checklist(graph, qs[0])[-2].startswith("Names ")


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


def test_k2v_reward_needs_its_columns():
    with pytest.raises(KeyError, match=r"needs the dataset columns \['checklist'\]"):
        K2VReward(ScriptedJudge(lambda p: "yes"))(completions=["x"], golds=[["a"]], question=["q"])


def test_registered_rewards_build_from_params():
    from factlab.rewards import Resources

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
    from factlab.judges import make_judge

    judge = make_judge(config.JudgeSection(backend="transformers", model="smollm2-135m-instruct", dtype="float32",
                                           base_url=None, max_new_tokens=4, enable_thinking=None), cache=False)
    prompts = ["Is Paris the capital of France? Answer yes or no.", "Is the sky green? Answer yes or no."]
    rates = ChecklistJudge(judge, "choice").pass_rates(["q", "q"], ["a", "a"], [["c1"], ["c2", "c3"]], ["r1", "r2"])
    assert all(r in (0.0, 0.5, 1.0) for r in rates) and judge.stats["calls"] == 3
    assert set(judge.choose(prompts, ("yes", "no"))) <= {"yes", "no"}


# ---------------------------------------------------------------- DAPO's group filter


def test_keep_groups_uses_a_tolerance_and_keeps_nan_groups():
    assert keep_groups([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.5], 4) == [False, True]
    assert keep_groups([0.3, 0.1 + 0.2, 0.5, 0.5 + 1e-9], 2) == [False, False]  # float noise agrees
    assert keep_groups([0.0, 1e-3, 2.0, 2.0], 2, tol=1e-2) == [False, False]
    assert keep_groups([1.0, float("nan"), 1.0, 1.0], 2) == [True, False]
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
        return config.load_config("params/04_k2v_smoke.yaml", K2VConfig, over)

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


def test_miniworld_mcq_questions_have_one_right_letter():
    from factlab.eval.mcq import LETTERS, miniworld_mcq

    world = ensure_world()
    rows = miniworld_mcq(world, 12, seed=0)
    assert len(rows) == 12
    heldout = {d["id"]: d for d in read_jsonl(world["qa_heldout"])}
    for r in rows:
        options = [r[x] for x in LETTERS]
        assert len(set(options)) == 4 and r["answer"] in LETTERS
        assert r[r["answer"]] in heldout[r["id"]]["golds"]
    assert miniworld_mcq(world, 12, seed=0) == rows and miniworld_mcq(world, 12, seed=1) != rows


def test_an_empty_corpus_is_a_clear_error(tmp_path):
    from factlab.rewards import Resources
    from factlab.train.k2v import knowledge_graph

    empty = tmp_path / "corpus.jsonl"
    empty.write_text("")
    cfg = config.load_config("params/04_k2v_smoke.yaml", K2VConfig, {"kg": {"source": "extracted",
                                                                             "corpus": str(empty)}})
    with pytest.raises(ValueError, match=r"kg.corpus: .*corpus.jsonl has no documents"):
        knowledge_graph(cfg, Resources(cfg), tmp_path)
