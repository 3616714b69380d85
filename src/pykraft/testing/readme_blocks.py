"""The code blocks of a Markdown file, for the README doc test (tests/integration/test_readme.py).

A block is a fenced block (its info string is its language: `sh`, `console`, `python`,
`text`, ...) or an indented one (four spaces, after a blank line or at the top; taken as
shell). An HTML comment on the line just before a block (blank lines between allowed) marks
it for the doc test:

    <!-- doc-test: cluster -->          run against a three-node LocalCluster
    <!-- doc-test: slow, REASON -->     run only by the slow suite (./scripts/test-long)
    <!-- doc-test: skip, REASON -->     never run; REASON says why it cannot run in CI

A shell block splits into commands: lines joined at a trailing backslash, a here-document's
body kept with the command that opens it, comment lines and blank lines dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Block", "Marker", "code_blocks", "shell_commands", "table_rows"]

_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
_MARKER = re.compile(r"^<!--\s*doc-test:\s*(cluster|slow|skip)\s*(?:,\s*(.*?))?\s*-->\s*$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


@dataclass(frozen=True, slots=True)
class Marker:
    kind: str  # "cluster", "slow" or "skip"
    reason: str


@dataclass(frozen=True, slots=True)
class Block:
    line: int  # 1-based line of the block's first line of code
    language: str  # "sh" for indented blocks
    text: str
    marker: Marker | None

    @property
    def is_shell(self) -> bool:
        return self.language in ("sh", "bash", "shell")


def code_blocks(markdown: str) -> list[Block]:
    """Every code block of `markdown`, in order. A marker that is not followed by a block,
    or an unclosed fence, raises ValueError (a typo must not turn a block's test off)."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    marker: Marker | None = None
    marker_line = 0
    previous_blank = True
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        found = _MARKER.match(line)
        if found:
            if marker is not None:
                raise ValueError(f"line {marker_line}: doc-test marker not followed by a block")
            kind, reason = found.group(1), found.group(2) or ""
            if kind in ("slow", "skip") and not reason:
                raise ValueError(f"line {i + 1}: a doc-test {kind} marker needs its reason")
            marker, marker_line = Marker(kind, reason), i + 1
            i += 1
            continue
        if line.strip().startswith("<!--") and "doc-test" in line:
            raise ValueError(f"line {i + 1}: unreadable doc-test marker: {line.strip()}")
        if fence:
            close = fence.group(1)
            end = i + 1
            while end < len(lines) and not lines[end].startswith(close):
                end += 1
            if end == len(lines):
                raise ValueError(f"line {i + 1}: code fence never closed")
            blocks.append(Block(i + 2, fence.group(2) or "text", "\n".join(lines[i + 1:end]),
                                marker))
            marker, previous_blank, i = None, False, end + 1
            continue
        if line.startswith("    ") and line.strip() and previous_blank:
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            body = [text[4:] for text in lines[i:end]]
            while body and not body[-1].strip():
                body.pop()
            blocks.append(Block(i + 1, "sh", "\n".join(body), marker))
            marker, previous_blank, i = None, True, end
            continue
        if line.strip() and marker is not None:
            raise ValueError(f"line {marker_line}: doc-test marker not followed by a block")
        previous_blank = not line.strip()
        i += 1
    if marker is not None:
        raise ValueError(f"line {marker_line}: doc-test marker not followed by a block")
    return blocks


def shell_commands(text: str) -> list[str]:
    """The commands of a shell block: continuation lines joined (the backslash and newline
    kept, so the command runs as written), here-documents kept with their command."""
    commands: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        command = [line]
        while command[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        heredoc = _HEREDOC.search("\n".join(command))
        if heredoc:
            delimiter = heredoc.group(2)
            while i + 1 < len(lines):
                i += 1
                command.append(lines[i])
                if lines[i] == delimiter:
                    break
            else:
                raise ValueError(f"here-document {delimiter} never ends")
        commands.append("\n".join(command))
        i += 1
    return commands


def table_rows(markdown: str, header: str) -> list[list[str]]:
    """The cells of each row of the Markdown table whose header row starts with `header`
    (the separator row left out). Raises ValueError when there is no such table."""
    lines = markdown.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header)]
    if not starts:
        raise ValueError(f"no table headed {header!r}")
    start = starts[0]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        # a cell's `\|` is a literal bar, not a separator
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        rows.append([cell.strip().replace("\\|", "|") for cell in cells])
    return rows
