"""What Python work beside a node's event loop costs the requests it answers.

A node runs some CPU-bound Python work away from its requests: the controller's decisions
and folds, metadata snapshots, log creation and loading. It can run on a worker thread,
which shares the GIL with the loop, or on the loop itself in slices between turns. This
measures which hurts the requests less: an echo server answers one client (another
process) that sends 100-byte requests one at a time for --seconds, while the same Python
work spins beside it

- none: nothing beside the server;
- thread: on a worker thread, at the interpreter's switch interval (5 ms, and 1 ms);
- slices: on the loop, in slices of 10 ms and 2 ms, each followed by a turn of the loop.

For each: round trips per second, the slowest one, and how much of the work got done. Run
with asyncio's own loop and with uvloop (which the nodes run: `pykraft server start`).

Run: .venv/bin/python benchmarks/gil_convoy.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import sys
import threading
import time
from collections.abc import Callable

import uvloop

REQUEST = b"x" * 100


def spin(units: int = 10_000) -> int:
    """One unit of pure-Python work: 10,000 steps of a loop."""
    total = 0
    for i in range(units):
        total += i * i % 7
    return total


def client(port: int, seconds: float, results: multiprocessing.Queue[tuple[float, float]]) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        count, slowest = 0, 0.0
        end = time.monotonic() + seconds
        while (start := time.monotonic()) < end:
            sock.sendall(REQUEST)
            received = 0
            while received < len(REQUEST):
                received += len(sock.recv(4096))
            slowest = max(slowest, time.monotonic() - start)
            count += 1
    results.put((count / seconds, slowest))


async def measure(mode: str, setting_s: float, seconds: float) -> str:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(4096):
            writer.write(data)

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stop = threading.Event()
    done = [0]
    switch_interval = sys.getswitchinterval()

    def work_on_thread() -> None:
        while not stop.is_set():
            spin()
            done[0] += 1

    async def work_in_slices() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            while time.perf_counter() - start < setting_s:
                spin()
                done[0] += 1
            await asyncio.sleep(0)

    if mode == "thread":
        sys.setswitchinterval(setting_s)
        threading.Thread(target=work_on_thread, daemon=True).start()
    elif mode == "slices":
        slicing = asyncio.ensure_future(work_in_slices())
    results: multiprocessing.Queue[tuple[float, float]] = multiprocessing.Queue()
    process = multiprocessing.Process(target=client, args=(port, seconds, results))
    process.start()
    while process.is_alive():
        await asyncio.sleep(0.05)
    rate, slowest = results.get()
    stop.set()
    if mode == "slices":
        await slicing
    sys.setswitchinterval(switch_interval)
    server.close()
    label = {"none": "nothing beside", "thread": f"thread, switch {setting_s * 1000:g} ms",
             "slices": f"slices of {setting_s * 1000:g} ms"}[mode]
    return (f"  {label:24s} {rate:8,.0f} round trips/s, slowest {slowest * 1000:5.1f} ms, "
            f"{done[0]:6,} units of work")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    runs = [("none", 0.0), ("thread", 0.005), ("thread", 0.001), ("slices", 0.010),
            ("slices", 0.002)]
    loops: list[tuple[str, Callable[[], asyncio.AbstractEventLoop]]] = [
        ("asyncio", asyncio.new_event_loop), ("uvloop", uvloop.new_event_loop)]
    for name, new_loop in loops:
        print(name)
        for mode, setting in runs:
            with asyncio.Runner(loop_factory=new_loop) as runner:
                print(runner.run(measure(mode, setting, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
