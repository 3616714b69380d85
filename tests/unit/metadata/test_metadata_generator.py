"""scripts/gen_metadata_records.py: schema parsing rules, refusal of what it cannot
translate, and that the committed records.py is what the generator makes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
SCHEMAS = Path("/work/shared/kafka-schemas")


def load_generator() -> ModuleType:
    path = REPO / "scripts" / "gen_metadata_records.py"
    spec = importlib.util.spec_from_file_location("gen_metadata_records", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def test_comments_are_stripped_outside_strings_only() -> None:
    """`//` starts a comment, except inside a JSON string (URLs in "about" texts)."""
    text = '// header\n{ "a": "http://x", // trailing\n "b": "q\\"//" }\n'
    assert json.loads(gen.strip_comments(text)) == {"a": "http://x", "b": 'q"//'}


def test_versions_and_names() -> None:
    """Version ranges and Kafka's CamelCase to snake_case."""
    assert gen.parse_versions("0+") == (0, 0x7FFF)
    assert gen.parse_versions("1-3") == (1, 3)
    assert gen.parse_versions("2") == (2, 2)
    assert gen.parse_versions("none") == gen.parse_versions(None) == (0, -1)
    assert gen.snake_case("TopicId") == "topic_id"
    assert gen.snake_case("IsMigratingZkBroker") == "is_migrating_zk_broker"
    assert gen.snake_case("Isr") == "isr"
    assert gen.snake_case("EndPoints") == "end_points"


def write_schema(directory: Path, fields: list[dict[str, object]]) -> Path:
    (directory / "metadata").mkdir(exist_ok=True)
    schema = {
        "apiKey": 99, "type": "metadata", "name": "TestRecord", "validVersions": "0-1",
        "flexibleVersions": "1+", "fields": fields,
    }  # fmt: skip
    path = directory / "metadata" / "TestRecord.json"
    path.write_text(json.dumps(schema))
    return path


@pytest.mark.parametrize(
    "field",
    [
        {"name": "A", "type": "int32", "versions": "0+", "tag": 0, "taggedVersions": "0+"},
        {"name": "B", "type": "int32", "versions": "0+", "nullableVersions": "0+"},
        {"name": "C", "type": "float32", "versions": "0+"},
        {"name": "D", "type": "int8", "versions": "0+", "default": "300"},
        {"name": "E", "type": "string", "versions": "0+", "default": "null"},
        {"name": "F", "type": "Nested", "versions": "0+", "fields": []},
    ],
    ids=[
        "tag-not-flexible",
        "nullable-int",
        "unknown-type",
        "default-range",
        "null-default",
        "plain-struct",
    ],  # fmt: skip
)
def test_untranslatable_schemas_are_refused(tmp_path: Path, field: dict[str, object]) -> None:
    """What the generator cannot translate faithfully is an error, never a guess."""
    write_schema(tmp_path, [field])
    with pytest.raises(gen.SchemaError):
        gen.load_message(tmp_path / "metadata" / "TestRecord.json")


def test_tagged_nullable_field_translates(tmp_path: Path) -> None:
    """A tagged nullable array in flexible versions becomes a spec with tag and defaults."""
    field = {
        "name": "Elr", "type": "[]int32", "versions": "1+", "nullableVersions": "1+",
        "taggedVersions": "1+", "tag": 4, "default": "null",
    }  # fmt: skip
    message = gen.load_message(write_schema(tmp_path, [field]))
    (parsed,) = message.struct.fields
    assert (parsed.name, parsed.tag, parsed.default) == ("elr", 4, None)
    assert gen.annotation(parsed) == "tuple[int, ...] | None"


@pytest.mark.skipif(not SCHEMAS.is_dir(), reason="Kafka's JSON schemas are not available")
def test_committed_records_module_is_up_to_date() -> None:
    """records.py is exactly what the generator writes from the schemas."""
    committed = (REPO / "src" / "pykraft" / "metadata" / "records.py").read_text()
    assert gen.generate(SCHEMAS) == committed
