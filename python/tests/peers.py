"""Peers for the tests, each run in a process of its own (multiprocessing, spawn)."""
import multiprocessing as mp
import traceback
from typing import Any, Callable, List, Sequence


def _run(target: Callable[..., Any], args: Sequence[Any], results: Any, index: int) -> None:
    try:
        results.put((index, True, target(*args)))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        results.put((index, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_in_processes(target: Callable[..., Any], arg_lists: Sequence[Sequence[Any]], timeout: float = 120) -> List[Any]:
    """Runs target(*args) for each args in its own process; returns the results in order,
    raising if one failed, hung past `timeout`, or died."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_run, args=(target, args, results, i), daemon=True) for i, args in enumerate(arg_lists)]
    for p in procs:
        p.start()
    out: List[Any] = [None] * len(procs)
    errors = []
    try:
        for _ in procs:
            index, ok, value = results.get(timeout=timeout)
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
