"""The one config loader of factlab: typed params (pydantic) read from ``params/*.yaml``.

This is the bottom of the config stack. It holds the base class every params section
derives from, the YAML loader with ``base:`` inheritance and the error types. Every section
is written with URL credentials hidden by ``factlab.credentials`` (the one redaction, and the
API-key rules the judge section checks). The knob sections that are plain settings of a
library (model, generation, LoRA, TRL's GRPO and SFT configs, an LLM judge, a sweep) are in
``factlab.sections``; sections that belong to one piece of code live beside that code
(``data.EvalDataConfig``, ``corpus.retrieval.DatastoreSection``, ``recipes.selffilter.
SelfFilterSection``, ...); the experiment configs that compose them are in
``factlab.experiment`` and in each paper's ``train`` module.

A params file may name a ``base:`` file (relative to itself) whose values it overrides key
by key, so ``*_smoke.yaml`` states only what differs from the full-scale file. Unknown keys,
ill-typed values and rules that involve several keys fail when the file loads, with the
dotted key path, the expected type and the file. So do a key written twice in one mapping,
an empty file, YAML aliases that expand past ``MAX_PARAMS_NODES`` values (an alias bomb),
infinite or NaN numbers, a boolean where a number belongs, and token counts above
``MAX_TOKENS``.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import (BaseModel, ConfigDict, SerializationInfo, SerializerFunctionWrapHandler, ValidationError,
                      ValidationInfo, field_validator, model_serializer)

from .credentials import UNREDACTED, redact_text, redact_value, short_repr

T = TypeVar("T", bound=BaseModel)

Dtype = Literal["float32", "bfloat16", "float16", "auto"]
MAX_TOKENS = 1 << 20  # no length in tokens (generation, prompt, completion, model context) goes above this
MAX_PARAMS_NODES = 100_000  # values a params file may hold once YAML aliases are expanded
MAX_PARAMS_BYTES = 1 << 20  # a params file is a few KB; a bigger "file" is a mistake (or a device)
MAX_SEED = 2**32 - 1  # numpy, torch and vLLM seeds are unsigned 32-bit


class ConfigError(ValueError):
    """A params file that does not validate; the message names every bad key."""


class ParamError(ValueError):
    """Raised by a validator to name the key it objects to, relative to where it runs:
    ``ParamError("grpo.num_generations", "...")`` inside a top-level model validator is
    reported as ``'grpo.num_generations': ...``."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path, self.message = path, message


def _numeric(annotation: Any) -> bool:
    """Whether a field annotation only admits numbers (``int``, ``float``, optionally ``None``)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _numeric(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(kinds) and all(_numeric(a) for a in kinds)
    return annotation in (int, float)


class Section(BaseModel):
    """Base of every config block: unknown keys are errors, values are validated on set, numbers
    are finite (no ``.inf`` / ``.nan``) and never booleans (``max_new_tokens: true`` is not 1)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=(), allow_inf_nan=False,
                              hide_input_in_errors=True)  # pydantic's own message would print a URL unredacted

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, got the boolean {str(value).lower()}")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _seeds_in_range(cls, value: Any, info: ValidationInfo) -> Any:
        """Every ``seed`` / ``*_seed`` / ``seeds`` field of every section: 0 to 2**32 - 1, the
        range numpy, torch and vLLM take (10**26 or -1 failed only when a run started)."""
        name = info.field_name or ""
        if name == "seed" or name.endswith("_seed") or name == "seeds":
            for seed in value if isinstance(value, list) else [value]:
                if isinstance(seed, int) and not 0 <= seed <= MAX_SEED:
                    raise ValueError(f"a seed is a whole number from 0 to {MAX_SEED:,} (2**32 - 1), got {short_repr(seed)}")
        return value

    @model_serializer(mode="wrap")
    def _urls_redacted(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """Every section is written with the credentials of every URL in it hidden
        (``redact_value``): ``config.yaml``, ``manifest.json``, sweep files, whatever dumps it.
        Code that hands the values on (TRL's config) dumps with ``context=UNREDACTED``."""
        data = handler(self)
        if (info.context or {}).get("unredacted"):
            return data
        return redact_value(data)


# ---------------------------------------------------------------- loading

def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_text(path: Path, named_by: str) -> str:
    """The file's text, or a ``ConfigError`` naming it (and the file whose ``base:`` named it)."""
    if not path.exists():
        raise ConfigError(f"params file not found: {path}{named_by}")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a params file{named_by}")
    if not path.is_file():  # a FIFO blocks forever, /dev/zero and /dev/urandom never end
        raise ConfigError(f"{path}: not a regular file (a pipe, a device, a socket), not a params file{named_by}")
    if path.stat().st_size > MAX_PARAMS_BYTES:
        raise ConfigError(f"{path}: {path.stat().st_size:,} bytes, more than a params file's {MAX_PARAMS_BYTES:,}"
                          f"{named_by}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.object[e.start:e.start + 1]!r} at offset "
                          f"{e.start}){named_by}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or e}){named_by}") from None


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _nodes_checked(root: yaml.Node, source: str) -> None:
    """Refuse a YAML document whose mappings repeat a key (the last value would silently win),
    holds an unquoted base-60 number (YAML 1.1 reads ``seed: 190:20:30`` as 685230), or whose
    aliases expand past ``MAX_PARAMS_NODES`` values (an alias bomb: a few hundred
    bytes that expand to billions). Each node is visited once; expanded sizes are counted,
    not built."""
    size: dict[int, int] = {}
    path_of: dict[int, str] = {id(root): ""}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in size:
            continue
        if isinstance(node, yaml.ScalarNode):
            size[id(node)] = 1
            if node.style is None and ":" in node.value and node.tag in _NUMBER_TAGS:
                where = path_of.get(id(node)) or "a value"
                raise ConfigError(f"{source}: '{where}': {node.value!r} reads as a base-60 number in YAML 1.1 "
                                  f"(line {node.start_mark.line + 1}); quote it for text, or write the number")
            continue
        pairs = node.value if isinstance(node, yaml.MappingNode) else [(None, v) for v in node.value]
        if children_done:
            total = 1 + sum(size[id(k)] if k is not None else 0 for k, _ in pairs) + sum(size[id(v)] for _, v in pairs)
            if total > MAX_PARAMS_NODES:
                where = path_of.get(id(node)) or "the top level"
                raise ConfigError(f"{source}: '{where}' expands to more than {MAX_PARAMS_NODES:,} values through "
                                  "YAML aliases (&anchor / *alias); write the values out, or use fewer aliases")
            size[id(node)] = total
            continue
        here = path_of[id(node)]
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for k, _ in pairs:
                if k.tag == "tag:yaml.org,2002:merge" or not isinstance(k, yaml.ScalarNode):
                    continue
                line = k.start_mark.line + 1
                if k.value in seen:
                    key = f"{here}.{k.value}" if here else k.value
                    raise ConfigError(f"{source}: duplicate key '{key}' (lines {seen[k.value]} and {line}): "
                                      "the last value would silently win; keep one")
                seen[k.value] = line
        stack.append((node, True))
        for i, (k, v) in enumerate(pairs):
            label = k.value if isinstance(k, yaml.ScalarNode) else str(i)
            for child in (k, v):
                if child is not None and id(child) not in size:
                    path_of.setdefault(id(child), f"{here}.{label}" if here else str(label))
                    stack.append((child, False))


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # tab, newline and carriage return are text


def _no_control_characters(data: Any, source: str, path: str = "") -> None:
    """``ConfigError`` naming the key of the first string (key or value) holding a control
    character: YAML's reader refuses them raw, but a double-quoted ``"\\e"``, ``"\\x1b"`` or
    ``"\\0"`` writes one, which reaches a terminal (escape sequences) or a path (a NUL byte)."""
    stack = [(data, path)]
    while stack:
        value, here = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                key = f"{here}.{k}" if here else str(k)
                if isinstance(k, str) and _CONTROL.search(k):
                    raise ConfigError(f"{source}: key {key!r} holds a control character ({_CONTROL.search(k).group()!r})")
                stack.append((v, key))
        elif isinstance(value, list):
            stack.extend((v, f"{here}.{i}" if here else str(i)) for i, v in enumerate(value))
        elif isinstance(value, str) and _CONTROL.search(value):
            raise ConfigError(f"{source}: '{here or '(value)'}' holds a control character "
                              f"({_CONTROL.search(value).group()!r}); write it out, or drop it")


def load_yaml(text: str, source: str = "<params>") -> Any:
    """Parse one YAML document safely (``yaml.SafeLoader``: no Python objects), after
    ``_nodes_checked``; ``ConfigError`` naming ``source`` for any YAML problem."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters (\x1b, \x00) here
        node = loader.get_single_node()
        if node is None:
            return None
        _nodes_checked(node, source)
        data = loader.construct_document(node)
        _no_control_characters(data, source)
        return data
    except yaml.MarkedYAMLError as e:  # its own text quotes the line, a password included: say where, not what
        mark = e.problem_mark or e.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = "; ".join(str(m) for m in (e.context, e.problem) if m)
        raise ConfigError(f"{redact_text(source)}: not valid YAML: {what}{where}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{redact_text(source)}: not valid YAML: {redact_text(str(e))}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply to be a params file") from None
    except ConfigError:
        raise
    except ValueError as e:  # a number of thousands of digits (Python's int conversion limit), a bad date
        raise ConfigError(f"{source}: a value YAML cannot read: {str(e)[:200]}") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_params(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a params YAML into a plain dict, resolving its ``base:`` chain. Every failure is a
    ``ConfigError`` naming the file, and for a ``base:`` file the params file that named it;
    an empty file is refused (every key would silently take its default)."""
    path = Path(path).resolve()
    named_by = f" (named by 'base:' in {_seen[-1]})" if _seen else ""
    if path in _seen:
        raise ConfigError(f"{path}: 'base' chain loops back to itself{named_by}")
    data = load_yaml(_read_text(path, named_by), str(path))
    if data is None:
        raise ConfigError(f"{path}: empty params file: every key would take its default{named_by}; write the "
                          "keys to set, or 'base: <file>' to start from another params file")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str) or not base:
            raise ConfigError(f"{path}: 'base' must name a params file, got {short_repr(base)}")
        data = _merge(read_params(path.parent / base, _seen + (path,)), data)
    return data


def error_message(err: dict) -> str:
    """The message of one pydantic error, without its key path."""
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, ParamError):
        return cause.message
    if err["type"] == "value_error" and cause is not None:
        return str(cause)
    return f"{err['msg']} (got {short_repr(err.get('input'))})"


def _describe(err: dict) -> str:
    loc = [str(p) for p in err["loc"]]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, ParamError) and cause.path:
        loc.append(cause.path)
    path = ".".join(loc)
    if err["type"] == "extra_forbidden":
        return f"unknown key '{path}'"
    return f"'{path}': {error_message(err)}" if path else error_message(err)


def describe_errors(e: ValidationError) -> list[str]:
    """One line per error of a pydantic ``ValidationError``, each naming its key path."""
    return [_describe(err) for err in e.errors()]


def validate(data: dict[str, Any], cls: type[T], source: str = "<dict>") -> T:
    """Validate a dict into ``cls``; raise ``ConfigError`` listing every bad key path."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: invalid {cls.__name__}:\n  " + "\n  ".join(describe_errors(e))) from None


def load_config(path: str | Path, cls: type[T], overrides: dict[str, Any] | None = None) -> T:
    """Load and validate a params file (plus optional nested ``overrides``) into ``cls``."""
    data = read_params(path)
    if overrides:
        data = _merge(data, overrides)
    return validate(data, cls, source=str(path))


def _redacted_keys(given: Any, written: Any, path: str = "") -> list[str]:
    if isinstance(given, dict) and isinstance(written, dict):
        return [k for key in given for k in _redacted_keys(given[key], written.get(key), f"{path}.{key}" if path else str(key))]
    if isinstance(given, list) and isinstance(written, list):
        return [k for i, (a, b) in enumerate(zip(given, written)) for k in _redacted_keys(a, b, f"{path}.{i}")]
    return [] if given == written else [path]


def refuse_url_credentials(cfg: BaseModel) -> None:
    """``ConfigError`` naming every key whose URL holds credentials (``user:password@``, a
    secret query parameter): a run folder's ``config.yaml``, which its notebook, its training
    processes and every ``--resume`` read, is written with them hidden (``***``), so the run
    would send ``***`` and fail at the judge or the vLLM server. Checked before a run starts."""
    keys = _redacted_keys(cfg.model_dump(mode="json", context=UNREDACTED), cfg.model_dump(mode="json"))
    if keys:
        raise ConfigError(f"{', '.join(keys)}: a URL with credentials (user:password@, api_key=, token=, ...) cannot "
                          "reach a run: config.yaml, which the notebook and every --resume read, is written with them "
                          "hidden (***); give the judge's key through the variable judge.api_key_env names (sent as a "
                          "Bearer token), and reach a vLLM server without credentials in its URL")


def dump_config(cfg: BaseModel) -> str:
    """The fully-resolved config as YAML (written into every run folder)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
