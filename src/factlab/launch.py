"""The training stage of a notebook's params on many processes: ``accelerate launch``.

    factlab train 01_corver --params params/01_corver.yaml --accelerate-config zero3 --num-processes 8
    factlab train 03_seva --params P --accelerate-config ddp --num-processes 8 --dry-run   # print, run nothing

``factlab train`` validates the params (the notebook's config class, as ``factlab check``
does) and the accelerate config (accelerate's own loader plus the keys factlab relies on),
writes the resolved ``config.yaml`` into a run folder (``runner.make_run_dir``, the folder maker
of ``factlab run`` too) and runs

    accelerate launch --config_file params/accelerate/<name>.yaml --num_processes N \\
        --mixed_precision <from grpo.bf16> -m factlab.launch --notebook NB --params RUN/config.yaml --run-dir RUN

Every process then runs ``train_stage``: the notebook's recipe (``factlab.recipes``), the same
functions the notebook's cells call: ``start`` (the warm start), ``prepare`` (the training input;
the main process first, so caches are filled once and read by the others) and ``train`` (every
process; TRL shards each batch), into the folders the recipe chooses under the run folder. A
notebook run resumed in that folder (``factlab run NB --resume RUN``) finds the finished
training and goes on to evaluate and report.

When the recipe's preparation itself trains (``prepare_alone``: the warm start's SFT, KLCF's
truthfulness reward model), ``factlab train`` first runs it once in its own plain process
(``python -m factlab.launch ... --prepare-only``), then the launch, whose processes find it done.

Launchable: every training notebook, 01 to 06 (``recipes.RECIPES``): 01_corver (every ablation of
``runs``), 02_binary_rar, 03_seva (SFT, merge, GRPO with the process reward and the control, each
self-evolution round), 04_k2v, 05_klcf (pipeline and reward model prepared, then GRPO),
06_compare (each compared run and seed in turn). 00_quickstart has no training stage.

The accelerate configs live in ``params/accelerate/`` (``ddp``, ``zero2``, ``zero3``, ``fsdp2``);
``--accelerate-config`` takes one of those names or a path to any accelerate YAML.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import BaseModel

from .config import ConfigError, dump_config, load_yaml, read_params, refuse_url_credentials, validate
from .credentials import redact_text
from .manifest import changed_keys, read_manifest
from .paths import refuse_symlinks, write_json
from .recipes import RECIPES, Recipe
from .rewards import Resources
from .runner import config_for_notebook, default_params, find_notebook, make_run_dir, project_root, sigterm_as_interrupt
from .sections import host_name
from .sweep import set_dotted
from .threads import usable_cores
from .train.grpo import TrainResult
from .train.runtime import RuntimeCheckError
from .train.runtime import check_runtime as check_train_runtime

log = logging.getLogger(__name__)

__all__ = ["LaunchError", "NOT_LAUNCHABLE", "training_stage", "accelerate_configs", "accelerate_config_path",
           "check_accelerate_config", "check_runtime", "launch_command", "train_stage", "main", "add_command",
           "command"]

LAUNCH_FILE = "launch.json"  # what the launched processes trained (written by the main process)


class LaunchError(ValueError):
    """A launch that cannot start: an unknown config, a notebook with no training stage, a
    runtime that lacks what the params ask for. The CLI prints it and exits 2."""


# ---------------------------------------------------------------- the training stage of each notebook

NOT_LAUNCHABLE: dict[str, str] = {
    "00_quickstart": "it evaluates a model and has no training stage (quickstart-style GRPO, judge + format on "
                     "mini-world questions, is 01_corver with `runs: [A1]`)",
}


def training_stage(notebook: str) -> Recipe:
    """The recipe (``factlab.recipes``) whose stages train a notebook stem, or ``LaunchError``
    naming it and why."""
    stem = Path(notebook).stem
    if stem in RECIPES:
        return RECIPES[stem]
    why = NOT_LAUNCHABLE.get(stem, "it has no recipe in factlab.recipes.RECIPES")
    raise LaunchError(f"{stem} cannot be launched with accelerate: {why}. "
                      f"Launchable: {', '.join(sorted(RECIPES))}")


# ---------------------------------------------------------------- accelerate configs

def _accelerate_dir(root: Path | None = None) -> Path:
    return (root or project_root()) / "params" / "accelerate"


def accelerate_configs(root: Path | None = None) -> dict[str, Path]:
    """The shipped accelerate configs by name (``params/accelerate/<name>.yaml``)."""
    folder = _accelerate_dir(root)
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def accelerate_config_path(name: str, root: Path | None = None) -> Path:
    """``ddp`` / ``zero2`` / ``zero3`` / ``fsdp2`` (any stem in ``params/accelerate/``), or a path
    to an accelerate YAML; ``LaunchError`` naming the known ones otherwise."""
    p = Path(name).expanduser()
    if p.suffix in (".yaml", ".yml") or os.sep in name or "/" in name:
        if not p.is_file():
            raise LaunchError(f"--accelerate-config {name}: no such file")
        return p.resolve()
    known = accelerate_configs(root)
    if name not in known:
        raise LaunchError(f"unknown accelerate config {name!r}; known: {', '.join(known) or '(none found)'} "
                          f"(in {_accelerate_dir(root)}), or a path to an accelerate YAML")
    return known[name]


_LAUNCHED_TYPES = ("MULTI_GPU", "DEEPSPEED", "FSDP")


def _launch_option_names() -> set[str]:
    """Every option ``accelerate launch`` knows (its parser's dests): a config's nested keys
    become these, so a key outside the set is a typo accelerate would silently ignore."""
    from accelerate.commands.launch import launch_command_parser  # lazy: builds a large parser

    return {a.dest for a in launch_command_parser()._actions}


def check_accelerate_config(path: str | Path) -> dict[str, Any]:
    """Load an accelerate config with accelerate's own loader and check what factlab launches
    with; returns ``{distributed_type, num_processes, num_machines, mixed_precision, zero_stage |
    fsdp_version}``. ``LaunchError`` naming the file and the key otherwise."""
    from accelerate.commands.config.config_args import load_config_from_file  # lazy: accelerate CLI code

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise LaunchError(f"{path}: not a readable YAML file ({e})") from None
    if not isinstance(raw, dict):
        raise LaunchError(f"{path}: an accelerate config is a mapping of keys")
    try:
        acc = load_config_from_file(str(path))
    except (ValueError, TypeError, KeyError) as e:
        raise LaunchError(f"{path}: accelerate cannot read it: {e}") from None
    dtype = getattr(acc.distributed_type, "value", str(acc.distributed_type))
    if dtype not in _LAUNCHED_TYPES:
        raise LaunchError(f"{path}: distributed_type {dtype!r}; factlab train launches one of "
                          f"{', '.join(_LAUNCHED_TYPES)} (on a CPU machine use MULTI_GPU, the ddp config: "
                          f"torchrun starts the processes and the trainer joins them over gloo)")
    n = getattr(acc, "num_processes", None)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise LaunchError(f"{path}: num_processes must be a whole number >= 1 (got {n!r})")
    mp = acc.mixed_precision or "no"
    if mp not in ("no", "bf16", "fp16"):
        raise LaunchError(f"{path}: mixed_precision must be no, bf16 or fp16 (got {mp!r})")
    out: dict[str, Any] = {"distributed_type": dtype, "num_processes": n, "num_machines": acc.num_machines,
                           "mixed_precision": mp}
    options = _launch_option_names()
    if dtype == "DEEPSPEED":
        ds = acc.deepspeed_config or {}
        if "deepspeed_config_file" not in ds:
            stage = ds.get("zero_stage")
            if stage not in (0, 1, 2, 3):
                raise LaunchError(f"{path}: deepspeed_config.zero_stage must be 0, 1, 2 or 3 (got {stage!r})")
            out["zero_stage"] = stage
        unknown = sorted(set(ds) - options)
        if unknown:
            raise LaunchError(f"{path}: deepspeed_config.{unknown[0]} is not an accelerate DeepSpeed option")
    if dtype == "FSDP":
        fs = acc.fsdp_config or {}
        version = fs.get("fsdp_version")
        if str(version) not in ("1", "2"):
            raise LaunchError(f"{path}: fsdp_config.fsdp_version must be 1 or 2 (got {version!r})")
        out["fsdp_version"] = int(version)
        unknown = sorted(k for k in fs if (k if k.startswith("fsdp") else f"fsdp_{k}") not in options)
        if unknown:
            raise LaunchError(f"{path}: fsdp_config.{unknown[0]} is not an accelerate FSDP option")
    return out


def check_runtime(cfg: BaseModel, accelerate: dict[str, Any] | None = None) -> None:
    """``train.check_runtime`` (vLLM, CUDA, DeepSpeed as the params and the accelerate config ask),
    its refusal as a ``LaunchError``."""
    try:
        check_train_runtime(cfg, accelerate)
    except RuntimeCheckError as e:
        raise LaunchError(str(e)) from None


# ---------------------------------------------------------------- the command line `accelerate launch` gets

def _accelerate_launch() -> list[str]:
    """``accelerate launch`` of this Python's environment."""
    exe = Path(sys.executable).with_name("accelerate")
    return [str(exe), "launch"] if exe.exists() else [sys.executable, "-m", "accelerate.commands.launch"]


def launch_command(notebook: str, params: str | Path, run_dir: str | Path, config_file: str | Path | None, *,
                   num_processes: int | None = None, mixed_precision: str | None = None,
                   num_machines: int | None = None, machine_rank: int | None = None,
                   main_process_ip: str | None = None, main_process_port: int | None = None,
                   prepare_only: bool = False) -> list[str]:
    """The command that runs ``factlab.launch`` in every process (``accelerate launch ... -m
    factlab.launch``), or, with ``prepare_only``, once in a plain process."""
    entry = ["--notebook", Path(notebook).stem, "--params", str(params), "--run-dir", str(run_dir)]
    if prepare_only:
        return [sys.executable, "-m", "factlab.launch", *entry, "--prepare-only"]
    cmd = [*_accelerate_launch(), "--config_file", str(config_file)]
    for flag, value in (("--num_processes", num_processes), ("--num_machines", num_machines),
                        ("--machine_rank", machine_rank), ("--main_process_ip", main_process_ip),
                        ("--main_process_port", main_process_port), ("--mixed_precision", mixed_precision)):
        if value is not None:
            cmd += [flag, str(value)]
    return cmd + ["-m", "factlab.launch", *entry]


# ---------------------------------------------------------------- what every launched process runs

def _result_row(r: TrainResult) -> dict[str, Any]:
    return {"steps": r.steps, "runtime_s": r.runtime_s, "model_dir": r.model_dir, "is_adapter": r.is_adapter,
            "resumed": r.resumed, "output_dir": r.output_dir}


def _size(inputs: Any) -> int:
    """How many training items a recipe's ``prepare`` returned (``.size``, else ``len``)."""
    size = getattr(inputs, "size", None)
    return int(size) if size is not None else len(inputs)


def train_stage(notebook: str, cfg: BaseModel, run_dir: str | Path, *, prepare_only: bool = False
                ) -> dict[str, TrainResult]:
    """The notebook's training stage in this process: one of ``accelerate launch``'s processes,
    or the only one. The recipe's ``start`` and ``prepare`` (main process first), then its
    ``train`` in every process; the main process writes ``run_dir/launch.json``."""
    from accelerate import PartialState  # lazy: the process group starts here, not at import

    recipe = training_stage(notebook)
    if not prepare_only:
        check_runtime(cfg)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    state = PartialState(cpu=not torch.cuda.is_available())
    if state.device.type == "cuda":
        torch.cuda.set_device(state.device)  # "cuda" (models.pick_device) is this process's GPU
    t0 = time.perf_counter()
    recipe.start(cfg)  # the warm start: cfg.model.name is then the warm-started model
    resources = Resources(cfg)
    train_input = recipe.prepare(cfg, resources, run_dir)
    prepared_s = time.perf_counter() - t0
    n_items = _size(train_input)
    log.info("process %d/%d: %s training input ready in %.1f s (%d items)", state.process_index,
             state.num_processes, recipe.notebook, prepared_s, n_items)
    if prepare_only:
        state.wait_for_everyone()
        return {}
    results = recipe.train(cfg, train_input, resources, run_dir)
    if state.is_main_process:
        info = {"notebook": recipe.notebook, "num_processes": state.num_processes,
                "distributed_type": str(getattr(state.distributed_type, "value", state.distributed_type)),
                "backend": state.backend, "device": str(state.device),
                "mixed_precision": os.environ.get("ACCELERATE_MIXED_PRECISION", "no"),
                "training_items": n_items, "prepare_seconds": prepared_s,
                "seconds": time.perf_counter() - t0, "runs": {n: _result_row(r) for n, r in results.items()}}
        write_json(run_dir / LAUNCH_FILE, info, indent=1, default=str)
    state.wait_for_everyone()
    return results


def main(argv: list[str] | None = None) -> int:
    """``python -m factlab.launch``: what ``factlab train`` runs in every process."""
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per judge request: noise, and the URL
    p = argparse.ArgumentParser(prog="python -m factlab.launch", description=main.__doc__)
    p.add_argument("--notebook", required=True, help="notebook stem, e.g. 01_corver")
    p.add_argument("--params", required=True, help="params YAML (factlab train passes the run folder's config.yaml)")
    p.add_argument("--run-dir", required=True, help="the run folder (the recipe chooses the folders inside it)")
    p.add_argument("--prepare-only", action="store_true", help="build the training input (fill caches), train nothing")
    args = p.parse_args(argv)
    try:
        training_stage(args.notebook)
        cfg = validate(read_params(args.params), config_for_notebook(Path(args.notebook).stem), source=args.params)
        with sigterm_as_interrupt():
            results = train_stage(args.notebook, cfg, args.run_dir, prepare_only=args.prepare_only)
    except ValueError as e:  # LaunchError, ConfigError
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # factlab train stopping its launch: one line per process, no trace
        print(f"[rank {rank}] interrupted ({str(e) or 'Ctrl-C'}); checkpoints so far are kept", file=sys.stderr)
        return 130
    for name, r in results.items():
        log.info("%s: %d steps in %.0f s -> %s", name, r.steps, r.runtime_s, r.model_dir)
    return 0


# ---------------------------------------------------------------- factlab train

def _overrides(data: dict[str, Any], items: list[str]) -> dict[str, Any]:
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {redact_text(repr(item))}: expected KEY=VALUE, e.g. grpo.vllm_server_host=10.0.0.5")
        parsed = load_yaml(value, f"--set {redact_text(repr(item))}: the value") if value else None
        data = set_dotted(data, key.strip(), parsed)
    return data


def add_command(sub) -> None:
    """Register ``factlab train`` on the CLI's subparsers."""
    t = sub.add_parser("train", help="launch a notebook's training stage on many processes (accelerate launch)",
                       description="Validate the params and the accelerate config, write the resolved config.yaml "
                                   "into a run folder, and run `accelerate launch ... -m factlab.launch` there. "
                                   "Then `factlab run NOTEBOOK --resume RUN_DIR` evaluates and reports.")
    t.add_argument("notebook", help=f"notebook stem: {', '.join(sorted(RECIPES))}")
    t.add_argument("--params", help="params YAML (default: params/<stem>.yaml, or _smoke with --smoke)")
    t.add_argument("--smoke", action="store_true", help="use params/<stem>_smoke.yaml")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one params key (dotted path, value read as YAML), e.g. "
                        "grpo.vllm_server_host=$VLLM_NODE; repeatable")
    t.add_argument("--accelerate-config", default="ddp", metavar="{ddp,zero2,zero3,fsdp2,PATH}",
                   help="a config of params/accelerate/ by name, or a path to an accelerate YAML (default: ddp)")
    t.add_argument("--num-processes", type=int, help="processes over all machines (default: the config's)")
    t.add_argument("--num-machines", type=int, help="nodes (multi-node; default: the config's)")
    t.add_argument("--machine-rank", type=int, help="this node's rank (multi-node)")
    t.add_argument("--main-process-ip", help="address of the rank-0 node (multi-node)")
    t.add_argument("--main-process-port", type=int, help="its port (default: accelerate's 29500)")
    t.add_argument("--out", help="runs folder for a new run folder (default: outputs/runs)")
    t.add_argument("--run-dir", help="this run folder exactly (multi-node: every node must name the same one; "
                                     "an existing one continues: finished runs load, others resume)")
    t.add_argument("--prepare-only", action="store_true",
                   help="build the training input once in this process (self-filter, datastores, synthesis) "
                        "and stop: a long preparation then never keeps launched processes waiting")
    t.add_argument("--dry-run", action="store_true", help="validate and print the command, run nothing")
    t.set_defaults(func=command)


STOP_GRACE_S = 30.0  # after Ctrl-C / SIGTERM, how long the launched processes get to stop before SIGKILL


def _run(cmd: list[str]) -> tuple[int, float]:
    """Run ``cmd`` to its end, in a session of its own. Ctrl-C or SIGTERM here (a
    ``KeyboardInterrupt``) reaches every process it started as SIGINT, what is left of them
    ``STOP_GRACE_S`` later is killed, and the interrupt is raised: no launched process trains on
    in the run folder once ``factlab train`` has returned (SIGTERM used to end this process alone,
    and ``accelerate launch`` and its ranks trained on, orphaned)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        _stop_group(proc)
        raise
    return rc, time.perf_counter() - t0


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGINT to ``proc``'s process group, SIGKILL to what is left of it after ``STOP_GRACE_S``
    (at once on a second Ctrl-C)."""
    def signal_group(sig: int) -> bool:
        try:
            os.killpg(proc.pid, sig)
            return True
        except ProcessLookupError:  # every process of the group has ended
            return False

    deadline = time.monotonic() + STOP_GRACE_S
    try:
        signal_group(signal.SIGINT)
        while time.monotonic() < deadline and signal_group(0):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.2)  # reaps the leader: its group lives on only in its children
    except KeyboardInterrupt:
        pass
    signal_group(signal.SIGKILL)
    proc.wait()


MAX_PROCESSES_PER_MACHINE = 256  # more than any machine's GPUs or useful CPU processes: a typo


def _check_launch_flags(args, n: int, machines: int) -> None:
    """The launch flags that would fail only inside ``accelerate launch`` (or never end), checked
    before anything is written: processes per machine, the machine rank, the port, the address."""
    if n // max(machines, 1) > MAX_PROCESSES_PER_MACHINE:
        raise LaunchError(f"--num-processes {n} on {machines} machine(s) is more than {MAX_PROCESSES_PER_MACHINE} "
                          "per machine (one process per GPU)")
    if args.machine_rank is not None and args.machine_rank >= machines:
        raise LaunchError(f"--machine-rank {args.machine_rank} with {machines} machine(s): ranks are 0 to "
                          f"{machines - 1}")
    if args.main_process_port is not None and not 1 <= args.main_process_port <= 65535:
        raise LaunchError(f"--main-process-port {args.main_process_port}: a port is 1 to 65535")
    if args.main_process_ip is not None:
        try:
            host_name(args.main_process_ip)
        except ValueError as e:
            raise LaunchError(f"--main-process-ip: {e}") from None


def _own_run_folder(run_dir: Path, notebook: str) -> None:
    """``LaunchError`` when ``run_dir`` is another notebook's run folder: its ``config.yaml``
    would be replaced by this notebook's (a finished run's record, overwritten)."""
    manifest = read_manifest(run_dir) if run_dir.is_dir() else None
    launched = run_dir / LAUNCH_FILE
    owner = (manifest or {}).get("notebook")
    if owner is None and launched.is_file():
        try:
            owner = json.loads(launched.read_text(encoding="utf-8")).get("notebook")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            owner = None
    if owner is not None and owner != notebook:
        raise LaunchError(f"--run-dir {run_dir} is a run folder of {owner}, not {notebook}: its config.yaml would "
                          "be replaced; name a new folder, or leave --run-dir out")


def _same_config(run_dir: Path, cfg: BaseModel) -> None:
    """``LaunchError`` when ``run_dir`` holds a ``config.yaml`` other than the one this launch would
    write: a file that is no factlab config (it was replaced), or this notebook's run at other
    settings (its checkpoints continued, or its finished runs were reported, under the new ones:
    issue 43 round-3b probe). The same params again resume it."""
    path = run_dir / "config.yaml"
    if not path.exists() and not path.is_symlink():
        return
    try:
        if not path.is_file():
            raise ValueError("not a regular file")
        old = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(old, dict):
            raise ValueError(f"a YAML mapping is expected, got {type(old).__name__}")
        unknown = sorted(set(old) - set(type(cfg).model_fields), key=str)
        if unknown:
            raise ValueError(f"keys {', '.join(map(str, unknown[:3]))} are not {type(cfg).__name__}'s")
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError, RecursionError) as e:
        raise LaunchError(f"--run-dir {run_dir}: its config.yaml is not a factlab config ({str(e).splitlines()[0][:120]}) "
                          "and would be replaced; name a new folder, or leave --run-dir out") from None
    changed = changed_keys(old, yaml.safe_load(dump_config(cfg)))
    if changed:
        shown = ", ".join(changed[:8]) + (f" (+{len(changed) - 8} more)" if len(changed) > 8 else "")
        raise LaunchError(f"--run-dir {run_dir} was launched with other settings ({shown}); its checkpoints would "
                          "continue under these ones; launch it with the params it was made with, or name a new folder")


def command(args) -> int:
    """``factlab train``: 0 when every process finished, 1 when the launch failed, 2 on bad input."""
    nb = find_notebook(args.notebook)
    recipe = training_stage(nb.stem)
    params = Path(args.params) if args.params else default_params(nb, args.smoke)
    cfg = validate(_overrides(read_params(params), args.set), config_for_notebook(nb.stem), source=str(params))
    refuse_url_credentials(cfg)  # the run folder's config.yaml, which every process reads, hides them
    acc_path = accelerate_config_path(args.accelerate_config, nb.parent.parent)
    acc = check_accelerate_config(acc_path)
    for flag in ("num_processes", "num_machines", "machine_rank", "main_process_port"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag == "machine_rank" else 1):
            raise LaunchError(f"--{flag.replace('_', '-')} must be >= {0 if flag == 'machine_rank' else 1}")
    n = args.num_processes or acc["num_processes"]
    machines = args.num_machines or acc["num_machines"] or 1
    _check_launch_flags(args, n, machines)
    if not args.dry_run and not args.prepare_only:
        check_runtime(cfg, acc)
        if torch.cuda.is_available() and n // machines > torch.cuda.device_count():
            raise LaunchError(f"{n // machines} processes per machine and {torch.cuda.device_count()} GPUs here: "
                              f"one process per GPU (--num-processes counts all machines)")
        if not torch.cuda.is_available() and n // machines > usable_cores():
            raise LaunchError(f"{n // machines} CPU processes per machine and {usable_cores()} usable cores here "
                              f"(--num-processes counts all machines)")
    if args.run_dir:
        run_dir = Path(args.run_dir).resolve()
        _own_run_folder(run_dir, nb.stem)
        _same_config(run_dir, cfg)
        if run_dir.is_dir():  # config.yaml, launch.json and checkpoints were written through a link planted there
            refuse_symlinks(run_dir, "a run folder")
    else:  # the folder maker of factlab run; a dry run only names it
        run_dir = make_run_dir(nb, params, args.out, tag="train", create=not args.dry_run).resolve()
    grpo = getattr(cfg, "grpo", None)
    mixed = "bf16" if grpo is not None and grpo.bf16 else "no"  # the params decide precision, not the config
    config = run_dir / "config.yaml"
    prepare = launch_command(nb.stem, config, run_dir, None, prepare_only=True)
    cmd = prepare if args.prepare_only else launch_command(
        nb.stem, config, run_dir, acc_path, num_processes=n, mixed_precision=mixed, num_machines=args.num_machines,
        machine_rank=args.machine_rank, main_process_ip=args.main_process_ip,
        main_process_port=args.main_process_port)
    # the preparation runs first in one plain process when it trains (warm start, reward model) and whenever
    # several processes launch: otherwise ranks 1..N-1 wait in a collective while rank 0 self-filters or builds
    # datastores, past NCCL's timeout (issue 42); the launched processes then find it finished (cached)
    trains = recipe.prepare_alone(cfg)
    alone = not args.prepare_only and (trains or n > 1)
    detail = ", ".join(f"{k} {v}" for k, v in acc.items() if k not in ("num_processes", "mixed_precision"))
    steps = f"$ {shlex.join(prepare)}\n" if alone else ""
    print(f"{recipe.notebook}: {recipe.what}\naccelerate: {acc_path} ({detail}); {n} processes on {machines} "
          f"machine(s), mixed precision {mixed} (grpo.bf16)\nrun folder: {run_dir}"
          + (f"\nprepared first in one process ({'its preparation trains: warm start or reward model' if trains else f'{n} processes would wait for rank 0 to prepare'})"
             if alone else "")
          + f"\n{steps}$ {shlex.join(cmd)}", flush=True)
    if args.dry_run:
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)
    config.write_text(dump_config(cfg), encoding="utf-8")
    seconds = 0.0
    for step in ([prepare] if alone else []) + [cmd]:
        try:
            with sigterm_as_interrupt():
                rc, s = _run(step)
        except KeyboardInterrupt:
            print(f"interrupted: every launched process stopped; run the same command again to resume from the last "
                  f"checkpoints (--run-dir {run_dir})", file=sys.stderr)
            return 130
        seconds += s
        if rc != 0:
            what = "the preparation" if step is prepare else "the launch"
            print(f"FAILED: {what} exited {rc} after {seconds:.0f} s; its processes' output is above. Run the "
                  f"same command again to resume from the last checkpoints (--run-dir {run_dir})", file=sys.stderr)
            return 1
    if args.prepare_only:
        print(f"prepared in {seconds:.0f} s: {run_dir}")
        return 0
    info = json.loads((run_dir / LAUNCH_FILE).read_text(encoding="utf-8"))
    for name, r in info["runs"].items():
        print(f"{name}: {r['steps']} steps in {r['runtime_s']:.0f} s -> {r['model_dir']}")
    print(f"{info['num_processes']} processes ({info['distributed_type']}, {info['backend']}) in {seconds:.0f} s\n"
          f"evaluate and report: factlab run {nb.stem} --resume {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
