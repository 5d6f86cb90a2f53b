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
from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


class QuickstartConfig(Section):
    """``notebooks/00_quickstart.ipynb``: evaluate a model on short-form QA (000 §4)."""

    model: ModelConfig = ModelConfig()
    world: WorldConfig = WorldConfig()
    eval: list[EvalDataConfig] = [EvalDataConfig()]
    generation: GenerationConfig = GenerationConfig()
    trained_prompt: bool = False  # add the anti-loop line (000 §A.3) for adapter checkpoints


NOTEBOOK_CONFIGS: dict[str, type[Section]] = {
    "00_quickstart": QuickstartConfig,
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
