"""trainop.handlers.heap: glibc knobs that are no-ops where they do not apply."""

from __future__ import annotations

import pytest

from trainop.handlers import heap


def test_an_explicit_malloc_arena_max_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert heap.limit_arenas() is False


def test_without_glibc_both_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(heap, "_libc", lambda: None)
    assert heap.limit_arenas() is False
    assert heap.trim() is False


def test_trim_answers_with_a_bool() -> None:
    assert isinstance(heap.trim(), bool)
