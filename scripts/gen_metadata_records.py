#!/usr/bin/env python3
"""Generate src/pykraft/metadata/records.py from Kafka's metadata record JSON schemas.

Usage:
    .venv/bin/python scripts/gen_metadata_records.py [--schemas DIR] [--check]

Reads DIR/metadata/*.json (default DIR: /work/shared/kafka-schemas), the definitions of the
records of the `__cluster_metadata` log, and writes one frozen dataclass per record kind,
with nested dataclasses for nested structs and a `FIELDS` table (`FieldSpec`s) that the
hand-written generic codec interprets. The output is committed: pykraft never reads the
schemas at run time. `--check` exits non-zero when the committed file is out of date.

The generator understands exactly the schema features the metadata records use (primitive
fields, arrays of primitives, arrays of structs, nullable and tagged fields, defaults) and
fails loudly on anything else, so a new schema feature cannot be silently mistranslated.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "src" / "pykraft" / "metadata" / "records.py"
DEFAULT_SCHEMAS = Path("/work/shared/kafka-schemas")
VERSION_MAX = 0x7FFF

PYTHON_TYPES = {
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "uint16": "int",
    "int32": "int",
    "int64": "int",
    "float64": "float",
    "string": "str",
    "bytes": "bytes",
    "uuid": "uuid.UUID",
}
INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
NULLABLE_KINDS = ("string", "bytes")  # plus arrays; Kafka allows null for nothing else


class SchemaError(Exception):
    pass


def strip_comments(text: str) -> str:
    """Drop `//` comments outside JSON strings (Kafka's schema files are JSON plus comments)."""
    out: list[str] = []
    in_string = escaped = False
    i = 0
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(char)
        i += 1
    return "".join(out)


def parse_versions(text: str | None) -> tuple[int, int]:
    """'3' -> (3, 3); '0-2' -> (0, 2); '1+' -> (1, VERSION_MAX); 'none' or absent -> empty."""
    if text is None or text == "none" or text == "":
        return (0, -1)
    if text.endswith("+"):
        return (int(text[:-1]), VERSION_MAX)
    if "-" in text:
        low, high = text.split("-")
        return (int(low), int(high))
    return (int(text), int(text))


def versions_expr(versions: tuple[int, int]) -> str:
    if versions == (0, -1):
        return "NO_VERSIONS"
    high = "VERSION_MAX" if versions[1] == VERSION_MAX else str(versions[1])
    return f"Versions({versions[0]}, {high})"


def versions_text(versions: tuple[int, int]) -> str:
    low, high = versions
    return f"version {low}" if low == high else f"versions {low}-{high}"


def contains(outer: tuple[int, int], inner: tuple[int, int]) -> bool:
    return inner[0] > inner[1] or (outer[0] <= inner[0] and inner[1] <= outer[1])


def snake_case(name: str) -> str:
    """Kafka's CamelCase field names in snake_case: `TopicId` -> `topic_id`."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return name.lower()


@dataclass
class Field:
    name: str  # snake_case
    json_name: str
    type: str  # Kafka's type name
    element: str  # element type of an array, else the type
    versions: tuple[int, int]
    nullable: tuple[int, int]
    tag: int | None
    tagged: tuple[int, int]
    default: Any
    ignorable: bool
    struct: Struct | None


@dataclass
class Struct:
    name: str
    qualified: str  # the name Python code outside the class uses
    fields: list[Field]


@dataclass
class Message:
    name: str
    api_key: int
    valid: tuple[int, int]
    flexible: tuple[int, int]
    struct: Struct


def parse_default(spec: dict[str, Any], kind: str, is_array: bool, nullable: bool) -> Any:
    """The field's default as a Python value: the schema's, else Kafka's implicit one."""
    raw = spec.get("default")
    where = spec["name"]
    if raw == "null":
        if not nullable:
            raise SchemaError(f"{where}: default null on a field that is never nullable")
        return None
    if is_array:
        if raw not in (None, ""):
            raise SchemaError(f"{where}: arrays take no default but null")
        return ()
    if kind in INT_RANGES:
        value = 0 if raw is None else int(str(raw), 0)
        low, high = INT_RANGES[kind]
        if not low <= value <= high:
            raise SchemaError(f"{where}: default {value} out of range for {kind}")
        return value
    if kind == "bool":
        if raw is None:
            return False
        if str(raw) not in ("true", "false"):
            raise SchemaError(f"{where}: bad bool default {raw!r}")
        return raw == "true"
    if kind == "float64":
        return 0.0 if raw is None else float(raw)
    if kind == "string":
        return "" if raw is None else str(raw)
    if kind in ("bytes", "uuid"):
        if raw is not None:
            raise SchemaError(f"{where}: {kind} fields take no default but null")
        return b"" if kind == "bytes" else uuid.UUID(int=0)
    raise SchemaError(f"{where}: no default rule for {kind}")


def parse_field(
    spec: dict[str, Any], owner: str, flexible: tuple[int, int], structs: dict[str, Struct]
) -> Field:
    kind_text: str = spec["type"]
    is_array = kind_text.startswith("[]")
    element = kind_text[2:] if is_array else kind_text
    where = f"{owner}.{spec['name']}"
    versions = parse_versions(spec.get("versions"))
    nullable = parse_versions(spec.get("nullableVersions"))
    tagged = parse_versions(spec.get("taggedVersions"))
    tag = int(spec["tag"]) if "tag" in spec else None
    if (tag is None) != (tagged == (0, -1)):
        raise SchemaError(f"{where}: tag and taggedVersions go together")
    if not contains(versions, tagged) or not contains(versions, nullable):
        raise SchemaError(f"{where}: taggedVersions/nullableVersions outside versions")
    if not contains(flexible, tagged):
        raise SchemaError(f"{where}: tagged in a version that is not flexible")
    if nullable != (0, -1) and not is_array and element not in NULLABLE_KINDS:
        raise SchemaError(f"{where}: {kind_text} cannot be nullable")
    struct: Struct | None = None
    if element not in PYTHON_TYPES:
        if not is_array:
            raise SchemaError(f"{where}: struct fields that are not arrays are not supported")
        if "fields" not in spec:
            raise SchemaError(f"{where}: unknown type {kind_text}")
        if element in structs:
            raise SchemaError(f"{where}: struct {element} defined twice")
        struct = Struct(
            name=element,
            qualified=f"{owner}.{element}",
            fields=[
                parse_field(child, f"{owner}.{element}", flexible, structs)
                for child in spec["fields"]
            ],
        )
        structs[element] = struct
    elif "fields" in spec:
        raise SchemaError(f"{where}: a {kind_text} field cannot have fields")
    return Field(
        name=snake_case(spec["name"]),
        json_name=spec["name"],
        type=kind_text,
        element=element,
        versions=versions,
        nullable=nullable,
        tag=tag,
        tagged=tagged,
        default=parse_default(spec, element, is_array, nullable != (0, -1)),
        ignorable=bool(spec.get("ignorable", False)),
        struct=struct,
    )


def check_struct(struct: Struct) -> None:
    names = [field.name for field in struct.fields]
    if len(set(names)) != len(names):
        raise SchemaError(f"{struct.qualified}: two fields with one snake_case name")
    tags = [field.tag for field in struct.fields if field.tag is not None]
    if len(set(tags)) != len(tags):
        raise SchemaError(f"{struct.qualified}: duplicate tags {sorted(tags)}")


def load_message(path: Path) -> Message:
    spec = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    if spec.get("type") != "metadata":
        raise SchemaError(f"{path.name}: not a metadata record schema")
    name = spec["name"]
    flexible = parse_versions(spec.get("flexibleVersions"))
    structs: dict[str, Struct] = {}
    fields = [parse_field(child, name, flexible, structs) for child in spec["fields"]]
    struct = Struct(name=name, qualified=name, fields=fields)
    for each in [struct, *structs.values()]:
        check_struct(each)
    return Message(
        name=name,
        api_key=int(spec["apiKey"]),
        valid=parse_versions(spec["validVersions"]),
        flexible=flexible,
        struct=struct,
    )


def annotation(field: Field) -> str:
    inner = field.struct.qualified if field.struct else PYTHON_TYPES[field.element]
    text = f"tuple[{inner}, ...]" if field.type.startswith("[]") else inner
    return f"{text} | None" if field.nullable != (0, -1) else text


def default_expr(field: Field) -> str:
    if isinstance(field.default, uuid.UUID):
        return "ZERO_UUID"
    return repr(field.default)


def spec_expr(field: Field) -> str:
    parts = [repr(field.name), repr(field.type), versions_expr(field.versions)]
    if field.nullable != (0, -1):
        parts.append(f"nullable_versions={versions_expr(field.nullable)}")
    if field.tag is not None:
        parts.append(f"tag={field.tag}")
        parts.append(f"tagged_versions={versions_expr(field.tagged)}")
    parts.append(f"default={default_expr(field)}")
    if field.ignorable:
        parts.append("ignorable=True")
    if field.struct is not None:
        parts.append(f"struct={field.struct.name}")
    return f"FieldSpec({', '.join(parts)}),"


def emit_struct(struct: Struct, indent: str, header: list[str]) -> list[str]:
    lines = [f"{indent}@dataclass(frozen=True, slots=True, kw_only=True)"]
    lines.append(f"{indent}class {struct.name}:")
    body = indent + "    "
    lines.extend(body + line if line else "" for line in header)
    for field in struct.fields:
        if field.struct is not None:
            lines.extend(emit_struct(field.struct, body, []))
            lines.append("")
    for field in struct.fields:
        lines.append(f"{body}{field.name}: {annotation(field)} = {default_expr(field)}")
    lines.append("")
    if struct.fields:
        lines.append(f"{body}FIELDS: ClassVar[tuple[FieldSpec, ...]] = (")
        lines.extend(f"{body}    {spec_expr(field)}" for field in struct.fields)
        lines.append(f"{body})")
    else:
        lines.append(f"{body}FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()")
    return lines


def emit_message(message: Message) -> list[str]:
    low, high = message.valid
    flexible_from = message.flexible[0] if message.flexible != (0, -1) else None
    if message.flexible != (0, -1) and message.flexible[1] != VERSION_MAX:
        raise SchemaError(f"{message.name}: flexible versions must be open-ended")
    header = [
        f'"""Api key {message.api_key}, {versions_text(message.valid)}."""',
        "",
        f"API_KEY: ClassVar[int] = {message.api_key}",
        f"LOWEST_VERSION: ClassVar[int] = {low}",
        f"LATEST_VERSION: ClassVar[int] = {high}",
        f"FLEXIBLE_FROM: ClassVar[int | None] = {flexible_from}",
        "",
    ]
    return emit_struct(message.struct, "", header)


SCHEMA_NAMES = ("NO_VERSIONS", "VERSION_MAX", "ZERO_UUID", "FieldSpec", "Versions")
PREAMBLE = '''\
"""The records of the `__cluster_metadata` log, one frozen dataclass per record kind.

GENERATED by scripts/gen_metadata_records.py from Kafka's metadata JSON schemas; do not edit,
regenerate. Field names are the snake_case of Kafka's; a field absent from a version, or a
tagged field left out of the tag buffer, takes the default shown here. `FIELDS` is the
schema as data for the generic codec in `pykraft.metadata.codec`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Final, TypeAlias

from pykraft.metadata.schema import {schema_names}

'''


def render(messages: list[Message]) -> str:
    names = [message.name for message in messages]
    lines = []
    lines.append("__all__ = [")
    lines.extend(f'    "{name}",' for name in ["METADATA_RECORD_TYPES", "MetadataRecord", *names])
    lines.append("]")
    for message in messages:
        lines.extend(["", ""])
        lines.extend(emit_message(message))
    lines.extend(["", ""])
    lines.append("MetadataRecord: TypeAlias = (")
    lines.extend(f"    {'| ' if index else ''}{name}" for index, name in enumerate(names))
    lines.append(")")
    lines.append("")
    lines.append("# Every record kind by its api key, for decoding.")
    lines.append(
        "METADATA_RECORD_TYPES: Final[Mapping[int, type[MetadataRecord]]] = MappingProxyType({"
    )
    lines.extend(f"    {message.api_key}: {message.name}," for message in messages)
    lines.append("})")
    body = "\n".join(lines) + "\n"
    used = [name for name in SCHEMA_NAMES if re.search(rf"\b{name}\b", body)]
    return PREAMBLE.format(schema_names=", ".join(used)) + body


def generate(schemas: Path) -> str:
    paths = sorted((schemas / "metadata").glob("*.json"))
    if not paths:
        raise SchemaError(f"no schemas under {schemas / 'metadata'}")
    messages = sorted((load_message(path) for path in paths), key=lambda m: m.api_key)
    keys = [message.api_key for message in messages]
    if len(set(keys)) != len(keys):
        raise SchemaError(f"duplicate api keys: {keys}")
    return format_source(render(messages))


def format_source(source: str) -> str:
    """Run ruff's formatter so the committed file has the project's layout."""
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(OUTPUT), "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--schemas", type=Path, default=DEFAULT_SCHEMAS)
    parser.add_argument("--check", action="store_true", help="fail if records.py is stale")
    args = parser.parse_args()
    source = generate(args.schemas)
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != source:
            print(f"{OUTPUT} is out of date; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(source, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
