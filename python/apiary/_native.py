"""NativeRunner: what apiary's Python objects over a C++ one (``DHT``,
``DecentralizedAverager``, ``ProgressTracker``) share: ``is_alive()``, the check that the
C++ object runs (with the error saying why not), and the context manager that shuts it
down."""
from typing import Any, TypeVar

_Self = TypeVar("_Self", bound="NativeRunner")


class NativeRunner:
    """Runs a C++ object in ``_native`` (None until started) until ``shutdown()`` (which
    sets ``_shut_down``). A subclass names itself in errors (``_what``), says how it is
    started (``_start_with``) and defines ``shutdown()``."""

    _what = "object"
    _start_with = "run_in_background()"
    _native: Any
    _shut_down: bool

    def is_alive(self) -> bool:
        return self._native is not None and not self._shut_down

    def _require(self) -> Any:
        if self._shut_down:
            raise RuntimeError(f"expected a running {self._what}, but it was shut down")
        if self._native is None:
            raise RuntimeError(f"expected a running {self._what}, but it was not started; call {self._start_with}")
        return self._native

    def shutdown(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
