"""JSON Schema: validation against the metaschema, and Confluent's compatibility rules.

A schema is valid when its text is JSON (an object or a boolean) that its metaschema
accepts (``jsonschema``'s ``check_schema`` for the draft its ``$schema`` names, draft 7
when it names none, as Confluent defaults), its local ``$ref`` pointers resolve, and
the schemas it references are valid too.

``read_incompatibilities(reader, writer)`` follows Confluent Schema Registry's JSON
Schema ``SchemaDiff``: the writer is the *original* and the reader the *update*; a
difference is incompatible when the reader may refuse a document the writer accepted.
A schema is seen as Confluent's JSON Schema library sees it: ``true``/``{}`` (any
value), ``false``, one node per type (``integer`` is a number that must be whole;
``"type": [...]`` is an ``anyOf`` of one node per type), ``enum``, ``const``,
``allOf``/``anyOf``/``oneOf``, ``not``; a schema with several of those (``"type":
"string", "enum": [...]``) is their ``allOf``. ``$ref`` is followed (local pointers,
references by name or ``$id``; keywords beside it apply from draft 2019-09 on, as the
drafts say) and recursion stops at a pair already being compared.

Covered (Confluent's verdicts):

- type: a changed type is incompatible, but the reader may become ``true`` and the
  writer may have been ``false``; integer -> number is compatible, number -> integer
  is not; a reader ``anyOf``/``oneOf`` with a branch compatible with the writer's
  schema is compatible (``"string"`` -> ``["string", "null"]``), the reverse is not.
- objects, by content model (open: ``additionalProperties`` absent or true and no
  ``patternProperties``; closed: false; partially open: a schema): a property added
  to an open writer model is incompatible unless its schema is ``true``/``{}``; added
  to a closed or partially open one it is compatible when optional (and covered by
  the partial model's schema), and when required only with a ``default``; a property
  removed is compatible when the reader's model is open (or partially open and
  covering it, or the property was ``false``), incompatible when the reader is closed.
  Becoming required is incompatible without a ``default``, ceasing to be is
  compatible. ``additionalProperties`` true -> false or true -> schema is
  incompatible, the reverse compatible; ``minProperties``/``maxProperties`` tightened
  or added, ``dependencies`` (``dependentRequired``/``dependentSchemas``) added or
  extended are incompatible.
- strings: ``maxLength`` decreased or added, ``minLength`` increased or added, a
  ``pattern`` added or changed: incompatible; loosened or removed: compatible.
- numbers: an upper limit (``maximum``, ``exclusiveMaximum``) lowered or added, a
  lower limit (``minimum``, ``exclusiveMinimum``) raised or added, ``multipleOf``
  added or not a divisor of the writer's: incompatible; the opposite compatible.
- enums: values added compatible, removed or changed incompatible; ``const`` changed
  incompatible.
- arrays: ``items`` compared; tuple items (``items`` as a list or ``prefixItems``)
  by position with ``additionalItems`` as the content model (the object rules, for
  positions); ``minItems``/``maxItems`` tightened or added and ``uniqueItems`` added
  are incompatible.
- combined schemas: the criterion may widen (allOf/oneOf -> anyOf, a single-branch
  anyOf/allOf -> oneOf), not narrow; an ``anyOf``/``oneOf`` may gain branches, not
  lose them, an ``allOf`` may lose branches, not gain them; every branch of the
  smaller side must be matched, one to one, to a compatible branch of the other
  (a maximum bipartite matching). ``not``: compared reversed.

Not covered: ``if``/``then``/``else``, ``unevaluatedProperties``/``unevaluatedItems``,
``contains``/``minContains``/``maxContains``, ``propertyNames``, ``format``, ``$anchor``
and nested ``$id`` scopes, and Confluent's metadata/rule-set checks (reserved
properties). Titles, descriptions, defaults and ids may change freely, as in
Confluent.

Deliberate differences, where Confluent's library model gives verdicts its own rules
contradict:

- a schema that combines several constraints (``"type": "string", "enum": [...]``)
  compared with a plain one: Confluent sees a type change; here the plain one counts
  as a one-branch ``allOf``, so dropping the enum is compatible and adding one is not.
- an object with ``patternProperties`` and no ``additionalProperties``: a property
  no pattern matches may hold any value, so adding one with a schema is incompatible
  (Confluent treats the object as closed there).
- each number limit is the tighter of its inclusive and exclusive forms, so draft 4's
  boolean ``exclusiveMaximum`` counts and ``maximum: 9`` -> ``exclusiveMaximum: 9`` is
  a tightening (Confluent compares the keywords one by one).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, List, Optional, Set, Tuple

from ..model import InvalidSchema, Schema
from .json_schema_documents import Resolver, SchemaDocument, refs_in, resolve_ref, schema_documents
from .json_schema_keywords import (array_parts, as_decimal, as_object, bipartite_matching, bound_problems,
                                   canonical_json, dependency_maps, effective_limit, escape_pointer, has_default,
                                   is_open_object, limit_problems, partial_object_schema, partial_schema)

__all__ = ["validate", "read_incompatibilities"]

_ANNOTATIONS = {"$schema", "$id", "id", "$comment", "title", "description", "default", "examples",
                "definitions", "$defs", "readOnly", "writeOnly", "deprecated", "format", "contentEncoding",
                "contentMediaType", "$anchor", "$vocabulary"}
_IMPLIED_TYPES = (
    ("object", ("properties", "additionalProperties", "required", "patternProperties", "minProperties",
                "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "propertyNames")),
    ("array", ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains")),
    ("string", ("minLength", "maxLength", "pattern")),
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")),
)
_COMBINERS = ("allOf", "anyOf", "oneOf")



def validate(schema: Schema, resolve: Resolver) -> None:
    """Raise ``InvalidSchema`` unless ``schema`` and what it references are valid JSON
    schemas whose local ``$ref`` pointers resolve."""
    documents = schema_documents(schema, resolve)
    for name, document in documents.items():
        for ref in refs_in(document.raw):
            if ref.startswith("#") and resolve_ref(ref, document) is None:
                raise InvalidSchema(f"unresolvable $ref {ref!r}" + (f" in {name}" if name else ""))


def read_incompatibilities(reader: Schema, writer: Schema, resolve: Resolver) -> List[str]:
    """Why documents valid for ``writer`` may be refused by ``reader``, as
    ``"#/path: reason"`` messages by Confluent's rules (see the module docstring);
    empty when none may."""
    diff = _Diff()
    w, r = schema_documents(writer, resolve)[""], schema_documents(reader, resolve)[""]
    problems = diff.compare(diff.load(w.raw, w), diff.load(r.raw, r), "#")
    return list(dict.fromkeys(problems))


# --- the model Confluent's library builds ------------------------------------------------

@dataclass(eq=False)
class _Node:
    """One schema as compared: ``kind`` is empty (true), false, object, array, string,
    number, boolean, null, enum, const, allOf, anyOf, oneOf, not or ref (unresolved);
    ``raw`` the JSON object it reads its keywords from."""

    kind: str
    raw: Any
    document: SchemaDocument
    integer: bool = False
    parts: List["_Node"] = field(default_factory=list)
    synthetic: bool = False  # an allOf of the constraints of one schema object

    @property
    def combined(self) -> bool:
        return self.kind in _COMBINERS

    def spelled(self) -> str:
        if self.kind == "number" and self.integer:
            return "integer"
        if self.kind == "empty":
            return "any value (true)"
        if self.kind == "enum":
            return f"enum {json.dumps(self.raw.get('enum'))}"
        if self.kind == "const":
            return f"const {json.dumps(self.raw.get('const'))}"
        if self.kind == "ref":
            return f"$ref {self.raw.get('$ref')!r}"
        if self.combined:
            return f"{self.kind} [{', '.join(p.spelled() for p in self.parts)}]"
        return self.kind

    def key(self) -> Tuple[str, bool, str]:
        """Equality of branches (Confluent collapses duplicates)."""
        return self.kind, self.integer, json.dumps(self.raw, sort_keys=True, default=str)


class _Diff:
    """Compares writer (original) and reader (update) nodes, returning the reader's
    incompatibilities as messages."""

    def __init__(self) -> None:
        self._active: Set[Tuple[int, int, str, str]] = set()

    # loading

    def load(self, raw: Any, document: SchemaDocument, hops: int = 0) -> _Node:
        """The node for ``raw`` (found in ``document``); ``hops`` counts the ``$ref``
        chain followed so far, to stop at cycles of bare refs."""
        if raw is True or raw is None:
            return _Node("empty", {}, document)
        if raw is False:
            return _Node("false", {}, document)
        if not isinstance(raw, dict):
            return _Node("empty", {}, document)
        if "$ref" in raw and isinstance(raw["$ref"], str):
            found = resolve_ref(raw["$ref"], document) if hops < 64 else None
            rest = {k: v for k, v in raw.items() if k != "$ref"}
            target = self.load(found[0], found[1], hops + 1) if found else _Node("ref", raw, document)
            if not set(rest) - _ANNOTATIONS or not document.ref_has_siblings:
                return target
            return _Node("allOf", raw, document, parts=[target, self.load(rest, document)], synthetic=True)
        parts: List[_Node] = []
        types = raw.get("type")
        if types is None:
            types = [name for name, keywords in _IMPLIED_TYPES if any(k in raw for k in keywords)]
        elif isinstance(types, str):
            types = [types]
        typed = [_Node("number" if t == "integer" else t, raw, document, integer=t == "integer") for t in types]
        if len(typed) == 1:
            parts.append(typed[0])
        elif typed:
            parts.append(_Node("anyOf", raw, document, parts=typed))
        if "enum" in raw:
            parts.append(_Node("enum", raw, document))
        if "const" in raw:
            parts.append(_Node("const", raw, document))
        for combiner in _COMBINERS:
            if isinstance(raw.get(combiner), list):
                parts.append(_Node(combiner, raw[combiner], document,
                                   parts=[self.load(s, document, hops) for s in raw[combiner]]))
        if "not" in raw:
            parts.append(_Node("not", raw, document, parts=[self.load(raw["not"], document, hops)]))
        if not parts:
            return _Node("empty", raw, document)
        if len(parts) == 1:
            return parts[0]
        return _Node("allOf", raw, document, parts=parts, synthetic=True)

    def _child(self, parent: _Node, raw: Any) -> _Node:
        return self.load(raw, parent.document)

    # comparing

    def compare(self, original: Optional[_Node], update: Optional[_Node], path: str) -> List[str]:
        if original is None and update is None:
            return []
        if original is None:
            return [f"{path}: a schema was added where the writer allowed any value"]
        if update is None:
            return []
        if not original.combined and update.combined:
            if len(update.parts) == 1:
                found = self.compare(original, update.parts[0], path)
                if not found:
                    return []
            elif update.kind in ("anyOf", "oneOf"):
                if any(not self.compare(original, part, path) for part in update.parts):
                    return []
            elif update.synthetic:
                return self.compare(_Node("allOf", {}, original.document, parts=[original], synthetic=True),
                                    update, path)
        elif original.combined and not update.combined:
            if len(original.parts) == 1:
                if not self.compare(original.parts[0], update, path):
                    return []
            elif original.synthetic:
                return self.compare(original, _Node("allOf", {}, update.document, parts=[update], synthetic=True),
                                    path)
        if ("combined" if original.combined else original.kind) != ("combined" if update.combined else update.kind):
            if original.kind == "false" or update.kind == "empty":
                return []
            return [f"{path}: type changed from {original.spelled()} to {update.spelled()}"]
        if original.kind == "ref":
            same = original.raw.get("$ref") == update.raw.get("$ref")
            return [] if same else [f"{path}: unresolved $ref changed from {original.spelled()} to {update.spelled()}"]
        token = (id(original.raw), id(update.raw), original.kind, update.kind)
        if token in self._active:
            return []  # already being compared further up: assume it holds
        self._active.add(token)
        try:
            compare = getattr(self, f"_{'combined' if original.combined else original.kind}", None)
            return compare(original, update, path) if compare else []
        finally:
            self._active.discard(token)

    def _string(self, original: _Node, update: _Node, path: str) -> List[str]:
        w, r = original.raw, update.raw
        found = bound_problems(path, "maxLength", w.get("maxLength"), r.get("maxLength"), upper=True)
        found += bound_problems(path, "minLength", w.get("minLength"), r.get("minLength"), upper=False)
        if r.get("pattern") is not None and r.get("pattern") != w.get("pattern"):
            what = "added" if w.get("pattern") is None else f"changed from {w['pattern']!r}"
            found.append(f"{path}/pattern: pattern {what} to {r['pattern']!r}")
        return found

    def _number(self, original: _Node, update: _Node, path: str) -> List[str]:
        found = limit_problems(path, effective_limit(original.raw, upper=True), effective_limit(update.raw, upper=True), upper=True)
        found += limit_problems(path, effective_limit(original.raw, upper=False), effective_limit(update.raw, upper=False), upper=False)
        w_multiple, r_multiple = as_decimal(original.raw.get("multipleOf")), as_decimal(update.raw.get("multipleOf"))
        if r_multiple is not None and w_multiple != r_multiple:
            if w_multiple is None:
                found.append(f"{path}/multipleOf: multipleOf {r_multiple} added")
            elif w_multiple % r_multiple != 0:
                found.append(f"{path}/multipleOf: multipleOf changed from {w_multiple} to {r_multiple}, "
                             "not a divisor of the old one")
        if update.integer and not original.integer:
            found.append(f"{path}: type narrowed from number to integer")
        return found

    def _enum(self, original: _Node, update: _Node, path: str) -> List[str]:
        w = {canonical_json(v) for v in original.raw.get("enum", [])}
        r = {canonical_json(v) for v in update.raw.get("enum", [])}
        missing = sorted(w - r)
        return [f"{path}/enum: values removed: {', '.join(missing)}"] if missing else []

    def _const(self, original: _Node, update: _Node, path: str) -> List[str]:
        w, r = canonical_json(original.raw.get("const")), canonical_json(update.raw.get("const"))
        return [] if w == r else [f"{path}/const: const changed from {w} to {r}"]

    def _not(self, original: _Node, update: _Node, path: str) -> List[str]:
        # compared reversed: the reader may exclude less than the writer did, not more
        if self.compare(update.parts[0], original.parts[0], f"{path}/not"):
            return [f"{path}/not: the reader's not excludes values the writer allowed"]
        return []

    def _combined(self, original: _Node, update: _Node, path: str) -> List[str]:
        if original.kind != update.kind:
            widened = update.kind == "anyOf" \
                or update.kind == "oneOf" and len(original.parts) == 1 \
                or update.kind == "allOf" and len(original.parts) == 1 and len(update.parts) == 1
            if not widened:
                return [f"{path}: {original.kind} changed to {update.kind}"]
        w_parts = list({p.key(): p for p in original.parts}.values())
        r_parts = list({p.key(): p for p in update.parts}.values())
        found: List[str] = []
        if len(w_parts) < len(r_parts) and update.kind == "allOf":
            found.append(f"{path}: constraints added: {update.spelled()} (the writer had {original.spelled()})")
        elif len(w_parts) > len(r_parts) and update.kind != "allOf":
            found.append(f"{path}: {update.kind} lost branches: {update.spelled()} "
                         f"(the writer had {original.spelled()})")
        edges = {i: [j for j, r in enumerate(r_parts)
                     if not self.compare(w, r, f"{path}/{original.kind}/{i}")] for i, w in enumerate(w_parts)}
        matched = bipartite_matching(edges, len(r_parts))
        if len(matched) < min(len(w_parts), len(r_parts)):
            # say why the writer's unmatched branches fit no branch of the same kind
            reasons: List[str] = []
            for i, w in enumerate(w_parts):
                if i not in matched:
                    for r in r_parts:
                        if r.kind == w.kind:
                            reasons += self.compare(w, r, path if original.synthetic else f"{path}/{original.kind}/{i}")
            found += reasons or [f"{path}: the {original.kind} branches do not match the writer's one to one"]
        return found

    def _object(self, original: _Node, update: _Node, path: str) -> List[str]:
        w, r = original.raw, update.raw
        w_props, r_props = as_object(w.get("properties")), as_object(r.get("properties"))
        w_required, r_required = set(w.get("required") or ()), set(r.get("required") or ())
        found: List[str] = []
        for name in w_props:
            if name in r_props and name in r_required and name not in w_required \
                    and not has_default(r_props[name]):
                found.append(f"{path}/required/{name}: property {name!r} became required without a default")
        for name in list(w_props) + [n for n in r_props if n not in w_props]:
            where = f"{path}/properties/{escape_pointer(name)}"
            if name not in r_props:
                found += self._property_removed(original, update, name, where)
            elif name not in w_props:
                found += self._property_added(original, update, name, where)
            else:
                found += self.compare(self._child(original, w_props[name]), self._child(update, r_props[name]), where)
        found += self._dependencies(original, update, f"{path}/dependencies")
        found += self._additional(original, update, f"{path}/additionalProperties", "additionalProperties")
        found += bound_problems(path, "maxProperties", w.get("maxProperties"), r.get("maxProperties"), upper=True)
        found += bound_problems(path, "minProperties", w.get("minProperties"), r.get("minProperties"), upper=False)
        return found

    def _property_removed(self, original: _Node, update: _Node, name: str, where: str) -> List[str]:
        if is_open_object(update.raw):
            return []
        old = self._child(original, original.raw["properties"][name])
        partial = partial_object_schema(update.raw, name)
        if partial is not None:
            if self.compare(old, self._child(update, partial), where):
                return [f"{where}: property removed and the reader's patternProperties/additionalProperties "
                        "do not cover it"]
            return []
        if old.kind == "false":
            return []
        return [f"{where}: property removed from a closed content model (additionalProperties false)"]

    def _property_added(self, original: _Node, update: _Node, name: str, where: str) -> List[str]:
        new = self._child(update, update.raw["properties"][name])
        if is_open_object(original.raw):
            if new.kind == "empty":
                return []
            return [f"{where}: property added to an open content model (the writer allowed any value for it)"]
        found: List[str] = []
        partial = partial_object_schema(original.raw, name)
        if partial is not None and self.compare(self._child(original, partial), new, where):
            found.append(f"{where}: property added that the writer's patternProperties/additionalProperties "
                         "do not cover")
        if name in set(update.raw.get("required") or ()) and not has_default(update.raw["properties"][name]):
            found.append(f"{where}: required property added without a default")
        return found

    def _dependencies(self, original: _Node, update: _Node, path: str) -> List[str]:
        w_arrays, w_schemas = dependency_maps(original.raw)
        r_arrays, r_schemas = dependency_maps(update.raw)
        found: List[str] = []
        for name in sorted(r_arrays):
            if name not in w_arrays:
                found.append(f"{path}/{name}: dependency {r_arrays[name]} added")
            elif not r_arrays[name] <= w_arrays[name]:
                found.append(f"{path}/{name}: dependency changed from {sorted(w_arrays[name])} "
                             f"to {sorted(r_arrays[name])}")
        for name in sorted(r_schemas):
            if name not in w_schemas:
                found.append(f"{path}/{name}: dependent schema added")
            else:
                found += self.compare(self._child(original, w_schemas[name]), self._child(update, r_schemas[name]),
                                      f"{path}/{name}")
        return found

    def _additional(self, original: _Node, update: _Node, path: str, keyword: str) -> List[str]:
        w, r = original.raw.get(keyword, True), update.raw.get(keyword, True)
        if (w is False) != (r is False):
            return [f"{path}: {keyword} false now (the writer allowed more)"] if r is False else []
        w_schema, r_schema = partial_schema(w), partial_schema(r)
        if w_schema is None and r_schema is not None:
            return [f"{path}: {keyword} constrained by a schema now (the writer allowed any value)"]
        if r_schema is None or w_schema is None:
            return []
        return self.compare(self._child(original, w_schema), self._child(update, r_schema), path)

    def _array(self, original: _Node, update: _Node, path: str) -> List[str]:
        w, r = original.raw, update.raw
        w_items, w_tuple, w_more = array_parts(w)
        r_items, r_tuple, r_more = array_parts(r)
        found = self.compare(self._child(original, w_items) if w_items is not None else None,
                             self._child(update, r_items) if r_items is not None else None, f"{path}/items")
        for i in range(max(len(w_tuple), len(r_tuple))):
            where = f"{path}/items/{i}"
            if i < len(w_tuple) and i < len(r_tuple):
                found += self.compare(self._child(original, w_tuple[i]), self._child(update, r_tuple[i]), where)
            elif i < len(w_tuple):  # the reader has fewer positions: its additionalItems take this one
                if r_more is True:
                    continue
                old = self._child(original, w_tuple[i])
                if isinstance(r_more, dict):
                    if self.compare(old, self._child(update, r_more), where):
                        found.append(f"{where}: item removed and the reader's additionalItems do not cover it")
                elif old.kind != "false":
                    found.append(f"{where}: item removed from a closed content model (additionalItems false)")
            else:
                new = self._child(update, r_tuple[i])
                if w_more is True:
                    if new.kind != "empty":
                        found.append(f"{where}: item added to an open content model "
                                     "(the writer allowed any value there)")
                elif isinstance(w_more, dict) and self.compare(self._child(original, w_more), new, where):
                    found.append(f"{where}: item added that the writer's additionalItems do not cover")
        if w_tuple or r_tuple:
            found += self._additional(_Node("array", {"additionalItems": w_more}, original.document),
                                      _Node("array", {"additionalItems": r_more}, update.document),
                                      f"{path}/additionalItems", "additionalItems")
        found += bound_problems(path, "maxItems", w.get("maxItems"), r.get("maxItems"), upper=True)
        found += bound_problems(path, "minItems", w.get("minItems"), r.get("minItems"), upper=False)
        if r.get("uniqueItems") is True and w.get("uniqueItems") is not True:
            found.append(f"{path}/uniqueItems: uniqueItems added")
        return found
