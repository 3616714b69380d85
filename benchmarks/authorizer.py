"""Benchmark of the StandardAuthorizer: microseconds per authorization check, by binding count.

Builds `StandardAuthorizer`s holding N ACL bindings each (for every N in `--bindings`): per
principal, LITERAL READ/WRITE bindings on its own topics, a PREFIXED binding on its topic
prefix, a group READ and a DENY; plus a `User:*` wildcard binding. Then times `authorize` for
a mix of checks that end in ALLOW (a literal name, a prefixed name, a wildcard), DENY (a
DENY binding) and no match, each repeated `--checks` times, and `authorize_by_resource_type`
for one principal. A check should cost the same with 10 bindings as with 10,000 (the index
reads only the patterns that apply to the name and, under each, only the principal's and
`User:*`'s bindings).

Run: .venv/bin/python benchmarks/authorizer.py [--bindings 10 10000] [--checks 200000]
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from functools import partial

from pykraft.broker.authorizer import AuthorizerSettings, StandardAuthorizer
from pykraft.metadata.registrations import StandardAcl
from pykraft.net.principal import KafkaPrincipal
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from pykraft.protocol.framing import RequestHeader

TOPIC, GROUP = int(ResourceType.TOPIC), int(ResourceType.GROUP)
LITERAL, PREFIXED = int(PatternType.LITERAL), int(PatternType.PREFIXED)
READ, WRITE = int(AclOperation.READ), int(AclOperation.WRITE)
ALLOW, DENY = int(AclPermissionType.ALLOW), int(AclPermissionType.DENY)
PER_PRINCIPAL = 5  # bindings each principal gets below


def _per_principal(index: int) -> list[StandardAcl]:
    user = f"User:u{index}"
    return [StandardAcl(TOPIC, f"t{index}-orders", LITERAL, user, "*", READ, ALLOW),
            StandardAcl(TOPIC, f"t{index}-orders", LITERAL, user, "*", WRITE, ALLOW),
            StandardAcl(TOPIC, f"p{index}-", PREFIXED, user, "*", READ, ALLOW),
            StandardAcl(GROUP, f"g{index}", LITERAL, user, "*", READ, ALLOW),
            StandardAcl(TOPIC, f"t{index}-secret", LITERAL, user, "*", READ, DENY)]


def build(bindings: int) -> StandardAuthorizer:
    """Exactly `bindings` bindings (at least 6): a `User:*` one, then principals' sets."""
    acls = [StandardAcl(TOPIC, "public", LITERAL, "User:*", "*", READ, ALLOW)]
    index = 0
    while len(acls) < max(bindings, 1 + PER_PRINCIPAL):
        acls += _per_principal(index)
        index += 1
    authorizer = StandardAuthorizer(AuthorizerSettings(super_users=frozenset({"User:admin"})))
    authorizer.load({uuid.UUID(int=i + 1): acl
                     for i, acl in enumerate(acls[:max(bindings, 1 + PER_PRINCIPAL)])})
    return authorizer


def context(principal: str) -> RequestContext:
    return RequestContext(RequestHeader(1, 17, 1, "bench", 0), "PLAINTEXT", "10.0.0.1", 1,
                          principal=KafkaPrincipal.parse(principal))


def per_check_us(check: Callable[[], bool], expected: bool, checks: int,
                 repeats: int = 5) -> float:
    """The best of `repeats` timings of `checks` calls (the machine is shared: the best run
    is the one least disturbed), in microseconds per call."""
    assert check() is expected, "the benchmark's bindings do not decide as intended"
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(checks):
            check()
        best = min(best, (time.perf_counter() - start) / checks * 1e6)
    return best


def cases(authorizer: StandardAuthorizer) -> list[tuple[Callable[[], bool], bool]]:
    """The checks timed, with the answer each must give: literal, prefixed, wildcard, deny,
    no binding at all, and by resource type; for a principal in the middle of the table."""
    index = max(0, (len(authorizer) - 1) // PER_PRINCIPAL // 2)
    user, stranger = context(f"User:u{index}"), context("User:nobody")
    ask, topic, op = authorizer.authorize, ResourceType.TOPIC, AclOperation
    return [
        (partial(ask, user, op.WRITE, topic, f"t{index}-orders"), True),
        (partial(ask, user, op.READ, topic, f"p{index}-events-2024"), True),
        (partial(ask, stranger, op.DESCRIBE, topic, "public"), True),
        (partial(ask, user, op.READ, topic, f"t{index}-secret"), False),
        (partial(ask, stranger, op.READ, topic, "unlisted-topic"), False),
        (partial(authorizer.authorize_by_resource_type, user, op.WRITE, topic), True),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bindings", type=int, nargs="+", default=[10, 10_000],
                        help="binding counts to measure (each at least 6)")
    parser.add_argument("--checks", type=int, default=200_000)
    args = parser.parse_args()
    print(f"{'bindings':>9} {'literal':>8} {'prefixed':>9} {'wildcard':>9} {'deny':>6} "
          f"{'no acl':>7} {'by type':>8}   (microseconds per check)")
    for bindings in args.bindings:
        authorizer = build(bindings)
        timings = [per_check_us(check, expected, args.checks)
                   for check, expected in cases(authorizer)]
        print(f"{len(authorizer):>9} " + " ".join(
            f"{t:>{w}.2f}" for t, w in zip(timings, (8, 9, 9, 6, 7, 8), strict=True)))


if __name__ == "__main__":
    main()
