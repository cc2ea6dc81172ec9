"""How the library writes Python values as JSON (results, checkpoints, payloads).

The standard ``json`` module, plus the values a database hands back most:

    decimal.Decimal              a string, exact: Decimal("1.20") -> "1.20"
    datetime.datetime            ISO 8601: "2024-05-01T12:30:00+00:00" (naive: no offset)
    datetime.date / time         ISO 8601: "2024-05-01", "12:30:00"
    uuid.UUID                    "1b4e28ba-2fa1-11d2-883f-0016d3cca427"

Anything else that ``json`` cannot write (a set, bytes, a timedelta, an
object), and NaN or infinite floats (not JSON), raise TypeError or
ValueError.  A Decimal becomes a string rather than a number so that no digit
is lost to a float on the way back: read it with ``Decimal(value)`` or, in
SQL, ``(result->>'total')::numeric``.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from typing import Any


class JSONEncoder(json.JSONEncoder):
    """json.JSONEncoder that also writes Decimal, datetime, date, time and UUID
    (see the module docstring); subclass it to add more."""

    def default(self, o: Any) -> Any:
        if isinstance(o, decimal.Decimal):
            return str(o)
        if isinstance(o, (datetime.datetime, datetime.date, datetime.time)):
            return o.isoformat()
        if isinstance(o, uuid.UUID):
            return str(o)
        return super().default(o)


_utf8 = JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_ascii = JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def dumps(obj: Any, *, ascii: bool = False) -> str:
    """obj as JSON text, with JSONEncoder.  ``ascii=True`` escapes every
    non-ASCII character (\\u00e9), for a connection whose client encoding is
    not UTF8; otherwise characters are written as they are."""
    return (_ascii if ascii else _utf8).encode(obj)
