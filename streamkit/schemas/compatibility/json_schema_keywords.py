"""Keyword helpers of the JSON Schema compatibility check (:mod:`.json_schema`): number
limits (the tighter of inclusive and exclusive forms), object content models (open,
closed, partially open), dependencies, tuple items, and the bipartite matching that
pairs the branches of combined schemas. Pure functions of raw schema JSON.
"""
from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Dict, List, Optional, Set, Tuple


def bound_problems(path: str, keyword: str, writer: Any, reader: Any, *, upper: bool) -> List[str]:
    """A limit the reader adds or tightens (an upper limit decreased, a lower one
    increased) is incompatible."""
    w, r = as_decimal(writer), as_decimal(reader)
    if r is None or w == r:
        return []
    if w is None:
        return [f"{path}/{keyword}: {keyword} {spell_number(r)} added"]
    if (r < w) if upper else (r > w):
        direction = "decreased" if upper else "increased"
        return [f"{path}/{keyword}: {keyword} {direction} from {spell_number(w)} to {spell_number(r)}"]
    return []


def effective_limit(raw: Dict[str, Any], *, upper: bool) -> Optional[Tuple[Decimal, bool]]:
    """A number schema's upper (or lower) limit as ``(value, exclusive)``, from
    ``maximum`` and ``exclusiveMaximum`` (a number, or draft 4's boolean flag on
    ``maximum``), the tighter of the two; None when there is none."""
    inclusive_key, exclusive_key = ("maximum", "exclusiveMaximum") if upper else ("minimum", "exclusiveMinimum")
    inclusive, exclusive = as_decimal(raw.get(inclusive_key)), raw.get(exclusive_key)
    candidates: List[Tuple[Decimal, bool]] = []
    if inclusive is not None:
        candidates.append((inclusive, exclusive is True))
    if as_decimal(exclusive) is not None:
        candidates.append((as_decimal(exclusive), True))
    if not candidates:
        return None
    # the tighter limit: the smaller maximum (larger minimum), exclusive on a tie
    return min(candidates, key=lambda c: ((c[0] if upper else -c[0]), not c[1]))


def limit_problems(path: str, writer: Optional[Tuple[Decimal, bool]], reader: Optional[Tuple[Decimal, bool]], *,
           upper: bool) -> List[str]:
    """A numeric limit the reader adds or tightens is incompatible."""
    if reader is None or writer == reader:
        return []
    keyword = ("exclusiveMaximum" if reader[1] else "maximum") if upper else \
        ("exclusiveMinimum" if reader[1] else "minimum")
    if writer is None:
        return [f"{path}/{keyword}: {keyword} {spell_number(reader[0])} added"]
    tighter = reader[0] < writer[0] if upper else reader[0] > writer[0]
    if tighter or reader[0] == writer[0] and reader[1] and not writer[1]:
        side = "upper" if upper else "lower"
        return [f"{path}/{keyword}: {side} limit tightened from {spell_limit(writer, upper)} "
                f"to {spell_limit(reader, upper)}"]
    return []


def spell_limit(limit: Tuple[Decimal, bool], upper: bool) -> str:
    return ("<" if upper else ">") + ("" if limit[1] else "=") + " " + spell_number(limit[0])


def as_decimal(value: Any) -> Optional[Decimal]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def spell_number(value: Decimal) -> str:
    return format(value.normalize(), "f") if value == value.to_integral_value() else str(value)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def as_object(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def has_default(raw: Any) -> bool:
    return isinstance(raw, dict) and "default" in raw


def escape_pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def partial_schema(value: Any) -> Optional[Any]:
    """A schema constraining additional properties/items; None when it allows any."""
    if value is True or value is False or value is None or value == {}:
        return None
    return value


def is_open_object(raw: Dict[str, Any]) -> bool:
    return not raw.get("patternProperties") and raw.get("additionalProperties", True) is not False \
        and partial_schema(raw.get("additionalProperties", True)) is None


def partial_object_schema(raw: Dict[str, Any], name: str) -> Optional[Any]:
    """The schema a partially open object gives property ``name``: its first matching
    ``patternProperties`` entry, else its ``additionalProperties`` schema (``True``
    when that allows any value); None when the object is closed to ``name``."""
    for pattern, schema in as_object(raw.get("patternProperties")).items():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    extra = raw.get("additionalProperties", True)
    if extra is False:
        return None
    return True if partial_schema(extra) is None else extra


def dependency_maps(raw: Dict[str, Any]) -> Tuple[Dict[str, Set[str]], Dict[str, Any]]:
    """``(property dependencies, schema dependencies)`` from draft 7's ``dependencies``
    and 2019-09's ``dependentRequired``/``dependentSchemas``."""
    arrays: Dict[str, Set[str]] = {}
    schemas: Dict[str, Any] = {}
    for name, value in as_object(raw.get("dependencies")).items():
        if isinstance(value, list):
            arrays[name] = set(value)
        else:
            schemas[name] = value
    arrays.update({k: set(v) for k, v in as_object(raw.get("dependentRequired")).items() if isinstance(v, list)})
    schemas.update(as_object(raw.get("dependentSchemas")))
    return arrays, schemas


def array_parts(raw: Dict[str, Any]) -> Tuple[Optional[Any], List[Any], Any]:
    """``(schema of every item, tuple item schemas, additional items)``: ``items`` as
    one schema, or tuple items (``items`` as a list, or 2020-12's ``prefixItems`` with
    ``items`` for the rest) and ``additionalItems`` (True, False or a schema)."""
    if isinstance(raw.get("prefixItems"), list):
        more = raw.get("items", True)
        return None, list(raw["prefixItems"]), more if partial_schema(more) is not None or more is False else True
    if isinstance(raw.get("items"), list):
        more = raw.get("additionalItems", True)
        return None, list(raw["items"]), more if partial_schema(more) is not None or more is False else True
    return raw.get("items"), [], True


def bipartite_matching(edges: Dict[int, List[int]], right: int) -> Set[int]:
    """The left vertices of a maximum matching of a bipartite graph (Kuhn's augmenting
    paths); ``edges`` maps each left vertex to the right vertices it may pair with."""
    owner: List[Optional[int]] = [None] * right

    def augment(left: int, visited: Set[int]) -> bool:
        for candidate in edges.get(left, ()):
            if candidate in visited:
                continue
            visited.add(candidate)
            if owner[candidate] is None or augment(owner[candidate], visited):
                owner[candidate] = left
                return True
        return False

    for left in edges:
        augment(left, set())
    return {left for left in owner if left is not None}
