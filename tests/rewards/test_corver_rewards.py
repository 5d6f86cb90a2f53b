"""CorVer reward math (000 §3.2-3.4, §B.1, §B.3) and its trainer hooks on a real index."""

import pytest

from factlab.rewards.corver import (COUNT_REWARDS, STOP_WORDS, CooccurrenceScalarReward, CorVerArgs,
                                    CorVerScorer, CorVerTokenShaping, block_of, content_words, count_to_reward,
                                    entity_content_words, score_sentence, token_returns, traces_frame)
from factlab.rewards.triplets import HeuristicExtractor, Triplet


# ----------------------------------------------------------------------------- Eq. (2)

@pytest.mark.parametrize("count, reward", [
    (None, 0.0), (0, -0.3), (1, -0.1), (4, -0.1), (5, 0.0), (19, 0.0), (20, 0.1), (12_323, 0.1),
])
def test_count_to_reward_paper_tiers(count, reward):
    assert count_to_reward(count) == reward


def test_count_to_reward_custom_and_errors():
    assert count_to_reward(3, (2, 10), (-1, -0.5, 0.5, 1)) == 0.5
    with pytest.raises(ValueError):
        count_to_reward(-1)


def test_reward_args_validate():
    with pytest.raises(ValueError, match="tau_1"):
        CorVerArgs(count_thresholds=(20, 5))
    with pytest.raises(ValueError, match="non-decreasing"):
        CorVerArgs(count_rewards=(0.1, 0.0, -0.1, -0.3))
    with pytest.raises(ValueError, match="non-decreasing"):
        CorVerArgs(count_rewards=(-0.3, -0.1, 0.1, 0.0))


@pytest.mark.parametrize("alpha_0", [-0.1, -0.2, -0.3, -0.5, -1.0])  # the sweep of §B.2 / Figure 6
def test_zero_count_penalty_sweep_values_are_allowed(alpha_0):
    args = CorVerArgs(count_rewards=(alpha_0, -0.1, 0.0, 0.1))
    assert count_to_reward(0, args.count_thresholds, args.count_rewards) == alpha_0


# ----------------------------------------------------------------------------- §B.1 words

def test_stop_words_closed_list():
    assert len(STOP_WORDS) == 35 and "it" in STOP_WORDS and "the" in STOP_WORDS
    assert "paris" not in STOP_WORDS


@pytest.mark.parametrize("head, tail, words", [
    ("Philadelphia Flyers", "Stanley Cup", ["Philadelphia", "Flyers", "Stanley", "Cup"]),
    ("the team", "Buffalo Sabres", ["team", "Buffalo", "Sabres"]),  # head has no capital: fallback
    ("Ronkonkoma NY", "11777", ["Ronkonkoma", "NY", "11777"]),  # Figure 7 A: the number is kept
    ("Ella Fitzgerald's mother", "Height", ["Ella", "Fitzgerald", "Height"]),
    ("Kabul", "kabul", ["Kabul"]),  # deduplicated case-insensitively, first spelling kept
    ("it", "an", []),
    ("The Capital of France", "Paris", ["Capital", "France", "Paris"]),
])
def test_content_words(head, tail, words):
    assert content_words(head, tail) == words


def test_entity_fallback_drops_short_words():
    assert entity_content_words("a big ox") == ["big"]


# ----------------------------------------------------------------------------- §B.3 rules

COUNTS = {("Mario", "Camerini", "Il", "Seduttore"): 50, ("Il", "Seduttore", "Sophia", "Loren"): 0,
          ("Sophia", "Loren", "Il", "Seduttore"): 7, ("Mario", "Camerini", "Il", "Seduttore", "directed"): 3,
          ("Sophia", "Loren", "Il", "Seduttore", "directed"): 0}
CALLS: list = []


def fake_count(words):
    CALLS.append(tuple(words))
    return COUNTS[tuple(words)]


WORKED = [Triplet("Mario Camerini", "directed", "Il Seduttore"), Triplet("Il Seduttore", "starred", "Sophia Loren")]


def test_first_rule_worked_example():
    CALLS.clear()
    s = score_sentence(WORKED, fake_count, "first")
    assert (s.count, s.reward, s.lookups) == (50, 0.1, 1) and len(CALLS) == 1


def test_min_rule_worked_example():
    s = score_sentence(WORKED, fake_count, "min")
    assert (s.count, s.reward, s.lookups) == (0, -0.3, 2)
    assert s.triplet == WORKED[1]


def test_relcheck_keeps_and_demotes():
    s = score_sentence(WORKED, fake_count, "relcheck")
    assert (s.count, s.reward, s.lookups, s.relation_count) == (50, 0.1, 2, 3)
    swapped = [Triplet("Sophia Loren", "directed", "Il Seduttore")]
    COUNTS[("Sophia", "Loren", "Il", "Seduttore")] = 25
    s = score_sentence(swapped, fake_count, "relcheck")
    assert (s.count, s.reward, s.relation_count) == (25, -0.05, 0)
    COUNTS[("Sophia", "Loren", "Il", "Seduttore")] = 7
    s = score_sentence(swapped, fake_count, "relcheck")  # c < tau_2: one lookup, Eq. (2) as is
    assert (s.count, s.reward, s.lookups) == (7, 0.0, 1)


def test_first_skips_invalid_and_pairs_then_neutral():
    trips = [Triplet("It", "is", "big"), Triplet("Il Seduttore", "director"),
             Triplet("Mario Camerini", "directed", "Il Seduttore")]
    assert score_sentence(trips, fake_count, "first").count == 50
    assert score_sentence([], fake_count).reward == 0.0
    # the first valid triplet has < 2 content words: neutral, no fall-through to later ones
    s = score_sentence([Triplet("Kabul", "is", "kabul")] + trips, fake_count)
    assert (s.count, s.reward, s.lookups) == (None, 0.0, 0)
    with pytest.raises(ValueError, match="aggregation rule"):
        score_sentence(trips, fake_count, "max")


# ----------------------------------------------------------------------------- Eq. (4)

def test_token_returns_formula():
    r = token_returns(2.0, [-0.3, 0.1], [0, 1, 1, 0, 2, 2, 0], lambda_c=1.0)
    assert r == pytest.approx([2.0, 1.7, 1.7, 2.0, 2.1, 2.1, 2.0])
    r = token_returns(-1.0, [-0.3], [1, 0], lambda_c=0.5)
    assert r == pytest.approx([-1.15, -1.0])
    assert token_returns(1.0, [0.1], [0, 0], lambda_c=0.0) == [1.0, 1.0]
    with pytest.raises(ValueError, match="sentence 3"):
        token_returns(0.0, [0.1], [3])


def test_block_of():
    c = "<think> A b. </think> <answer> C d. </answer>"
    assert block_of(c, c.index("A")) == "think" and block_of(c, c.index("C")) == "answer"
    assert block_of("plain text", 0) == "none"


# ----------------------------------------------------------------------------- real index

@pytest.fixture(scope="module")
def world_scorer(tmp_path_factory):
    from factlab.corpus import CorpusIndex
    from factlab.data.miniworld import ensure_world

    paths = ensure_world()
    index = CorpusIndex.build(paths["corpus"], "smollm2-135m-instruct", tmp_path_factory.mktemp("w") / "ix",
                              progress=False)
    return CorVerScorer(HeuristicExtractor(), lambda w: index.cooccurrence(list(w), 1000), CorVerArgs())


def test_true_claim_outscores_swapped_claim_on_real_index(world_scorer):
    true, false = world_scorer.traces(["The capital of Afghanistan is Kabul.", "The capital of Afghanistan is Lima."])
    assert true[0].count > 0 and false[0].count == 0
    assert true[0].reward > false[0].reward == COUNT_REWARDS[0]


def test_traces_split_think_and_answer(world_scorer):
    comp = "<think>France borders Spain. Let me think.</think> <answer>The capital of France is Paris.</answer>"
    (tr,) = world_scorer.traces([comp])
    assert [t.block for t in tr] == ["think", "think", "answer"]
    assert tr[1].count is None and tr[1].reward == 0.0  # no triplet: neutral
    assert tr[0].triplet == ("France", "borders", "Spain") and tr[0].count > 0
    df = traces_frame([comp], [tr])
    assert list(df["sentence_no"]) == [1, 2, 3] and df["query"][0] == "France AND Spain"


def test_scorer_caches_extraction_and_lookups(world_scorer):
    n0 = world_scorer.lookups
    world_scorer.traces(["Peru borders Chile."] * 3)
    world_scorer.traces(["Peru borders Chile."])
    assert world_scorer.lookups - n0 == 1


def test_token_shaping_on_real_tokens(world_scorer, tokenizer):
    shaping = CorVerTokenShaping(world_scorer, tokenizer)
    good = "The capital of Afghanistan is Kabul. The capital of Afghanistan is Lima."
    ids = tokenizer(good, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    empty: list[int] = []
    (s, e) = shaping([good, ""], [ids, empty], [{}, {}])
    assert len(s.values) == len(ids) and s.values[-1] == 0.0  # EOS is not in a sentence
    assert s.stats["fallback"] == 0.0 and s.stats["alignment_rate"] == 1.0 and s.stats["n_sentences"] == 2
    first_kabul = ids.index(tokenizer(" Kabul", add_special_tokens=False)["input_ids"][0])
    last_lima = len(ids) - 3  # "...Lima", ".", EOS
    assert s.values[first_kabul] > s.values[last_lima] == pytest.approx(-0.3)
    assert e.values == [] and e.stats["fallback"] == 1.0  # nothing to align: falls back to R^r


def test_token_shaping_fallback_when_alignment_low(world_scorer, tokenizer):
    args = CorVerArgs(alignment_min=1.0)
    scorer = CorVerScorer(world_scorer.extractor, world_scorer._count_fn, args)
    shaping = CorVerTokenShaping(scorer, tokenizer)
    scorer.args = args.model_copy(update={"alignment_min": 1.01})  # impossible rate: every completion falls back
    ids = tokenizer("Peru borders Chile.", add_special_tokens=False)["input_ids"]
    (s,) = shaping(["Peru borders Chile."], [ids], [{}])
    assert s.values == [0.0] * len(ids) and s.stats["fallback"] == 1.0


def test_a3_scalar_is_mean_sentence_reward(world_scorer):
    a3 = CooccurrenceScalarReward(world_scorer)
    vals = a3(completions=["The capital of Afghanistan is Lima. Let me think.", "", "Peru borders Mongolia."])
    assert vals[0] == pytest.approx((-0.3 + 0.0) / 2) and vals[1] == 0.0 and vals[2] == pytest.approx(-0.3)


def test_ablation_reward_lists():
    from factlab.rewards import RewardSpec
    from factlab.recipes.corver import CorVerConfig, ablation_rewards

    full = CorVerConfig().rewards
    assert [s.name for s in full] == ["qa_judge", "format", "corver"]
    assert [(s.name, s.weight) for s in ablation_rewards(full, "full")] == [("qa_judge", 1.0), ("format", 1.0),
                                                                           ("corver", 1.0)]
    assert [s.name for s in ablation_rewards(full, "A1")] == ["qa_judge", "format"]
    assert [(s.name, s.weight) for s in ablation_rewards(full, "A2")][0] == ("qa_judge", 0.0)
    custom = [RewardSpec(name="qa_judge"), RewardSpec(name="corver", weight=0.5, args={"window": 64})]
    a3 = ablation_rewards(custom, "A3")[-1]
    assert (a3.name, a3.weight, a3.args["window"]) == ("corver_scalar", 0.5, 64)
    with pytest.raises(ValueError, match="unknown CorVer run"):
        ablation_rewards(full, "A9")


def test_registry_builds_each_ablation_on_shared_resources(world_scorer, tokenizer):
    from factlab.rewards import build_rewards
    from factlab.recipes.corver import CorVerConfig, ablation_rewards

    class Res:  # the two resources the corver rewards draw on
        def scorer(self, args):
            return world_scorer

        def policy_tokenizer(self):
            return tokenizer

    cfg = CorVerConfig()
    full = build_rewards(ablation_rewards(cfg.rewards, "full"), Res())
    assert [f.__name__ for f in full.funcs] == ["qa_judge", "format"] and full.weights == [1.0, 1.0]
    assert [n for n, _, _ in full.shaping] == ["corver"] and full.token_shaping() is not None
    assert full.by_name("corver").__name__ == "corver"  # a shaping hook carries its registry name too
    a1 = build_rewards(ablation_rewards(cfg.rewards, "A1"), Res())
    assert a1.token_shaping() is None and a1.weights == [1.0, 1.0]
    a2 = build_rewards(ablation_rewards(cfg.rewards, "A2"), Res())
    assert a2.weights == [0.0, 1.0] and a2.token_shaping() is not None
    a3 = build_rewards(ablation_rewards(cfg.rewards, "A3"), Res())
    assert a3.token_shaping() is None and [f.__name__ for f in a3.funcs] == ["qa_judge", "format", "corver_scalar"]
    # the composed shaping scales the sentence rewards by the reward's weight (lambda_c)
    half = build_rewards([*ablation_rewards(cfg.rewards, "A1"),
                          ablation_rewards(cfg.rewards, "full")[-1].model_copy(update={"weight": 0.5})], Res())
    text = "The capital of Afghanistan is Lima."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    (once,) = full.token_shaping()([text], [ids], [{}])
    (scaled,) = half.token_shaping()([text], [ids], [{}])
    assert min(once.values) == pytest.approx(-0.3) and scaled.values == pytest.approx([0.5 * v for v in once.values])
