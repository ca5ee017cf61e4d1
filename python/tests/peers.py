"""Peers for the tests, each run in a process of its own (multiprocessing, spawn)."""
import multiprocessing as mp
import queue
import time
import traceback
from typing import Any, Callable, List, Sequence


def _run(target: Callable[..., Any], args: Sequence[Any], results: Any, index: int) -> None:
    try:
        results.put((index, True, target(*args)))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        results.put((index, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class PeerDied(AssertionError):
    """A peer's process ended without a result (killed, or aborted)."""

    def __init__(self, index: int, exitcode: int):
        super().__init__(f"peer {index} died with exit code {exitcode} before giving a result"
                         + {-6: " (SIGABRT: UCX 1.13's tcp sockcm assertion is a known cause)",
                            -11: " (SIGSEGV: UCX 1.13's tcp sockcm handing a connection to a destroyed listener "
                                 "is a known cause)"}.get(exitcode, ""))
        self.index, self.exitcode = index, exitcode


def run_in_processes(target: Callable[..., Any], arg_lists: Sequence[Sequence[Any]], timeout: float = 120) -> List[Any]:
    """Runs target(*args) for each args in its own process; returns the results in order,
    raising if one failed, gave no result for `timeout` seconds, or died (PeerDied, at
    once)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_run, args=(target, args, results, i), daemon=True) for i, args in enumerate(arg_lists)]
    for p in procs:
        p.start()
    out: List[Any] = [None] * len(procs)
    errors = []
    reported = set()
    deadline = time.monotonic() + timeout
    try:
        while len(reported) < len(procs):
            try:
                index, ok, value = results.get(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                dead = [i for i, p in enumerate(procs) if i not in reported and p.exitcode not in (None, 0)]
                if dead:
                    raise PeerDied(dead[0], procs[dead[0]].exitcode)
                if time.monotonic() >= deadline:
                    raise
                continue
            reported.add(index)
            deadline = time.monotonic() + timeout  # `timeout` for each result, as the others may end later
            if ok:
                out[index] = value
            else:
                errors.append(f"peer {index}: {value}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if errors:
        raise AssertionError("\n".join(errors))
    return out
