"""One shard convention for the suite and the nightly sweep: ``I/N`` as users write it (1-based:
``--shard 2/4`` is the second of four), taking every N-th item from the I-th on (round-robin, so
each shard gets problems of every level and size)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from kernelopt_bot.errors import BadInputError

T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    number: int  # 1 .. total
    total: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``I/N``; anything else is a :class:`BadInputError` that says what it takes."""
        try:
            number, total = (int(x) for x in text.split("/"))
        except ValueError:
            raise BadInputError(f"--shard {text!r}: expected I/N, e.g. 1/4") from None
        if total < 1 or not 1 <= number <= total:
            raise BadInputError(f"--shard {text!r}: need 1 <= I <= N")
        return cls(number, total)

    def take(self, items: Sequence[T]) -> list[T]:
        """This shard's items, in their order."""
        return list(items[self.number - 1:: self.total])

    def __str__(self) -> str:
        return f"{self.number}/{self.total}"


ALL = Shard(1, 1)
