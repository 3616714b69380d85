"""What security costs on one node: PLAINTEXT against SASL_SSL with SCRAM-SHA-512, in one run.

One combined node with three client listeners: PLAINTEXT, SASL_PLAINTEXT and SASL_SSL (a PEM
key store from a throwaway CA), SCRAM-SHA-512 for the user `bench` (4096 iterations, from
`storage format --add-scram`). No authorizer: the cost of a check is benchmarks/authorizer.py's.

1. Throughput: `pykraft perf produce` (100-byte records, acks=1, batch.size 1 MiB, linger.ms 5)
   then `pykraft perf consume` of the same records, over PLAINTEXT and over SASL_SSL in
   alternation (`--rounds` of each), each on a fresh one-partition topic. Reports records/s,
   the SASL_SSL / PLAINTEXT ratio of each pair, and the node's CPU seconds per GB of payload.
2. Logins: `--logins` fresh connections, `--concurrency` at a time, each doing SaslHandshake
   + SaslAuthenticate with SCRAM-SHA-512 (net/sasl_client.py) and closing, on the
   SASL_PLAINTEXT listener and on the SASL_SSL one (TLS handshake first). The client's
   PBKDF2 of the password (4096 rounds of HMAC-SHA-512, ~7 ms) is computed once and reused,
   as it depends only on the password, salt and iterations: what is measured is what the
   node sustains, not this Python client. Reports logins/s and the node's CPU ms per login.

    .venv/bin/python benchmarks/security.py [--records 1000000] [--rounds 2]
        [--logins 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.net import scram  # noqa: E402
from pykraft.net.sasl_client import ClientSasl, authenticate  # noqa: E402
from pykraft.testing import LocalCluster  # noqa: E402
from pykraft.testing.certs import CertificateAuthority  # noqa: E402
from pykraft.testing.ports import free_port  # noqa: E402

RECORD_BYTES = 100
TICKS_PER_SECOND = 100  # Linux USER_HZ
USER, PASSWORD = "bench", "bench-secret"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND  # utime + stime


def run_perf(args: list[str]) -> str:
    result = subprocess.run([sys.executable, "-m", "pykraft", "perf", *args],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"perf {args[0]} failed: {result.stderr[-2000:]}")
    return result.stdout


def start_node(workdir: Path) -> tuple[LocalCluster, dict[str, str], Path]:
    """The node, its client addresses by protocol, and the CA file clients trust."""
    pem = CertificateAuthority.create().issue("bench-node").write_pem(workdir / "certs")
    sasl_port, ssl_port = free_port(), free_port()
    cluster = LocalCluster(data_dir=workdir / "node")
    broker, controller = cluster.broker_port, cluster.controller_port
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required;'
    cluster.extra_configs.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller},"
                     f"SASL://127.0.0.1:{sasl_port},SECURE://127.0.0.1:{ssl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker},"
                                f"SASL://127.0.0.1:{sasl_port},SECURE://127.0.0.1:{ssl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                          "SASL:SASL_PLAINTEXT,SECURE:SASL_SSL",
        "listener.name.secure.ssl.keystore.type": "PEM",
        "listener.name.secure.ssl.keystore.location": str(pem.keystore),
        "listener.name.secure.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.secure.scram-sha-512.sasl.jaas.config": jaas,
        "listener.name.sasl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl.scram-sha-512.sasl.jaas.config": jaas,
    })
    cluster._write_config()
    formatted = subprocess.run(
        [sys.executable, "-m", "pykraft", "storage", "format", "--config",
         str(cluster.config_path), "--cluster-id", cluster.cluster_id, "--add-scram",
         f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
        capture_output=True, text=True, timeout=60)
    if formatted.returncode != 0:
        raise RuntimeError(f"storage format failed: {formatted.stderr}")
    cluster.start()
    return cluster, {"PLAINTEXT": f"127.0.0.1:{broker}",
                     "SASL_PLAINTEXT": f"127.0.0.1:{sasl_port}",
                     "SASL_SSL": f"127.0.0.1:{ssl_port}"}, pem.ca


def client_properties(path: Path, ca: Path) -> Path:
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n")
    return path


def throughput(cluster: LocalCluster, pid: int, address: str, properties: Path | None,
               topic: str, records: int) -> tuple[float, float, float, float]:
    """produce rec/s, consume rec/s, node CPU s/GB produce, node CPU s/GB consume"""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=1,
                                  replication_factor=1)])[topic].result(30)
    gigabytes = records * RECORD_BYTES / 1e9
    produce_config = ["--producer.config", str(properties)] if properties else []
    consume_config = ["--consumer.config", str(properties)] if properties else []
    before = cpu_seconds(pid)
    produced = run_perf([
        "produce", "--bootstrap-server", address, "--topic", topic, *produce_config,
        "--num-records", str(records), "--record-size", str(RECORD_BYTES),
        "--throughput", "-1", "--producer-props", "acks=1", "batch.size=1048576",
        "linger.ms=5"])
    cpu_produce = cpu_seconds(pid) - before
    before = cpu_seconds(pid)
    consumed = run_perf(["consume", "--bootstrap-server", address, "--topic", topic,
                         *consume_config, "--messages", str(records),
                         "--timeout-ms", "30000"])
    cpu_consume = cpu_seconds(pid) - before
    match = re.search(r"([\d.]+) records/sec", produced.strip().splitlines()[-1])
    if match is None:
        raise RuntimeError(f"cannot parse perf produce output: {produced[-500:]}")
    row = consumed.strip().splitlines()[-1].split(",")
    if int(row[4].strip()) != records:
        raise RuntimeError(f"consumed {row[4]} of {records} records")
    return (float(match.group(1)), float(row[5]), cpu_produce / gigabytes,
            cpu_consume / gigabytes)


async def logins(address: str, ca: Path | None, count: int, concurrency: int) -> float:
    """Seconds for `count` SCRAM-SHA-512 logins, `concurrency` at a time."""
    import ssl

    host, port = address.rsplit(":", 1)
    context = None
    if ca is not None:
        context = ssl.create_default_context(cafile=str(ca))
    sasl = ClientSasl("SCRAM-SHA-512", USER, PASSWORD)
    left = iter(range(count))

    async def worker() -> None:
        for _ in left:
            reader, writer = await asyncio.open_connection(
                host, int(port), ssl=context, server_hostname="localhost" if context else None)
            try:
                await authenticate(reader, writer, sasl)
            finally:
                writer.close()
                try:
                    await writer.wait_closed()
                except (ConnectionError, OSError):
                    pass

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--logins", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    arguments = parser.parse_args()
    # the client's PBKDF2 depends on (password, salt, iterations) only: computed once
    for mechanism in scram.MECHANISMS.values():
        mechanism.salted_password = functools.lru_cache(
            maxsize=8)(mechanism.salted_password)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        workdir = Path(tmp)
        cluster, addresses, ca = start_node(workdir)
        try:
            assert cluster.process is not None
            pid = cluster.process.pid
            properties = client_properties(workdir / "client.properties", ca)
            rows = []
            for round_ in range(arguments.rounds):
                for protocol in ("PLAINTEXT", "SASL_SSL"):
                    measured = throughput(
                        cluster, pid, addresses[protocol],
                        properties if protocol == "SASL_SSL" else None,
                        f"bench-{protocol.lower()}-{round_}", arguments.records)
                    rows.append((round_, protocol, *measured))
                    print(f"round {round_} {protocol}: produce {measured[0]:,.0f} rec/s, "
                          f"consume {measured[1]:,.0f} rec/s, node CPU s/GB "
                          f"{measured[2]:.2f} / {measured[3]:.2f}", flush=True)
            login_rows = []
            for protocol, trust in (("SASL_PLAINTEXT", None), ("SASL_SSL", ca)):
                before = cpu_seconds(pid)
                seconds = asyncio.run(logins(addresses[protocol], trust, arguments.logins,
                                             arguments.concurrency))
                cpu = cpu_seconds(pid) - before
                login_rows.append((protocol, arguments.logins / seconds,
                                   cpu * 1000 / arguments.logins))
                print(f"logins {protocol}: {arguments.logins / seconds:,.0f}/s, node CPU "
                      f"{cpu * 1000 / arguments.logins:.2f} ms per login", flush=True)
        finally:
            cluster.close()
    print()
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
          f"Python {platform.python_version()}; {arguments.records:,} records of "
          f"{RECORD_BYTES} B per run, acks=1, batch.size=1 MiB, linger.ms=5")
    print()
    print("| round | listener | produce rec/s | consume rec/s | node CPU s/GB produce |"
          " node CPU s/GB consume |")
    print("|---|---|---|---|---|---|")
    for round_, protocol, produce, consume, cpu_p, cpu_c in rows:
        print(f"| {round_} | {protocol} | {produce:,.0f} | {consume:,.0f} | {cpu_p:.2f} |"
              f" {cpu_c:.2f} |")
    print()
    for round_ in range(arguments.rounds):
        plain = next(r for r in rows if r[0] == round_ and r[1] == "PLAINTEXT")
        secure = next(r for r in rows if r[0] == round_ and r[1] == "SASL_SSL")
        print(f"round {round_}: SASL_SSL / PLAINTEXT produce {secure[2] / plain[2]:.2f}, "
              f"consume {secure[3] / plain[3]:.2f}")
    print()
    print("| listener | SCRAM-SHA-512 logins/s | node CPU ms per login |")
    print("|---|---|---|")
    for protocol, rate, cpu_ms in login_rows:
        print(f"| {protocol} | {rate:,.0f} | {cpu_ms:.2f} |")


if __name__ == "__main__":
    main()
