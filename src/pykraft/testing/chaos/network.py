"""The chaos harness's network: a private bridge, one network namespace per node, and the
network faults, as nftables rules inside each node's namespace.

Topology (x.y picked per run, see `pick_subnet`):

    host (the clients) 10.x.y.1/24 on bridge <prefix>br
        veth <prefix>v<i>  <->  eth0 10.x.y.(10+i)/24 in namespace <prefix>n<i>

Every fault is a rule on a *peer address* in the node's own namespace, in one table
`inet chaos` with an input and an output chain, so faults of any shape compose: a partition
is a set of blocked (source, destination) pairs, a one-way drop is one pair, isolation from
the clients is the pairs with the host's address. A node's whole ruleset is rewritten in one
`nft -f -` transaction whenever its part of the fault state changes. The rules drop every
packet, so connections that were already open stall as well (nothing in conntrack lets
them through). Loopback traffic is never touched: a node always reaches itself.

Loss is `numgen random mod 100 < N drop` on both chains. There is no delay: this kernel has
no `netem` qdisc (nor do many VM kernels), so a slow link is a `tbf` rate cap on both ends
of the node's veth instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["ChaosError", "NetworkFaults", "NotSupported", "pick_subnet", "run"]

COMMAND_TIMEOUT_S = 30.0
TBF_BURST = "32kbit"  # the bucket a rate-capped link may send at once
TBF_LATENCY = "400ms"  # packets queued longer than this are dropped (tbf needs a bound)


class ChaosError(Exception):
    """A harness operation failed (a command's stderr is in the message)."""


class NotSupported(ChaosError):
    """This machine cannot inject that fault (the message says why)."""


def run(command: Sequence[str], *, input_text: str | None = None,
        timeout_s: float = COMMAND_TIMEOUT_S, check: bool = True) -> str:
    """Run one command; its stdout, or ChaosError with its stderr when it fails."""
    try:
        result = subprocess.run(list(command), input=input_text, capture_output=True,
                                text=True, timeout=timeout_s)
    except FileNotFoundError as error:
        raise ChaosError(f"{command[0]} is not installed ({error}); "
                         "run ./scripts/setup --test") from error
    except subprocess.TimeoutExpired as error:
        raise ChaosError(f"{' '.join(command)} did not finish in {timeout_s} s") from error
    if check and result.returncode != 0:
        raise ChaosError(f"{' '.join(command)} failed (exit {result.returncode}): "
                         f"{result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def in_netns(netns: str, command: Sequence[str]) -> list[str]:
    return ["ip", "netns", "exec", netns, *command]


def used_subnets() -> set[tuple[int, int]]:
    """The 10.x.y.0/24 networks this host already has addresses or routes in."""
    text = run(["ip", "-4", "-o", "addr", "show"]) + run(["ip", "-4", "route", "show"])
    used: set[tuple[int, int]] = set()
    for match in re.finditer(r"\b10\.(\d+)\.(\d+)\.\d+(?:/(\d+))?", text):
        if match.group(3) is not None and int(match.group(3)) < 24:
            # a wider network covers many /24s: keep clear of its whole second octet
            used.update((int(match.group(1)), y) for y in range(256))
        else:
            used.add((int(match.group(1)), int(match.group(2))))
    return used


def pick_subnet(pid: int) -> tuple[int, int]:
    """(x, y) of a free 10.x.y.0/24, first tried from the pid so that two runs on one machine
    start apart; at most 64 candidates are tried."""
    used = used_subnets()
    for attempt in range(64):
        candidate = (pid + attempt * 7919) % (100 * 256)
        x, y = 100 + candidate // 256, candidate % 256
        if (x, y) not in used:
            return x, y
    raise ChaosError("no free 10.x.y.0/24 network for the chaos bridge after 64 tries")


def create_bridge(bridge: str, host_cidr: str) -> None:
    run(["ip", "link", "add", bridge, "type", "bridge"])
    run(["ip", "addr", "add", host_cidr, "dev", bridge])
    run(["ip", "link", "set", bridge, "up"])


def create_node_netns(netns: str, veth: str, bridge: str, node_cidr: str) -> None:
    """A namespace whose eth0 (address `node_cidr`) is a veth into `bridge`; lo up."""
    run(["ip", "netns", "add", netns])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns])
    run(["ip", "link", "set", veth, "master", bridge])
    run(["ip", "link", "set", veth, "up"])
    for command in (["ip", "addr", "add", node_cidr, "dev", "eth0"],
                    ["ip", "link", "set", "eth0", "up"],
                    ["ip", "link", "set", "lo", "up"]):
        run(in_netns(netns, command))


def netns_pids(netns: str) -> list[int]:
    text = run(["ip", "netns", "pids", netns], check=False)
    return [int(word) for word in text.split() if word.isdigit()]


def delete_netns(netns: str) -> None:
    """Kill whatever still runs in the namespace, then delete it (missing: nothing to do)."""
    if netns not in list_netns():
        return
    for pid in netns_pids(netns):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    run(["ip", "netns", "delete", netns])


def delete_link(name: str) -> None:
    """Delete a link (gone already: nothing to do). A veth whose peer's namespace was just
    deleted vanishes by itself a moment later, so a failed delete is checked, not raised."""
    for _ in range(20):
        if not link_exists(name):
            return
        run(["ip", "link", "delete", name], check=False)
        time.sleep(0.1)
    raise ChaosError(f"link {name} cannot be deleted")


def link_exists(name: str) -> bool:
    return run(["ip", "link", "show", name], check=False).strip() != ""


def list_netns() -> list[str]:
    return [line.split()[0] for line in run(["ip", "netns", "list"]).splitlines()
            if line.strip()]


def list_links() -> list[str]:
    names = []
    for line in run(["ip", "-o", "link", "show"]).splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


@dataclass
class _NodeNet:
    netns: str
    address: str
    veth: str  # the host end; the node end is eth0 inside `netns`
    ruleset: str | None = None  # the last ruleset loaded (None: the table was never made)
    rate_kbit: int | None = None


@dataclass
class NetworkFaults:
    """The network fault state of one cluster and its rules.

    `blocked` holds directed (source, destination) address pairs whose packets are dropped;
    `loss_percent` maps a node address to the share of its packets dropped both ways.
    """

    host_address: str
    nodes: dict[int, _NodeNet] = field(default_factory=dict)
    blocked: set[tuple[str, str]] = field(default_factory=set)
    loss_percent: dict[str, int] = field(default_factory=dict)

    def add_node(self, node_id: int, netns: str, address: str, veth: str) -> None:
        self.nodes[node_id] = _NodeNet(netns=netns, address=address, veth=veth)

    def address(self, node_id: int) -> str:
        if node_id not in self.nodes:
            raise ChaosError(f"no node {node_id}")
        return self.nodes[node_id].address

    # -- faults ---------------------------------------------------------------------------

    def partition(self, groups: Iterable[set[int]]) -> None:
        """Nodes in different groups cannot reach each other, either way. A node in no
        group keeps its links; earlier faults stay (heal() removes them)."""
        listed = [set(group) for group in groups]
        for index, group in enumerate(listed):
            for other in listed[index + 1:]:
                if group & other:
                    raise ChaosError(f"node(s) {sorted(group & other)} in two groups")
                for a in group:
                    for b in other:
                        self.blocked.add((self.address(a), self.address(b)))
                        self.blocked.add((self.address(b), self.address(a)))
        self.apply()

    def drop(self, source: int, destination: int) -> None:
        self.blocked.add((self.address(source), self.address(destination)))
        self.apply()

    def isolate_from_clients(self, node_id: int) -> None:
        address = self.address(node_id)
        self.blocked.add((address, self.host_address))
        self.blocked.add((self.host_address, address))
        self.apply()

    def flaky(self, node_id: int, loss_percent: int, rate_kbit: int | None) -> None:
        if not 0 <= loss_percent <= 100:
            raise ChaosError(f"loss_percent {loss_percent} is not 0..100")
        if rate_kbit is not None and rate_kbit < 1:
            raise ChaosError(f"rate_kbit {rate_kbit} is not positive")
        node = self.nodes[node_id]
        self.loss_percent[node.address] = loss_percent
        self.apply()
        if rate_kbit is not None:
            self._set_rate(node, rate_kbit)

    def heal(self) -> None:
        self.blocked.clear()
        self.loss_percent.clear()
        self.apply()
        for node in self.nodes.values():
            if node.rate_kbit is not None:
                self._set_rate(node, None)

    # -- rules ----------------------------------------------------------------------------

    def ruleset(self, node: _NodeNet) -> str:
        """The whole `inet chaos` table of one node, replacing the previous one atomically
        (declaring the table first makes the delete valid when it did not exist)."""
        inputs = [f"ip saddr {source} drop" for source, destination in sorted(self.blocked)
                  if destination == node.address]
        outputs = [f"ip daddr {destination} drop"
                   for source, destination in sorted(self.blocked) if source == node.address]
        loss = self.loss_percent.get(node.address, 0)
        if loss:
            # numgen's values are 0..99: "< 100" is out of its range, and means every packet
            rule = "drop" if loss >= 100 else f"numgen random mod 100 < {loss} drop"
            inputs.append(rule)
            outputs.append(rule)
        lines = ["table inet chaos", "delete table inet chaos", "table inet chaos {",
                 "  chain input {", "    type filter hook input priority 0; policy accept;",
                 '    iifname "lo" accept', *(f"    {rule}" for rule in inputs), "  }",
                 "  chain output {", "    type filter hook output priority 0; policy accept;",
                 '    oifname "lo" accept', *(f"    {rule}" for rule in outputs), "  }", "}"]
        return "\n".join(lines) + "\n"

    def apply(self) -> None:
        """Load the rules of every node whose rules changed."""
        for node in self.nodes.values():
            text = self.ruleset(node)
            if text != node.ruleset:
                run(in_netns(node.netns, ["nft", "-f", "-"]), input_text=text)
                node.ruleset = text

    def _set_rate(self, node: _NodeNet, rate_kbit: int | None) -> None:
        """A tbf rate cap on both ends of the node's veth (the node's eth0 shapes what it
        sends, the host end what it receives), or none."""
        for command in (["tc", "qdisc", "del", "dev", node.veth, "root"],
                        in_netns(node.netns, ["tc", "qdisc", "del", "dev", "eth0", "root"])):
            run(command, check=False)  # no qdisc yet: nothing to delete
        node.rate_kbit = rate_kbit
        if rate_kbit is None:
            return
        shape = ["root", "tbf", "rate", f"{rate_kbit}kbit", "burst", TBF_BURST, "latency",
                 TBF_LATENCY]
        run(["tc", "qdisc", "add", "dev", node.veth, *shape])
        run(in_netns(node.netns, ["tc", "qdisc", "add", "dev", "eth0", *shape]))

