"""A kill at a chosen point of a run: the file-system steps of a job counted, and the run
stopped (KeyboardInterrupt) before step `after + 1`."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest

# the steps whose order makes a job kill-safe: renames, deletes and truncations
STEPS = ("replace", "rename", "ftruncate", "truncate", "unlink")


class Killer:
    """Counts the calls of `os.<step>` for each of `steps` and raises before call `after + 1`."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, after: int, steps: Sequence[str] = STEPS
    ) -> None:
        self.calls, self.after = 0, after
        for name in steps:
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls > self.after:
                raise KeyboardInterrupt(f"killed before {name}")
            return original(*args, **kwargs)

        return step
