"""Rules that involve several params keys, or a value only wrong in context, fail when the params
load: ``factlab check`` exits 2 naming the key path, before any kernel or model starts (issue 17,
"Fail at load, not an hour in"). One case per rule; each starts from a notebook's valid smoke file
and breaks one thing."""

from pathlib import Path

import pytest

from factlab.cli import main
from factlab.config import ConfigError, validate
from factlab.rewards.corver import CorVerArgs
from factlab.rewards.resources import Resources
from factlab.synth.klcf import KLCFPipelineSection

ROOT = Path(__file__).resolve().parents[1]

RULES = [
    # (notebook, YAML overriding its smoke params, key path the error must name, words of the message)
    pytest.param("01_corver", "grpo: {per_device_train_batch_size: 3, gradient_accumulation_steps: 1, num_generations: 4}",
                 "grpo.per_device_train_batch_size", "not a multiple of num_generations = 4", id="batch-x-accum-vs-G"),
    pytest.param("01_corver", "rewards:\n  - {name: qa_judge}\n  - {name: format}\n"
                              "  - {name: corver, args: {count_thresholds: [20, 5]}}",
                 "rewards.2.args.count_thresholds", "0 < tau_1 < tau_2", id="count-thresholds-decreasing"),
    pytest.param("02_binary_rar", "judge: {backend: openai, base_url: null}",
                 "judge.base_url", "the openai backend needs base_url", id="openai-judge-without-base-url"),
    pytest.param("03_seva", "teacher: {judge: {backend: openai, base_url: null}}",
                 "teacher.judge.base_url", "the openai backend needs base_url", id="nested-openai-judge"),
    pytest.param("00_quickstart", "eval: [{name: trivia_qa}]",
                 "eval.0.name", "unknown QA set 'trivia_qa'; known: miniworld, triviaqa", id="unknown-benchmark"),
    pytest.param("03_seva", "rewards:\n  - {name: seva_process, args: {weights: '75/25'}}",
                 "rewards.0.args.weights", "unknown weight split '75/25'", id="unknown-seva-weight-split"),
    pytest.param("02_binary_rar", "datastore: {chunk_tokens: 64, veriscore_chunk_tokens: 64, overlap: 64}",
                 "datastore.overlap", "overlap must be smaller than every chunk size", id="overlap-not-below-chunk"),
    pytest.param("01_corver", "self_filter: {num_samples: 1}",
                 "self_filter.num_samples", "greater than or equal to 2", id="self-filter-one-sample"),
    pytest.param("01_corver", "grpo: {optim: adamw_torchh}",
                 "grpo.optim", "unknown optimizer 'adamw_torchh'; known: adamw_torch", id="unknown-optimizer"),
    pytest.param("01_corver", "grpo: {lr_scheduler_type: cosin}",
                 "grpo.lr_scheduler_type", "unknown scheduler 'cosin'; known: linear, cosine", id="unknown-scheduler"),
    pytest.param("03_seva", "sft: {lr_scheduler_type: cosin}",
                 "sft.lr_scheduler_type", "unknown scheduler 'cosin'", id="unknown-sft-scheduler"),
    pytest.param("03_seva", "sft: {extra: {optim: sgdd}}",
                 "sft.extra.optim", "unknown optimizer 'sgdd'", id="unknown-sft-optimizer"),
    pytest.param("03_seva", "sft: {max_steps: -7}",
                 "sft.max_steps", "must be a positive number of steps, or -1", id="sft-negative-steps"),
    pytest.param("01_corver", "grpo: {loss_type: grp0}",
                 "grpo.loss_type", "'grpo', 'dr_grpo', 'dapo'", id="unknown-loss-type"),
    pytest.param("01_corver", "grpo: {extra: {num_iteration: 2}}",
                 "grpo.extra.num_iteration", "not a field of TRL's GRPOConfig", id="unknown-grpo-extra-field"),
    pytest.param("01_corver", "grpo: {use_vllm: true, vllm_mode: server}",
                 "grpo.vllm_server_host", "vllm_mode: server needs where `trl vllm-serve` runs", id="vllm-server-nowhere"),
    pytest.param("01_corver", "grpo: {vllm_server_base_url: 'gen-node:8000'}",
                 "grpo.vllm_server_base_url", "must be an http:// or https:// URL", id="vllm-base-url-no-scheme"),
    pytest.param("01_corver", "grpo: {vllm_server_base_url: 'http://gen:8000', vllm_server_host: gen}",
                 "grpo.vllm_server_base_url", "not both", id="vllm-base-url-and-host"),
]


@pytest.mark.parametrize("notebook, body, key, words", RULES)
def test_rule_fails_at_check_naming_the_key(tmp_path, capsys, notebook, body, key, words):
    params = tmp_path / "bad.yaml"
    params.write_text(f"base: {ROOT / 'params' / f'{notebook}_smoke.yaml'}\n{body}\n", encoding="utf-8")
    assert main(["check", notebook, "--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert f"'{key}': " in err and words in err, err
    assert str(params) in err  # and the file


def test_klcf_count_limit_below_tau_2(tmp_path):
    """The co-occurrence verifier's scorer must count up to CorVer's tau_2 (Eq. 2)."""
    with pytest.raises(ConfigError, match=r"'count_limit': 10 is below CorVer's tau_2 = 20"):
        validate({"verify": "cooccurrence", "count_limit": 10}, KLCFPipelineSection, "klcf")
    assert validate({"verify": "judge", "count_limit": 10}, KLCFPipelineSection).count_limit == 10


class _Index:
    """Records the limit the scorer counts with."""

    def __init__(self):
        self.limits = []

    def cooccurrence(self, words, window, limit=None):
        self.limits.append(limit)
        return 7


def test_corver_scorer_counts_up_to_the_params_tau_2(tmp_path):
    """``count_thresholds: [5, 30]`` is valid, so the reward built from it must not fail later
    on the scorer's default count limit: the scorer counts up to tau_2 = 30."""
    index = _Index()
    resources = Resources(cfg=None)
    resources.index = lambda: index
    resources.extractor = lambda: None
    resources.scorer(CorVerArgs(count_thresholds=(5, 30))).count(["France", "Paris"])
    resources.scorer(CorVerArgs(), count_limit=None).count(["France", "Paris"])
    assert index.limits == [30, None]
