"""Futures of apiary operations: ``result(timeout)``, ``done()``, ``cancel()``, callbacks."""
import concurrent.futures
import threading
from typing import Any, Callable, List, Optional


class OperationFuture:
    """The result of one C++ operation on its way (a ``return_future=True`` call).

    Waiting releases the GIL and can be interrupted with Ctrl-C. ``cancel()`` abandons
    the result here (``result()`` then raises ``CancelledError``); an operation already
    sent to peers still completes there.
    """

    def __init__(self, pending: Any, convert: Callable[[Any], Any] = lambda x: x):
        self._pending = pending
        self._convert = convert
        self._lock = threading.Lock()
        self._cancelled = False
        self._callbacks: List[Callable[["OperationFuture"], None]] = []
        self._watcher: Optional[threading.Thread] = None
        self._converted: List[Any] = []  # the converted value, once taken (converted once)

    def result(self, timeout: Optional[float] = None) -> Any:
        if self._cancelled:
            raise concurrent.futures.CancelledError("the future was cancelled")
        raw = self._pending.result(timeout)
        with self._lock:
            if not self._converted:
                self._converted.append(self._convert(raw))
            return self._converted[0]

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        try:
            self.result(timeout)
        except TimeoutError:
            raise
        except BaseException as e:  # noqa: BLE001 - the operation's error, handed back
            return e
        return None

    def done(self) -> bool:
        return self._cancelled or self._pending.done()

    def cancel(self) -> bool:
        if self._pending.done():
            return False
        self._cancelled = True
        self._run_callbacks()
        return True

    def cancelled(self) -> bool:
        return self._cancelled

    def add_done_callback(self, fn: Callable[["OperationFuture"], None]) -> None:
        """Calls ``fn(self)`` once done (from a helper thread, or at once if done)."""
        with self._lock:
            self._callbacks.append(fn)
            if self._watcher is None and not self.done():
                self._watcher = threading.Thread(target=self._watch, daemon=True)
                self._watcher.start()
                return
        if self.done():
            self._run_callbacks()

    def _watch(self) -> None:
        while not self.done():
            try:
                self._pending.result(0.1)
            except TimeoutError:
                continue
            except BaseException:  # noqa: BLE001 - done with an error
                break
        self._run_callbacks()

    def _run_callbacks(self) -> None:
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)
