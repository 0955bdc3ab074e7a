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
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Dict, List, Optional, Set, Tuple
from urllib.parse import unquote, urljoin

from ..model import InvalidSchema, Schema, SchemaReference

__all__ = ["validate", "read_incompatibilities"]

Resolver = Callable[[SchemaReference], Schema]

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


# --- parsing and validation --------------------------------------------------------------

def _parse_schema(schema: Schema) -> Any:
    """The schema's JSON (an object or a boolean), checked against its metaschema;
    ``InvalidSchema`` otherwise."""
    import jsonschema
    from jsonschema import validators

    try:
        raw = json.loads(schema.schema_str)
    except (TypeError, ValueError) as exc:
        raise InvalidSchema(f"not JSON: {exc}") from exc
    if not isinstance(raw, (dict, bool)):
        raise InvalidSchema(f"a JSON schema is an object or a boolean, not {type(raw).__name__}")
    try:
        validators.validator_for(raw, default=validators.Draft7Validator).check_schema(raw)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise InvalidSchema(f"invalid JSON schema{f' at #/{where}' if where else ''}: {exc.message}") from exc
    return raw


def validate(schema: Schema, resolve: Resolver) -> None:
    """Raise ``InvalidSchema`` unless ``schema`` and what it references are valid JSON
    schemas whose local ``$ref`` pointers resolve."""
    documents = _documents(schema, resolve)
    for name, document in documents.items():
        for ref in _refs(document.raw):
            if ref.startswith("#") and _resolve(ref, document) is None:
                raise InvalidSchema(f"unresolvable $ref {ref!r}" + (f" in {name}" if name else ""))


def read_incompatibilities(reader: Schema, writer: Schema, resolve: Resolver) -> List[str]:
    """Why documents valid for ``writer`` may be refused by ``reader``, as
    ``"#/path: reason"`` messages by Confluent's rules (see the module docstring);
    empty when none may."""
    diff = _Diff()
    w, r = _documents(writer, resolve)[""], _documents(reader, resolve)[""]
    problems = diff.compare(diff.load(w.raw, w), diff.load(r.raw, r), "#")
    return list(dict.fromkeys(problems))


@dataclass(eq=False)
class _Document:
    """A schema document: its JSON, its base URI (``$id``) for relative refs, and the
    documents its refs may name (``siblings``: by reference name and by ``$id``)."""

    raw: Any
    base: str = ""
    siblings: Dict[str, "_Document"] = field(default_factory=dict)

    @property
    def ref_has_siblings(self) -> bool:
        """Whether keywords beside ``$ref`` apply (2019-09 on); up to draft 7 (the
        default) they are ignored."""
        dialect = self.raw.get("$schema", "") if isinstance(self.raw, dict) else ""
        return isinstance(dialect, str) and ("2019-09" in dialect or "2020-12" in dialect)


def _documents(schema: Schema, resolve: Resolver) -> Dict[str, _Document]:
    """The schema (under ``""``) and everything it references, transitively, under
    their reference names and their ``$id`` s."""
    found: Dict[str, _Document] = {}

    def add(name: str, target: Schema) -> None:
        raw = _parse_schema(target)
        document = _Document(raw, raw.get("$id", "") if isinstance(raw, dict) else "", found)
        found[name] = document
        if document.base:
            found.setdefault(document.base, document)

    add("", schema)
    pending = list(schema.references)
    seen: Set[str] = set()
    while pending:
        ref = pending.pop()
        if ref.name in seen:
            continue
        seen.add(ref.name)
        target = resolve(ref)
        add(ref.name, target)
        pending.extend(target.references)
    return found


def _refs(raw: Any) -> List[str]:
    found: List[str] = []
    stack = [raw]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                found.append(node["$ref"])
            stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default", "examples"))
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _resolve(ref: str, document: _Document) -> Optional[Tuple[Any, _Document]]:
    """The schema ``ref`` points at from ``document`` and the document holding it
    (None if it points nowhere known)."""
    url, _, fragment = ref.partition("#")
    target: Optional[_Document] = document
    if url:
        target = document.siblings.get(url)
        if target is None and document.base:
            target = document.siblings.get(urljoin(document.base, url))
        if target is None:
            return None
    node = target.raw
    if fragment in ("", "/"):
        return (node, target) if fragment == "" else None
    if not fragment.startswith("/"):
        return None  # $anchor names: not resolved
    for token in fragment[1:].split("/"):
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node, target


# --- the model Confluent's library builds ------------------------------------------------

@dataclass(eq=False)
class _Node:
    """One schema as compared: ``kind`` is empty (true), false, object, array, string,
    number, boolean, null, enum, const, allOf, anyOf, oneOf, not or ref (unresolved);
    ``raw`` the JSON object it reads its keywords from."""

    kind: str
    raw: Any
    document: _Document
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

    def load(self, raw: Any, document: _Document, hops: int = 0) -> _Node:
        """The node for ``raw`` (found in ``document``); ``hops`` counts the ``$ref``
        chain followed so far, to stop at cycles of bare refs."""
        if raw is True or raw is None:
            return _Node("empty", {}, document)
        if raw is False:
            return _Node("false", {}, document)
        if not isinstance(raw, dict):
            return _Node("empty", {}, document)
        if "$ref" in raw and isinstance(raw["$ref"], str):
            found = _resolve(raw["$ref"], document) if hops < 64 else None
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
        found = _bound(path, "maxLength", w.get("maxLength"), r.get("maxLength"), upper=True)
        found += _bound(path, "minLength", w.get("minLength"), r.get("minLength"), upper=False)
        if r.get("pattern") is not None and r.get("pattern") != w.get("pattern"):
            what = "added" if w.get("pattern") is None else f"changed from {w['pattern']!r}"
            found.append(f"{path}/pattern: pattern {what} to {r['pattern']!r}")
        return found

    def _number(self, original: _Node, update: _Node, path: str) -> List[str]:
        found = _limit(path, _effective(original.raw, upper=True), _effective(update.raw, upper=True), upper=True)
        found += _limit(path, _effective(original.raw, upper=False), _effective(update.raw, upper=False), upper=False)
        w_multiple, r_multiple = _decimal(original.raw.get("multipleOf")), _decimal(update.raw.get("multipleOf"))
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
        w = {_canonical(v) for v in original.raw.get("enum", [])}
        r = {_canonical(v) for v in update.raw.get("enum", [])}
        missing = sorted(w - r)
        return [f"{path}/enum: values removed: {', '.join(missing)}"] if missing else []

    def _const(self, original: _Node, update: _Node, path: str) -> List[str]:
        w, r = _canonical(original.raw.get("const")), _canonical(update.raw.get("const"))
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
        matched = _matching(edges, len(r_parts))
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
        w_props, r_props = _dict(w.get("properties")), _dict(r.get("properties"))
        w_required, r_required = set(w.get("required") or ()), set(r.get("required") or ())
        found: List[str] = []
        for name in w_props:
            if name in r_props and name in r_required and name not in w_required \
                    and not _has_default(r_props[name]):
                found.append(f"{path}/required/{name}: property {name!r} became required without a default")
        for name in list(w_props) + [n for n in r_props if n not in w_props]:
            where = f"{path}/properties/{_escape(name)}"
            if name not in r_props:
                found += self._property_removed(original, update, name, where)
            elif name not in w_props:
                found += self._property_added(original, update, name, where)
            else:
                found += self.compare(self._child(original, w_props[name]), self._child(update, r_props[name]), where)
        found += self._dependencies(original, update, f"{path}/dependencies")
        found += self._additional(original, update, f"{path}/additionalProperties", "additionalProperties")
        found += _bound(path, "maxProperties", w.get("maxProperties"), r.get("maxProperties"), upper=True)
        found += _bound(path, "minProperties", w.get("minProperties"), r.get("minProperties"), upper=False)
        return found

    def _property_removed(self, original: _Node, update: _Node, name: str, where: str) -> List[str]:
        if _open_object(update.raw):
            return []
        old = self._child(original, original.raw["properties"][name])
        partial = _partial_object(update.raw, name)
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
        if _open_object(original.raw):
            if new.kind == "empty":
                return []
            return [f"{where}: property added to an open content model (the writer allowed any value for it)"]
        found: List[str] = []
        partial = _partial_object(original.raw, name)
        if partial is not None and self.compare(self._child(original, partial), new, where):
            found.append(f"{where}: property added that the writer's patternProperties/additionalProperties "
                         "do not cover")
        if name in set(update.raw.get("required") or ()) and not _has_default(update.raw["properties"][name]):
            found.append(f"{where}: required property added without a default")
        return found

    def _dependencies(self, original: _Node, update: _Node, path: str) -> List[str]:
        w_arrays, w_schemas = _dependency_maps(original.raw)
        r_arrays, r_schemas = _dependency_maps(update.raw)
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
        w_schema, r_schema = _partial_schema(w), _partial_schema(r)
        if w_schema is None and r_schema is not None:
            return [f"{path}: {keyword} constrained by a schema now (the writer allowed any value)"]
        if r_schema is None or w_schema is None:
            return []
        return self.compare(self._child(original, w_schema), self._child(update, r_schema), path)

    def _array(self, original: _Node, update: _Node, path: str) -> List[str]:
        w, r = original.raw, update.raw
        w_items, w_tuple, w_more = _array_parts(w)
        r_items, r_tuple, r_more = _array_parts(r)
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
        found += _bound(path, "maxItems", w.get("maxItems"), r.get("maxItems"), upper=True)
        found += _bound(path, "minItems", w.get("minItems"), r.get("minItems"), upper=False)
        if r.get("uniqueItems") is True and w.get("uniqueItems") is not True:
            found.append(f"{path}/uniqueItems: uniqueItems added")
        return found


# --- helpers -----------------------------------------------------------------------------

def _bound(path: str, keyword: str, writer: Any, reader: Any, *, upper: bool) -> List[str]:
    """A limit the reader adds or tightens (an upper limit decreased, a lower one
    increased) is incompatible."""
    w, r = _decimal(writer), _decimal(reader)
    if r is None or w == r:
        return []
    if w is None:
        return [f"{path}/{keyword}: {keyword} {_spell_number(r)} added"]
    if (r < w) if upper else (r > w):
        direction = "decreased" if upper else "increased"
        return [f"{path}/{keyword}: {keyword} {direction} from {_spell_number(w)} to {_spell_number(r)}"]
    return []


def _effective(raw: Dict[str, Any], *, upper: bool) -> Optional[Tuple[Decimal, bool]]:
    """A number schema's upper (or lower) limit as ``(value, exclusive)``, from
    ``maximum`` and ``exclusiveMaximum`` (a number, or draft 4's boolean flag on
    ``maximum``), the tighter of the two; None when there is none."""
    inclusive_key, exclusive_key = ("maximum", "exclusiveMaximum") if upper else ("minimum", "exclusiveMinimum")
    inclusive, exclusive = _decimal(raw.get(inclusive_key)), raw.get(exclusive_key)
    candidates: List[Tuple[Decimal, bool]] = []
    if inclusive is not None:
        candidates.append((inclusive, exclusive is True))
    if _decimal(exclusive) is not None:
        candidates.append((_decimal(exclusive), True))
    if not candidates:
        return None
    # the tighter limit: the smaller maximum (larger minimum), exclusive on a tie
    return min(candidates, key=lambda c: ((c[0] if upper else -c[0]), not c[1]))


def _limit(path: str, writer: Optional[Tuple[Decimal, bool]], reader: Optional[Tuple[Decimal, bool]], *,
           upper: bool) -> List[str]:
    """A numeric limit the reader adds or tightens is incompatible."""
    if reader is None or writer == reader:
        return []
    keyword = ("exclusiveMaximum" if reader[1] else "maximum") if upper else \
        ("exclusiveMinimum" if reader[1] else "minimum")
    if writer is None:
        return [f"{path}/{keyword}: {keyword} {_spell_number(reader[0])} added"]
    tighter = reader[0] < writer[0] if upper else reader[0] > writer[0]
    if tighter or reader[0] == writer[0] and reader[1] and not writer[1]:
        side = "upper" if upper else "lower"
        return [f"{path}/{keyword}: {side} limit tightened from {_spell_limit(writer, upper)} "
                f"to {_spell_limit(reader, upper)}"]
    return []


def _spell_limit(limit: Tuple[Decimal, bool], upper: bool) -> str:
    return ("<" if upper else ">") + ("" if limit[1] else "=") + " " + _spell_number(limit[0])


def _decimal(value: Any) -> Optional[Decimal]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def _spell_number(value: Decimal) -> str:
    return format(value.normalize(), "f") if value == value.to_integral_value() else str(value)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _has_default(raw: Any) -> bool:
    return isinstance(raw, dict) and "default" in raw


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _partial_schema(value: Any) -> Optional[Any]:
    """A schema constraining additional properties/items; None when it allows any."""
    if value is True or value is False or value is None or value == {}:
        return None
    return value


def _open_object(raw: Dict[str, Any]) -> bool:
    return not raw.get("patternProperties") and raw.get("additionalProperties", True) is not False \
        and _partial_schema(raw.get("additionalProperties", True)) is None


def _partial_object(raw: Dict[str, Any], name: str) -> Optional[Any]:
    """The schema a partially open object gives property ``name``: its first matching
    ``patternProperties`` entry, else its ``additionalProperties`` schema (``True``
    when that allows any value); None when the object is closed to ``name``."""
    for pattern, schema in _dict(raw.get("patternProperties")).items():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    extra = raw.get("additionalProperties", True)
    if extra is False:
        return None
    return True if _partial_schema(extra) is None else extra


def _dependency_maps(raw: Dict[str, Any]) -> Tuple[Dict[str, Set[str]], Dict[str, Any]]:
    """``(property dependencies, schema dependencies)`` from draft 7's ``dependencies``
    and 2019-09's ``dependentRequired``/``dependentSchemas``."""
    arrays: Dict[str, Set[str]] = {}
    schemas: Dict[str, Any] = {}
    for name, value in _dict(raw.get("dependencies")).items():
        if isinstance(value, list):
            arrays[name] = set(value)
        else:
            schemas[name] = value
    arrays.update({k: set(v) for k, v in _dict(raw.get("dependentRequired")).items() if isinstance(v, list)})
    schemas.update(_dict(raw.get("dependentSchemas")))
    return arrays, schemas


def _array_parts(raw: Dict[str, Any]) -> Tuple[Optional[Any], List[Any], Any]:
    """``(schema of every item, tuple item schemas, additional items)``: ``items`` as
    one schema, or tuple items (``items`` as a list, or 2020-12's ``prefixItems`` with
    ``items`` for the rest) and ``additionalItems`` (True, False or a schema)."""
    if isinstance(raw.get("prefixItems"), list):
        more = raw.get("items", True)
        return None, list(raw["prefixItems"]), more if _partial_schema(more) is not None or more is False else True
    if isinstance(raw.get("items"), list):
        more = raw.get("additionalItems", True)
        return None, list(raw["items"]), more if _partial_schema(more) is not None or more is False else True
    return raw.get("items"), [], True


def _matching(edges: Dict[int, List[int]], right: int) -> Set[int]:
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


