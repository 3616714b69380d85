"""The metadata quorum: throughput, commit latency and failover of 3 voters on loopback.

For each payload size and number of concurrent proposers, a fresh 3-voter quorum of separate
processes is started; on the leader, N proposers each append one record and wait for its
commit, again and again, for a warm-up and then a measured window. Reported: committed
records/s and commit latency p50/p99 (propose -> commit seen by the proposer).

- pykraft: RaftNode on its DiskLogStore (fsync before an entry counts), the Raft RPCs over
  TCP (RaftChannels / RaftDispatcher), Kafka's default controller.quorum.* settings
  (append linger 25 ms unless --linger-ms).
- PySyncObj: 3 SyncObj nodes with its file journal (journalFile, fullDumpFile) and its
  default settings; a replicated method called with a callback, latency up to the callback.

Then the failover figure: kill -9 of the leader, time to the first committed write by the
new leader, over --trials trials at the default timeouts (election 1000 ms, election backoff
1000 ms, fetch 2000 ms, request 2000 ms), using the harness of
pykraft.testing.raft_processes (as tests/integration/test_raft_processes.py does).

    .venv/bin/python benchmarks/raft_quorum.py [--seconds 5] [--sizes 100,1024]
        [--proposers 1,16,64] [--trials 20] [--only pykraft|pysyncobj|failover]
        [--profile DIR]

The processes print nothing per record: the leader prints one JSON summary at the end.
--profile DIR runs each pykraft voter under cProfile (main thread: the event loop) and
writes DIR/<case>-node-<id>.prof when it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

CLUSTER_ID = "UmFmdFF1b3J1bUJlbmNoMDA"
TICKS_PER_SECOND = 100  # Linux USER_HZ


# -- measuring inside the leader ------------------------------------------------------------


class Window:
    """Latencies of the proposals that started inside the measured window."""

    def __init__(self, warmup_s: float, seconds: float) -> None:
        now = time.monotonic()
        self.start = now + warmup_s
        self.end = self.start + seconds
        self.latencies: list[float] = []
        self.errors = 0

    def record(self, started: float, finished: float) -> None:
        if self.start <= started and finished <= self.end:
            self.latencies.append(finished - started)

    def summary(self, system: str, node_id: int, seconds: float) -> dict[str, Any]:
        lat = sorted(self.latencies)

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else 0.0

        return {"event": "result", "system": system, "node_id": node_id,
                "committed": len(lat), "per_s": len(lat) / seconds, "p50_ms": pct(0.50),
                "p99_ms": pct(0.99), "max_ms": lat[-1] * 1000 if lat else 0.0,
                "errors": self.errors, "cpu_s": cpu_seconds(os.getpid())}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND  # utime + stime


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


# -- a pykraft voter ------------------------------------------------------------------------


async def pykraft_node(args: argparse.Namespace) -> None:
    import random

    from pykraft.errors import KafkaError
    from pykraft.net.server import Listener
    from pykraft.raft.core import CommittedBatch, RaftConfig
    from pykraft.raft.driver import RaftNode
    from pykraft.raft.network import RaftApis, RaftChannels, RaftDispatcher
    from pykraft.server.config import parse_voters

    class Quiet:
        leader_changes = 0

        def handle_commit(self, batch: CommittedBatch) -> None:
            pass

        def handle_leader_change(self, leader_id: int, epoch: int) -> None:
            self.leader_changes += 1

    voters = parse_voters(args.voters)
    config = RaftConfig(append_linger_ms=args.linger_ms)
    channels = RaftChannels.for_voters(args.node_id, CLUSTER_ID, voters, config)
    quiet = Quiet()
    node = RaftNode.open(node_id=args.node_id, voters=frozenset(voters),
                         log_dir=Path(args.log_dir), listener=quiet, config=config,
                         rng=random.Random(), transport=channels)
    listener = Listener("CONTROLLER", "127.0.0.1", args.port,
                        RaftDispatcher(RaftApis(node, CLUSTER_ID)),
                        request_bytes_max=100 << 20, on_fatal=lambda error: None)
    await listener.start()
    await node.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    leads = asyncio.ensure_future(node.wait_leader())  # this node leads (first leader only)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([leads, stopping], return_when=asyncio.FIRST_COMPLETED)
    if not leads.done():
        leads.cancel()
    if leads.done() and not stop.is_set() and node.is_leader:
        changes = quiet.leader_changes
        window = Window(args.warmup, args.seconds)
        value = b"v" * args.value_bytes

        async def propose() -> None:
            while time.monotonic() < window.end:
                started = time.monotonic()
                try:
                    offset = node.append([value])
                    await node.wait_committed(offset)
                except KafkaError:
                    window.errors += 1
                    await asyncio.sleep(0.001)
                    continue
                window.record(started, time.monotonic())

        await asyncio.gather(*(propose() for _ in range(args.proposers)))
        emit(**window.summary("pykraft", args.node_id, args.seconds),
             leader_changes=quiet.leader_changes - changes)
    await stop.wait()
    await node.stop()
    await listener.close()


def run_pykraft_node(args: argparse.Namespace) -> None:
    if not args.profile:
        asyncio.run(pykraft_node(args))
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        asyncio.run(pykraft_node(args))
    finally:
        profiler.disable()
        profiler.dump_stats(args.profile)


# -- a PySyncObj node -----------------------------------------------------------------------


def pysyncobj_node(args: argparse.Namespace) -> None:
    from pysyncobj import (  # type: ignore[import-untyped]
        SyncObj,
        SyncObjConf,
        replicated,
    )

    class Store(SyncObj):  # type: ignore[misc]
        def __init__(self, me: str, partners: list[str], conf: SyncObjConf) -> None:
            super().__init__(me, partners, conf)
            self.applied = 0

        @replicated  # type: ignore[untyped-decorator]
        def put(self, value: bytes) -> int:
            self.applied += 1
            return self.applied

    addresses = [spec.split("@", 1)[1] for spec in args.voters.split(",")]
    me = f"127.0.0.1:{args.port}"
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    conf = SyncObjConf(journalFile=str(log_dir / "journal"),
                       fullDumpFile=str(log_dir / "dump"), **json.loads(args.pysyncobj_conf))
    node = Store(me, [a for a in addresses if a != me], conf)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set() and not node._isLeader() and node._getLeader() is None:
        time.sleep(0.01)  # until a leader is known: this node, or another (then quiet)
    if node._isLeader():
        window = Window(args.warmup, args.seconds)
        value = b"v" * args.value_bytes
        lock = threading.Lock()
        done = threading.Event()
        running = [args.proposers]

        def propose() -> None:
            started = time.monotonic()

            def callback(result: object, error: object) -> None:
                finished = time.monotonic()
                with lock:
                    if error:
                        window.errors += 1
                    else:
                        window.record(started, finished)
                    if finished >= window.end:
                        running[0] -= 1
                        if running[0] == 0:
                            done.set()
                        return
                propose()

            node.put(value, callback=callback)

        for _ in range(args.proposers):
            propose()
        done.wait(args.warmup + args.seconds + 30)
        emit(**window.summary("pysyncobj", args.node_id, args.seconds))
    stop.wait()
    node.destroy()


# -- the driver -----------------------------------------------------------------------------


def pysyncobj_options(options: list[str]) -> dict[str, Any]:
    pairs = (option.split("=", 1) for option in options)
    return {key: json.loads(value) for key, value in pairs}


def run_case(system: str, value_bytes: int, proposers: int, args: argparse.Namespace,
             workdir: Path) -> dict[str, Any]:
    from pykraft.testing.raft_processes import free_ports

    case = f"{system}-{value_bytes}b-{proposers}p"
    ports = free_ports(3)
    voters = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(ports))
    results: list[dict[str, Any]] = []
    got = threading.Event()
    processes = []
    for index, port in enumerate(ports):
        node_id = index + 1
        log_dir = workdir / case / f"node-{node_id}" / "__cluster_metadata-0"
        log_dir.mkdir(parents=True)
        command = [sys.executable, __file__, "--node", system, "--node-id", str(node_id),
                   "--port", str(port), "--voters", voters, "--log-dir", str(log_dir),
                   "--value-bytes", str(value_bytes), "--proposers", str(proposers),
                   "--seconds", str(args.seconds), "--warmup", str(args.warmup),
                   "--linger-ms", str(args.linger_ms),
                   "--pysyncobj-conf", json.dumps(pysyncobj_options(args.pysyncobj_option))]
        if args.profile and system == "pykraft":
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            command += ["--profile", str(Path(args.profile) / f"{case}-node-{node_id}.prof")]
        stderr = open(workdir / case / f"node-{node_id}.stderr", "w")  # noqa: SIM115
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr,
                                   text=True)
        stderr.close()
        processes.append(process)

        def read(process: subprocess.Popen[str] = process) -> None:
            assert process.stdout is not None
            for line in process.stdout:
                event = json.loads(line)
                if event.get("event") == "result":
                    results.append(event)
                    got.set()

        threading.Thread(target=read, daemon=True).start()
    try:
        if not got.wait(args.warmup + args.seconds + 60):
            raise RuntimeError(f"{case}: no result; see {workdir / case}/*.stderr")
    finally:
        cpu = sum(cpu_seconds(p.pid) for p in processes if p.poll() is None)
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    if len(results) > 1:
        print(f"  {case}: {len(results)} nodes measured (the leader changed)")
    result = dict(results[0])
    result.update(value_bytes=value_bytes, proposers=proposers, all_cpu_s=cpu)
    return result


def failover(trials: int, workdir: Path, *, settle: bool = True) -> list[float]:
    """kill -9 the leader `trials` times at the default timeouts; seconds to the first
    commit of the next leader, each time (the harness of pykraft.testing.raft_processes,
    which tests/integration/test_raft_processes.py uses too). With `settle` each kill waits
    until the voter killed before follows the current leader; without it a kill may find
    that voter still starting up."""
    from pykraft.testing.raft_processes import check_logs, kill_leader_trials, start_voters

    voters = start_voters(workdir / "failover", [], cwd=ROOT)
    try:
        times = kill_leader_trials(
            voters, trials, settle=settle,
            on_trial=lambda n, s: print(f"  trial {n}: {s * 1000:.0f} ms", flush=True))
    finally:
        for voter in voters:
            voter.stop()
    check_logs(voters)
    return times


def table(rows: list[dict[str, Any]]) -> str:
    by_key = {(r["system"], r["value_bytes"], r["proposers"]): r for r in rows}
    lines = ["| record bytes | proposers | pykraft rec/s | p50 ms | p99 ms | PySyncObj rec/s "
             "| p50 ms | p99 ms | ratio rec/s | errors (pk/pso) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["value_bytes"], r["proposers"]) for r in rows})
    for size, proposers in keys:
        pk = by_key.get(("pykraft", size, proposers))
        ps = by_key.get(("pysyncobj", size, proposers))

        def cells(r: dict[str, Any] | None) -> str:
            if r is None:
                return "– | – | –"
            return f"{r['per_s']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f}"

        ratio = f"{pk['per_s'] / ps['per_s']:.2f}" if pk and ps and ps["per_s"] else "–"
        errors = f"{pk['errors'] if pk else '–'}/{ps['errors'] if ps else '–'}"
        lines.append(f"| {size} | {proposers} | {cells(pk)} | {cells(ps)} | {ratio} | "
                     f"{errors} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per case")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--proposers", default="1,16,64")
    parser.add_argument("--trials", type=int, default=20, help="failover trials")
    parser.add_argument("--only", choices=["pykraft", "pysyncobj", "failover"])
    parser.add_argument("--no-settle", action="store_true",
                        help="failover: kill the next leader without waiting for the "
                        "voter killed before to rejoin")
    parser.add_argument("--linger-ms", type=int, default=25,
                        help="controller.quorum.append.linger.ms of the pykraft voters")
    parser.add_argument("--pysyncobj-option", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="a SyncObjConf setting for the PySyncObj nodes (JSON value), "
                        "e.g. appendEntriesUseBatch=false")
    parser.add_argument("--profile", help="cProfile each pykraft voter into this directory")
    parser.add_argument("--workdir", help="keep the data dirs here (default: a temp dir)")
    # one voter (internal)
    parser.add_argument("--node", choices=["pykraft", "pysyncobj"], help=argparse.SUPPRESS)
    parser.add_argument("--node-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--voters", help=argparse.SUPPRESS)
    parser.add_argument("--log-dir", help=argparse.SUPPRESS)
    parser.add_argument("--value-bytes", type=int, default=100, help=argparse.SUPPRESS)
    parser.add_argument("--pysyncobj-conf", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.node == "pykraft":
        args.proposers = int(args.proposers)
        run_pykraft_node(args)
        return
    if args.node == "pysyncobj":
        args.proposers = int(args.proposers)
        pysyncobj_node(args)
        return

    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(n) for n in args.proposers.split(",")]
    systems = ["pykraft", "pysyncobj"]
    if args.only in systems:
        systems = [args.only]
    started = time.monotonic()
    if args.pysyncobj_option:
        print(f"PySyncObj options: {pysyncobj_options(args.pysyncobj_option)}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="raft-quorum-") as temp:
        workdir = Path(args.workdir or temp)
        rows: list[dict[str, Any]] = []
        if args.only != "failover":
            for size in sizes:
                for count in counts:
                    for system in systems:
                        row = run_case(system, size, count, args, workdir)
                        rows.append(row)
                        print(f"{system:9} {size:5} B x {count:3} proposers: "
                              f"{row['per_s']:9,.0f} rec/s  p50 {row['p50_ms']:7.1f} ms  "
                              f"p99 {row['p99_ms']:7.1f} ms  errors {row['errors']}  "
                              f"leader changes {row.get('leader_changes', '-')}  "
                              f"CPU {row['all_cpu_s']:.1f} s (3 nodes)", flush=True)
            print(table(rows))
        if args.only in (None, "failover") and args.trials > 0:
            print(f"failover, {args.trials} trials (election 1000 ms, fetch 2000 ms):",
                  flush=True)
            times = failover(args.trials, workdir, settle=not args.no_settle)
            print(f"failover after kill -9: median {statistics.median(times) * 1000:.0f} ms, "
                  f"max {max(times) * 1000:.0f} ms over {len(times)} trials")
    print(f"wall time {time.monotonic() - started:.0f} s, load average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
