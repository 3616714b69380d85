"""One Raft voter as a process, for kill -9 tests: a RaftNode on disk behind a real controller
listener, proposing a record every few milliseconds while it leads.

    python -m tests.integration.raft_process --node-id 1 --port 19093 \
        --voters 1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095 \
        --log-dir /tmp/n1 --cluster-id C [--election-timeout-ms 150 --fetch-timeout-ms 400]

stdout, one JSON object a line, flushed at once:
    {"event": "applied", "offset": o, "epoch": e, "value": "..."}   every committed record
    {"event": "committed", "offset": o, "epoch": e, "value": v, "time": wall,
     "latency_ms": append to commit}                                  ours, committed
    {"event": "leader", "leader": id, "epoch": e, "time": wall}
SIGTERM stops the node gracefully (a leader resigns first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
from pathlib import Path

from pykraft.errors import KafkaError
from pykraft.net.server import Listener
from pykraft.raft.core import CommittedBatch, RaftConfig
from pykraft.raft.driver import RaftNode
from pykraft.raft.network import RaftApis, RaftChannels, RaftDispatcher
from pykraft.server.config import parse_voters


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class Printer:
    def handle_commit(self, batch: CommittedBatch) -> None:
        for index, value in enumerate(batch.records):
            emit(event="applied", offset=batch.base_offset + index, epoch=batch.epoch,
                 value=value.decode())

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        emit(event="leader", leader=leader_id, epoch=epoch, time=time.time())


async def propose_while_leading(
    node: RaftNode, name: str, interval_s: float, value_bytes: int
) -> None:
    sequence = 0
    padding = "x" * max(0, value_bytes - len(name) - 12)
    while True:
        await asyncio.sleep(interval_s)
        if not node.is_leader:
            continue
        sequence += 1
        value = f"{name}:{sequence}:{padding}"
        started = time.monotonic()
        try:
            offset = node.append([value.encode()])
            await node.wait_committed(offset)
        except KafkaError:
            continue
        emit(event="committed", offset=offset, epoch=node.leader_and_epoch.epoch, value=value,
             time=time.time(), latency_ms=(time.monotonic() - started) * 1000)


async def main(args: argparse.Namespace) -> None:
    voters = parse_voters(args.voters)
    config = RaftConfig(
        append_linger_ms=args.linger_ms,
        election_timeout_ms=args.election_timeout_ms,
        election_backoff_max_ms=args.election_timeout_ms,
        fetch_timeout_ms=args.fetch_timeout_ms,
        request_timeout_ms=args.request_timeout_ms,
        fetch_max_wait_ms=min(500, args.request_timeout_ms // 2),
    )
    channels = RaftChannels.for_voters(args.node_id, args.cluster_id, voters, config)
    node = RaftNode.open(node_id=args.node_id, voters=frozenset(voters),
                         log_dir=Path(args.log_dir), listener=Printer(), config=config,
                         rng=random.Random(), transport=channels)
    listener = Listener("CONTROLLER", "127.0.0.1", args.port,
                        RaftDispatcher(RaftApis(node, args.cluster_id)),
                        request_bytes_max=100 << 20, on_fatal=lambda error: None)
    await listener.start()
    await node.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    proposers = [
        asyncio.create_task(
            propose_while_leading(node, f"{args.node_id}.{index}", args.interval_s,
                                  args.value_bytes)
        )
        for index in range(args.proposers)
    ]
    await stop.wait()
    for proposer in proposers:
        proposer.cancel()
    await node.stop()
    await listener.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--voters", required=True)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--cluster-id", required=True)
    parser.add_argument("--election-timeout-ms", type=int, default=1000)
    parser.add_argument("--fetch-timeout-ms", type=int, default=2000)
    parser.add_argument("--request-timeout-ms", type=int, default=2000)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--interval-s", type=float, default=0.005,
                        help="pause of each proposer between proposals")
    parser.add_argument("--proposers", type=int, default=1,
                        help="concurrent proposers, each waiting for its commit")
    parser.add_argument("--value-bytes", type=int, default=0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
