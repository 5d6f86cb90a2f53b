"""Typed configs loaded from ``params/*.yaml``: the one config loader of factlab.

Every notebook has one config class (registered in ``NOTEBOOK_CONFIGS`` under the
notebook's stem). A params file may name a ``base:`` file (relative to itself) whose
values it overrides key by key, so ``*_smoke.yaml`` states only what differs from the
full-scale file. Unknown keys and ill-typed values fail with the dotted key path, the
expected type and the file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

T = TypeVar("T", bound="Section")


class ConfigError(ValueError):
    """A params file that does not validate; the message names every bad key."""


class Section(BaseModel):
    """Base of every config block: unknown keys are errors, values are validated on set."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())


class ModelConfig(Section):
    """Which model to load: the embedded default alias, an HF id, or a local folder."""

    name: str = "smollm2-135m-instruct"
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    device: str = "auto"  # "auto" picks cuda when available, else cpu
    adapter: str | None = None  # a PEFT adapter folder to load on top


class GenerationConfig(Section):
    """Sampling settings; defaults are the greedy evaluation of 000 §A.3."""

    max_new_tokens: int = Field(1000, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    batch_size: int = Field(16, ge=1)
    seed: int = 0


class WorldConfig(Section):
    """The bundled countryinfo mini-world (see ``factlab.data.miniworld``)."""

    dir: str | None = None  # default: the user cache folder
    heldout_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    seed: int = 0


class EvalDataConfig(Section):
    """One evaluation set: ``miniworld`` or a benchmark name from ``factlab.data.benchmarks``."""

    name: str = "miniworld"
    split: str = "heldout"  # miniworld: train | heldout; benchmarks: the HF split
    path: str | None = None  # local JSONL in the dataset's own field layout
    hf_id: str | None = None
    limit: int | None = Field(None, ge=1)
    seed: int = 0


class LoraSection(Section):
    """LoRA adapter (peft). Defaults: CorVer's r=128, alpha=256, dropout 0, no bias, all seven
    projections (000_ac66a963fabf3916.txt §A.1)."""

    r: int = Field(128, ge=1)
    alpha: int = Field(256, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class GRPOSection(Section):
    """TRL ``GRPOConfig`` knobs. Defaults: CorVer's Tables 5-7 and the headline row of
    Table 6 (000 §A.1). ``extra`` passes any other GRPOConfig field through unchanged."""

    learning_rate: float = Field(1.0e-5, gt=0.0)
    beta: float = Field(0.001, ge=0.0)  # beta_KL
    epsilon: float = Field(0.2, gt=0.0)  # PPO clip
    epsilon_high: float | None = None
    loss_type: str = "grpo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    num_generations: int = Field(16, ge=2)  # G
    max_prompt_length: int = Field(256, ge=1)  # prompts longer than this are dropped (and counted)
    max_completion_length: int = Field(1024, ge=1)
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    per_device_train_batch_size: int = Field(8, ge=1)  # completions per device per step
    gradient_accumulation_steps: int = Field(3, ge=1)
    max_steps: int = Field(100, ge=1)
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = Field(0.03, ge=0.0, lt=1.0)
    optim: str = "adamw_8bit"
    max_grad_norm: float = Field(1.0, gt=0.0)
    bf16: bool = True
    tf32: bool = True  # CUDA only (Ampere+); ignored on CPU
    gradient_checkpointing: bool = True
    mask_truncated_completions: bool = False
    importance_sampling_level: Literal["token", "sequence"] = "token"
    use_vllm: bool = True
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_gpu_memory_utilization: float = Field(0.4, gt=0.0, le=1.0)
    logging_steps: int = Field(1, ge=1)
    save_steps: int = Field(50, ge=1)
    save_total_limit: int | None = 4
    seed: int = 42
    extra: dict[str, Any] = {}


class JudgeSection(Section):
    """An LLM judge behind ``factlab.judges.make_judge`` (one interface, three backends).

    ``transformers`` runs locally (left-padded batches); ``vllm`` is the offline engine
    (``pip install factlab[gpu]``); ``openai`` calls any OpenAI-compatible server such as
    ``vllm serve`` at ``base_url``. The API key is read from the environment variable
    named by ``api_key_env``, never from params, and never logged."""

    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    model: str = "smollm2-135m-instruct"
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    device: str = "auto"
    system: str | None = None
    batch_size: int = Field(16, ge=1)
    max_new_tokens: int = Field(256, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = 0
    enable_thinking: bool | None = None  # Qwen3 chat templates: False = no <think> block
    max_prompt_tokens: int | None = Field(None, ge=1)  # transformers: left-truncate longer prompts
    # openai backend
    base_url: str | None = None  # e.g. http://localhost:8000/v1
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = Field(8, ge=1)
    timeout_s: float = Field(120.0, gt=0.0)
    max_retries: int = Field(4, ge=0)
    backoff_s: float = Field(1.0, ge=0.0)
    # vllm backend
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)
    max_model_len: int | None = Field(None, ge=1)
    # on-disk cache keyed by (backend model, system, prompt, sampling)
    cache: bool = True
    cache_dir: str | None = None  # None = <factlab cache>/judge_cache


class QuickstartConfig(Section):
    """``notebooks/00_quickstart.ipynb``: evaluate a model on short-form QA (000 §4)."""

    model: ModelConfig = ModelConfig()
    world: WorldConfig = WorldConfig()
    eval: list[EvalDataConfig] = [EvalDataConfig()]
    generation: GenerationConfig = GenerationConfig()
    trained_prompt: bool = False  # add the anti-loop line (000 §A.3) for adapter checkpoints


class IndexSection(Section):
    """The infini-gram co-occurrence index (000 §3.2, §B.1)."""

    corpus: str | None = None  # JSONL with a text field; None = the mini-world corpus
    text_field: str = "text"
    dir: str | None = None  # None = <cache>/indexes/<corpus>-<tokenizer>
    tokenizer: str | None = None  # None = the policy's tokenizer
    shard_tokens: int = Field(500_000_000, ge=1)
    window: int = Field(1000, ge=1)  # W, tokens


class ExtractorSection(Section):
    """Triplet extractor (000 §3.2): ``heuristic`` (CPU smoke) or an HF causal LM id/path."""

    name: str = "heuristic"
    batch_size: int = Field(32, ge=1)
    max_new_tokens: int = Field(96, ge=1)
    rule: Literal["first", "min", "relcheck"] = "first"  # 000 §6.4, §B.3


class CorVerRewardSection(Section):
    """CorVer reward constants (000 §4 "Implementation details", Table 8)."""

    lambda_f: float = 1.0
    lambda_j: float = 1.0
    lambda_c: float = 1.0
    judge_rewards: dict[Literal["GOOD", "BAD", "NA"], float] = {"GOOD": 2.0, "BAD": -1.0, "NA": -1.0}
    format_rewards: tuple[float, float] = (1.0, -1.0)
    count_thresholds: tuple[int, int] = (5, 20)  # tau_1, tau_2
    count_rewards: tuple[float, float, float, float] = (-0.3, -0.1, 0.0, 0.1)  # alpha_0..alpha_3
    alignment_min: float = Field(0.5, ge=0.0, le=1.0)  # rho_min
    answer_parsing: Literal["lenient", "strict"] = "lenient"


class SelfFilterSection(Section):
    """Learning-zone self-filter (000 §A.2, §A.4)."""

    enabled: bool = True
    num_samples: int = Field(16, ge=1)  # G
    temperature: float = Field(0.7, ge=0.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(512, ge=1)
    batch_size: int = Field(8, ge=1)
    anchors: int = Field(0, ge=0)  # n_correct = G questions mixed back in (1,000 for 3B, 800 for 4B)
    lenient: bool = True
    seed: int = 42


class TrainDataConfig(EvalDataConfig):
    """The candidate question pool (000 §A.2: NQ-Open train + WebQuestions)."""

    split: str = "train"


class CalibrationSection(Section):
    """Calibration audit (000 §6.1, §B.5): labelled sentences, or the mini-world claims."""

    labelled: str | None = None  # JSONL with sentence + label; None = mini-world true/perturbed claims
    limit: int | None = Field(None, ge=1)
    seed: int = 0


class CorVerConfig(Section):
    """``notebooks/01_corver.ipynb``: CorVer end to end (000_ac66a963fabf3916.txt)."""

    model: ModelConfig = ModelConfig()
    world: WorldConfig = WorldConfig()
    index: IndexSection = IndexSection()
    extractor: ExtractorSection = ExtractorSection()
    reward: CorVerRewardSection = CorVerRewardSection()
    train_data: TrainDataConfig = TrainDataConfig()
    self_filter: SelfFilterSection = SelfFilterSection()
    grpo: GRPOSection = GRPOSection()
    lora: LoraSection = LoraSection()
    runs: list[Literal["full", "A1", "A2", "A3"]] = ["full", "A1"]  # trained from the same start
    eval: list[EvalDataConfig] = [EvalDataConfig()]
    eval_generation: GenerationConfig = GenerationConfig()
    calibration: CalibrationSection = CalibrationSection()
    trace_completions: int = Field(3, ge=0)  # per-sentence traces shown (§B.6)


class SFTSection(Section):
    """TRL ``SFTConfig`` knobs. Defaults: SEVA's SFT (002 §2.4, Table 8)."""

    learning_rate: float = Field(2.0e-5, gt=0.0)
    num_train_epochs: float = Field(3.0, gt=0.0)
    max_steps: int = -1  # > 0 overrides epochs
    per_device_train_batch_size: int = Field(8, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    max_length: int = Field(2048, ge=16)
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = Field(0.03, ge=0.0, lt=1.0)
    bf16: bool = True
    gradient_checkpointing: bool = True
    logging_steps: int = Field(1, ge=1)
    save_steps: int = Field(200, ge=1)
    save_total_limit: int | None = 2
    seed: int = 42
    extra: dict[str, Any] = {}


class PairDataConfig(Section):
    """Claim/source pairs: ``miniworld`` (Table 19 perturbations) or a ``factlab.data.pairs``
    dataset (clearfacts, fever, halueval, truthfulqa, anli) by HF id or local JSONL."""

    name: str = "miniworld"
    path: str | None = None
    hf_id: str | None = None
    split: str | None = None
    limit: int | None = Field(None, ge=2)
    seed: int = 0

    @field_validator("name")
    @classmethod
    def _known_dataset(cls, name: str) -> str:
        from .data.pairs import PAIR_DATASETS  # lazy: keeps `import factlab.config` light

        known = ["miniworld", *PAIR_DATASETS]
        if name not in known:
            raise ValueError(f"unknown pair dataset {name!r}; known: {', '.join(known)}")
        return name


class TeacherSection(Section):
    """Teacher annotation (002 §2.4, B.1): any judge backend with the K.1 system prompt."""

    judge: JudgeSection = JudgeSection()
    limit: int | None = Field(None, ge=1)  # pairs to annotate (None = all training pairs)
    max_attempts: int = Field(3, ge=1)
    require_gold_label: bool = True
    reference_fallback: bool = False  # mini-world: rejected pairs get a reference annotation


class SelfEvolutionSection(Section):
    """Verify -> Reflect -> Probe -> Refine (002 §2.5, App. F)."""

    rounds: int = Field(1, ge=0)
    probe_budget: int = Field(60, ge=1)  # perturbed pairs generated per round (each with its twin)
    refine_steps: int = Field(50, ge=1)  # GRPO steps on the probe set per round


class SevaConfig(Section):
    """``notebooks/03_seva.ipynb``: SEVA end to end (002_56f1a732f42030d3.txt)."""

    model: ModelConfig = ModelConfig()
    world: WorldConfig = WorldConfig()
    train_data: PairDataConfig = PairDataConfig()
    eval: list[PairDataConfig] = [PairDataConfig()]
    teacher: TeacherSection = TeacherSection()
    sft: SFTSection = SFTSection()
    grpo: GRPOSection = GRPOSection()
    grpo_rewards: list[Literal["process", "binary"]] = ["process", "binary"]
    reward_weights: str = "70/30"  # Table 21 split name; 70/30 = the paper's default weights
    lora: LoraSection | None = LoraSection()
    eval_generation: GenerationConfig = GenerationConfig()
    self_evolution: SelfEvolutionSection = SelfEvolutionSection()


RAR_REWARDS = ("binary_rar", "rating_rar", "veriscore", "lm_judge")


class DatastoreSection(Section):
    """Retrieval datastore of Binary RAR (001 §3.2, §4.2-4.3): BM25 (bm25s) over chunks."""

    corpus: str | None = None  # JSONL (id, title?, text); None = the mini-world corpus
    text_field: str = "text"
    tokenizer: str | None = None  # None = the judge's tokenizer
    chunk_tokens: int = Field(512, ge=8)  # 001 §4.3: 512-token chunks for Binary RAR
    veriscore_chunk_tokens: int = Field(256, ge=8)  # 001 §4.2: 256-token chunks for VeriScore
    overlap: int = Field(0, ge=0)
    top_k: int = Field(8, ge=1)  # 001 §4.3: top 8 chunks per response
    veriscore_top_k: int = Field(4, ge=1)  # 001 §4.2: top 4 chunks per claim
    precache_docs: int = Field(10, ge=1)  # 001 §3.2 DS_cache(x): documents per prompt
    dir: str | None = None  # None = <cache>/datastores/<corpus>-<tokenizer>-<chunk_tokens>


class RARRewardSection(Section):
    """Which reward trains the policy, which are compared, and judge-format help."""

    train: Literal["binary_rar", "rating_rar", "veriscore", "lm_judge"] = "binary_rar"
    compare: list[Literal["binary_rar", "rating_rar", "veriscore", "lm_judge"]] = list(RAR_REWARDS)
    prefill: bool = False  # start judge answers with the JSON key (judges too small for the format)
    max_claims: int = Field(32, ge=1)  # VeriScore: claims verified per response
    claim_max_new_tokens: int | None = Field(None, ge=1)  # claim extraction budget; None = judge's


class LongformPromptsSection(Section):
    """Long-form prompts: JSONL (id, prompt, reference?) or the mini-world's
    "Tell me about <country>." with the country's article as reference."""

    path: str | None = None
    heldout_path: str | None = None
    train_limit: int | None = Field(None, ge=1)
    eval_limit: int | None = Field(None, ge=1)
    seed: int = 0


class EarlyStoppingSection(Section):
    """001 §4.3: stop when any utility benchmark drops more than 10% from the start."""

    enabled: bool = True
    eval_every: int = Field(50, ge=1)
    max_relative_drop: float = Field(0.10, gt=0.0, lt=1.0)
    lm_eval_tasks: list[str] = []  # run with lm-evaluation-harness when it is installed
    qa_limit: int = Field(64, ge=1)  # fallback utility: forced-answer QA accuracy on this many items


class RewardCompareSection(Section):
    """Figure 4-style comparison of every reward on the same responses."""

    prompts: int = Field(8, ge=1)  # heldout prompts; each gets one true and one perturbed response
    policy_samples: int = Field(2, ge=0)  # plus this many base-policy samples per prompt


class RARConfig(Section):
    """``notebooks/02_binary_rar.ipynb``: Binary RAR end to end (001_f9c1f8134c3dd554.txt)."""

    model: ModelConfig = ModelConfig()
    world: WorldConfig = WorldConfig()
    judge: JudgeSection = JudgeSection()
    datastore: DatastoreSection = DatastoreSection()
    reward: RARRewardSection = RARRewardSection()
    prompts: LongformPromptsSection = LongformPromptsSection()
    compare: RewardCompareSection = RewardCompareSection()
    grpo: GRPOSection = GRPOSection()
    lora: LoraSection | None = LoraSection()  # None = full fine-tuning
    early_stopping: EarlyStoppingSection = EarlyStoppingSection()
    eval: list[EvalDataConfig] = [EvalDataConfig()]  # short-form QA, abstain and forced modes
    eval_generation: GenerationConfig = GenerationConfig()
    longform_generation: GenerationConfig = GenerationConfig()
    longform_recall_k: int = Field(10, ge=1)  # K of Recall@K / F1@K in the long-form evaluation


NOTEBOOK_CONFIGS: dict[str, type[Section]] = {
    "00_quickstart": QuickstartConfig,
    "01_corver": CorVerConfig,
    "02_binary_rar": RARConfig,
    "03_seva": SevaConfig,
}


def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_params(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a params YAML into a plain dict, resolving its ``base:`` chain."""
    path = Path(path).resolve()
    if not path.exists():
        raise ConfigError(f"params file not found: {path}")
    if path in _seen:
        raise ConfigError(f"{path}: 'base' chain loops back to itself")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is not None:
        data = _merge(read_params(path.parent / base, _seen + (path,)), data)
    return data


def _describe(err: dict, cls: type[BaseModel]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        return f"unknown key '{loc}'"
    got = err.get("input")
    got_s = repr(got)
    if len(got_s) > 60:
        got_s = got_s[:57] + "..."
    return f"'{loc}': {err['msg']} (got {got_s})"


def validate(data: dict[str, Any], cls: type[T], source: str = "<dict>") -> T:
    """Validate a dict into ``cls``; raise ``ConfigError`` listing every bad key path."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        lines = [_describe(err, cls) for err in e.errors()]
        raise ConfigError(
            f"{source}: invalid {cls.__name__}:\n  " + "\n  ".join(lines)
        ) from None


def load_config(path: str | Path, cls: type[T], overrides: dict[str, Any] | None = None) -> T:
    """Load and validate a params file (plus optional nested ``overrides``) into ``cls``."""
    data = read_params(path)
    if overrides:
        data = _merge(data, overrides)
    return validate(data, cls, source=str(path))


def config_for_notebook(stem: str) -> type[Section]:
    """The config class of a notebook stem such as ``00_quickstart``."""
    try:
        return NOTEBOOK_CONFIGS[stem]
    except KeyError:
        raise ConfigError(
            f"no config registered for notebook '{stem}'; known: {sorted(NOTEBOOK_CONFIGS)}"
        ) from None


def dump_config(cfg: BaseModel) -> str:
    """The fully-resolved config as YAML (written into every run folder)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
