"""The params sections that are plain settings of a library, each with the checks of its
fields: the model to load (``ModelConfig``), sampling (``GenerationConfig``, 000 §A.3), LoRA
(``LoraSection``, 000 §A.1), TRL's GRPO and SFT configs (``GRPOSection``: 000 Tables 5-7, DAPO
as 003 Table 7; ``SFTSection``: 002 §2.4, Table 8), an LLM judge (``JudgeSection``) and a sweep
(``SweepSection``).

They derive from ``config.Section`` and load through ``factlab.config``, the one config loader.
Sections that belong to one piece of code live beside that code (``data.EvalDataConfig``,
``corpus.retrieval.DatastoreSection``, ...).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from .config import MAX_SEED, MAX_TOKENS, Dtype, ParamError, Section
from .credentials import api_key_env_problem, key_destination_problem, redact_url, sends_key_in_clear, short_repr


def known_optimizers() -> list[str]:
    """The ``optim`` names the pinned transformers accepts (``training_args.OptimizerNames``)."""
    from transformers.training_args import OptimizerNames  # lazy: imports torch

    return [o.value for o in OptimizerNames]


def known_schedulers() -> list[str]:
    """The ``lr_scheduler_type`` names the pinned transformers accepts (``trainer_utils.SchedulerType``)."""
    from transformers.trainer_utils import SchedulerType  # lazy: imports torch

    return [s.value for s in SchedulerType]


def config_fields(kind: Literal["grpo", "sft"]) -> set[str]:
    """Field names of TRL's ``GRPOConfig`` / ``SFTConfig`` (what ``extra:`` may set)."""
    import dataclasses

    import trl  # lazy: imports torch and transformers

    return {f.name for f in dataclasses.fields(trl.GRPOConfig if kind == "grpo" else trl.SFTConfig)}


def _one_of(value: str, known: list[str], what: str) -> str:
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(known)}")
    return value


def _known_optimizer(name: str) -> str:
    return _one_of(name, known_optimizers(), "optimizer")


def _known_scheduler(name: str) -> str:
    return _one_of(name, known_schedulers(), "scheduler")


# TRL fields factlab sets itself when it builds the trainer's config (``train.grpo.grpo_args``,
# ``train.sft.sft_args``): where checkpoints go, how they are saved, the reward weights, the device
# and those its launcher and resume own (issue 43 round-3b probe): the process's rank and the sharding strategy
# come from accelerate (factlab train --accelerate-config: deepspeed or fsdp given here failed when training
# started, local_rank: 3 on one CPU process), and a resume needs whole checkpoints (save_only_model drops the
# optimizer; load_best_model_at_end failed when training started: GRPO evaluates nothing)
_LAUNCH_AND_RESUME = {"local_rank", "ddp_backend", "deepspeed", "fsdp", "fsdp_config", "save_only_model",
                      "load_best_model_at_end"}  # ddp_backend: gloo failed building the trainer's config on one process
# factlab's trainers get no eval dataset (the notebook evaluates): eval_strategy: steps failed building the trainer
_NO_EVAL = {"eval_strategy", "eval_on_start"}
FACTLAB_SET_FIELDS: dict[str, frozenset[str]] = {
    "grpo": frozenset({"output_dir", "run_name", "project", "save_strategy", "use_cpu", "reward_weights",
                       "gradient_checkpointing_kwargs", "logging_dir", *_LAUNCH_AND_RESUME, *_NO_EVAL}),
    "sft": frozenset({"output_dir", "run_name", "project", "save_strategy", "use_cpu", "logging_dir",
                      *_LAUNCH_AND_RESUME, *_NO_EVAL})}
# TRL fields that upload the model (or its completions, or its metrics: a Trackio Space, public by
# default, and its bucket) to the Hugging Face Hub with the user's token
MAX_DATALOADER_WORKERS = 256  # as factlab train's processes per machine: more is a typo, and forks that many trainers
_HUB_FIELD = re.compile(r"^(?:push_to_hub|hub_|log_completions_hub|trackio_(?:space|static_space|bucket)_id$)")


def _extra_fields(extra: dict[str, Any], kind: Literal["grpo", "sft"], validated: set[str],
                  allow_hub_upload: bool = False) -> dict[str, Any]:
    """``extra``: TRL config fields passed through unchanged; unknown ones are refused, and so are
    those the section validates itself (``validated``: its fields, and ``warmup_steps``, which
    ``warmup_ratio`` fills), since a value there would replace the validated one unchecked; those
    factlab sets itself (``FACTLAB_SET_FIELDS``); and every Hub upload field (``push_to_hub``,
    ``hub_*``) unless the section's ``allow_hub_upload`` is true."""
    unknown = sorted(set(extra) - config_fields(kind))
    if unknown:
        cls = "GRPOConfig" if kind == "grpo" else "SFTConfig"
        raise ParamError(unknown[0], f"not a field of TRL's {cls} (unknown: {', '.join(unknown)})")
    shadowing = sorted(set(extra) & ((validated | {"warmup_steps"}) - {"extra"}))
    if shadowing:
        name = shadowing[0]
        field = "warmup_ratio" if name == "warmup_steps" else name
        raise ParamError(name, f"{kind}.{field} is a validated setting of its own: set it there, not in "
                               f"{kind}.extra (extra would pass it to TRL unchecked)")
    own = sorted(set(extra) & FACTLAB_SET_FIELDS[kind])
    if own:
        why = ("factlab train --accelerate-config and factlab's resume set it" if own[0] in _LAUNCH_AND_RESUME else
               "its trainers get no eval dataset: the notebook evaluates" if own[0] in _NO_EVAL else
               "the run folder's layout, checkpoints, reward weights and device follow from it")
        raise ParamError(own[0], f"factlab sets {own[0]} itself ({why}); it cannot be given in {kind}.extra")
    for name in sorted(k for k in extra if k == "seed" or k.endswith("_seed")):  # data_seed: as every seed field
        seed = extra[name]
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED):
            raise ParamError(name, f"a seed is a whole number from 0 to {MAX_SEED:,} (2**32 - 1), got {short_repr(extra[name])}")
    workers = extra.get("dataloader_num_workers")  # each one a process forked from the trainer when training starts
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool)
                                or not 0 <= workers <= MAX_DATALOADER_WORKERS):
        raise ParamError("dataloader_num_workers", f"a whole number from 0 to {MAX_DATALOADER_WORKERS} (each worker is a "
                                                   f"process forked from the trainer), got {short_repr(workers)}")
    hub = sorted(k for k in extra if _HUB_FIELD.match(k))
    if hub and not allow_hub_upload:
        raise ParamError(hub[0], f"{hub[0]} uploads to the Hugging Face Hub with your token; factlab never uploads "
                                 f"unless {kind}.allow_hub_upload: true is set too")
    if "optim" in extra and extra["optim"] not in known_optimizers():  # sft: no optim field of its own
        raise ParamError("optim", f"unknown optimizer {extra['optim']!r}; known: {', '.join(known_optimizers())}")
    return extra


_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def existing_model(name: str | None) -> str | None:
    """``name`` unchanged when it can name a model: an existing file or folder, an HF hub id
    (``org/name``) or a bare alias; ``ValueError`` for a local path (absolute, ``./``, ``../``,
    ``~``, or several folders deep) that does not exist, which would fail only when loaded."""
    if name is None or Path(name).expanduser().exists() or _HUB_ID.match(name):
        return name
    if "/" in name or name.startswith(("~", ".")):
        raise ValueError(f"{name} does not exist (a local model folder; a hub model is written org/name)")
    return name


ReportTo = Literal["none", "tensorboard", "trackio", "wandb"]
# the packages each tracker needs (any one of them); TensorBoard is a dependency of factlab
TRACKER_PACKAGES: dict[str, tuple[str, ...]] = {"tensorboard": ("tensorboard", "tensorboardX"),
                                                "trackio": ("trackio",), "wandb": ("wandb",)}


def tracker_available(report_to: str) -> str:
    """``report_to`` unchanged when its tracker's package is installed (``none`` always is);
    ``ValueError`` naming the key, the package and how to install it otherwise, so a missing
    tracker fails when the params load, not after the model has loaded."""
    packages = TRACKER_PACKAGES.get(report_to, ())
    if packages and not any(importlib.util.find_spec(p) is not None for p in packages):
        raise ValueError(f"report_to: {report_to} needs the {packages[0]} package, which is not installed "
                         f"(pip install {packages[0]}); or set report_to: tensorboard (the default, logs into the "
                         f"run folder) or none")
    return report_to


_HOST_NAME = re.compile(r"(?=.{1,253}\Z)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")  # fullmatch


def host_name(host: str | None) -> str | None:
    """``host`` unchanged when it is an IPv4 / IPv6 address or a DNS host name; ``ValueError``
    otherwise (``10.0.0.300``, ``host name``, ``http://x``), at load rather than at connect."""
    if host is None:
        return None
    import ipaddress

    bracketed = host.startswith("[") and host.endswith("]")  # an IPv6 address as a URL writes it, both brackets
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
        if not bracketed or address.version == 6:
            return host
    except ValueError:
        pass
    if re.fullmatch(r"[\d.]+", host) or not _HOST_NAME.fullmatch(host):
        raise ValueError(f"{short_repr(host)} is not an IP address or a host name")
    return host


_DEVICE = re.compile(r"(?:auto|cpu|mps|cuda|cuda:(0|[1-9]\d?))")  # fullmatch: torch refuses cuda:01 and a newline
MAX_GPUS_PER_MACHINE = 16


def device_name(value: str) -> str:
    """``value`` unchanged when it names a torch device factlab can use: ``auto``, ``cpu``,
    ``mps``, ``cuda`` or ``cuda:N`` (N below the GPUs this machine sees, when it sees any; below
    16 where it sees none: the same params load on a laptop and run on the cluster);
    ``ValueError`` otherwise."""
    m = _DEVICE.fullmatch(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"device must be auto, cpu, mps, cuda or cuda:N, got {short_repr(value)}")
    if m.group(1) is not None:
        import torch  # lazy: only for a numbered GPU

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count and int(m.group(1)) >= count:
            raise ValueError(f"{value}: this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}")
        if not count and int(m.group(1)) >= MAX_GPUS_PER_MACHINE:
            raise ValueError(f"{value}: no machine factlab runs on has more than {MAX_GPUS_PER_MACHINE} GPUs")
    return value


def model_folder(name: str | None, marker: str = "config.json", what: str = "model") -> str | None:
    """``name`` unchanged unless it is an existing local folder without ``marker`` (a model's
    ``config.json``, an adapter's ``adapter_config.json``): such a folder fails only when loaded,
    with an error that names the wrong file."""
    if name is not None and Path(name).expanduser().is_dir() and not (Path(name).expanduser() / marker).is_file():
        raise ValueError(f"{name} is a folder without {marker}: not a {what} folder")
    if name is not None and Path(name).expanduser().exists() and not Path(name).expanduser().is_dir():
        # /dev/zero, a FIFO or a file passed and failed when the model loaded (issue 43 round-3b probe)
        raise ValueError(f"{name} is a file, not a {what} folder (a folder with {marker}, an HF id org/name or an alias)")
    return name


# field types that carry their check, for every section that has such a field
_Device = Annotated[str, AfterValidator(device_name)]
_ModelFolder = Annotated[str, AfterValidator(model_folder)]
_Tracker = Annotated[ReportTo, AfterValidator(tracker_available)]
_Optimizer = Annotated[str, AfterValidator(_known_optimizer)]
_Scheduler = Annotated[str, AfterValidator(_known_scheduler)]


class ModelConfig(Section):
    """Which model to load: the embedded default alias, an HF id, or a local folder."""

    name: _ModelFolder = "smollm2-135m-instruct"
    dtype: Dtype = "float32"
    device: _Device = "auto"  # "auto" picks cuda when available, else cpu
    adapter: str | None = None  # a PEFT adapter folder to load on top

    @field_validator("adapter")
    @classmethod
    def _adapter_folder(cls, name: str | None) -> str | None:
        return model_folder(existing_model(name), "adapter_config.json", "PEFT adapter")


class GenerationConfig(Section):
    """Sampling settings; defaults are the greedy evaluation of 000 §A.3."""

    max_new_tokens: int = Field(1000, ge=1, le=MAX_TOKENS)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    batch_size: int = Field(16, ge=1)
    seed: int = 0


class LoraSection(Section):
    """LoRA adapter (peft). Defaults: CorVer's r=128, alpha=256, dropout 0, no bias, all seven
    projections (000_ac66a963fabf3916.txt §A.1)."""

    r: int = Field(128, ge=1)
    alpha: int = Field(256, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class DynamicSamplingSection(Section):
    """DAPO's dynamic sampling (``factlab.train.dapo``): drop groups whose rewards all agree
    within ``tol`` and generate the dataloader's next batches, ``generation_batches`` per round
    (verl's ``gen_batch_size`` over the train batch: 3 in K2V's Table 7), at most ``max_rounds``
    extra rounds a step."""

    enabled: bool = False
    tol: float = Field(1e-6, ge=0.0)
    generation_batches: int = Field(1, ge=1)
    max_rounds: int = Field(3, ge=0)
    # when max_rounds cannot fill the batch: raise DynamicSamplingError, or fill it with dropped
    # (zero-advantage) groups and count them in dynamic/filled_groups
    on_exhausted: Literal["raise", "fill"] = "raise"


_DAPO_PRESET = {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28, "beta": 0.0}


class _TrainerSection(Section):
    """What ``GRPOSection`` and ``SFTSection`` check alike: ``extra`` (``_extra_fields``) and
    ``max_steps``. No fields of its own, so each section's fields keep their order in config.yaml."""

    trl_kind: ClassVar[Literal["grpo", "sft"]]

    @field_validator("extra", check_fields=False)
    @classmethod
    def _trl_fields(cls, extra: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return _extra_fields(extra, cls.trl_kind, set(cls.model_fields), bool(info.data.get("allow_hub_upload")))

    @model_validator(mode="after")
    def _steps_or_epochs(self) -> "_TrainerSection":
        if self.max_steps == 0 or self.max_steps < -1:
            raise ParamError("max_steps", f"must be a positive number of steps, or -1 to train "
                                          f"num_train_epochs epochs (got {self.max_steps})")
        return self


class GRPOSection(_TrainerSection):
    """TRL ``GRPOConfig`` knobs. Defaults: CorVer's Tables 5-7 and the headline row of
    Table 6 (000 §A.1). ``extra`` passes any other GRPOConfig field through unchanged.

    ``preset: dapo`` (DAPO as K2V trains, 003 Table 7) fills in, where the params leave them
    unset, ``loss_type: dapo``, ``epsilon: 0.2``, ``epsilon_high: 0.28``, ``beta: 0`` and
    ``dynamic_sampling.enabled: true``; keys the params set win. Pair it with the ``overlong``
    reward for DAPO's overlong buffer penalty."""

    trl_kind = "grpo"
    preset: Literal["grpo", "dapo"] = "grpo"
    dynamic_sampling: DynamicSamplingSection = DynamicSamplingSection()

    learning_rate: float = Field(1.0e-5, gt=0.0)
    beta: float = Field(0.001, ge=0.0)  # beta_KL
    epsilon: float = Field(0.2, gt=0.0)  # PPO clip
    epsilon_high: float | None = None
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"] = "grpo"  # TRL 1.16's
    scale_rewards: Literal["group", "batch", "none"] = "group"
    num_generations: int = Field(16, ge=2)  # G
    max_prompt_length: int = Field(256, ge=1, le=MAX_TOKENS)  # prompts longer than this are dropped (and counted)
    max_completion_length: int = Field(1024, ge=1, le=MAX_TOKENS)
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    per_device_train_batch_size: int = Field(128, ge=1)  # completions per device: 8 prompts x G=16 (000 Table 6)
    gradient_accumulation_steps: int = Field(3, ge=1)
    # micro-batches per generation batch (TRL's; default: gradient_accumulation_steps, one update per
    # generation). 2 x gradient_accumulation_steps gives verl's two mini-batch updates (003 Table 7).
    steps_per_generation: int | None = Field(None, ge=1)
    max_steps: int = 100  # -1: train num_train_epochs epochs
    num_train_epochs: float = Field(1.0, gt=0.0)
    lr_scheduler_type: _Scheduler = "cosine"
    warmup_ratio: float = Field(0.03, ge=0.0, lt=1.0)
    optim: _Optimizer = "adamw_8bit"
    max_grad_norm: float = Field(1.0, gt=0.0)
    bf16: bool = True
    tf32: bool = True  # CUDA only (Ampere+); ignored on CPU
    gradient_checkpointing: bool = True
    mask_truncated_completions: bool = False
    importance_sampling_level: Literal["token", "sequence"] = "token"
    # vLLM rollouts (TRL's fields, passed through). Whether vLLM and CUDA exist is checked when a
    # run starts, not here: the same params load on a laptop and run on the cluster.
    use_vllm: bool = True
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_gpu_memory_utilization: float = Field(0.4, gt=0.0, le=1.0)  # colocate only; a server takes its own flag
    # vLLM's context (TRL's vllm_max_model_length). None: max_prompt_length + max_completion_length, never the
    # model's own context (Llama-3.1's 131,072 tokens need 16 GiB of KV cache for one sequence)
    vllm_max_model_length: int | None = Field(None, ge=1, le=MAX_TOKENS)
    # server mode: where `trl vllm-serve --model ...` runs (other GPUs or another node); base_url wins
    vllm_server_base_url: str | None = None  # e.g. http://10.0.0.5:8000
    vllm_server_host: str | None = None  # e.g. 10.0.0.5 (with vllm_server_port)
    vllm_server_port: int = Field(8000, ge=1, le=65535)
    vllm_server_timeout: float = Field(240.0, gt=0.0)  # seconds the trainer waits for the server to answer
    logging_steps: int = Field(1, ge=1)
    # live metrics through transformers' own integration: tensorboard writes event files into the run
    # folder (<output_dir>/runs/), no server, no network; trackio and wandb need their package
    report_to: _Tracker = Field("tensorboard", validate_default=True)
    save_steps: int = Field(50, ge=1)
    save_total_limit: int | None = 4
    seed: int = 42
    allow_hub_upload: bool = False  # let extra: set push_to_hub / hub_* (an upload with your HF token)
    extra: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") == "dapo":
            data = {**_DAPO_PRESET, **data}
            ds = data.get("dynamic_sampling")
            if ds is None or isinstance(ds, dict):
                data["dynamic_sampling"] = {"enabled": True, **(ds or {})}
        return data

    @model_validator(mode="after")
    def _groups_fill_the_batch(self) -> "GRPOSection":
        completions = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if completions % self.num_generations:
            raise ParamError("per_device_train_batch_size", (
                f"per_device_train_batch_size x gradient_accumulation_steps = {completions} completions "
                f"is not a multiple of num_generations = {self.num_generations} (every prompt's group of "
                f"G completions must fit in one step)"))
        spg = self.steps_per_generation
        if spg is not None and (self.per_device_train_batch_size * spg) % self.num_generations:
            raise ParamError("steps_per_generation", (
                f"per_device_train_batch_size x steps_per_generation = {self.per_device_train_batch_size * spg} "
                f"completions per generation batch is not a multiple of num_generations = {self.num_generations}"))
        return self

    @field_validator("vllm_server_host")
    @classmethod
    def _host(cls, host: str | None) -> str | None:
        return host_name(host)

    @model_validator(mode="after")
    def _vllm_context_holds_a_rollout(self) -> "GRPOSection":
        need = self.max_prompt_length + self.max_completion_length
        if self.vllm_max_model_length is not None and self.vllm_max_model_length < need:
            raise ParamError("vllm_max_model_length", (
                f"{self.vllm_max_model_length} tokens cannot hold a rollout: max_prompt_length + "
                f"max_completion_length = {need}"))
        return self

    def vllm_context(self) -> int:
        """The context vLLM is started with: ``vllm_max_model_length``, else prompt + completion."""
        return self.vllm_max_model_length or self.max_prompt_length + self.max_completion_length

    @model_validator(mode="after")
    def _vllm_server_is_named(self) -> "GRPOSection":
        url = self.vllm_server_base_url
        if url is not None and not re.match(r"https?://[^/\s]+", url):
            raise ParamError("vllm_server_base_url", f"must be an http:// or https:// URL such as "
                                                     f"http://10.0.0.5:8000 (got {short_repr(url)})")
        if url and self.vllm_server_host:
            raise ParamError("vllm_server_base_url", "set vllm_server_base_url or vllm_server_host (+ port), "
                                                     "not both: TRL ignores host and port when base_url is given")
        if self.use_vllm and self.vllm_mode == "server" and not (url or self.vllm_server_host):
            raise ParamError("vllm_server_host", "vllm_mode: server needs where `trl vllm-serve` runs: "
                                                 "vllm_server_host (and vllm_server_port) or vllm_server_base_url")
        return self


class SFTSection(_TrainerSection):
    """TRL ``SFTConfig`` knobs. Defaults: SEVA's SFT (002 §2.4, Table 8: 3 epochs, 4 x 4 batch,
    lr 2e-5 cosine, warmup 0.05, weight decay 0.01, max length 1280, bf16, checkpointing)."""

    trl_kind = "sft"

    learning_rate: float = Field(2.0e-5, gt=0.0)
    num_train_epochs: float = Field(3.0, gt=0.0)
    max_steps: int = -1  # > 0 overrides epochs
    per_device_train_batch_size: int = Field(4, ge=1)
    gradient_accumulation_steps: int = Field(4, ge=1)
    max_length: int = Field(1280, ge=16, le=MAX_TOKENS)
    lr_scheduler_type: _Scheduler = "cosine"
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.01, ge=0.0)
    bf16: bool = True
    gradient_checkpointing: bool = True
    logging_steps: int = Field(1, ge=1)
    report_to: _Tracker = Field("tensorboard", validate_default=True)  # as grpo.report_to
    save_steps: int = Field(200, ge=1)
    save_total_limit: int | None = 2
    seed: int = 42
    allow_hub_upload: bool = False  # as grpo.allow_hub_upload
    extra: dict[str, Any] = {}


MAX_JUDGE_BACKOFF_S = 3600.0  # one request's retry sleeps, together (judges.transport.MAX_TOTAL_BACKOFF_S at run time)


def _duration(seconds: float) -> str:
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.0f} s"


class JudgeSection(Section):
    """An LLM judge behind ``factlab.judges.make_judge`` (one interface, three backends).

    ``transformers`` runs locally (left-padded batches); ``vllm`` is the offline engine
    (``pip install factlab[gpu]``); ``openai`` calls any OpenAI-compatible server such as
    ``vllm serve`` at ``base_url``. The API key is read from the environment variable
    named by ``api_key_env``, never from params, and never logged. ``prefill`` starts every
    JSON answer with its key (``{"SCORE": ``), for judges too small to follow the format.

    ``base_url`` may list several endpoints serving the same model (replicas): requests are
    balanced over them (least in flight), an endpoint that stops answering is set aside and its
    requests go to the others. ``prefill_mode`` says how the endpoint honours a prefill:
    ``continue`` (vLLM's ``continue_final_message``), ``completions`` (``/completions`` with the
    chat template applied locally by ``model``'s tokenizer), ``none`` (the prefix is not sent)."""

    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    model: _ModelFolder = "smollm2-135m-instruct"
    dtype: Dtype = "float32"
    device: _Device = "auto"
    system: str | None = None
    batch_size: int = Field(16, ge=1)
    max_new_tokens: int = Field(256, ge=1, le=MAX_TOKENS)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = 0
    enable_thinking: bool | None = None  # Qwen3 chat templates: False = no <think> block
    max_prompt_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)  # transformers: left-truncate longer prompts
    prefill: bool = False
    # openai backend
    # e.g. http://localhost:8000/v1, or a list of replicas; written to config.yaml with credentials redacted
    base_url: str | list[str] | None = None
    api_key_env: str = "OPENAI_API_KEY"  # *_API_KEY, a provider token (HF_TOKEN, ...), or one in allowed_key_envs
    allowed_key_envs: list[str] = []  # other variable names that may be sent as the API key
    allow_key_over_http: bool = False  # send the key over plain http:// to a host that is not this machine
    concurrency: int = Field(8, ge=1)
    timeout_s: float = Field(120.0, gt=0.0, le=86_400.0)  # 1e308 passed and every request failed (OverflowError)
    max_retries: int = Field(4, ge=0, le=100)
    backoff_s: float = Field(1.0, ge=0.0)  # sleeps backoff_s * 2**attempt; at most MAX_JUDGE_BACKOFF_S in all
    max_retry_after_s: float = Field(60.0, gt=0.0)  # a longer Retry-After fails the request instead of sleeping
    health_check: bool = True  # GET {base_url}/models on every endpoint when the judge is built
    prefill_mode: Literal["continue", "completions", "none"] = "continue"
    tokenizer: str | None = None  # prefill_mode completions: HF id or path of the chat template (default: model)
    price_per_1k_prompt_tokens: float | None = Field(None, ge=0.0)  # dollars; for the cost estimate
    price_per_1k_completion_tokens: float | None = Field(None, ge=0.0)
    # vllm backend
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)
    max_model_len: int | None = Field(None, ge=1, le=MAX_TOKENS)
    # on-disk cache keyed by (backend model, system, prompt, sampling)
    cache: bool = True
    cache_dir: str | None = None  # None = <factlab cache>/judge_cache

    def endpoints(self) -> list[str]:
        """``base_url`` as a list (one URL or several; empty when unset)."""
        if not self.base_url:
            return []
        return [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)

    @model_validator(mode="after")
    def _backoff_is_bounded(self) -> "JudgeSection":
        total = self.backoff_s * (2.0 ** self.max_retries - 1)
        if total > MAX_JUDGE_BACKOFF_S:
            raise ParamError("max_retries", f"max_retries: {self.max_retries} with backoff_s: {self.backoff_s:g} "
                                            f"schedules {_duration(total)} of sleeps for one failing request; at most "
                                            f"{MAX_JUDGE_BACKOFF_S:,.0f} s: lower max_retries or backoff_s")
        return self

    @model_validator(mode="after")
    def _key_variable_looks_like_a_key(self) -> "JudgeSection":
        problem = api_key_env_problem(self.api_key_env, self.allowed_key_envs)
        if problem:
            raise ParamError("api_key_env", problem)
        return self

    @model_validator(mode="after")
    def _endpoint_for_openai(self) -> "JudgeSection":
        if self.backend == "openai" and not self.base_url:
            raise ParamError("base_url", "the openai backend needs base_url (e.g. http://localhost:8000/v1)")
        many = isinstance(self.base_url, list)
        seen: set[str] = set()
        for i, url in enumerate(self.endpoints()):
            where = f"base_url.{i}" if many else "base_url"
            if not url.strip():
                raise ParamError(where, "an endpoint URL is empty")
            try:
                parts = urlsplit(url)
                host = parts.hostname
                parts.port  # noqa: B018  (ValueError for a port that is not a number)
            except ValueError:
                raise ParamError(where, f"{redact_url(url)} is not a URL (a host, then an optional numeric port; "
                                        "percent-encode / ? # @ in a password)") from None
            if parts.scheme.lower() not in ("http", "https") or not host:
                raise ParamError(where, f"{redact_url(url)} is not an http:// or https:// URL with a host")
            if url.rstrip("/") in seen:
                raise ParamError(where, f"{redact_url(url)} is listed twice")
            seen.add(url.rstrip("/"))
            key_set = self.backend == "openai" and bool(os.environ.get(self.api_key_env))
            problem = key_destination_problem(self.api_key_env, url, self.allowed_key_envs) if key_set else None
            if problem:
                raise ParamError(where, problem)
            if key_set and sends_key_in_clear(url) and not self.allow_key_over_http:
                raise ParamError(where, f"${self.api_key_env} is set and {redact_url(url)} is plain http:// "
                                        "to another machine: the key would travel unencrypted; use https://, or "
                                        "set judge.allow_key_over_http: true")
        return self


class SweepRaySection(Section):
    """Ray executor of a sweep: where to connect and what each point's task requests."""

    address: str | None = None  # None: start a local Ray instance; "auto" or "ray://head:10001": a cluster
    num_cpus: float = Field(1.0, ge=0.0)
    num_gpus: float = Field(0.0, ge=0.0)  # e.g. 1: one GPU per point
    resources: dict[str, float] = {}  # custom Ray resources per point


class SweepSection(Section):
    """``factlab sweep``: a grid of params overrides, one notebook run per point
    (``factlab.sweep``). ``grid`` maps a dotted key path (list items by index:
    ``rewards.0.args.alpha``) to its values; a mapping value is merged into the mapping there."""

    grid: dict[str, list[Any]] = {}
    executor: Literal["local", "ray"] = "local"
    max_workers: int = Field(1, ge=1)  # local: processes; ray (local instance): CPUs
    metric: str | None = None  # dotted path in a run's metrics.json, plotted per point
    ray: SweepRaySection = SweepRaySection()

    @model_validator(mode="after")
    def _values_are_lists(self) -> "SweepSection":
        empty = sorted(k for k, v in self.grid.items() if not v)
        if empty:
            raise ParamError(f"grid.{empty[0]}", "needs at least one value")
        return self
