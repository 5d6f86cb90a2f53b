"""GPU memory planner: what one rank of a params file holds, term by term, per stage.

    plan = plan_config(cfg, gpus=8, gpu_mem_gb=80)       # -> Plan (the first strategy that fits)
    print(plan.describe()); plan.fits; plan.problem       # the term that does not fit

Pure arithmetic over the validated params and each model's ``config.json`` shape (shipped for
the models the full params name, under ``factlab/model_configs/``; a local model folder's own
``config.json`` otherwise). Nothing is loaded and no GPU is needed. Each term cites its rule:

- weights, gradients, optimizer states: 2 + 2 + K bytes per parameter for mixed-precision Adam
  with K = 12 (fp32 master copy, momentum, variance): 16 bytes per parameter, sharded over N
  ranks by ZeRO stage 1 (optimizer), 2 (+ gradients), 3 (+ weights) (Rajbhandari et al. 2020,
  "ZeRO", §5.1-5.3 and Figure 1). Without DeepSpeed, factlab keeps the master weights in the
  model itself (loaded in fp32, bf16 autocast): 4 + 4 + 8 bytes (AdamW) or 4 + 4 + 2
  (8-bit AdamW, bitsandbytes: two 1-byte states); autocast caches a bf16 copy of every weight it
  casts until the forward ends: 2 bytes per parameter more.
- LoRA: the frozen base at its load dtype plus r x (in + out) fp32 parameters per adapted
  projection, each with its fp32 gradient and Adam states.
- the reference model (grpo.beta > 0 without LoRA; TRL builds one, in bf16 here).
- activations: per layer and token, 2 bytes x (6 h + 4 i + 2 kv) for a pre-norm decoder with
  a SwiGLU MLP under SDPA / flash attention (no seq x seq scores stored; Korthikanti et al.
  2022, §4.1, adapted from GPT's 4h MLP); with gradient checkpointing only every layer's input
  (2 h bytes a token) plus one layer recomputed.
- logits: micro-batch x completion tokens x vocabulary x 2 bytes (bf16), twice (TRL's
  temperature-scaled copy, then its gradient).
- vLLM (colocated): ``vllm_gpu_memory_utilization`` x the GPU, which must hold its bf16 weights,
  ``VLLM_WORKSPACE`` of activations and CUDA graphs, and the KV cache of one sequence of
  ``vllm_max_model_length`` tokens (2 x layers x kv_heads x head_dim x 2 bytes a token).
- judges and reward models on this GPU (vllm backend: their share; transformers backend,
  ``general_rm``, the KLCF truthfulness RM, CorVer's extractor: their weights).
- ``CUDA_CONTEXT``: the CUDA context, NCCL buffers and allocator slack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import yaml
from pydantic import BaseModel

from .models import EMBEDDED_MODELS, TINY_MODELS, resolve_model
from .sections import JudgeSection

__all__ = ["GB", "ModelShape", "PlanError", "Strategy", "STRATEGIES", "Term", "StagePlan", "Plan", "model_shape",
           "zero_bytes", "lora_params", "plan_config", "strategy_from_accelerate", "auto_strategies"]

GB = 1e9
GiB = 1 << 30
CUDA_CONTEXT = 3 * GiB  # CUDA context (~0.5 GiB), NCCL buffers, allocator fragmentation
VLLM_WORKSPACE = 2 * GiB  # vLLM's profiled activations and CUDA graphs, beside weights and KV cache
ZERO3_LIVE_PARAMS = 1e9  # DeepSpeed's stage3_max_live_parameters default (parameters gathered at once)
OFFLOAD_GRAD_BUCKETS = 1e9  # bytes of bf16 gradient buckets ZeRO-Offload keeps on the GPU (reduce + 2 x prefetch)
# a shipped config under another name: the model it is a fine-tune of (same shape)
ALIASES = {"QuCo-extractor-0.5B": "Qwen/Qwen2.5-0.5B-Instruct"}  # 000 §3.2: Qwen2.5-0.5B-Instruct fine-tuned
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}  # auto: the checkpoints' bf16


class PlanError(ValueError):
    """A model whose shape is unknown, or a strategy that does not exist."""


# ---------------------------------------------------------------- model shapes

@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer that memory depends on (from ``config.json``)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    max_positions: int
    lm_head: bool = True  # False: a sequence classifier (a score head of ``hidden`` weights)
    qkv_bias: bool = False

    @classmethod
    def from_config(cls, name: str, c: dict[str, Any]) -> "ModelShape":
        heads = c["num_attention_heads"]
        arch = " ".join(c.get("architectures") or [])
        return cls(name=name, layers=c["num_hidden_layers"], hidden=c["hidden_size"],
                   intermediate=c["intermediate_size"], heads=heads, kv_heads=c.get("num_key_value_heads", heads),
                   head_dim=c.get("head_dim") or c["hidden_size"] // heads, vocab=c["vocab_size"],
                   tied=bool(c.get("tie_word_embeddings", False)),
                   max_positions=c.get("max_position_embeddings", 4096),
                   lm_head="SequenceClassification" not in arch,
                   qkv_bias=c.get("model_type") == "qwen2" or bool(c.get("attention_bias", False)))

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear projection of one decoder layer."""
        h, i, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def params(self) -> int:
        """Parameter count: embeddings, layers (projections, biases, two norms), final norm, head."""
        layer = sum(a * b for a, b in self.projections().values()) + 2 * self.hidden
        if self.qkv_bias:
            layer += (self.heads + 2 * self.kv_heads) * self.head_dim
        head = (0 if self.tied else self.vocab * self.hidden) if self.lm_head else self.hidden
        return self.vocab * self.hidden + self.layers * layer + self.hidden + head

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache a token: keys and values of every layer (vLLM's and HF's cache)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def activation_bytes_per_token_layer(self) -> int:
        """Saved activations of one layer for one token in bf16 without checkpointing: two norm
        inputs, the QKV input, Q, K, V, the attention output (8 h + 2 kv elements... see the
        module docstring), the MLP input and SwiGLU's gate, up, activated gate and product (4 i)."""
        kv = self.kv_heads * self.head_dim
        return 2 * (6 * self.hidden + 4 * self.intermediate + 2 * kv)


def _shipped(name: str) -> dict[str, Any] | None:
    fname = ALIASES.get(name, name).replace("/", "__") + ".json"
    path = resources.files("factlab") / "model_configs" / fname
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def model_shape(name: str, embedded: bool = True) -> ModelShape:
    """The shape of ``name``: its shipped ``config.json`` (``factlab/model_configs``), the
    ``config.json`` of a local model folder, or (``embedded``) of factlab's embedded model's cached
    folder; ``PlanError`` naming the model otherwise."""
    config, folder = _shipped(name), name
    if config is None and embedded and (name in EMBEDDED_MODELS or name in TINY_MODELS or name == "default"):
        folder = resolve_model(name)  # factlab's embedded models: their cached folder (built on first use)
    if config is None:
        local = Path(folder).expanduser() / "config.json"
        if local.is_file():
            config = json.loads(local.read_text(encoding="utf-8"))
    if config is None:
        raise PlanError(f"no config.json for model {name!r}: add its hub config.json as "
                        f"factlab/model_configs/{name.replace('/', '__')}.json, or name a local model folder")
    return ModelShape.from_config(name, config)


# ---------------------------------------------------------------- sharding rules

@dataclass(frozen=True)
class Strategy:
    """How training state is placed: ZeRO ``stage`` (0: replicated), DeepSpeed's bf16 (weights
    and gradients bf16, fp32 master in the optimizer) or factlab's fp32 model with autocast, and
    what is offloaded to host memory."""

    name: str
    stage: int = 0
    deepspeed: bool = False
    offload_optimizer: bool = False
    offload_params: bool = False
    launch: str = ""  # how to run it

    def __post_init__(self):
        if self.stage not in (0, 1, 2, 3):
            raise PlanError(f"ZeRO stage must be 0-3, got {self.stage}")


STRATEGIES: dict[str, Strategy] = {
    "single": Strategy("single", launch="factlab run (one process), or factlab train --accelerate-config ddp "
                                        "--num-processes 1"),
    "ddp": Strategy("ddp", launch="factlab train --accelerate-config ddp"),
    "zero2": Strategy("zero2", 2, deepspeed=True, launch="factlab train --accelerate-config zero2"),
    "zero3": Strategy("zero3", 3, deepspeed=True, launch="factlab train --accelerate-config zero3"),
    "zero3_offload": Strategy("zero3_offload", 3, deepspeed=True, offload_optimizer=True, offload_params=True,
                              launch="factlab train --accelerate-config zero3_offload"),
    "fsdp2": Strategy("fsdp2", 3, launch="factlab train --accelerate-config fsdp2"),
}


def auto_strategies(gpus: int) -> list[str]:
    """The strategies ``plan_config`` tries, simplest first."""
    return ["single", "zero3_offload"] if gpus == 1 else ["ddp", "zero2", "zero3", "zero3_offload"]


def strategy_from_accelerate(acc: dict[str, Any], name: str = "custom", root: Path | None = None) -> Strategy:
    """A ``Strategy`` from an accelerate config (a ``params/accelerate/*.yaml`` mapping):
    DeepSpeed's ``zero_stage`` and ``offload_*_device``, FSDP (sharded like stage 3, fp32 master).
    A relative ``deepspeed_config_file`` is read from the working directory, else from ``root``
    (the project root, where ``factlab train`` runs)."""
    kind = acc.get("distributed_type", "MULTI_GPU")
    if kind == "DEEPSPEED":
        ds = acc.get("deepspeed_config") or {}
        stage = ds.get("zero_stage", 3 if "deepspeed_config_file" in ds else 0)
        file = ds.get("deepspeed_config_file")
        if file and not Path(file).is_file() and root is not None and (root / file).is_file():
            file = str(root / file)
        if file and Path(file).is_file():
            zo = json.loads(Path(file).read_text(encoding="utf-8")).get("zero_optimization", {})
            stage = zo.get("stage", stage)
            off_o = (zo.get("offload_optimizer") or {}).get("device", "none") != "none"
            off_p = (zo.get("offload_param") or {}).get("device", "none") != "none"
        else:
            off_o = ds.get("offload_optimizer_device", "none") not in ("none", None)
            off_p = ds.get("offload_param_device", "none") not in ("none", None)
        return Strategy(name, int(stage), deepspeed=True, offload_optimizer=off_o, offload_params=off_p and stage == 3,
                        launch=f"factlab train --accelerate-config {name}")
    if kind == "FSDP":
        return Strategy(name, 3, launch=f"factlab train --accelerate-config {name}")
    return Strategy(name, 0, launch=f"factlab train --accelerate-config {name}")


def load_strategy(name_or_path: str, accelerate_dir: Path | None = None) -> Strategy:
    """A strategy by name (``STRATEGIES``), or read from an accelerate YAML (a path, or a stem of
    ``accelerate_dir``)."""
    if name_or_path in STRATEGIES:
        return STRATEGIES[name_or_path]
    path = Path(name_or_path)
    if not path.is_file() and accelerate_dir is not None:
        path = accelerate_dir / f"{name_or_path}.yaml"
    if not path.is_file():
        raise PlanError(f"unknown strategy {name_or_path!r}; known: {', '.join(STRATEGIES)}, or an accelerate YAML")
    return strategy_from_accelerate(yaml.safe_load(path.read_text(encoding="utf-8")) or {}, path.stem,
                                    root=path.resolve().parent.parent.parent)


def zero_bytes(params: float, ranks: int, stage: int, weight_bytes: float = 2, grad_bytes: float = 2,
               optim_bytes: float = 12) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) per rank under ZeRO ``stage`` (ZeRO §5): stage 1
    shards the optimizer states over ``ranks``, stage 2 the gradients too, stage 3 the weights too.
    The defaults are mixed-precision Adam: 2 + 2 + 12 = 16 bytes a parameter."""
    w = weight_bytes * params / (ranks if stage >= 3 else 1)
    g = grad_bytes * params / (ranks if stage >= 2 else 1)
    o = optim_bytes * params / (ranks if stage >= 1 else 1)
    return w, g, o


def lora_params(shape: ModelShape, r: int, targets: Iterable[str]) -> int:
    """LoRA's trainable parameters: r x (in + out) per adapted projection and layer."""
    proj = shape.projections()
    return shape.layers * sum(r * (proj[t][0] + proj[t][1]) for t in targets if t in proj)


def optimizer_bytes(optim: str) -> float:
    """Optimizer state bytes a trainable parameter, master weights excluded: two fp32 Adam
    states (8), or two 8-bit ones (2: bitsandbytes' ``*_8bit``), SGD / Adafactor ~ (4 / ~0)."""
    if "8bit" in optim:
        return 2
    if "4bit" in optim:
        return 1
    if optim.startswith("adafactor"):
        return 0.1
    if optim.startswith("sgd"):
        return 4
    return 8


# ---------------------------------------------------------------- the plan

@dataclass
class Term:
    name: str
    bytes: float
    note: str = ""


@dataclass
class StagePlan:
    """One stage's terms on one rank, against the GPU's memory."""

    stage: str
    what: str
    terms: list[Term]
    gpu_bytes: float
    host: list[Term] = field(default_factory=list)
    problem: str | None = None  # a term that fails on its own (vLLM's share too small, ...)
    one_process: bool = False  # runs in one process whatever the launch

    @property
    def total(self) -> float:
        return sum(t.bytes for t in self.terms)

    @property
    def fits(self) -> bool:
        return self.problem is None and self.total <= self.gpu_bytes

    def why_not(self) -> str | None:
        """The term that does not fit, in words; None when the stage fits."""
        why = [self.problem] if self.problem else []
        if self.total > self.gpu_bytes:
            big = sorted(self.terms, key=lambda t: -t.bytes)[:2]
            why.append(f"{self.total / GB:.1f} GB per rank > {self.gpu_bytes / GB:.0f} GB; the largest terms: "
                       + "; ".join(f"{t.name} {t.bytes / GB:.1f} GB ({t.note})" for t in big))
        return f"{self.stage}: " + "; and ".join(why) if why else None


@dataclass
class Plan:
    notebook: str
    gpus: int
    gpu_mem_gb: float
    strategy: Strategy
    stages: list[StagePlan]
    tried: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.stages)

    @property
    def problem(self) -> str | None:
        return next((s.why_not() for s in self.stages if not s.fits), None)

    def describe(self) -> str:
        lines = [f"{self.notebook} on {self.gpus} x {self.gpu_mem_gb:g} GB: strategy {self.strategy.name} "
                 f"({self.strategy.launch}{'' if self.gpus == 1 else f' --num-processes {self.gpus}'})"]
        if len(self.tried) > 1:
            lines.append(f"  tried in order: {', '.join(self.tried)}")
        for s in self.stages:
            who = "in one process" if s.one_process else f"per rank (each of {self.gpus})"
            lines.append(f"stage {s.stage}, {who}: {s.what}")
            for t in s.terms:
                lines.append(f"  {t.name:<26}{t.bytes / GB:8.1f} GB  {t.note}")
            mark = "fits" if s.fits else "DOES NOT FIT"
            lines.append(f"  {'total':<26}{s.total / GB:8.1f} GB  of {s.gpu_bytes / GB:.0f} GB: {mark}")
            for t in s.host:
                lines.append(f"  host: {t.name:<20}{t.bytes / GB:8.1f} GB  {t.note}")
            if s.problem:
                lines.append(f"  problem: {s.problem}")
        lines.append("plan: fits" if self.fits else f"plan: DOES NOT FIT: {self.problem}")
        return "\n".join(lines)


def _gb(x: float) -> str:
    return f"{x / GB:.1f} GB"


def _walk(node: Any) -> Iterable[Any]:
    """Every pydantic model, dict and list value inside ``node``, depth first."""
    yield node
    if isinstance(node, BaseModel):
        for name in type(node).model_fields:
            yield from _walk(getattr(node, name))
    elif isinstance(node, dict):
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _walk(v)


def _reward_sets(cfg: Any) -> list[list[Any]]:
    """The reward lists runs of ``cfg`` train with, one at a time (the heaviest decides)."""
    sets = [list(getattr(cfg, "rewards", None) or [])]
    for run in getattr(cfg, "runs", None) or []:
        if getattr(run, "rewards", None):
            sets.append(list(run.rewards))
    return sets


def _on_gpu(device: str) -> bool:
    return device in ("auto", "cuda") or device.startswith("cuda")


def _policy_name(cfg: Any) -> str:
    return cfg.model.name


def reward_model_terms(cfg: Any, gpu_bytes: float) -> list[Term]:
    """Judges and reward models a training run of ``cfg`` holds on its GPU (the heaviest run's)."""
    best: list[Term] = []
    for specs in _reward_sets(cfg):
        terms: list[Term] = []
        for spec in specs:
            args = dict(getattr(spec, "args", None) or {})
            if spec.name == "general_rm" and _on_gpu(args.get("device", "auto")):
                name = args.get("model", "Skywork/Skywork-Reward-V2-Llama-3.2-1B")
                dt = args.get("dtype", "float32")
                terms.append(Term(f"reward model ({spec.name})", model_shape(name).params * DTYPE_BYTES[dt],
                                  f"{name} in {dt}"))
            if spec.name in ("klcf_fact", "klcf_truth") and _on_gpu(args.get("rm_device", "auto")):
                variant = args.get("variant", "both")
                if spec.name == "klcf_fact" and variant == "checklist":
                    continue
                name = args.get("rm_model")
                if name is None:
                    rm = getattr(cfg, "truth_rm", None)
                    name = (getattr(rm, "model", None) or cfg.model.name)
                dt = args.get("rm_dtype", "float32")
                terms.append(Term("truthfulness RM", model_shape(name).params * DTYPE_BYTES[dt],
                                  f"{name} in {dt} ({spec.name}.rm_dtype)"))
            if spec.name == "corver":
                ext = getattr(cfg, "extractor", None)
                if ext is not None and ext.name != "heuristic":
                    terms.append(Term("triplet extractor", model_shape(ext.name).params * 2, f"{ext.name} (bf16)"))
        seen: set[int] = set()
        for node in _walk([cfg.judge if hasattr(cfg, "judge") else None, specs]):
            j = None
            if isinstance(node, JudgeSection):
                j = node
            elif isinstance(node, dict) and node.get("backend") in ("vllm", "transformers") and "model" in node:
                j = JudgeSection.model_validate(node)
            if j is None or id(node) in seen:
                continue
            seen.add(id(node))
            if j.backend == "vllm":
                terms.append(Term(f"judge (vllm) {j.model}", j.gpu_memory_utilization * gpu_bytes,
                                  f"gpu_memory_utilization {j.gpu_memory_utilization}"))
            elif j.backend == "transformers" and _on_gpu(j.device):
                try:  # not the embedded default judge (every params file has one; most never build it)
                    size = model_shape(j.model, embedded=False).params * DTYPE_BYTES[j.dtype]
                except PlanError:
                    continue  # a judge model with no config.json to read: its weights are not counted
                terms.append(Term(f"judge {j.model}", size, f"transformers backend, {j.dtype}"))
        if sum(t.bytes for t in terms) >= sum(t.bytes for t in best):
            best = terms
    return best


def policy_state_terms(shape: ModelShape, lora: Any, optim: str, strategy: Strategy, ranks: int,
                       load_bytes: int) -> tuple[list[Term], list[Term], float]:
    """(GPU terms, host terms, trainable parameters) for the trained model's weights, gradients
    and optimizer states on one rank."""
    n = shape.params
    gpu: list[Term] = []
    host: list[Term] = []
    k = optimizer_bytes(optim)
    if lora is not None:
        t = lora_params(shape, lora.r, lora.target_modules)
        base = load_bytes * n / (ranks if strategy.stage >= 3 else 1)
        if strategy.offload_params:
            host.append(Term("frozen base", base, "ZeRO-3 param offload"))
            base = min(n, ZERO3_LIVE_PARAMS) * load_bytes
        w, g, o = zero_bytes(t, ranks, strategy.stage, 4, 4, k)
        gpu += [Term("weights", base + w, f"frozen base {n / 1e9:.2f} B params x {load_bytes} B + LoRA r={lora.r} "
                                          f"{t / 1e6:.0f} M params x 4 B"),
                Term("gradients", g, "LoRA fp32"), Term("optimizer states", o, f"{optim}: {k:g} B a LoRA param")]
        return gpu, host, t
    if strategy.deepspeed:
        w, g, o = zero_bytes(n, ranks, strategy.stage, 2, 2, 4 + (8 if strategy.offload_optimizer else k))
        wn = f"bf16 (DeepSpeed), ZeRO-{strategy.stage}" + (f" over {ranks}" if strategy.stage >= 3 else "")
        if strategy.offload_params:
            host.append(Term("weights", w, "ZeRO-3 param offload"))
            w = min(n, ZERO3_LIVE_PARAMS) * 2
            wn = "live parameters only (stage3_max_live_parameters 1e9), the rest on the host"
        gn = "bf16" + (f", sharded over {ranks}" if strategy.stage >= 2 else "")
        if strategy.offload_optimizer:  # ZeRO-Offload: reduced gradients go to the host; reduce buckets stay
            host.append(Term("gradients", g, "ZeRO-Offload"))
            g, gn = min(g, OFFLOAD_GRAD_BUCKETS), "reduce buckets only (ZeRO-Offload keeps gradients on the host)"
        gpu += [Term("weights", w, wn), Term("gradients", g, gn)]
        on = f"fp32 master + {'AdamW (DeepSpeed CPU Adam)' if strategy.offload_optimizer else optim}"
        if strategy.offload_optimizer:
            host.append(Term("optimizer states", o, on))
            gpu.append(Term("optimizer states", 0.0, "offloaded to the host"))
        else:
            gpu.append(Term("optimizer states", o, on + (f", sharded over {ranks}" if strategy.stage >= 1 else "")))
        return gpu, host, n
    w, g, o = zero_bytes(n, ranks, strategy.stage, 4, 4, k)
    shard = f", sharded over {ranks}" if strategy.stage >= 3 else ""
    gpu += [Term("weights", w, f"fp32 master weights, {n / 1e9:.2f} B params x 4 B{shard}"),
            Term("gradients", g, "fp32" + shard), Term("optimizer states", o, f"{optim}: {k:g} B a param{shard}"),
            Term("autocast bf16 copies", 2 * n / (ranks if strategy.stage >= 3 else 1),
                 "bf16 casts of every weight, cached until the forward ends")]
    return gpu, host, n


def activation_terms(shape: ModelShape, micro_batch: int, seq: int, completion: int, checkpointing: bool
                     ) -> list[Term]:
    """Activations and logits of one micro-batch's forward and backward."""
    tokens = micro_batch * seq
    per_layer = shape.activation_bytes_per_token_layer()
    full = shape.layers * tokens * per_layer
    kept = shape.layers * tokens * shape.hidden * 2 + tokens * per_layer
    if checkpointing:
        act = kept
        note = (f"checkpointed: {shape.layers} layer inputs + 1 layer recomputed, {micro_batch} x {seq} tokens "
                f"(without checkpointing: {_gb(full)})")
    else:
        act = full
        note = (f"no checkpointing: {shape.layers} layers x {per_layer:,} B a token, {micro_batch} x {seq} tokens "
                f"(with checkpointing: {_gb(kept)})")
    logits = micro_batch * completion * shape.vocab * 2 * 2 if shape.lm_head else 0
    return [Term("activations", act, note),
            Term("logits", logits, f"{micro_batch} x {completion} tokens x {shape.vocab} vocab x 2 B, x2 (copy, grad)")]


def vllm_terms(shape: ModelShape, grpo: Any, gpu_bytes: float) -> tuple[list[Term], str | None]:
    """vLLM's colocated share and whether it holds one sequence of ``vllm_max_model_length``."""
    if not grpo.use_vllm or grpo.vllm_mode != "colocate":
        return [], None
    share = grpo.vllm_gpu_memory_utilization * gpu_bytes
    max_len = grpo.vllm_context() if hasattr(grpo, "vllm_context") else shape.max_positions
    kv_token = shape.kv_bytes_per_token(2)
    weights = shape.params * 2
    kv_room = share - weights - VLLM_WORKSPACE
    need = kv_token * max_len
    note = (f"{grpo.vllm_gpu_memory_utilization} x GPU: weights {_gb(weights)} + workspace {_gb(VLLM_WORKSPACE)} + "
            f"KV cache {_gb(max(kv_room, 0))} = {max(kv_room, 0) / kv_token:,.0f} tokens at {kv_token:,} B a token")
    problem = None
    if kv_room < need:
        problem = (f"vLLM's share ({grpo.vllm_gpu_memory_utilization} x {gpu_bytes / GB:.0f} GB = {_gb(share)}) leaves "
                   f"{_gb(max(kv_room, 0))} of KV cache after its weights ({_gb(weights)}) and workspace, and one "
                   f"sequence of vllm_max_model_length {max_len:,} tokens needs {_gb(need)} "
                   f"({kv_token:,} B a token): raise grpo.vllm_gpu_memory_utilization or set "
                   f"grpo.vllm_max_model_length to prompt + completion")
    return [Term("vLLM (colocated)", share, note)], problem


def _grpo_stage(cfg: Any, strategy: Strategy, gpus: int, gpu_bytes: float) -> StagePlan:
    grpo, lora = cfg.grpo, getattr(cfg, "lora", None)
    shape = model_shape(_policy_name(cfg))
    load = 2 if lora is not None and cfg.model.dtype in ("bfloat16", "float16", "auto") else 4
    terms, host, trainable = policy_state_terms(shape, lora, grpo.optim, strategy, gpus, load)
    if grpo.beta > 0 and lora is None:
        ref = shape.params * 2 / (gpus if strategy.stage >= 3 else 1)
        note = "grpo.beta > 0 without LoRA: TRL's reference model, bf16"
        if strategy.offload_params:
            host.append(Term("reference model", ref, "ZeRO-3 param offload"))
            ref, note = min(shape.params, ZERO3_LIVE_PARAMS) * 2, note + ", offloaded (live parameters only)"
        terms.append(Term("reference model", ref, note))
    seq = grpo.max_prompt_length + grpo.max_completion_length
    terms += activation_terms(shape, grpo.per_device_train_batch_size, seq, grpo.max_completion_length,
                              grpo.gradient_checkpointing)
    vterms, problem = vllm_terms(shape, grpo, gpu_bytes)
    terms += vterms
    terms += reward_model_terms(cfg, gpu_bytes)
    terms.append(Term("CUDA context + slack", CUDA_CONTEXT, "context, NCCL buffers, fragmentation"))
    what = (f"GRPO of {shape.name} ({shape.params / 1e9:.2f} B params, "
            f"{'LoRA r=%d' % lora.r if lora is not None else 'full fine-tune'}, {trainable / 1e6:,.0f} M trainable), "
            f"micro-batch {grpo.per_device_train_batch_size} completions x {seq} tokens")
    return StagePlan("grpo", what, terms, gpu_bytes, host, problem)


def _sft_stages(cfg: Any, gpu_bytes: float) -> list[StagePlan]:
    """SFT stages of a params file: SEVA's verifier SFT (``sft``), KLCF's truthfulness RM
    (``truth_rm.sft`` with ``method: sft``), planned unsharded in one process: KLCF's runs alone
    before ``accelerate launch`` (``factlab train`` prepares it), and the notebook runs both in its
    kernel; SEVA's under ``factlab train`` is sharded like GRPO, so this bounds it from above."""
    strategy, gpus = STRATEGIES["single"], 1
    found = []
    if getattr(cfg, "sft", None) is not None and hasattr(cfg.sft, "max_length"):
        found.append(("sft", cfg.sft, cfg.model.name, getattr(cfg, "lora", None)))
    rm = getattr(cfg, "truth_rm", None)
    if rm is not None and rm.enabled and rm.method == "sft":
        lora = getattr(cfg, "lora", None) if rm.lora == "policy" else (None if rm.lora == "none" else rm.lora)
        found.append(("truth_rm.sft", rm.sft, rm.model or cfg.model.name, lora))
    out = []
    for stage, sft, name, lora in found:
        shape = model_shape(name)
        optim = sft.extra.get("optim", "adamw_torch")
        load = 2 if lora is not None else 4
        terms, host, trainable = policy_state_terms(shape, lora, optim, strategy, gpus, load)
        terms += activation_terms(shape, sft.per_device_train_batch_size, sft.max_length, sft.max_length,
                                  sft.gradient_checkpointing)
        terms.append(Term("CUDA context + slack", CUDA_CONTEXT, "context, NCCL buffers, fragmentation"))
        what = (f"SFT of {shape.name} ({'LoRA' if lora is not None else 'full fine-tune'}, {trainable / 1e6:,.0f} M "
                f"trainable), micro-batch {sft.per_device_train_batch_size} x {sft.max_length} tokens")
        out.append(StagePlan(stage, what, terms, gpu_bytes, host, one_process=True))
    return out


def _eval_stage(cfg: Any, gpu_bytes: float) -> StagePlan:
    """Greedy evaluation with the policy (HF generate): weights, KV cache, one step's logits."""
    shape = model_shape(_policy_name(cfg))
    gen = cfg.eval_generation
    prompt = getattr(getattr(cfg, "grpo", None), "max_prompt_length", 1024)
    tokens = prompt + gen.max_new_tokens
    dt = DTYPE_BYTES[cfg.model.dtype]
    terms = [Term("weights", shape.params * dt, f"{cfg.model.dtype}"),
             Term("KV cache", gen.batch_size * tokens * shape.kv_bytes_per_token(dt),
                  f"batch {gen.batch_size} x {tokens} tokens x {shape.kv_bytes_per_token(dt):,} B"),
             Term("logits", gen.batch_size * shape.vocab * 4 * 2, "last-position logits of the batch, fp32, x2"),
             Term("CUDA context + slack", CUDA_CONTEXT, "")]
    return StagePlan("eval", f"evaluation generation, batch {gen.batch_size}", terms, gpu_bytes)


def plan_with(cfg: Any, notebook: str, strategy: Strategy, gpus: int, gpu_mem_gb: float) -> Plan:
    """The plan of ``cfg`` under one strategy."""
    gpu_bytes = gpu_mem_gb * GB
    stages: list[StagePlan] = []
    if getattr(cfg, "grpo", None) is not None:
        stages += _sft_stages(cfg, gpu_bytes)
        stages.append(_grpo_stage(cfg, strategy, gpus, gpu_bytes))
    stages.append(_eval_stage(cfg, gpu_bytes))
    return Plan(notebook, gpus, gpu_mem_gb, strategy, stages)


def plan_config(cfg: Any, notebook: str = "", gpus: int = 1, gpu_mem_gb: float = 80.0,
                strategy: Strategy | None = None) -> Plan:
    """The plan of ``cfg`` on ``gpus`` x ``gpu_mem_gb`` GB: under ``strategy``, or the first of
    ``auto_strategies`` that fits (the last tried when none does)."""
    if gpus < 1 or gpu_mem_gb <= 0:
        raise PlanError(f"need gpus >= 1 and gpu memory > 0 (got {gpus}, {gpu_mem_gb})")
    if strategy is not None:
        return plan_with(cfg, notebook, strategy, gpus, gpu_mem_gb)
    tried: list[str] = []
    plan = None
    for name in auto_strategies(gpus):
        tried.append(name)
        plan = plan_with(cfg, notebook, STRATEGIES[name], gpus, gpu_mem_gb)
        if plan.fits or getattr(cfg, "grpo", None) is None:
            break
    assert plan is not None
    plan.tried = tried
    return plan
