"""Building kio entities for whichever version a client speaks.

kio defines one set of classes per (API, version), and fields come and go between versions.
Handlers build responses by name through `make`, which drops fields the version lacks, so one
handler serves every version of an API. Request fields are read with `field` for the same
reason.
"""

from __future__ import annotations

import datetime
import sys
from functools import cache
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from pykraft.protocol.framing import response_type


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    return sys.modules[response_type(api_key, api_version).__module__]


@cache
def _field_names(entity_type: type) -> frozenset[str]:
    return frozenset(entity_type.__dataclass_fields__)  # type: ignore[attr-defined]


def make(entity_type: Any, **values: Any) -> Any:
    """Construct `entity_type` from the values it has fields for; the rest are dropped."""
    names = _field_names(entity_type)
    error_code = values.get("error_code")
    if error_code is not None and not isinstance(error_code, ErrorCode):
        values["error_code"] = ErrorCode(error_code)
    return entity_type(**{name: value for name, value in values.items() if name in names})


def field(entity: Any, name: str, default: Any = None) -> Any:
    """A request field, or `default` where the client's version has no such field."""
    return getattr(entity, name, default)


def millis(value: Any) -> int:
    """kio carries durations as timedelta; Kafka speaks milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


NO_THROTTLE = datetime.timedelta(0)
