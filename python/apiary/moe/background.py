"""``background_server``: an expert server (``Server.create``) in a process of its own,
for tests and examples, as hivemind's ``background_server``."""
import multiprocessing as mp
import traceback
from contextlib import contextmanager
from typing import Any, Iterator, List, NamedTuple


class ServerInfo(NamedTuple):
    """What a background server reports: its DHT's multiaddrs (initial peers for
    clients), the address of its experts, their uids and the server process's PID."""

    initial_peers: List[str]
    address: str
    uids: List[str]
    pid: int


def _serve(kwargs: Any, conn: Any) -> None:
    import os

    from .server import Server

    try:
        server = Server.create(start=True, **kwargs)
        conn.send(ServerInfo(server.dht.get_visible_maddrs(), server.address, list(server.uids), os.getpid()))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(RuntimeError(f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        return
    try:
        conn.recv()  # until the parent says stop, or goes away
    except EOFError:
        pass
    server.shutdown()
    server.dht.shutdown()
    conn.send("stopped")


@contextmanager
def background_server(start_timeout: float = 120, **kwargs: Any) -> Iterator[ServerInfo]:
    """Runs ``Server.create(start=True, **kwargs)`` in a new process (spawned) until the
    block ends; yields its ServerInfo. Raises the server's error if it did not start."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(kwargs, child), daemon=True)
    process.start()
    try:
        if not parent.poll(start_timeout):
            raise TimeoutError(f"the expert server did not start within {start_timeout} s")
        info = parent.recv()
        if isinstance(info, BaseException):
            raise info
        yield info
    finally:
        try:
            parent.send("stop")
            parent.poll(30)
        except (BrokenPipeError, EOFError, OSError):
            pass
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
