"""The reward registry: every reward of every paper by name, composed from params.

A params file lists the rewards of a training run::

    rewards:
      - {name: qa_judge, weight: 1.0}
      - {name: format, weight: 1.0}
      - {name: binary_rar, weight: 0.5, args: {top_k: 8}}

Each name is registered by its family module with ``@register(name, args=ArgsModel)``: a
factory ``build(args, resources) -> reward`` and a pydantic model of its ``args``, so an
unknown name, an unknown argument or an ill-typed one fails when the params load, naming
the key path and the known names. ``build_rewards`` turns the list into a ``RewardSet``:
sequence-level TRL reward functions with their weights (TRL's ``reward_weights``), and
token-level shaping hooks (``kind="shaping"``, e.g. CorVer's per-token co-occurrence term),
which the trainer adds to the weighted sum R^r token by token, scaled by their weight.
Shared resources (judge, datastore, index, extractor) come from one ``Resources`` object per
run, so every reward that needs a judge shares the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from pydantic import ValidationError, field_validator, model_validator

from ..config import ParamError, Section, error_message
from ..credentials import UNREDACTED
from ..registry import Registry
from .base import TokenShaping, TokenShapingFn

__all__ = ["NoArgs", "RewardEntry", "REWARDS", "register", "available", "RewardSpec", "RewardSet", "build_rewards",
           "parse_args"]


class NoArgs(Section):
    """A reward without arguments."""


@dataclass(frozen=True)
class RewardEntry:
    """One registered reward: how to build it and which arguments it takes."""

    name: str
    build: Callable[[Any, Any], Any]  # (args, resources) -> TRL reward function or shaping hook
    args: type[Section]
    kind: Literal["reward", "shaping"]
    summary: str


REWARDS: Registry[RewardEntry] = Registry("reward")


def register(name: str, *, args: type[Section] = NoArgs, kind: Literal["reward", "shaping"] = "reward",
             summary: str = "") -> Callable:
    """Decorator on a factory ``build(args, resources)``: registers it as reward ``name``."""
    def deco(build: Callable) -> Callable:
        REWARDS.add(name, RewardEntry(name, build, args, kind, summary or (build.__doc__ or "").strip()))
        return build
    return deco


def available() -> list[str]:
    """Every registered reward name."""
    return REWARDS.available()


def parse_args(name: str, args: dict[str, Any] | None = None) -> Section:
    """The validated argument model of reward ``name`` (defaults filled in)."""
    return REWARDS.get(name).args.model_validate(args or {})


class RewardSpec(Section):
    """One entry of a params ``rewards:`` list: a registered name, its weight, its arguments.

    For a sequence-level reward ``weight`` is its TRL reward weight; for a token-level
    shaping hook it scales the per-token term (CorVer's lambda_c)."""

    name: str
    weight: float = 1.0
    args: dict[str, Any] = {}

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        REWARDS.get(name)  # ValueError naming the known rewards
        return name

    @model_validator(mode="after")
    def _args_fit(self) -> "RewardSpec":
        try:
            parsed = parse_args(self.name, self.args)
        except ValidationError as e:
            err = e.errors()[0]
            path = ".".join(["args", *map(str, err["loc"])])
            if err["type"] == "extra_forbidden":
                takes = ", ".join(REWARDS.get(self.name).args.model_fields) or "no arguments"
                raise ParamError(path, f"unknown argument of reward {self.name!r}; it takes: {takes}") from None
            raise ParamError(path, error_message(err)) from None
        object.__setattr__(self, "args", parsed.model_dump(context=UNREDACTED))
        return self

    def parsed_args(self) -> Section:
        return parse_args(self.name, self.args)


def check_reward_list(specs: Sequence[RewardSpec]) -> None:
    """Rules over a whole ``rewards:`` list: names unique, at least one sequence-level reward."""
    seen: set[str] = set()
    for i, s in enumerate(specs):
        if s.name in seen:
            raise ParamError(f"{i}.name", f"reward {s.name!r} is listed twice (TRL logs one metric per name)")
        seen.add(s.name)
    if specs and all(REWARDS.get(s.name).kind == "shaping" for s in specs):
        raise ParamError("", "a token-level shaping reward needs at least one sequence-level reward beside it "
                             "(R_t = R^r + shaping); add e.g. qa_judge or format")


@dataclass
class RewardSet:
    """The rewards of one run, built: TRL reward functions with weights, plus shaping hooks."""

    specs: list[RewardSpec]
    funcs: list[Callable] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    shaping: list[tuple[str, float, TokenShapingFn]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def by_name(self, name: str) -> Callable:
        for s, fn in zip([s for s in self.specs if REWARDS.get(s.name).kind == "reward"], self.funcs):
            if s.name == name:
                return fn
        for n, _, fn in self.shaping:
            if n == name:
                return fn
        raise KeyError(f"reward {name!r} is not in this set ({', '.join(self.names)})")

    def token_shaping(self) -> TokenShapingFn | None:
        """The shaping hooks as one ``TokenShapingFn`` (weighted sum of their values), or None."""
        if not self.shaping:
            return None
        hooks = list(self.shaping)

        def shaped(texts: list[str], ids: list[list[int]], rows: list[dict]) -> list[TokenShaping]:
            total = [TokenShaping([0.0] * len(x)) for x in ids]
            for name, weight, hook in hooks:
                for acc, part in zip(total, hook(texts, ids, rows)):
                    acc.values = [a + weight * v for a, v in zip(acc.values, part.values)]
                    prefix = "" if len(hooks) == 1 else f"{name}/"
                    acc.stats.update({prefix + k: v for k, v in part.stats.items()})
            return total

        return shaped

    def describe(self) -> str:
        """``R = 1.0 qa_judge + 1.0 format; per token + 1.0 corver`` style summary."""
        seq = " + ".join(f"{w:g} {s.name}" for s, w in zip(
            [s for s in self.specs if REWARDS.get(s.name).kind == "reward"], self.weights))
        tok = " + ".join(f"{w:g} {n}" for n, w, _ in self.shaping)
        return f"R = {seq or '0'}" + (f"; per token + {tok}" if tok else "")


def build_rewards(specs: Sequence[RewardSpec], resources: Any) -> RewardSet:
    """Build every reward of ``specs`` on the shared ``resources`` (``rewards.Resources``)."""
    specs = list(specs)
    check_reward_list(specs)
    out = RewardSet(specs)
    for spec in specs:
        entry = REWARDS.get(spec.name)
        fn = entry.build(spec.parsed_args(), resources)
        fn.__name__ = spec.name  # TRL names its metrics rewards/<__name__>/...; shaping hooks too
        if entry.kind == "shaping":
            out.shaping.append((spec.name, spec.weight, fn))
        else:
            out.funcs.append(fn)
            out.weights.append(spec.weight)
    return out
