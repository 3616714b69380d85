"""README.md runs as written (issue 18): every code block, against real nodes.

The README's first block (above the title) starts the module's node: its `./scripts/start`
runs from the checkout as the quick start says, with two changes a test needs: the data goes
to a temporary directory (PYKRAFT_DATA) and the ports are free ones (--override). Every later
block then runs in README order, in a sandbox directory that links the checkout's files (so
`.venv/bin/pykraft`, `examples/` and relative paths such as `data/` work as from the
repository root), with the README's loopback addresses (127.0.0.1:9092, :9093, ...) replaced
by the ports actually used:

- `sh` blocks run command by command under `bash -euo pipefail`; a command that runs until
  stopped (`./scripts/start`, `pykraft server start`, `examples/cluster/run.sh`) is started in
  the background in a sandbox and on ports of its own, checked to answer a real client, then
  stopped with Ctrl-C (SIGINT) and checked to have exited cleanly with nothing left running;
- `console` blocks run their `$ ` commands, whose output must have the sample's shape (the
  sample's first words of its lines, e.g. its labels and table header);
- `python` blocks run in the venv's interpreter; `text` blocks are not run.

Markers (src/pykraft/testing/readme_blocks.py) are kept few: `slow` blocks run in
./scripts/test-long only, `skip` ones never, and NOT_RUN lists the one command of the first
block that cannot run here. The tools table must name every subcommand of `pykraft --help`.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import closing
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pykraft.testing import LocalCluster, free_port
from pykraft.testing.readme_blocks import Block, code_blocks, shell_commands, table_rows

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = code_blocks(README)
TOP, LATER = BLOCKS[0], BLOCKS[1:]
# commands of the first block that are not run, with the reason
NOT_RUN = {"./scripts/test": "runs this whole suite (CI runs it as .ci/run)"}
MAX_NOT_RUN = 3  # NOT_RUN, skip and slow markers together
LONG_RUNNING = re.compile(r"^(\./scripts/start|\S*pykraft server start|examples/cluster/run\.sh)\b")
ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")
RUNNABLE = ("sh", "bash", "shell", "console", "python")
COMMAND_TIMEOUT_S = 120.0
SLOW_COMMAND_TIMEOUT_S = 900.0


def _as_in_a_terminal() -> None:
    """(In the child, before exec.) Ctrl-C and Ctrl-\\ at their defaults, as for a command
    typed at a terminal. A test run started in the background (`./scripts/test &`, or under
    nohup) hands its processes SIGINT ignored, and a shell started so can never trap it:
    run.sh then ignored the Ctrl-C these tests send (seen twice in full runs, where the
    failure message showed SigIgn 0x7)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYKRAFT", "PYKRAFT_DATA", "PYKRAFT_PORT_BASE")}
    env.update(extra)
    return env


def _sandbox(directory: Path) -> Path:
    """A directory that looks like the checkout's root: a link to each of its entries,
    except those a README command writes (data/, out/, server.properties)."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in REPO.iterdir():
        if entry.name not in ("data", "out", "server.properties", ".git"):
            (directory / entry.name).symlink_to(entry)
    return directory


def _with_ports(text: str, ports: Mapping[int, int], where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        port = int(match.group(1))
        assert port in ports, f"{where}: the doc test does not know port {port} of the README"
        return f"127.0.0.1:{ports[port]}"
    return ADDRESS.sub(replace, text)


def _answers(bootstrap: str, brokers: int, timeout_s: float = 60.0,
             process: subprocess.Popen[str] | None = None, log: Path | None = None) -> None:
    """Waits until `bootstrap` lists `brokers` brokers in Metadata (a real client)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            output = log.read_text(errors="replace") if log else ""
            raise AssertionError(f"exited with {process.returncode} before answering:\n{output}")
        try:
            found = len(admin.list_topics(timeout=2).brokers)
            if found == brokers:
                return
            last = f"{found} brokers"
        except KafkaException as error:
            last = error
        time.sleep(0.1)
    raise AssertionError(f"{bootstrap} did not list {brokers} brokers in {timeout_s} s ({last})")


def _stop(process: subprocess.Popen[str], what: str, log: Path | None = None) -> None:
    """Ctrl-C, as the README says; the process must exit cleanly within 60 s."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise AssertionError(f"{what} did not stop within 60 s of SIGINT") from None
    output = log.read_text(errors="replace") if log else ""
    assert process.returncode in (0, 130), f"{what} exited with {process.returncode}:\n{output}"


def _fail(block: Block, command: str, result: subprocess.CompletedProcess[str] | str) -> None:
    output = result if isinstance(result, str) else (
        f"exit code {result.returncode}\n{result.stdout}{result.stderr}")
    raise AssertionError(f"README.md line {block.line}: the block\n{block.text}\n"
                         f"failed at\n{command}\n--- output ---\n{output}")


def _run(block: Block, command: str, cwd: Path, timeout_s: float,
         *args: str) -> subprocess.CompletedProcess[str]:
    argv = list(args) or ["bash", "-euo", "pipefail", "-c", command]
    try:
        result = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True,
                                timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as error:
        output = b"".join(part if isinstance(part, bytes) else (part or "").encode()
                          for part in (error.stdout, error.stderr))
        _fail(block, command, f"did not finish in {timeout_s} s\n"
              + output.decode(errors="replace"))
        raise  # unreachable: _fail raises
    if result.returncode != 0:
        _fail(block, command, result)
    return result


# --- the module's node: the README's quick start ---------------------------------------

@pytest.fixture(scope="module")
def quick_start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[int, int]]]:
    """The first block's ./scripts/start, running for the whole module; yields the sandbox
    whose data/ the node uses and the README port -> real port map."""
    commands = shell_commands(TOP.text)
    start = [c for c in commands if LONG_RUNNING.match(c)]
    assert [c.split("#")[0].strip() for c in start] == ["./scripts/start"], TOP.text
    for command in commands:
        assert command in start or command.split("#")[0].strip() in NOT_RUN, command
    sandbox = _sandbox(tmp_path_factory.mktemp("readme"))
    ports = {9092: free_port(), 9093: free_port()}
    overrides = [
        f"listeners=PLAINTEXT://127.0.0.1:{ports[9092]},CONTROLLER://127.0.0.1:{ports[9093]}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{ports[9092]}",
        f"controller.quorum.voters=1@127.0.0.1:{ports[9093]}",
    ]
    log = sandbox / "quick-start.log"
    with open(log, "w") as output:
        process = subprocess.Popen(
            ["./scripts/start", *[arg for o in overrides for arg in ("--override", o)]],
            cwd=REPO, env=_env(PYKRAFT_DATA=str(sandbox / "data")), stdout=output,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_as_in_a_terminal, text=True)
    try:
        _answers(f"127.0.0.1:{ports[9092]}", 1, process=process, log=log)
        yield sandbox, ports
    finally:
        _stop(process, "./scripts/start", log)


@pytest.fixture(scope="module")
def cluster_ports() -> Iterator[dict[int, int]]:
    """For `<!-- doc-test: cluster -->` blocks: three combined nodes on the example
    cluster's README ports (9092/9192/9292 for clients, 19093-19095 for controllers)."""
    with LocalCluster(combined=3) as cluster:
        nodes = [cluster.nodes[i] for i in sorted(cluster.nodes)]
        ports = {9092 + 100 * i: n.broker_port for i, n in enumerate(nodes)}
        ports.update({19093 + i: n.controller_port for i, n in enumerate(nodes)})
        yield ports


# --- the commands that run until stopped ----------------------------------------------

def _bindable(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port_base() -> int:
    """A PORT_BASE for examples/cluster/run.sh whose ports (base, +100, +200,
    +10001..+10003) are all free, below the kernel's ephemeral range."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        base = random.randrange(10_000, min(low, 55_532) - 10_003)
        if all(_bindable(base + offset) for offset in (0, 100, 200, 10001, 10002, 10003)):
            return base
    raise AssertionError("no free port base for run.sh")


def _lines(stream: object) -> queue.Queue[str | None]:
    """A reader thread's queue of the lines of `stream` (None at its end)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line)
        lines.put(None)
    threading.Thread(target=read, daemon=True).start()
    return lines


def _process_state(pid: int) -> str:
    """What a process that does not react is doing: its state, signal masks, kernel wait
    channel and children (for a failure message)."""
    proc = Path(f"/proc/{pid}")
    try:
        status = [line for line in (proc / "status").read_text().splitlines()
                  if line.startswith(("State", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn",
                                      "SigCgt"))]
        wchan = (proc / "wchan").read_text()
        children = subprocess.run(["ps", "-o", "pid,pgid,stat,wchan:20,args", "--ppid",
                                   str(pid)], capture_output=True, text=True).stdout
    except OSError as error:
        return f"pid {pid}: {error}"
    return f"pid {pid}: {'; '.join(status)}; wchan {wchan}; children:\n{children}"


def _node_processes(cwd: Path) -> list[int]:
    """Pids of the live `pykraft server start` processes running in directory `cwd`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                where = Path(os.readlink(entry / "cwd"))
            except (OSError, IndexError, UnicodeDecodeError):
                continue
            if "server start" in cmdline and state != "Z" and where == cwd.resolve():
                found.append(int(entry.name))
    return found


def _use_cluster(bootstrap: str, replicas: int) -> None:
    """A replicated topic takes acks=all writes and a consumer group reads and commits them;
    the group's __consumer_offsets has `replicas` replicas (the example configs' choice)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("readme-check", 3, replicas)], operation_timeout=30)
    futures["readme-check"].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce("readme-check", f"value-{i}".encode(), f"key-{i}".encode())
    assert producer.flush(60) == 0, "records not acknowledged with acks=all"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readme-check",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["readme-check"])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 30 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.add(message.value() or b"")
        assert len(seen) == 30, f"the group read {len(seen)} of 30 records"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    offsets = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    assert {len(p.replicas) for p in offsets.partitions.values()} == {replicas}


def _log_tails(sandbox: Path) -> str:
    """The last 40 lines of each node log run.sh wrote (data/<node>.log)."""
    return "".join(
        f"\n--- the end of {log.name}:\n"
        + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        for log in sorted((sandbox / "data").glob("*.log")))


def _run_cluster_example(block: Block, command: str, sandbox: Path) -> None:
    """examples/cluster/run.sh on a free port base: the cluster it prints answers real
    clients; after Ctrl-C (SIGINT) every node it started is gone."""
    base = _free_port_base()
    process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=sandbox,
                               env=_env(PYKRAFT_PORT_BASE=str(base)), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                               start_new_session=True, preexec_fn=_as_in_a_terminal)
    lines = _lines(process.stdout)
    output: list[str] = []
    pids: list[int] = []
    bootstrap = ""
    try:
        deadline = time.monotonic() + 60
        while not bootstrap:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                _fail(block, command, "no bootstrap.servers line in 60 s:\n" + "".join(output))
            if line is None:
                _fail(block, command, f"exited ({process.wait()}):\n" + "".join(output))
            assert line is not None
            output.append(line)
            if started := re.match(r"started \S+ \(pid (\d+)\)", line):
                pids.append(int(started.group(1)))
            if line.startswith("bootstrap.servers="):
                bootstrap = line.strip().split("=", 1)[1]
        assert bootstrap.split(",")[0] == f"127.0.0.1:{base}", bootstrap
        brokers = len(bootstrap.split(","))
        try:
            _answers(bootstrap, brokers)
        except AssertionError as error:  # which node did not join, and what it said
            raise AssertionError(f"{error}:{_log_tails(sandbox)}") from None
        _use_cluster(bootstrap, min(3, brokers))
        assert sorted(_node_processes(sandbox)) == sorted(pids), "the nodes are not run.sh's"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            state = _process_state(process.pid)
            os.killpg(process.pid, signal.SIGKILL)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            raise AssertionError(
                f"run.sh did not stop within 60 s of SIGINT ({state}); its output:\n"
                f"{''.join(output)}{_log_tails(sandbox)}") from None
    while (line := lines.get(timeout=5)) is not None:
        output.append(line)
    text = "".join(output)
    assert process.returncode == 130, f"run.sh exited with {process.returncode}:\n{text}"
    assert "stopped every node" in text, text
    assert len(pids) == (3 if "combined" in command else 4), text
    left = _node_processes(sandbox)
    assert left == [], f"node processes left after Ctrl-C: {left}\n{text}"
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)


def _run_server(block: Block, command: str, sandbox: Path, ports: Mapping[int, int]) -> None:
    log = sandbox / "server.log"
    with open(log, "w") as output:
        process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=sandbox, env=_env(),
                                   stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                   preexec_fn=_as_in_a_terminal)
    try:
        _answers(f"127.0.0.1:{ports[9092]}", 1, process=process, log=log)
    except AssertionError as error:
        _fail(block, command, str(error))
    finally:
        _stop(process, command, log)


# --- running a block ---------------------------------------------------------------------

def _run_shell(block: Block, cwd: Path, ports: Mapping[int, int], timeout_s: float,
               tmp_path: Path) -> None:
    commands = shell_commands(block.text)
    if any(LONG_RUNNING.match(c) for c in commands):
        # it starts nodes of its own: a sandbox and README ports of its own
        cwd = _sandbox(tmp_path / "sandbox")
        ports = {9092: free_port(), 9093: free_port()}
    for command in commands:
        runnable = _with_ports(command, ports, f"README.md line {block.line}")
        if runnable.startswith("examples/cluster/run.sh"):
            _run_cluster_example(block, runnable, cwd)
        elif LONG_RUNNING.match(runnable):
            _run_server(block, runnable, cwd, ports)
        else:
            _run(block, runnable, cwd, timeout_s)


def _run_console(block: Block, cwd: Path, ports: Mapping[int, int], timeout_s: float) -> None:
    """`$ command` lines run; the lines after each are its sample output, whose first words
    (labels, a table's header) the real output must have, line for line."""
    runs: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            runs.append((line[2:], []))
        else:
            assert runs, f"README.md line {block.line}: console block must start with '$ '"
            runs[-1][1].append(line)
    for command, sample in runs:
        runnable = _with_ports(command, ports, f"README.md line {block.line}")
        result = _run(block, runnable, cwd, timeout_s)
        actual = [line.split() for line in result.stdout.splitlines() if line.strip()]
        wanted = [line.split() for line in sample if line.strip()]
        if [words[0] for words in actual] != [words[0] for words in wanted]:
            _fail(block, command, "output does not have the sample's shape:\n" + result.stdout)
        header = [w for w in wanted if w[0] == "NodeId"]
        if header and header[0] not in actual:
            _fail(block, command, "the table header differs from the sample's:\n" + result.stdout)


def _run_block(block: Block, cwd: Path, ports: Mapping[int, int], tmp_path: Path,
               timeout_s: float = COMMAND_TIMEOUT_S) -> None:
    if block.language == "python":
        code = _with_ports(block.text, ports, f"README.md line {block.line}")
        _run(block, code, cwd, timeout_s, sys.executable, "-c", code)
    elif block.language == "console":
        _run_console(block, cwd, ports, timeout_s)
    else:
        _run_shell(block, cwd, ports, timeout_s, tmp_path)


def _ids(blocks: list[Block]) -> list[str]:
    return [f"line{b.line}-{b.language}" for b in blocks]


RUN_NOW = [b for b in LATER if b.language in RUNNABLE and b.marker is None or
           b.marker is not None and b.marker.kind == "cluster"]
RUN_SLOW = [b for b in LATER if b.marker is not None and b.marker.kind == "slow"]


@pytest.mark.parametrize("block", RUN_NOW, ids=_ids(RUN_NOW))
def test_block(block: Block, quick_start: tuple[Path, dict[int, int]],
               request: pytest.FixtureRequest, tmp_path: Path) -> None:
    sandbox, ports = quick_start
    if block.marker is not None and block.marker.kind == "cluster":
        ports = request.getfixturevalue("cluster_ports")
    _run_block(block, sandbox, ports, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN_SLOW, ids=_ids(RUN_SLOW))
def test_slow_block(block: Block, quick_start: tuple[Path, dict[int, int]],
                    tmp_path: Path) -> None:
    sandbox, ports = quick_start
    if "127.0.0.1:9192" in block.text:  # another cluster (the mirror's target)
        with LocalCluster() as other:
            _run_block(block, sandbox, {**ports, 9192: other.broker_port}, tmp_path,
                       SLOW_COMMAND_TIMEOUT_S)
    else:
        _run_block(block, sandbox, ports, tmp_path, SLOW_COMMAND_TIMEOUT_S)


def test_every_block_is_run_or_marked() -> None:
    """A block is run, marked as not a command (```text), or marked slow/skip with a reason;
    those that do not run in CI stay few."""
    for block in LATER:
        assert block.language in (*RUNNABLE, "text"), (
            f"README.md line {block.line}: a ```{block.language} block is neither run nor "
            "marked ```text")
    not_run = len(NOT_RUN) + sum(1 for b in BLOCKS if b.marker and b.marker.kind != "cluster")
    assert not_run <= MAX_NOT_RUN, "README blocks not run in CI: run them instead of marking"


def test_tools_table_names_every_tool() -> None:
    """Every top-level subcommand of `pykraft --help` has a row in the README's tools table,
    and every row names a real one."""
    result = subprocess.run([str(REPO / ".venv/bin/pykraft"), "--help"], capture_output=True,
                            text=True, timeout=60, check=True)
    listing = result.stdout.split("positional arguments:", 1)[1].split("options:", 1)[0]
    tools = set(re.findall(r"^    ([a-z][a-z-]*)(?:\s|$)", listing, re.MULTILINE))
    assert {"server", "topics", "transactions", "features", "cluster"} <= tools, listing
    named = {name for row in table_rows(README, "| command |")
             for name in re.findall(r"`pykraft ([a-z][a-z-]*)", row[0])}
    assert not tools - named, f"tools without a row in README.md's tools table: {tools - named}"
    assert not named - tools, f"README.md's tools table names unknown tools: {named - tools}"


def test_block_parser_markers_heredocs_and_continuations() -> None:
    """The parser the doc test relies on: a marker must precede a block and give a reason,
    a here-document and a continued line are one command each, indented code is shell."""
    markdown = ("    ./scripts/start\n\nText\n\n<!-- doc-test: slow, needs Spark -->\n\n"
                "```sh\ncat > f <<'EOF'\na=1\n# not a comment here\nEOF\necho a \\\n"
                "    b  # c\n# a comment\n```\n\n| command | what |\n| --- | --- |\n"
                "| `pykraft a\\|b` | x |\n")
    top, block = code_blocks(markdown)
    assert (top.language, top.text, top.marker) == ("sh", "./scripts/start", None)
    assert block.marker is not None and (block.marker.kind, block.marker.reason) == (
        "slow", "needs Spark")
    assert shell_commands(block.text) == [
        "cat > f <<'EOF'\na=1\n# not a comment here\nEOF", "echo a \\\n    b  # c"]
    assert table_rows(markdown, "| command |") == [["`pykraft a|b`", "x"]]
    for broken in ("<!-- doc-test: slow -->\n```sh\nx\n```\n",      # no reason
                   "<!-- doc-test: skip, why -->\n\ntext\n",          # no block after it
                   "<!-- doc-test: later -->\n```sh\nx\n```\n",       # unknown kind
                   "```sh\nx\n"):                                     # never closed
        with pytest.raises(ValueError):
            code_blocks(broken)
