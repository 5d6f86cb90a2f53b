"""KLCF's full params and code against 004_4f2ca2d982459bb2.txt where issue 26 found them apart
(items 6-9): the truthfulness RM (App. D.1, Table 13: the policy's own base model, the pipeline's
claims only, R_truth's claims by KLCF's Prompt 2), Prompt 7 with the whole fact list (§2.3.1,
App. E.2), Stage 1's few-shot context from the configured corpus (§2.2, Prompt 1), the base model
10-shot (App. C.3), the win-rate judge on answer parts (App. C.4.2, Prompt 8), Table 9's retrieval
and temperature, Table 8's weight decay and betas, and the checklist verifier's own model (App. D.1).
Constructed inputs through the public functions; the params as loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factlab import config
from factlab import prompts as P
from factlab.data.longform import LongformPrompt
from factlab.experiment import TrainingConfig
from factlab.rewards import Resources, RewardSpec, build_rewards
from factlab.rewards.klcf import KLCFFactArgs
from factlab.synth import klcf as K
from factlab.synth import klcf_labels as KL
from factlab.synth import klcf_sampling as KS
from factlab.synth import klcf_truth_data as KT
from factlab.recipes import klcf

ROOT = Path(__file__).resolve().parents[2]
THINK = "<think>Recalling what I know about France and its capital city.</think>"


@pytest.fixture(scope="module")
def full():
    return config.load_config(ROOT / "params/05_klcf.yaml", klcf.KLCFConfig)


@pytest.fixture(scope="module")
def smoke():
    return config.load_config(ROOT / "params/05_klcf_lm.yaml", klcf.KLCFConfig)


def _fact_args(cfg) -> dict:
    return next(s.args for s in cfg.rewards if s.name == "klcf_fact")


class ScriptedJudge:
    """Records every prompt; answers by ``rule``."""

    def __init__(self, rule):
        self.rule, self.prompts, self.calls = rule, [], []

    def judge(self, prompts, prefix=None):
        self.calls.append(len(prompts))
        self.prompts += list(prompts)
        return [self.rule(p) for p in prompts]

    def choose(self, prompts, options, prefix=None):
        return self.judge(prompts)

    def summary(self):
        return {"calls": sum(self.calls)}


class _Res(Resources):
    """The run's resources with a scripted judge; ``judge_for`` records the sections asked for."""

    def __init__(self, judge, cfg=None):
        super().__init__(cfg or TrainingConfig())
        self.scripted, self.sections = judge, []

    def judge(self, max_new_tokens=None):
        return self.scripted

    def judge_for(self, section, max_new_tokens=None):
        self.sections.append(section)
        return self.scripted if section is None else ("judge of", section.model)


# ---------------------------------------------------------------- item 6: the truthfulness RM


def test_full_params_train_the_truth_rm_on_the_policys_own_base_model(full, smoke):
    """App. D.1 / Table 13: "SFT on pre-trained models of these three sizes": Qwen2.5-7B for the
    7B policy, not Qwen2.5-14B-Instruct; on the pipeline's claims only."""
    assert full.model.name == "Qwen/Qwen2.5-7B"
    assert full.truth_rm.model in (None, full.model.name)
    assert klcf.truth_rm_model(full) == "Qwen/Qwen2.5-7B"
    assert full.truth_rm.data == "pipeline" and full.truth_rm.method == "sft"
    assert smoke.truth_rm.data == "miniworld+pipeline"  # the smoke keeps the mix, explicitly
    named = klcf.KLCFConfig(model={"name": "Qwen/Qwen2.5-14B"}, truth_rm={"model": "my/rm"})
    assert klcf.truth_rm_model(named) == "my/rm"


class NoWorld:
    """Resources whose mini-world must not be read."""

    def world(self):
        raise AssertionError("the pipeline-only truthfulness data read the mini-world")


def _labels():
    """Stage 3 labels of 12 queries: q0-q11, each with 8 SUPPORT claims, one REFUTE, one NEI."""
    labels, query_of = {}, {}
    for q in range(12):
        for j in range(8):
            labels[f"Fact {j} of topic {q} is true."] = KL.SUPPORT
            query_of[f"Fact {j} of topic {q} is true."] = f"q{q}"
        labels[f"Topic {q} was founded on Mars."] = KL.REFUTE
        query_of[f"Topic {q} was founded on Mars."] = f"q{q}"
        labels[f"Topic {q} is unclear."] = KL.NEI
        query_of[f"Topic {q} is unclear."] = f"q{q}"
    labels["Unread claim."] = None
    return labels, query_of


def test_pipeline_truth_data_uses_the_pipelines_claims_only_and_holds_out_whole_queries(full):
    labels, query_of = _labels()
    train, held, rep = KT.pipeline_truth_data(labels, query_of, heldout_size=4, seed=0)
    assert {r["source"] for r in train + held} == {"pipeline"}
    assert {r["claim"] for r in train + held} <= {c for c, v in labels.items() if v in (KL.SUPPORT, KL.REFUTE)}
    # held out 1 : 1 (Table 13), whole queries: no training row comes from a held-out query
    assert rep["heldout"] == len(held) == 4 and sum(r["label"] for r in held) == 2 == rep["heldout_true"]
    held_q = {query_of[r["claim"]] for r in held}
    assert held_q and not held_q & {query_of[r["claim"]] for r in train}
    # Eq. 4 on the rest: negatives x 3, positives down-sampled to 2 : 1
    false = [r for r in train if not r["label"]]
    assert rep["train_true"] == 2 * rep["train_false"] == 2 * len(false)
    assert len(false) == 3 * (12 - rep["heldout_queries"])
    assert (rep["pipeline_support"], rep["pipeline_refute"]) == (96, 12)
    # through the run's config: the full params' data never touches the mini-world
    cfg = full.model_copy(update={"pipeline": full.pipeline.model_copy(update={"heldout_size": 4})})
    train2, held2, rep2 = klcf.truth_data(cfg, NoWorld(), labels, query_of)
    assert rep2["source"] == "pipeline" and (train2, held2) == (train, held)


def test_miniworld_truth_data_needs_the_miniworld_queries():
    """A rule of two keys, checked when params load: the mini-world mix with your own queries."""
    with pytest.raises(config.ConfigError, match=r"'truth_rm.data': 'miniworld\+pipeline' mixes"):
        config.validate({"truth_rm": {"data": "miniworld+pipeline"}, "queries": {"path": "q.jsonl"}}, klcf.KLCFConfig)
    config.validate({"truth_rm": {"data": "pipeline"}, "queries": {"path": "q.jsonl"}}, klcf.KLCFConfig)


def test_r_truth_extracts_claims_with_klcfs_prompt_2():
    """§2.3.1 / App. C.1: R_truth's claims come from the extraction model "along with Prompt 2";
    the Figure 8 prompt of 001 stays an option."""
    judge = ScriptedJudge(lambda p: "* Paris is the capital of France.\n* France is in Europe.")
    res = _Res(judge)
    rs = build_rewards([RewardSpec(name="klcf_truth", args={"rm_device": "cpu"})], res)
    extractor = rs.funcs[0].truth.extractor
    assert extractor.extract(["q", "q"], ["Paris is the capital of France. It is in Europe.", " "]) == [
        ["Paris is the capital of France.", "France is in Europe."], []]
    (prompt,) = judge.prompts  # the empty answer is not asked
    assert prompt == P.KLCF_CLAIM_EXTRACTION.format(response="Paris is the capital of France. It is in Europe.")
    assert P.CLAIM_EXTRACTION_PROMPT.split("\n")[0] not in prompt
    judge.prompts.clear()
    figure8 = build_rewards([RewardSpec(name="klcf_truth", args={"rm_device": "cpu",
                                                                "extraction_prompt": "rar_figure8"})], res)
    figure8.funcs[0].truth.extractor.extract(["q"], ["Paris."])
    assert judge.prompts[0].startswith(P.CLAIM_EXTRACTION_PROMPT.split("\n")[0])


# ---------------------------------------------------------------- item 7: Prompt 7 with the whole list


def test_full_params_verify_the_whole_fact_list_in_one_call(full):
    args = _fact_args(full)
    assert args["unit"] == "list"
    judge = ScriptedJudge(lambda p: '[{"conclusion": "Consistent"}, {"conclusion": "Missing"}, '
                                    '{"conclusion": "Contradictory"}]')
    parsed = KLCFFactArgs.model_validate({**args, "verifier_judge": None, "extractor_judge": None})
    verifier = klcf.checklist_verifier(parsed, _Res(judge))
    facts = ["France's capital is Paris.", "France is in Asia.", "France's river is the Loire."]
    labels = verifier.labels(["q1", "q2"], ["Paris.", "Lyon."], [facts, facts])
    assert judge.calls == [2]  # one prompt per reply, every fact in it (Prompt 7's [Fact List])
    assert all(all(f in p for f in facts) for p in judge.prompts)
    assert labels == [["Consistent", "Missing", "Contradictory"]] * 2
    assert KLCFFactArgs().unit == "item"  # still an option (and the default for small judges)


# ---------------------------------------------------------------- item 8: Stage 1's few-shot context


def _corpus(tmp_path) -> Path:
    path = tmp_path / "wiki.jsonl"
    docs = [{"id": f"d{i}", "title": t, "text": f"{t} is the subject of article {i}. It has a long history."}
            for i, t in enumerate(["Marie Curie", "Photosynthesis", "The Nile", "Mount Everest", "Ada Lovelace"])]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


class _PipelineRes:
    """What ``synth.klcf.from_resources`` reads of a run: config, mini-world, judge."""

    def __init__(self, cfg):
        self.cfg = cfg

    def world(self):
        from factlab.data.miniworld import ensure_world

        return ensure_world(self.cfg.world)

    def judge(self, max_new_tokens=None):
        return None

    def datastore(self, kind="rar"):
        return None

    def scorer(self, **_):
        return None


def test_stage1_few_shot_examples_come_from_the_configured_corpus(tmp_path, full):
    corpus = _corpus(tmp_path)
    cfg = klcf.KLCFConfig(datastore={"corpus": str(corpus)}, queries={"path": "q.jsonl"},
                          pipeline={"few_shot": 3, "verify": "judge"})
    queries = [{"id": "a", "prompt": "Who was Marie Curie?"}, {"id": "b", "prompt": "Describe the Nile."}]
    pipe = K.from_resources(cfg.pipeline, _PipelineRes(cfg), tmp_path / "p", model=object(), tokenizer=object(),
                            queries=queries)
    titles = {q.removeprefix("Tell me about ").rstrip(".") for q, _ in pipe.examples}
    # three of the corpus's documents, none about a query (Marie Curie, The Nile are named by them)
    assert titles == {"Photosynthesis", "Mount Everest", "Ada Lovelace"}
    assert all(a.startswith(t) for t, (_, a) in zip(sorted(titles), sorted(pipe.examples, key=lambda e: e[0])))
    prompt = KS.fewshot_prompt("Who was Marie Curie?", pipe.examples)
    assert prompt.startswith(P.KLCF_FEWSHOT_HEADER) and prompt.count("[Question]:") == 4
    # the full params read their examples from the configured corpus too (no mini-world source)
    assert full.pipeline.few_shot_source == "corpus" and full.pipeline.few_shot == 10
    # your own examples, in a file
    own = tmp_path / "shots.jsonl"
    own.write_text(json.dumps({"question": "What is DNA?", "answer": "DNA carries genes."}) + "\n")
    section = K.KLCFPipelineSection(few_shot=1, few_shot_source="file", few_shot_path=str(own))
    assert K.fewshot_examples(section, corpus) == [("What is DNA?", "DNA carries genes.")]
    with pytest.raises(config.ConfigError, match="few_shot_path"):
        config.validate({"few_shot_source": "file"}, K.KLCFPipelineSection)


def test_corpus_few_shot_reads_only_its_pool(tmp_path):
    path = tmp_path / "big.jsonl"
    with path.open("w") as fh:
        for i in range(50):
            fh.write(json.dumps({"id": str(i), "title": f"Topic {i}", "text": f"Text {i}."}) + "\n")
        fh.write("not json: the scan must stop before this line\n")
    shots = KS.corpus_fewshot(path, 4, pool=10, seed=1)
    assert len(shots) == 4 and all(int(q.split()[-1].rstrip(".")) < 10 for q, _ in shots)


# ---------------------------------------------------------------- item 9: baselines and evaluation


def test_base_model_is_evaluated_10_shot_with_prompt_1(full, smoke, monkeypatch, tmp_path):
    """App. C.3: "the pretrained Qwen2.5 models ... evaluated in a 10-shot setting"."""
    assert full.base_few_shot == 10 and smoke.base_few_shot >= 1
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"Topic {i}", "text": f"Topic {i} is old."}) + "\n"
                              for i in range(30)))
    cfg = klcf.KLCFConfig(datastore={"corpus": str(corpus)}, queries={"path": "q.jsonl"})
    seen = {}

    def fake_evaluate(suite, model, tokenizer, prompts, generation, **kw):
        seen.update(kw)
        return "result"

    monkeypatch.setattr(klcf, "evaluate", fake_evaluate)
    res = type("R", (), {"cfg": cfg, "claim_verifier": lambda self: "verifier",
                         "world": lambda self: {"corpus": corpus}})()
    held = [LongformPrompt("h1", "Tell me about Topic 3.")]
    assert klcf.longform_eval(cfg, res, None, None, held, "base", base=True) == "result"
    rendered = seen["render"](held[0])
    assert rendered.startswith(P.KLCF_FEWSHOT_HEADER) and rendered.endswith("[Question]: Tell me about Topic 3.\n"
                                                                              "[Answer]:")
    assert rendered.count("[Question]:") == 11 and "Topic 3 is old" not in rendered  # 10 examples + the query
    assert "system" not in seen  # raw text, no Prompt 5
    assert seen["cut"]("Topic 3 is old.\n\n[Question]: next") == "Topic 3 is old."
    seen.clear()
    klcf.longform_eval(cfg, res, None, None, held, "KLCF")  # a trained policy: Prompt 5 (raw, as printed)
    assert seen["render"](held[0]).endswith("User: Tell me about Topic 3. Assistant: <think>")
    assert seen["cut"]("plan</think><answer>x</answer>") == "<think>plan</think><answer>x</answer>"
    chat = cfg.model_copy(update={"prompt_form": "chat"})
    seen.clear()
    klcf.longform_eval(chat, res, None, None, held, "KLCF")  # Prompt 5 as a system turn
    assert seen["system"] == P.KLCF_SYSTEM and "render" not in seen
    seen.clear()
    klcf.longform_eval(chat.model_copy(update={"base_few_shot": 0}), res, None, None, held, "base", base=True)
    assert seen["system"] == P.KLCF_SYSTEM and "render" not in seen


def test_win_rate_judge_reads_the_answer_parts_without_think(full):
    """Prompt 8 ranks the responses; App. C.4.2 compares answers (the base's 10-shot responses
    have no <think>): the judge never sees the trained policy's reasoning block."""
    assert full.winrate.response == "answer" and full.winrate.judge.model == "gpt-4.1"  # App. C.4.2
    judge = ScriptedJudge(lambda p: "[{'model': 'model_1', 'rank': 1}, {'model': 'model_2', 'rank': 2}]")
    trained = ["<think>SECRET chain of thought about the question.</think> <answer>Paris is the capital.</answer>",
               "<think>SECRET again</think> no answer tag, the rest is the answer"]
    out = klcf.win_rate(full, [LongformPrompt("1", "q1"), LongformPrompt("2", "q2")], ["Base one.", "Base two."],
                        trained, judge=judge)
    assert len(judge.prompts) == 4 and not any("SECRET" in p or "<think>" in p for p in judge.prompts)
    assert "Paris is the capital." in judge.prompts[0] and "no answer tag" in judge.prompts[2]
    assert out["n"] == 2 and out["response"] == "answer"
    judge.prompts.clear()
    whole = full.model_copy(update={"winrate": full.winrate.model_copy(update={"response": "full"})})
    klcf.win_rate(whole, [LongformPrompt("1", "q1")], ["Base."], trained[:1], judge=judge)
    assert "SECRET" in judge.prompts[0]


def test_full_params_follow_table_9_retrieval_and_temperature(full):
    """App. C.4.1, Table 9: top_k=10, chunk_size=300, chunk_overlap=20; claim extraction and
    verification at temperature 0.1 with max_tokens 8192."""
    d = full.datastore
    assert (d.chunk_tokens, d.veriscore_chunk_tokens, d.overlap) == (300, 300, 20)
    assert full.verifier.top_k == 10 and full.pipeline.top_k == 10
    assert full.judge.temperature == 0.1 and full.judge.max_new_tokens == 8192
    assert full.verifier.max_new_tokens == 8192


def test_full_params_follow_table_8_weight_decay_and_betas(full, tmp_path):
    """Table 8: RL weight_decay=0.1; the SFT rows (the truthfulness RM "same as above"): betas
    (0.9, 0.95), clip_grad 1.0, weight_decay 0.01, lr 1e-5, 3 epochs, max_length 4096; the values
    reach TRL's configs."""
    from factlab.train.grpo import grpo_args
    from factlab.train.sft import sft_args

    grpo = grpo_args(full.grpo.model_copy(update={"use_vllm": False, "bf16": False}), tmp_path / "g")
    assert grpo.weight_decay == 0.1 and grpo.learning_rate == 1e-6 and grpo.beta == 0.0
    sft = sft_args(full.truth_rm.sft.model_copy(update={"bf16": False}), tmp_path / "s")
    assert (sft.adam_beta1, sft.adam_beta2, sft.max_grad_norm, sft.weight_decay) == (0.9, 0.95, 1.0, 0.01)
    assert (sft.learning_rate, sft.num_train_epochs, sft.max_length) == (1e-5, 3, 4096)


def test_full_params_checklist_verifier_is_the_papers_14b_sft(full):
    """App. D.1: the Checklist Verifier is an SFT of Qwen2.5-14B-Instruct, its own model, not the
    72B pipeline judge; R_truth's extractor likewise. The reward builds its verifier on the judge
    its args name (``Resources.judge_for``)."""
    args = KLCFFactArgs.model_validate(_fact_args(full))
    assert args.verifier_judge.model == "klcf-checklist-verifier-14b" != full.judge.model
    assert args.extractor_judge.model == "klcf-claim-extractor-14b"
    assert args.verifier_judge.base_url != full.judge.base_url
    res = _Res(ScriptedJudge(lambda p: ""))
    assert klcf.checklist_verifier(args, res).judge == ("judge of", "klcf-checklist-verifier-14b")
    truth = klcf.claim_truth(args.model_copy(update={"rm_device": "cpu"}), res)
    assert truth.extractor.judge == ("judge of", "klcf-claim-extractor-14b")
    # unset: the run's judge, as before
    assert klcf.checklist_verifier(KLCFFactArgs(), res).judge is res.scripted


def test_resources_build_a_named_judge_once_and_honour_uncached_views(monkeypatch):
    from factlab.rewards import resources as R
    from factlab.sections import JudgeSection

    built = []
    monkeypatch.setattr(R, "make_judge", lambda section, **kw: built.append((section.model, kw)) or object())
    res = Resources(TrainingConfig())
    section = JudgeSection(model="verifier-14b")
    a, b = res.judge_for(section), res.judge_for(section)
    assert a is b and built == [("verifier-14b", {})]
    res.uncached_judges().judge_for(section)
    assert built[-1] == ("verifier-14b", {"cache": False})


def test_prompt5_raw_form_as_printed_for_the_full_params_and_chat_for_the_smoke(full, smoke):
    """004 App. E.2 prints Prompt 5 as one raw string ending "User: {prompt} Assistant: <think>"
    (RL-zero from a base model). The full params use it; the smoke's chat models get the same
    text as a system turn with no prefill. Under the raw form the completion continues the
    prompt's ``<think>``, which the trainer puts back before the rewards read the response."""
    assert full.prompt_form == "raw" and smoke.prompt_form == "chat"
    query = LongformPrompt(id="q1", prompt="Tell me about France.")
    rows = klcf.klcf_rows([query], {"q1": ["France's capital is Paris."]}, full.system_prompt, full.prompt_form)
    prompt = rows[0]["prompt"]
    assert isinstance(prompt, str) and prompt.startswith("A conversation between User and Assistant.")
    assert prompt.endswith("</answer>. User: Tell me about France. Assistant: <think>")
    assert rows[0]["completion_prefix"] == "<think>"
    chat = klcf.klcf_rows([query], {"q1": ["x"]}, smoke.system_prompt, smoke.prompt_form)[0]
    assert chat["prompt"][0] == {"role": "system", "content": P.KLCF_SYSTEM} and "completion_prefix" not in chat
    # the seam scores the whole response: a raw completion is valid only with the prefill back
    from factlab.rewards.klcf import format_reward
    from factlab.train.trl_seam import prefixed_completions

    completion = "Recalling what I know about France and its capital.</think><answer>Paris is its capital.</answer>"
    assert format_reward(completion) == -1.0
    fixed = prefixed_completions(rows, [completion])
    assert fixed == ["<think>" + completion] and format_reward(fixed[0]) == 0.0
    assert prefixed_completions([chat], [completion]) == [completion]
    assert klcf.policy_response(completion, "raw") == fixed[0] and klcf.policy_response(completion, "chat") == completion
    with pytest.raises(ValueError, match="prompt form"):
        klcf.policy_prompt("q", form="neither")
