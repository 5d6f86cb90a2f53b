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
    # issue 30: inputs that passed `factlab check`
    pytest.param("01_corver", "grpo: {extra: {learning_rate: -5, beta: -1}}",
                 "grpo.extra.beta", "grpo.beta is a validated setting of its own", id="extra-shadows-beta"),
    pytest.param("01_corver", "grpo: {extra: {learning_rate: -5}}",
                 "grpo.extra.learning_rate", "set it there, not in grpo.extra", id="extra-shadows-learning-rate"),
    pytest.param("01_corver", "grpo: {extra: {warmup_steps: 100}}",
                 "grpo.extra.warmup_steps", "grpo.warmup_ratio is a validated setting", id="extra-shadows-warmup"),
    pytest.param("01_corver", "grpo: {extra: {output_dir: /tmp/elsewhere}}",
                 "grpo.extra.output_dir", "factlab sets output_dir itself", id="extra-output-dir"),
    pytest.param("01_corver", "grpo: {extra: {reward_weights: [9.0, 0.0]}}",
                 "grpo.extra.reward_weights", "factlab sets reward_weights itself", id="extra-reward-weights"),
    pytest.param("01_corver", "grpo: {extra: {save_strategy: 'no'}}",
                 "grpo.extra.save_strategy", "factlab sets save_strategy itself", id="extra-save-strategy"),
    pytest.param("03_seva", "sft: {extra: {output_dir: /tmp/elsewhere}}",
                 "sft.extra.output_dir", "factlab sets output_dir itself", id="sft-extra-output-dir"),
    # issue 43 round-3b probe: accepted at load, failed when training started (or broke the resume)
    pytest.param("01_corver", "grpo: {extra: {deepspeed: /etc/passwd}}",
                 "grpo.extra.deepspeed", "factlab sets deepspeed itself (factlab train --accelerate-config", id="extra-deepspeed"),
    pytest.param("01_corver", "grpo: {extra: {eval_strategy: steps}}",
                 "grpo.extra.eval_strategy", "its trainers get no eval dataset", id="extra-eval-strategy"),
    pytest.param("01_corver", "grpo: {extra: {ddp_backend: gloo}}",
                 "grpo.extra.ddp_backend", "factlab sets ddp_backend itself", id="extra-ddp-backend"),
    pytest.param("01_corver", "grpo: {extra: {local_rank: 3}}",
                 "grpo.extra.local_rank", "factlab sets local_rank itself", id="extra-local-rank"),
    pytest.param("01_corver", "grpo: {extra: {load_best_model_at_end: true}}",
                 "grpo.extra.load_best_model_at_end", "factlab sets load_best_model_at_end itself", id="extra-load-best"),
    pytest.param("03_seva", "sft: {extra: {save_only_model: true}}",
                 "sft.extra.save_only_model", "factlab sets save_only_model itself", id="sft-extra-save-only-model"),
    pytest.param("01_corver", "grpo: {extra: {push_to_hub: true, hub_model_id: someone/model}}",
                 "grpo.extra.hub_model_id", "uploads to the Hugging Face Hub", id="extra-push-to-hub"),
    pytest.param("03_seva", "sft: {extra: {push_to_hub: true}}",
                 "sft.extra.push_to_hub", "unless sft.allow_hub_upload: true", id="sft-extra-push-to-hub"),
    pytest.param("01_corver", "grpo: {report_to: none, extra: {trackio_space_id: someone/dashboard}}",
                 "grpo.extra.trackio_space_id", "unless grpo.allow_hub_upload: true", id="extra-trackio-space"),
    pytest.param("03_seva", "sft: {extra: {trackio_bucket_id: someone/bucket}}",
                 "sft.extra.trackio_bucket_id", "uploads to the Hugging Face Hub", id="sft-extra-trackio-bucket"),
    pytest.param("01_corver", "grpo: {extra: {dataloader_num_workers: 100000}}",  # round 3c: forked at training
                 "grpo.extra.dataloader_num_workers", "a whole number from 0 to 256", id="extra-dataloader-workers"),
    pytest.param("03_seva", "sft: {extra: {dataloader_num_workers: -1}}",
                 "sft.extra.dataloader_num_workers", "a whole number from 0 to 256", id="sft-extra-dataloader-workers"),
    pytest.param("01_corver", "grpo: {extra: {data_seed: 99999999999999999}}",
                 "grpo.extra.data_seed", "a seed is a whole number from 0", id="extra-data-seed"),
    pytest.param("01_corver", "evidence: {hypothesis: corver, arms: [{name: full, rewards: [{name: format}]},\n"
                              "                                     {name: A1, rewards: [{name: format}]}],\n"
                              "           grpo: {extra: {push_to_hub: true}}}",
                 "evidence.grpo", "push_to_hub uploads to the Hugging Face Hub", id="evidence-extra-push-to-hub"),
    pytest.param("01_corver", "grpo: {seed: 100000000000000000000000000}",
                 "grpo.seed", "a seed is a whole number from 0 to 4,294,967,295", id="seed-10e26"),
    pytest.param("00_quickstart", "eval_generation: {seed: -1}",
                 "eval_generation.seed", "a seed is a whole number from 0", id="seed-negative"),
    pytest.param("01_corver", "evidence: {hypothesis: corver, seeds: [0, 1, -2],\n"
                              "           arms: [{name: full, rewards: [{name: format}]}, {name: A1, rewards: [{name: format}]}]}",
                 "evidence.seeds", "a seed is a whole number from 0", id="evidence-seed-negative"),
    pytest.param("00_quickstart", "model: {device: 'cuda:99'}", "model.device", "more than 16 GPUs", id="cuda-99"),
    pytest.param("00_quickstart", "model: {device: 'gpu'}", "model.device", "device must be auto, cpu", id="device-gpu"),
    pytest.param("02_binary_rar", "judge: {device: 'cuda:x'}", "judge.device", "device must be auto", id="judge-device"),
    pytest.param("00_quickstart", f"model: {{name: '{ROOT / 'params'}'}}", "model.name",
                 "is a folder without config.json: not a model folder", id="model-not-a-model-folder"),
    pytest.param("00_quickstart", f"model: {{adapter: '{ROOT / 'params'}'}}", "model.adapter",
                 "without adapter_config.json: not a PEFT adapter folder", id="adapter-not-an-adapter-folder"),
    # issue 43 round-3b probe: a device or a file passed and failed when the model loaded
    pytest.param("00_quickstart", "model: {name: /dev/zero}", "model.name",
                 "/dev/zero is a file, not a model folder", id="model-dev-zero"),
    pytest.param("00_quickstart", f"model: {{adapter: '{ROOT / 'README.md'}'}}", "model.adapter",
                 "README.md is a file, not a PEFT adapter folder", id="adapter-a-file"),
    pytest.param("02_binary_rar", "judge: {model: /dev/null}", "judge.model",
                 "/dev/null is a file, not a model folder", id="judge-model-dev-null"),
    pytest.param("01_corver", "grpo: {vllm_server_host: 10.0.0.300}", "grpo.vllm_server_host",
                 "is not an IP address or a host name", id="vllm-host-bad-ip"),
    pytest.param("01_corver", "grpo: {vllm_server_port: 70000}", "grpo.vllm_server_port",
                 "less than or equal to 65535", id="vllm-port-70000"),
    pytest.param("03_seva", "sft: {extra: {learning_rate: 1.0}}",
                 "sft.extra.learning_rate", "sft.learning_rate is a validated setting", id="sft-extra-shadows"),
    pytest.param("01_corver", "rewards:\n  - {name: qa_judge, weight: .nan}\n  - {name: format}",
                 "rewards.0.weight", "finite number", id="reward-weight-nan"),
    pytest.param("01_corver", "rewards:\n  - {name: qa_judge, weight: .inf}\n  - {name: format}",
                 "rewards.0.weight", "finite number", id="reward-weight-inf"),
    pytest.param("01_corver", "rewards:\n  - {name: qa_judge}\n  - {name: format, weight: -.inf}",
                 "rewards.1.weight", "finite number", id="reward-weight-minus-inf"),
    pytest.param("01_corver", "grpo: {learning_rate: .inf}", "grpo.learning_rate", "finite number", id="lr-inf"),
    pytest.param("01_corver", "grpo: {temperature: .inf}", "grpo.temperature", "finite number", id="temperature-inf"),
    pytest.param("00_quickstart", "eval_generation: {temperature: .inf}",
                 "eval_generation.temperature", "finite number", id="eval-temperature-inf"),
    pytest.param("00_quickstart", "eval_generation: {max_new_tokens: 1.0e+12}",
                 "eval_generation.max_new_tokens", "less than or equal to 1048576", id="max-new-tokens-1e12"),
    pytest.param("02_binary_rar", "judge: {max_new_tokens: 1.0e+12}",
                 "judge.max_new_tokens", "less than or equal to 1048576", id="judge-max-new-tokens-1e12"),
    pytest.param("00_quickstart", "eval_generation: {max_new_tokens: true}",
                 "eval_generation.max_new_tokens", "expected a number, got the boolean true", id="max-new-tokens-true"),
    pytest.param("01_corver", "grpo: {learning_rate: false}",
                 "grpo.learning_rate", "expected a number, got the boolean false", id="learning-rate-false"),
    pytest.param("05_klcf", "grpo: {max_completion_length: 32}",
                 "rewards.1.args.max_len", "48 is above grpo.max_completion_length = 32", id="klcf-length-penalty-max-len"),
    pytest.param("04_k2v", "grpo: {max_completion_length: 32}",
                 "rewards.1.args.max_len", "40 is above grpo.max_completion_length = 32", id="k2v-overlong-max-len"),
    pytest.param("05_klcf", "rewards:\n  - {name: klcf_truth, args: {rm_model: /nonexistent/truth_rm}}",
                 "rewards.0.args.rm_model", "/nonexistent/truth_rm does not exist", id="rm-model-missing-folder"),
]


@pytest.mark.parametrize("notebook, body, key, words", RULES)
def test_rule_fails_at_check_naming_the_key(tmp_path, capsys, notebook, body, key, words):
    params = tmp_path / "bad.yaml"
    params.write_text(f"base: {ROOT / 'params' / f'{notebook}_lm.yaml'}\n{body}\n", encoding="utf-8")
    assert main(["check", notebook, "--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert f"'{key}': " in err and words in err, err
    assert str(params) in err  # and the file


def test_extra_reaches_factlabs_own_fields_and_the_hub_by_no_route(tmp_path, capsys):
    """``--set`` goes through the same check; the documented flag lets an upload through."""
    params = ROOT / "params" / "01_corver_lm.yaml"
    assert main(["train", "01_corver", "--smoke", "--set", "grpo.extra.output_dir=/tmp/x", "--run-dir",
                 str(tmp_path / "r"), "--dry-run"]) == 2
    assert "'grpo.extra.output_dir': factlab sets output_dir itself" in capsys.readouterr().err
    ok = tmp_path / "hub.yaml"
    ok.write_text(f"base: {params}\ngrpo: {{allow_hub_upload: true, extra: {{push_to_hub: true, "
                  f"hub_model_id: me/model}}}}\n", encoding="utf-8")
    assert main(["check", "01_corver", "--params", str(ok)]) == 0, capsys.readouterr().err


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


def _check(tmp_path, capsys, body: str, notebook: str = "01_corver") -> tuple[int, str]:
    params = tmp_path / "p.yaml"
    params.write_text(body, encoding="utf-8")
    rc = main(["check", notebook, "--params", str(params)])
    return rc, capsys.readouterr().err


def test_a_key_written_twice_in_one_mapping_is_refused(tmp_path, capsys):
    base = ROOT / "params" / "01_corver_lm.yaml"
    rc, err = _check(tmp_path, capsys, f"base: {base}\ngrpo:\n  learning_rate: 1.0e-5\n  beta: 0.0\n"
                                       "  learning_rate: 0.5\n")
    assert rc == 2 and "duplicate key 'grpo.learning_rate' (lines 3 and 5)" in err and "silently win" in err
    rc, err = _check(tmp_path, capsys, f"base: {base}\nbase: {base}\n")
    assert rc == 2 and "duplicate key 'base'" in err
    # a merge key (<<) overriding an anchored mapping is YAML, not a duplicate
    rc, err = _check(tmp_path, capsys, f"base: {base}\nx: &g {{beta: 0.0}}\ngrpo:\n  <<: *g\n  beta: 0.01\n")
    assert "duplicate" not in err


def test_an_empty_params_file_is_refused(tmp_path, capsys):
    for body in ("", "# only a comment\n", "---\n"):
        rc, err = _check(tmp_path, capsys, body)
        assert rc == 2 and "empty params file: every key would take its default" in err, body


def bomb(indent: str = "") -> str:
    """A billion laughs in YAML: nine levels of nine aliases, 9**9 values from about 650 bytes."""
    lines = [f"{indent}a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{indent}{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_load_not_expanded(tmp_path, capsys):
    """Refused in a moment, naming the key that explodes (issue 30: it passed check, then hung
    run, ignoring SIGTERM; in model.name a MemoryError in the error message's repr)."""
    import time

    base = ROOT / "params" / "04_k2v_lm.yaml"
    assert len(bomb()) < 700
    t0 = time.perf_counter()
    rc, err = _check(tmp_path, capsys, f"base: {base}\nsweep:\n  grid:\n{bomb('    ')}", "04_k2v")
    assert rc == 2 and "'sweep.grid.f' expands to more than 100,000 values through YAML aliases" in err, err  # 9**6
    rc, err = _check(tmp_path, capsys, f"base: {base}\nmodel:\n  name:\n{bomb('    ')}", "04_k2v")
    assert rc == 2 and "'model.name.f' expands" in err and "MemoryError" not in err, err
    assert time.perf_counter() - t0 < 60  # nothing was expanded (that would not end)


def test_the_same_bound_holds_for_sweep_and_launch_values():
    from factlab.config import ConfigError
    from factlab.launch import _overrides
    from factlab.sweep import parse_grid

    flow = "{" + ", ".join(bomb().strip().splitlines()) + "}"
    with pytest.raises(ConfigError, match="through YAML aliases"):
        parse_grid([f"model.name=[{flow}]"])
    with pytest.raises(ConfigError, match="through YAML aliases"):
        _overrides({}, [f"model.name={flow}"])


def test_error_messages_print_a_bounded_repr():
    from factlab.credentials import short_repr

    shared = ["x"] * 9
    for _ in range(9):
        shared = [shared] * 9  # 9**10 leaves behind 10 list objects, as an alias bomb builds
    assert len(short_repr(shared)) <= 60 and len(short_repr("y" * 10**7)) <= 60


# ---------------------------------------------------------------- what hung or failed late (issue 43)


@pytest.fixture
def no_hang():
    """A test that would block forever without its defence fails after 20 s instead."""
    import signal

    def stop(*_):
        raise TimeoutError("blocked: the defence is missing")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_params_that_are_not_regular_files_or_too_big_are_refused(tmp_path, capsys, no_hang):
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    via_base = tmp_path / "p.yaml"
    via_base.write_text(f"base: {fifo}\n")
    assert main(["check", "01_corver", "--params", str(via_base)]) == 2  # a FIFO blocked forever
    assert "not a regular file" in capsys.readouterr().err
    for device in ("/dev/zero", "/dev/urandom"):  # read until MemoryError
        assert main(["check", "01_corver", "--params", device]) == 2
        assert f"{device}: not a regular file" in capsys.readouterr().err
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    assert main(["check", "01_corver", "--params", str(big)]) == 2
    assert "more than a params file's 1,048,576" in capsys.readouterr().err


@pytest.mark.parametrize("body, words", [
    ("model: {name: \"a\x1bb\"}\n", "not valid YAML: unacceptable character #x001b"),
    ("model: {name: a\x00b}\n", "not valid YAML: unacceptable character #x0000"),
    ("model: {name: \"a\\x1bb\"}\n", "'model.name' holds a control character ('\\x1b')"),  # a YAML escape writes one
    ("model: {name: \"a\\eb\"}\n", "'model.name' holds a control character ('\\x1b')"),
    ("judge: {system: \"a\\0b\"}\n", "'judge.system' holds a control character ('\\x00')"),
    ("model: {device: \"cuda:0\\n\"}\n", "device must be auto, cpu, mps, cuda or cuda:N"),  # torch refused it later
    ("model: {device: \"cuda:01\"}\n", "device must be auto, cpu, mps, cuda or cuda:N"),
    ("grpo: {seed: " + "9" * 5000 + "}\n", "a value YAML cannot read: Exceeds the limit (4300 digits)"),
])
def test_unreadable_params_text_is_one_clear_error_naming_the_file(tmp_path, capsys, body, words):
    params = tmp_path / "bad.yaml"
    params.write_text(f"base: {ROOT / 'params' / '01_corver_lm.yaml'}\n{body}", encoding="utf-8")
    assert main(["check", "01_corver", "--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert words in err and str(params) in err and "Traceback" not in err, err


def test_a_yaml_date_with_set_is_a_clear_error(tmp_path, capsys):
    params = tmp_path / "dated.yaml"
    params.write_text(f"base: {ROOT / 'params' / '01_corver_lm.yaml'}\nrun_date: 2024-01-01\n")
    assert main(["train", "01_corver", "--params", str(params), "--set", "grpo.seed=1", "--run-dir",
                 str(tmp_path / "r"), "--dry-run"]) == 2
    assert "unknown key 'run_date'" in capsys.readouterr().err


def test_too_many_threads_is_refused_before_a_run_folder_is_made(tmp_path, capsys):
    assert main(["--threads", "99999", "run", "00_quickstart", "--smoke", "--out", str(tmp_path / "runs")]) == 2
    assert "99999 threads is more than 1024" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flags, words", [
    (["--num-processes", "100000"], "more than 256 per machine"),
    (["--num-machines", "2", "--machine-rank", "2"], "--machine-rank 2 with 2 machine(s): ranks are 0 to 1"),
    (["--main-process-port", "70000"], "a port is 1 to 65535"),
    (["--main-process-ip", "10.0.0.300"], "is not an IP address or a host name"),
    (["--main-process-ip", "not a host"], "is not an IP address or a host name"),
    (["--main-process-ip", "gpu-a\n"], "is not an IP address or a host name"),  # passed: $ before a newline
    (["--main-process-ip", "10.0.0.1]"], "is not an IP address or a host name"),  # passed: one bracket stripped
    (["--main-process-ip", "[10.0.0.1]"], "is not an IP address or a host name"),  # brackets hold IPv6 only
])
def test_launch_flags_are_checked_before_anything_is_written(tmp_path, capsys, flags, words):
    assert main(["train", "01_corver", "--smoke", *flags, "--run-dir", str(tmp_path / "r"), "--dry-run"]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_train_never_takes_over_another_notebooks_run_folder(tmp_path, capsys):
    import json

    other = tmp_path / "quickstart-run"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"notebook": "00_quickstart", "state": "ok"}))
    (other / "config.yaml").write_text("the finished run's config\n")
    assert main(["train", "01_corver", "--smoke", "--run-dir", str(other), "--dry-run"]) == 2
    assert "is a run folder of 00_quickstart, not 01_corver" in capsys.readouterr().err
    assert (other / "config.yaml").read_text() == "the finished run's config\n"


@pytest.mark.parametrize("config, extra, words", [
    ("precious: user data\n", [], "its config.yaml is not a factlab config (keys precious are not CorVerConfig's)"),
    ("[1, 2]\n", [], "its config.yaml is not a factlab config (a YAML mapping is expected, got list)"),
    (None, ["--set", "grpo.learning_rate=0.1"], "was launched with other settings (grpo.learning_rate)"),
])
def test_train_never_replaces_a_config_of_other_settings(tmp_path, capsys, monkeypatch, config, extra, words):
    """``--run-dir`` at a folder holding someone's config.yaml replaced it; at this notebook's own
    run with another ``--set`` it replaced the run's config and continued (or reported) its
    checkpoints under the new settings (issue 43 round-3b probe). The same params resume it."""
    from factlab import launch
    from factlab.config import dump_config
    from factlab.runner import load_params

    launched = []
    monkeypatch.setattr(launch, "_run", lambda cmd: launched.append(cmd) or (1, 0.0))
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    root = Path(__file__).resolve().parents[1]
    text = config if config is not None else dump_config(load_params("01_corver", root / "params/01_corver_smoke.yaml"))
    (run_dir / "config.yaml").write_text(text)
    args = ["train", "01_corver", "--smoke", "--num-processes", "1", "--run-dir", str(run_dir)]
    assert main([*args, *extra]) == 2
    assert words in capsys.readouterr().err
    assert (run_dir / "config.yaml").read_text() == text and not launched
    if config is None:  # the same params: a resume, launched
        assert main(args) == 1 and len(launched) == 1
