"""Multi-GPU training (issue 18, part 4): the accelerate configs in params/accelerate/, the
`factlab train` launcher, and the GRPO vLLM fields (part 5, GRPO side).

Exercised here on CPU: every config through accelerate's own loader, the exact `accelerate
launch` command for each, the refusals (unknown config, notebook without a launchable
training stage, bad params, vLLM on a machine without it), one step of the standalone entry
point in-process, and (slow) a real two-process `accelerate launch` over gloo. DeepSpeed and
FSDP launches need CUDA and are not run here."""

import importlib.util
import json
import os
import shlex
import socket
from pathlib import Path

import pytest
import yaml

from factlab import launch
from factlab.cli import main
from factlab.sections import GRPOSection
from factlab.stage_cache import StageCache
from factlab.train.grpo import grpo_args

ROOT = Path(__file__).resolve().parents[1]
ACC = ROOT / "params" / "accelerate"
CONFIGS = {"ddp": ("MULTI_GPU", None), "zero2": ("DEEPSPEED", 2), "zero3": ("DEEPSPEED", 3), "fsdp2": ("FSDP", 2)}

TINY = """\
base: {base}
model: {{name: tiny-random-smollm2}}   # the launcher's wiring, not what the model learns
rewards: [{{name: format}}]   # quickstart-style GRPO on mini-world questions, no judge to load
runs: [A1]
self_filter: {{enabled: false}}
warm_start: {{enabled: false}}   # the launcher's wiring: the warm start's prepare-alone step is the KLCF test's
train_data: {{name: miniworld, split: train, limit: 4, seed: 0}}
grpo: {{num_generations: 2, per_device_train_batch_size: 2, gradient_accumulation_steps: 1, max_steps: 1,
       max_completion_length: 8, save_steps: 10}}
lora: {{r: 4, alpha: 8, target_modules: [q_proj, v_proj]}}
"""


def _tiny(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY.format(base=ROOT / "params" / "01_corver_lm.yaml"), encoding="utf-8")
    return p


def _commands(out: str) -> list[list[str]]:
    """Every command ``factlab train`` prints (``$ ...``), in the order it runs them."""
    return [shlex.split(ln[2:]) for ln in out.splitlines() if ln.startswith("$ ")]


def _command(out: str) -> list[str]:
    """The last command printed: the launch (a preparation in its own process comes first)."""
    return _commands(out)[-1]


def _after(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


# ---------------------------------------------------------------- the configs


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_has_the_keys_and_loads_through_accelerate(name):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    path = ACC / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text())
    dtype, level = CONFIGS[name]
    assert raw["distributed_type"] == dtype and raw["num_processes"] >= 1 and raw["mixed_precision"] == "bf16"
    assert raw["compute_environment"] == "LOCAL_MACHINE" and raw["num_machines"] == 1
    if dtype == "DEEPSPEED":
        assert raw["deepspeed_config"]["zero_stage"] == level
        # the trainer owns these: a value here that disagrees with the params would be an error
        assert not {"gradient_accumulation_steps", "gradient_clipping"} & set(raw["deepspeed_config"])
    if dtype == "FSDP":
        assert raw["fsdp_config"]["fsdp_version"] == level
        assert raw["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"  # save_model writes a checkpoint
    acc = load_config_from_file(str(path))  # accelerate's own reader: unknown keys, bad enum values raise
    assert isinstance(acc, ClusterConfig) and acc.distributed_type.value == dtype
    summary = launch.check_accelerate_config(path)  # nested keys checked against accelerate launch's options
    assert summary["distributed_type"] == dtype and summary["mixed_precision"] == "bf16"
    assert summary.get("zero_stage", summary.get("fsdp_version")) == level


BROKEN = [
    ("zero3", "deepspeed_config", {"zero_stage": 4}, "deepspeed_config.zero_stage must be 0, 1, 2 or 3"),
    ("zero3", "deepspeed_config", {"zero_stag": 3}, "deepspeed_config.zero_stag is not an accelerate DeepSpeed"),
    ("fsdp2", "fsdp_config", {"fsdp_version": 3}, "fsdp_config.fsdp_version must be 1 or 2"),
    ("fsdp2", "fsdp_config", {"fsdp_reshard_after_forwrd": True}, "fsdp_config.fsdp_reshard_after_forwrd is not"),
    ("ddp", None, {"num_proceses": 2}, "accelerate cannot read it"),
    ("ddp", None, {"distributed_type": "NO"}, "distributed_type 'NO'"),
    ("ddp", None, {"num_processes": 0}, "num_processes must be a whole number >= 1"),
    ("ddp", None, {"mixed_precision": "fp32"}, "mixed_precision must be no, bf16 or fp16"),
]


@pytest.mark.parametrize("name, block, change, words", BROKEN)
def test_a_broken_config_is_refused_naming_the_key(tmp_path, name, block, change, words):
    raw = yaml.safe_load((ACC / f"{name}.yaml").read_text())
    (raw[block] if block else raw).update(change)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(launch.LaunchError) as e:
        launch.check_accelerate_config(path)
    assert words in str(e.value) and str(path) in str(e.value)


# ---------------------------------------------------------------- factlab train: the command it runs


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dry_run_prints_the_accelerate_command(tmp_path, capsys, name):
    run_dir = tmp_path / "run"
    assert main(["train", "01_corver", "--smoke", "--accelerate-config", name, "--num-processes", "4",
                 "--run-dir", str(run_dir), "--dry-run"]) == 0
    cmd = _command(capsys.readouterr().out)
    assert cmd[:cmd.index("--config_file")] == launch._accelerate_launch()  # accelerate launch of this venv
    assert Path(_after(cmd, "--config_file")) == ACC / f"{name}.yaml"
    assert _after(cmd, "--num_processes") == "4"
    assert _after(cmd, "--mixed_precision") == "no"  # the smoke params: grpo.bf16 false
    module = cmd.index("-m", 3)
    assert cmd[module:] == ["-m", "factlab.launch", "--notebook", "01_corver", "--params",
                            str(run_dir / "config.yaml"), "--run-dir", str(run_dir)]
    assert not run_dir.exists()  # a dry run writes nothing


def test_dry_run_takes_a_path_multinode_flags_and_overrides(tmp_path, capsys):
    own = tmp_path / "mine.yaml"
    own.write_text((ACC / "zero3.yaml").read_text())
    assert main(["train", "01_corver", "--accelerate-config", str(own), "--num-processes", "16",
                 "--num-machines", "2", "--machine-rank", "1", "--main-process-ip", "10.0.0.1",
                 "--main-process-port", "29501", "--run-dir", str(tmp_path / "r"), "--dry-run",
                 "--set", "grpo.use_vllm=true", "--set", "grpo.vllm_mode=server",
                 "--set", "grpo.vllm_server_host=10.0.0.9"]) == 0
    out = capsys.readouterr().out
    cmd = _command(out)
    assert _after(cmd, "--config_file") == str(own.resolve())
    assert [_after(cmd, f) for f in ("--num_processes", "--num_machines", "--machine_rank", "--main_process_ip",
                                      "--main_process_port", "--mixed_precision")] == \
        ["16", "2", "1", "10.0.0.1", "29501", "bf16"]  # the full params train in bf16
    assert "zero_stage 3" in out and "2 machine(s)" in out


def test_prepare_only_runs_the_entry_point_without_accelerate(tmp_path, capsys):
    assert main(["train", "04_k2v", "--smoke", "--run-dir", str(tmp_path / "r"), "--prepare-only", "--dry-run"]) == 0
    cmd = _command(capsys.readouterr().out)
    assert cmd[1:3] == ["-m", "factlab.launch"] and cmd[-1] == "--prepare-only" and "--config_file" not in cmd


def test_the_offload_config_names_its_deepspeed_json(tmp_path, capsys, monkeypatch):
    """zero3_offload (issue 42: full fine-tunes of 7-8 B on one GPU): ZeRO-3 with optimizer and
    weights on the host, DeepSpeed's own AdamW ("auto" values from the params; ZeRO-Offload refuses a
    client optimizer), no key accelerate forbids beside a deepspeed_config_file, and the planner
    reads the same sharding from it wherever it runs from."""
    from factlab.plan import load_strategy

    raw = yaml.safe_load((ACC / "zero3_offload.yaml").read_text())
    ds = json.loads((ROOT / raw["deepspeed_config"]["deepspeed_config_file"]).read_text())
    zo = ds["zero_optimization"]
    assert zo["stage"] == 3 and zo["offload_optimizer"]["device"] == zo["offload_param"]["device"] == "cpu"
    assert ds["optimizer"]["type"] == "AdamW" and set(ds["optimizer"]["params"].values()) == {"auto"}
    ignored = {"gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
               "offload_param_device", "zero3_save_16bit_model", "mixed_precision"}
    assert not ignored & set(raw["deepspeed_config"])  # accelerate refuses these beside a config file
    assert launch.check_accelerate_config(ACC / "zero3_offload.yaml")["distributed_type"] == "DEEPSPEED"
    monkeypatch.chdir(tmp_path)
    s = load_strategy(str(ACC / "zero3_offload.yaml"))
    assert (s.stage, s.offload_optimizer, s.offload_params) == (3, True, True)
    monkeypatch.chdir(ROOT)  # factlab train runs from the project root, where the JSON's path resolves
    assert main(["train", "02_binary_rar", "--params", str(ROOT / "params" / "02_binary_rar.yaml"),
                 "--accelerate-config", str(ACC / "zero3_offload.yaml"), "--num-processes", "1",
                 "--run-dir", str(tmp_path / "r"), "--dry-run"]) == 0
    cmd = _command(capsys.readouterr().out)
    assert Path(_after(cmd, "--config_file")) == ACC / "zero3_offload.yaml" and _after(cmd, "--mixed_precision") == "bf16"


def test_unknown_config_name_exits_2_naming_the_known_ones(capsys):
    assert main(["train", "01_corver", "--smoke", "--accelerate-config", "zero4", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "unknown accelerate config 'zero4'; known: ddp, fsdp2, zero2, zero3" in err
    assert main(["train", "01_corver", "--smoke", "--accelerate-config", "nowhere/zero3.yaml", "--dry-run"]) == 2
    assert "nowhere/zero3.yaml: no such file" in capsys.readouterr().err


def test_a_notebook_without_a_training_stage_is_named(capsys):
    assert main(["train", "00_quickstart", "--smoke", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "00_quickstart cannot be launched with accelerate" in err and "has no training stage" in err
    assert "Launchable: 01_corver, 02_binary_rar, 03_seva, 04_k2v, 05_klcf, 06_compare" in err


TRAINING_NOTEBOOKS = ["01_corver", "02_binary_rar", "03_seva", "04_k2v", "05_klcf", "06_compare"]


@pytest.mark.parametrize("notebook", TRAINING_NOTEBOOKS)
def test_every_training_notebook_dry_runs_on_eight_processes(tmp_path, capsys, notebook):
    """The issue's acceptance line for each of 01-06 (full params, ddp, 8 processes): exit 0 and
    the command printed, the launched entry point naming the notebook's recipe."""
    from factlab import recipes
    from factlab.runner import load_params

    params = ROOT / "params" / f"{notebook}.yaml"
    run_dir = tmp_path / "run"
    assert main(["train", notebook, "--params", str(params), "--accelerate-config", "ddp", "--num-processes", "8",
                 "--run-dir", str(run_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    recipe = recipes.recipe(notebook)
    assert out.startswith(f"{notebook}: {recipe.what}")
    *first, cmd = _commands(out)
    assert _after(cmd, "--num_processes") == "8" and Path(_after(cmd, "--config_file")) == ACC / "ddp.yaml"
    assert cmd[cmd.index("-m", 3):] == ["-m", "factlab.launch", "--notebook", notebook, "--params",
                                        str(run_dir / "config.yaml"), "--run-dir", str(run_dir)]
    # 8 processes: the preparation runs once, alone, before the launch (issue 42: ranks 1..7 would otherwise
    # wait in a collective while rank 0 self-filters, past NCCL's timeout)
    assert [c[1:3] + c[-1:] for c in first] == [["-m", "factlab.launch", "--prepare-only"]]
    assert "prepared first in one process" in out
    # one process: alone only when the preparation trains (warm start, KLCF's reward model SFT)
    assert main(["train", notebook, "--params", str(params), "--accelerate-config", "ddp", "--num-processes", "1",
                 "--run-dir", str(run_dir), "--dry-run"]) == 0
    *first, cmd = _commands(capsys.readouterr().out)
    alone = recipe.prepare_alone(load_params(notebook, params))
    assert [c[1:3] + c[-1:] for c in first] == ([["-m", "factlab.launch", "--prepare-only"]] if alone else [])
    assert not run_dir.exists()


# what each notebook's cells call: the recipe stages that `factlab train` runs too (no second copy)
NOTEBOOK_STAGES = {
    "01_corver": ["corver.start(cfg)", "corver.prepare(cfg, resources, run_dir)", "corver.train(cfg, sf, resources, run_dir)"],
    "02_binary_rar": ["rar.start(cfg)", "rar.prepare(cfg, resources, run_dir)", "rar.train_with_stopping(cfg, prompts"],
    "03_seva": ["seva_train.prepare(cfg, resources, run_dir)", "seva_train.sft_stage(cfg, inputs, run_dir)",
                "seva_train.grpo_stage(cfg, inputs", "seva_train.evolve_stage(cfg, inputs"],
    "04_k2v": ["k2v.start(cfg)", "k2v.knowledge_graph(cfg, resources, run_dir)", "k2v.synthesize(cfg, graph",
               "k2v.train_heldout(cfg, questions, graph", "k2v.format_step(cfg, train_q, graph)",
               "k2v.train(cfg, train_q, resources, run_dir)"],
    "05_klcf": ["klcf.start(cfg)", "klcf.pipeline_stage(cfg, resources, run_dir)", "klcf.reward_model_stage(cfg",
                "klcf.KLCFInputs.of(cfg", "klcf.train(cfg, inputs, resources, run_dir)"],
    "06_compare": ["compare.start(cfg)", "compare.prepare(cfg, resources, run_dir)",
                   "compare.train(cfg, inputs, resources, run_dir)", "compare.evaluate(cfg, inputs, resources, run_dir"],
}


@pytest.mark.parametrize("notebook", TRAINING_NOTEBOOKS)
def test_the_notebook_calls_the_recipe_stages_that_launch_runs(notebook):
    """The notebook and `factlab train` share the recipe: the notebook's cells call the stage
    functions whose composition (`prepare`, `train`) every launched process runs, and the
    launcher holds no training code of its own (it only reaches the recipes)."""
    import ast

    from factlab import recipes

    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    missing = [call for call in NOTEBOOK_STAGES[notebook] if call not in code]
    assert not missing, f"{notebook} no longer calls {missing}"
    recipe = recipes.recipe(notebook)
    assert launch.training_stage(notebook) is recipe
    for stage in ("start", "prepare", "prepare_alone", "train", "headline"):
        assert callable(getattr(recipe, stage)), stage
    # the headline is the recipe's (issue 44: not computed in a cell): one save_headline, fed by its headline
    module = recipe.headline.__module__.rsplit(".", 1)[-1]
    alias = {"seva": "seva_train"}.get(module, module)
    saves = [line for line in code.splitlines() if "runner.save_headline(" in line]
    assert len(saves) == 1 and f"runner.save_headline(run_dir, {alias}.headline(" in saves[0], saves
    assert "before_after" not in code
    tree = ast.parse((ROOT / "src" / "factlab" / "launch.py").read_text())
    imported = {(n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    # train.grpo for TrainResult, train.runtime for the runtime check every training path shares: no training code
    assert not {m for m in imported if m.startswith("train") and m not in ("train.grpo", "train.runtime")}
    assert "recipes" in imported


def test_dry_run_without_a_run_dir_names_the_runner_s_folder_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """One run-folder maker (runner.make_run_dir) for factlab run and factlab train."""
    monkeypatch.setenv("FACTLAB_OUTPUTS", str(tmp_path / "outputs"))
    assert main(["train", "04_k2v", "--smoke", "--dry-run"]) == 0
    run_dir = Path(_after(_command(capsys.readouterr().out), "--run-dir"))
    assert run_dir.parent == tmp_path / "outputs" / "runs" / "04_k2v" and run_dir.name.endswith("-04_k2v_smoke-train")
    assert not (tmp_path / "outputs").exists()


def test_params_are_validated_before_anything_launches(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"base: {ROOT / 'params' / '01_corver_lm.yaml'}\ngrpo: {{num_generations: 3}}\n")
    assert main(["train", "01_corver", "--params", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    assert "'grpo.per_device_train_batch_size': " in capsys.readouterr().err
    assert main(["train", "01_corver", "--smoke", "--set", "grpo.use_vllm=true", "--set", "grpo.vllm_mode=server",
                 "--dry-run"]) == 2
    assert "'grpo.vllm_server_host': vllm_mode: server needs" in capsys.readouterr().err
    assert main(["train", "01_corver", "--smoke", "--set", "grpo=", "--dry-run"]) == 2  # null is not a section
    assert "'grpo'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_slurm_template_runs_vllm_serve_and_a_valid_factlab_train_per_node(tmp_path, capsys):
    """params/accelerate/slurm_grpo.sbatch under stub srun / scontrol / factlab / trl: the first
    node serves the policy with `trl vllm-serve`, the prepare step runs once, and the trainer
    line (one per node) is a `factlab train` the real parser accepts."""
    import os
    import subprocess

    bin_dir, log = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    stubs = {
        "scontrol": 'echo gpu-a; echo gpu-b; echo gpu-c',
        "srun": 'while [[ "$1" == --* ]]; do shift; done; SLURM_PROCID=1 exec "$@"',
        # a trainer waits for the server, as a real one does (grpo.vllm_server_timeout): the script starts the
        # server in the background and kills it when training ends, so a trainer that did not wait could let
        # that kill land before the server's stub ran (a CI failure under load, 2026-11-28)
        "factlab": f'[ "$1" = train ] && for i in $(seq 200); do grep -q "^trl vllm-serve" {log} 2>/dev/null && break; '
                   'sleep 0.05; done; '
                   f'echo "factlab $*" >> {log}; '
                   '[ "$1" = check ] && echo "ok: p is a valid RARConfig for nb (model Qwen/Qwen3-8B; rewards: x)"; true',
        "trl": f'echo "trl $*" >> {log}',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-c]",
           "SLURM_JOB_ID": "42", "RUN_DIR": str(tmp_path / "run")}
    script = ACC / "slurm_grpo.sbatch"
    done = subprocess.run(["bash", str(script), "02_binary_rar", "params/02_binary_rar.yaml"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = [shlex.split(c) for c in log.read_text().splitlines()]
    serve = next(c for c in calls if c[:2] == ["trl", "vllm-serve"])
    assert _after(serve, "--model") == "Qwen/Qwen3-8B" and _after(serve, "--tensor_parallel_size") == "8"
    trains = [c[1:] for c in calls if c[:2] == ["factlab", "train"]]
    assert len(trains) == 2 and trains[0][-1] == "--prepare-only"
    node = trains[1]
    assert _after(node, "--machine-rank") == "1" and _after(node, "--main-process-ip") == "gpu-b"
    assert _after(node, "--num-processes") == "16" and _after(node, "--num-machines") == "2"
    assert "grpo.vllm_server_host=gpu-a" in node and "grpo.vllm_mode=server" in node
    assert main([*node, "--dry-run"]) == 0  # the real factlab train accepts that exact line
    cmd = _command(capsys.readouterr().out)
    assert Path(_after(cmd, "--config_file")) == ACC / "zero3.yaml" and _after(cmd, "--machine_rank") == "1"


# ---------------------------------------------------------------- vLLM: first-class GRPO fields


def _grpo(**kw) -> GRPOSection:
    base = dict(optim="adamw_torch", bf16=False, gradient_checkpointing=False, num_generations=2,
                per_device_train_batch_size=2, gradient_accumulation_steps=1)
    return GRPOSection(**{**base, **kw})


def test_vllm_server_fields_reach_trl(tmp_path):
    args = grpo_args(_grpo(use_vllm=True, vllm_mode="server", vllm_server_host="10.0.0.5", vllm_server_port=8001,
                           vllm_server_timeout=30.0), tmp_path)
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_host, args.vllm_server_port, args.vllm_server_timeout) == \
        (True, "server", "10.0.0.5", 8001, 30.0)
    assert args.vllm_server_base_url is None
    args = grpo_args(_grpo(use_vllm=True, vllm_mode="server", vllm_server_base_url="http://gen-node:8000"), tmp_path)
    assert args.vllm_server_base_url == "http://gen-node:8000"
    args = grpo_args(_grpo(use_vllm=True, vllm_gpu_memory_utilization=0.25), tmp_path)  # colocate
    assert args.vllm_mode == "colocate" and args.vllm_gpu_memory_utilization == 0.25
    assert args.vllm_server_host == "0.0.0.0"  # unset: TRL's own default, never None


@pytest.mark.parametrize("kw, key, words", [
    ({"use_vllm": True, "vllm_mode": "server"}, "vllm_server_host", "vllm_mode: server needs"),
    ({"vllm_server_base_url": "gen-node:8000"}, "vllm_server_base_url", "must be an http:// or https:// URL"),
    ({"vllm_server_base_url": "http://a:8000", "vllm_server_host": "a"}, "vllm_server_base_url", "not both"),
    ({"vllm_server_port": 70000}, "vllm_server_port", "less than or equal to 65535"),
])
def test_vllm_rules_name_the_key(kw, key, words):
    from factlab.config import ConfigError, validate
    from factlab.recipes.corver import CorVerConfig

    with pytest.raises(ConfigError) as e:
        validate({"grpo": {**_grpo().model_dump(exclude={"preset", "dynamic_sampling"}), **kw}}, CorVerConfig)
    assert f"'grpo.{key}': " in str(e.value) and words in str(e.value)
    # server mode with vLLM off is no error: the rule is about where a used server is
    _grpo(use_vllm=False, vllm_mode="server")


def test_use_vllm_is_checked_when_a_run_starts_not_at_load(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    params = tmp_path / "vllm.yaml"
    params.write_text(f"base: {ROOT / 'params' / '01_corver_lm.yaml'}\n"
                      "grpo: {use_vllm: true, vllm_mode: server, vllm_server_host: 10.0.0.5}\n")
    assert main(["check", "01_corver", "--params", str(params)]) == 0  # loads on a machine without vLLM
    capsys.readouterr()
    run_dir = tmp_path / "r"
    assert main(["train", "01_corver", "--params", str(params), "--run-dir", str(run_dir)]) == 2
    assert "grpo.use_vllm is true and vllm is not installed here" in capsys.readouterr().err
    assert not run_dir.exists()  # refused before the run folder or any process
    assert launch.main(["--notebook", "01_corver", "--params", str(params), "--run-dir", str(run_dir)]) == 2


def test_deepspeed_and_fsdp_need_cuda_at_launch(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch.torch.cuda, "is_available", lambda: False)
    for name in ("zero3", "fsdp2"):
        assert main(["train", "01_corver", "--smoke", "--accelerate-config", name, "--run-dir", str(tmp_path)]) == 2
        assert "needs CUDA GPUs" in capsys.readouterr().err


# ---------------------------------------------------------------- real training


@pytest.mark.parametrize("notebook", ["02_binary_rar", "04_k2v"])
def test_prepare_builds_the_notebooks_training_input(tmp_path, notebook):
    """--prepare-only: the same library calls as the notebook's stages before training (RAR's
    pre-cached prompts, K2V's graph and synthesized questions cached in the run folder)."""
    from factlab.config import load_config
    from factlab.rewards import Resources
    from factlab.runner import config_for_notebook

    params, run_dir = tmp_path / "params.yaml", tmp_path / "run"
    params.write_text(f"base: {ROOT / 'params' / f'{notebook}_lm.yaml'}\nwarm_start: {{enabled: false}}\n")
    assert launch.main(["--notebook", notebook, "--params", str(params), "--run-dir", str(run_dir),
                        "--prepare-only"]) == 0
    assert not (run_dir / "launch.json").exists() and not (run_dir / "train").exists()  # nothing trained
    cfg = load_config(params, config_for_notebook(notebook))
    items = launch.training_stage(notebook).prepare(cfg, Resources(cfg), run_dir)
    if notebook == "04_k2v":  # the notebook's cell: synthesize (cached here), then the seeded split
        assert (run_dir / "kg.graphml").exists() and (run_dir / "questions.jsonl").exists()
        synthesized = (run_dir / "questions.jsonl").read_text().splitlines()
        assert 0 < len(items) < len(synthesized) and {q.id for q in items} <= {json.loads(s)["id"] for s in synthesized}
    else:
        from factlab.recipes import rar

        train, _, _ = rar.prepare_prompts(cfg, Resources(cfg))
        assert [p.id for p in items.train] == [p.id for p in train] and items.train


def test_entry_point_trains_one_step_in_process(tmp_path):
    """What every launched process runs, here as the only process: the notebook's training
    stage into run_dir/train/<run>, launch.json beside it; a second call finds it finished."""
    import torch

    params, run_dir = _tiny(tmp_path), tmp_path / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as torchrun gives each launched process; on a shared 2-core box 8x faster
    try:
        assert launch.main(["--notebook", "01_corver", "--params", str(params), "--run-dir", str(run_dir)]) == 0
    finally:
        torch.set_num_threads(threads)
    info = json.loads((run_dir / "launch.json").read_text())
    assert info["num_processes"] == 1 and info["training_items"] == 4
    a1 = info["runs"]["A1"]
    assert a1["steps"] == 1 and not a1["resumed"] and Path(a1["output_dir"]) == run_dir / "train" / "A1"
    assert (run_dir / "train" / "A1" / "model" / "adapter_config.json").exists()
    done = json.loads((run_dir / "train" / "A1" / "train_result.json").read_text())
    assert done["steps"] == 1 and done["metrics"]["rewards"] == "R = 1 format"
    # the notebook (factlab run 01_corver --resume RUN) calls the same function on the same folder
    assert launch.main(["--notebook", "01_corver", "--params", str(params), "--run-dir", str(run_dir)]) == 0
    assert json.loads((run_dir / "launch.json").read_text())["runs"]["A1"]["resumed"] is True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_factlab_train_launches_two_gloo_processes(tmp_path, capsys):
    """`factlab train` with the ddp config and two processes on CPU: torchrun starts them,
    the trainer joins them over gloo, each generates its half of the batch, one step."""
    run_dir = tmp_path / "run"
    rc = main(["train", "01_corver", "--params", str(_tiny(tmp_path)), "--accelerate-config", "ddp",
               "--num-processes", "2", "--main-process-port", str(_free_port()), "--run-dir", str(run_dir)])
    out = capsys.readouterr()
    assert rc == 0, out.err[-4000:]
    info = json.loads((run_dir / "launch.json").read_text())
    assert (info["num_processes"], info["distributed_type"], info["backend"]) == (2, "MULTI_CPU", "gloo")
    assert info["runs"]["A1"]["steps"] == 1
    done = json.loads((run_dir / "train" / "A1" / "train_result.json").read_text())
    # one optimizer step saw both processes' completions: 2 per process x 2 processes
    assert done["steps"] == 1 and done["log_history"][0]["num_tokens"] > 0
    assert (run_dir / "config.yaml").exists() and (run_dir / "train" / "A1" / "model" / "adapter_config.json").exists()
    assert "evaluate and report: factlab run 01_corver --resume" in out.out


SEVA_TINY = """\
train_data: {limit: 4}
eval: [{name: miniworld, split: heldout, limit: 2}]
teacher: {limit: 1, max_attempts: 1, judge: {max_new_tokens: 8}}
sft: {max_steps: 1, save_steps: 1, max_length: 768, per_device_train_batch_size: 1, gradient_accumulation_steps: 1}
grpo: {max_steps: 1, max_completion_length: 8, save_steps: 1, num_generations: 2, per_device_train_batch_size: 2,
       gradient_accumulation_steps: 1}
lora: {r: 4, alpha: 8, target_modules: [q_proj, v_proj]}
eval_generation: {max_new_tokens: 8}
self_evolution: {rounds: 1, probe_budget: 2, refine_steps: 1}
"""

KLCF_TINY = """\
warm_start: {enabled: false}
queries: {train_limit: 2, eval_limit: 1}
pipeline: {nu: 2, max_new_tokens: 16}
truth_rm: {method: sft, sft: {max_steps: 1, save_steps: 1, per_device_train_batch_size: 2, max_length: 64}}
grpo: {max_steps: 1, max_completion_length: 48, save_steps: 1, num_generations: 2, per_device_train_batch_size: 2,
       gradient_accumulation_steps: 1}
lora: {r: 4, alpha: 8, target_modules: [q_proj, v_proj]}
"""


def _train_two_processes(notebook: str, params: Path, run_dir: Path, capsys) -> tuple[dict, str]:
    rc = main(["train", notebook, "--params", str(params), "--accelerate-config", "ddp", "--num-processes", "2",
               "--main-process-port", str(_free_port()), "--run-dir", str(run_dir)])
    out = capsys.readouterr()
    assert rc == 0, out.err[-4000:]
    info = json.loads((run_dir / "launch.json").read_text())
    assert (info["notebook"], info["num_processes"], info["distributed_type"], info["backend"]) == \
        (notebook, 2, "MULTI_CPU", "gloo")
    return info, out.out


@pytest.mark.slow
def test_factlab_train_launches_seva_on_two_gloo_processes(tmp_path, capsys, tiny_params):
    """03_seva launched: the SFT, the adapter merged once, GRPO with the process reward and the
    binary control from the merged SFT model, and one self-evolution round's Refine, every
    training stage on both processes, in the folders the notebook uses (recipes.seva)."""
    run_dir = tmp_path / "run"
    info, out = _train_two_processes("03_seva", tiny_params("03_seva", SEVA_TINY), run_dir, capsys)
    assert set(info["runs"]) == {"sft", "grpo-seva_process", "grpo-seva_binary", "evolve-1"}
    assert all(r["steps"] == 1 for r in info["runs"].values())
    assert Path(info["runs"]["sft"]["output_dir"]) == run_dir / "sft"
    assert (run_dir / "sft" / "merged" / "config.json").exists() and (run_dir / "teacher.json").exists()
    for reward in ("seva_process", "seva_binary"):
        done = json.loads((run_dir / "grpo" / reward / "train_result.json").read_text())
        assert done["steps"] == 1 and done["base_model"] == str(run_dir / "sft" / "merged")
    assert Path(info["runs"]["evolve-1"]["output_dir"]) == run_dir / "evolve-1" / "seva_process"
    assert "evaluate and report: factlab run 03_seva --resume" in out
    # the notebook's stages on that folder (factlab run 03_seva --resume RUN) find every run finished
    from factlab import recipes
    from factlab.rewards import Resources
    from factlab.runner import load_params

    cfg, seva = load_params("03_seva", run_dir / "config.yaml"), recipes.recipe("03_seva")
    resources = Resources(cfg)
    again = seva.train(cfg, seva.prepare(cfg, resources, run_dir), resources, run_dir)
    assert set(again) == set(info["runs"]) and all(r.resumed and r.steps == 1 for r in again.values())


@pytest.mark.slow
def test_factlab_train_launches_klcf_on_two_gloo_processes(tmp_path, capsys, tiny_params):
    """05_klcf launched: the offline pipeline and the truthfulness RM's SFT prepared once in
    their own process, then GRPO on two processes with the trained RM in the rewards."""
    run_dir = tmp_path / "run"
    info, out = _train_two_processes("05_klcf", tiny_params("05_klcf", KLCF_TINY), run_dir, capsys)
    prepare, launched = _commands(out)  # the preparation (it trains the RM) ran alone, first
    assert prepare[1:3] == ["-m", "factlab.launch"] and prepare[-1] == "--prepare-only"
    assert "--config_file" in launched and "--prepare-only" not in launched
    (name, run), = info["runs"].items()
    assert run["steps"] == 1 and Path(run["output_dir"]).parent == run_dir / "train"
    assert (run_dir / "pipeline" / "stage1_samples.jsonl").exists()
    rm = StageCache(run_dir / "truth_rm" / "report.json").record()
    assert rm["report"]["sft"]["method"] == "sft" and rm["report"]["sft"]["steps"] == 1
    assert Path(rm["folder"]).exists()
    assert info["training_items"] == 2


RANK = """\
import os, signal, sys, time
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
"""
LAUNCHER = """\
import subprocess, sys
subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2], sys.argv[3]]).wait()
"""
FACTLAB_SIDE = """\
import sys
from factlab import launch, runner
launch.STOP_GRACE_S = 2.0
with runner.sigterm_as_interrupt():
    try:
        launch._run([sys.executable, *sys.argv[1:]])
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("rank", ["plain", "stubborn"])
def test_sigterm_to_factlab_train_stops_every_launched_process(tmp_path, rank):
    """SIGTERM to `factlab train` (a scheduler's stop) reaches the launcher's ranks as Ctrl-C, and a rank
    that ignores it is killed: SIGTERM used to end factlab alone, and `accelerate launch` and its ranks
    trained on, orphaned, in the run folder (issue 43 round 3c)."""
    import signal
    import subprocess
    import sys
    import time

    for name, text in (("rank.py", RANK), ("launcher.py", LAUNCHER), ("side.py", FACTLAB_SIDE)):
        (tmp_path / name).write_text(text)
    pid_file = tmp_path / "rank.pid"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "side.py"), str(tmp_path / "launcher.py"),
                             str(tmp_path / "rank.py"), str(pid_file), rank], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (pid_file.exists() and pid_file.read_text()):
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        stopped = not _alive(pid)
        if not stopped:
            os.kill(pid, signal.SIGKILL)
        proc.kill()
    assert "INTERRUPTED" in out
    assert stopped, "the launched rank trains on after factlab train ended"


def test_an_interrupted_train_exits_130_with_the_command_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted(cmd):
        raise KeyboardInterrupt("signal 15")

    monkeypatch.setattr(launch, "_run", interrupted)
    run_dir = tmp_path / "run"
    assert main(["train", "01_corver", "--params", str(_tiny(tmp_path)), "--accelerate-config", "ddp",
                 "--num-processes", "1", "--run-dir", str(run_dir)]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and f"--run-dir {run_dir}" in err and "Traceback" not in err


@pytest.mark.parametrize("planted", ["launch.json", "train"])
def test_a_link_planted_in_the_run_dir_is_refused_before_anything_launches(tmp_path, capsys, monkeypatch, planted):
    """`factlab train --run-dir D` wrote launch.json and the checkpoints through a link planted in D (issue 43
    round 3c probe); `factlab run` refused it already."""
    monkeypatch.setattr(launch, "_run", lambda cmd: pytest.fail("launched"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir() if planted == "train" else victim.write_text("precious\n")
    (run_dir / planted).symlink_to(victim)
    assert main(["train", "01_corver", "--params", str(_tiny(tmp_path)), "--accelerate-config", "ddp",
                 "--num-processes", "1", "--run-dir", str(run_dir)]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert not (run_dir / "config.yaml").exists()
