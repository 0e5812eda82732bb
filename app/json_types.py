"""Whether a value read from JSON has a type a dataclass declares: the checks behind `sessions import` and the
window's stored settings, so a damaged file is refused (or forgotten) whole instead of breaking a view later."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any


@functools.cache
def field_types(kind: type) -> dict[str, Any]:
    """The resolved type of each field of the dataclass `kind`."""
    return typing.get_type_hints(kind)


def sqlite_int(value: int) -> bool:
    """Whether SQLite can store `value` (a signed 64-bit integer)."""
    return -(2**63) <= value < 2**63


def typed_fields(kind: type, data: Any) -> dict[str, Any]:
    """`data` when it is an object whose every key is a field of `kind` with a value of that field's type;
    ValueError naming the first that is not."""
    if not isinstance(data, dict):
        raise ValueError(f"{kind.__name__} should be an object, not {type(data).__name__}")
    problem = mistyped_field(kind, data)
    if problem is not None:
        raise ValueError(problem)
    return data


def mistyped_field(kind: type, data: dict[str, Any], *, unknown: bool = False) -> str | None:
    """The first key of `data` that is no field of `kind`, or whose value is not of the field's type, said;
    None when there is none. `unknown`: keys `kind` has no field for pass (another version's settings)."""
    hints = field_types(kind)
    for name, value in data.items():
        if name not in hints and unknown:
            continue
        if name not in hints or not conforms(value, hints[name]):
            said = out_of_kind(value, hints[name]) if name in hints else None
            return f"{kind.__name__}'s {name!r} {said or f'should be {described(hints.get(name))}, not {value!r:.40}'}"
    return None


def out_of_kind(value: Any, hint: Any) -> str | None:
    """Why a value of the right kind does not fit `hint`, said: a number too large for SQLite, an infinity, a lone
    surrogate ("should be int, not int (...)" told nothing); None when its kind is what is wrong."""
    if isinstance(value, int) and not isinstance(value, bool) and not sqlite_int(value):
        if conforms(0, hint) and not conforms(0.5, hint):
            return f"should be {described(hint)} from -2**63 to 2**63-1 (what SQLite holds), not {value!r:.40}"
        if conforms(0.5, hint):
            return (f"should be {described(hint)}, and the whole number {value!r:.40} is beyond SQLite's integers "
                    "(write it with a decimal point)")
    if isinstance(value, float) and not math.isfinite(value) and conforms(0.0, hint):
        return f"should be a finite number, not {value!r}"
    if isinstance(value, str) and not utf8(value) and conforms("", hint):
        return f"should be valid Unicode text, not {value!r:.40} (it holds a lone surrogate)"
    return None


def conforms(value: Any, hint: Any) -> bool:
    """`value`, read from JSON, fits `hint`: int, float, str, bool, None, X | Y, tuple, tuple[X, ...],
    tuple[X, Y], dict[str, Any], Any or a dataclass (an object of its fields)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (types.UnionType, typing.Union):
        return any(conforms(value, arg) for arg in args)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(item, args[0]) for item in value)
        return len(value) == len(args) and all(conforms(v, a) for v, a in zip(value, args, strict=True))
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(key, str) for key in value)
    if dataclasses.is_dataclass(hint):
        hints = field_types(hint)
        return isinstance(value, dict) and all(k == "type" or (k in hints and conforms(v, hints[k]))
                                               for k, v in value.items())
    if hint is tuple:  # items of any type
        return isinstance(value, list | tuple)
    if hint is bool:
        return isinstance(value, bool) or value in (0, 1)
    if hint is int:
        return isinstance(value, int) and sqlite_int(value)
    if hint is float:  # an integer counts (JSON may write 3.0 as 3) when SQLite can hold it
        whole = isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, float) or (whole and sqlite_int(value))
    if hint is str:
        return isinstance(value, str) and utf8(value)
    return False


def described(hint: Any) -> str:
    """The type as a JSON file spells it: lists and objects, not tuples and dicts."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(described(arg) for arg in args)
    if origin is tuple:
        return f"a list of {described(args[0])}" if args[-1] is Ellipsis else f"a list of {len(args)} values"
    if origin is dict:
        return "an object"
    if hint is None:
        return "no field (unknown)"
    return {type(None): "null"}.get(hint) or getattr(hint, "__name__", str(hint))


def utf8(text: str) -> bool:
    """Whether `text` can be written as UTF-8 (JSON lets lone surrogates through)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
