"""A registry of named things (rewards, evaluation suites), in the spirit of
lm-evaluation-harness's task registry: register with a decorator, look up by name, and get
an error that lists every known name when a name is wrong."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "QA_SETS"]


class Registry(Generic[T]):
    """Names -> entries of one ``kind`` ("reward", "evaluation suite", ...)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated object as is."""
        return lambda entry: self.add(name, entry)

    def get(self, name: str) -> T:
        """The entry, or a ``ValueError`` naming the unknown name and every known one."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.available()) or "(none registered)"
            raise ValueError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def available(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.available())

    def __len__(self) -> int:
        return len(self._entries)


# Short-form QA sets defined above the data layer (a loader ``(split, limit, seed) -> list[QAItem]``
# registered under the set's name; ``data.load_eval_set`` looks here for names it does not own):
# the knowledge organism's questions, by exposure bucket (``factlab.organism``).
QA_SETS: Registry = Registry("QA set")
