#!/usr/bin/env python3
"""Lists the crate's public API, one sorted line per item and path.

The listing is read from rustdoc's JSON output, built with every feature on:

    RUSTC_BOOTSTRAP=1 cargo rustdoc -p mcp-tasks --lib --all-features -- \
        -Z unstable-options --output-format json --document-hidden-items

(the stable toolchain produces it with RUSTC_BOOTSTRAP; hidden items are included,
marked `#[doc(hidden)]`, since code can still name them). The walk starts at the
crate root and follows public modules and re-exports, so an item is listed under
every path a user can name it by: an item reachable by two paths shows up twice, and
the summary on stderr names each such item.

Each line is one of:
  * a module, struct, enum, union, trait, type alias, constant, static, function or
    macro, with its path and signature (generics, parameters, return type, bounds);
  * a public struct field, an enum variant and its fields, a trait's items
    (`(provided)` when the trait gives a body);
  * a type's public inherent items under the path of the type;
  * a trait implemented for a public type (auto traits Send, Sync, Unpin,
    UnwindSafe and RefUnwindSafe included; blanket implementations from other
    crates, such as `From<T> for T`, left out), with its associated types;
  * an implementation of one of the crate's traits for a type of another crate;
  * a re-export of another crate or of another crate's item.

Types in signatures are named by their shortest public path in this crate, or by
their defining path in their own crate (`alloc::sync::Arc`).

Usage:
  scripts/public-api.py                  rebuild the JSON, rewrite public-api.txt
  scripts/public-api.py --check          rebuild the JSON, fail with a diff when
                                         public-api.txt differs
  scripts/public-api.py --json FILE      read FILE instead of building (with either)
  scripts/public-api.py --print          print the listing instead of writing it

Exit status: 0 on success; 1 when --check finds a difference; 2 when the build fails.
"""

import argparse
import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTING = ROOT / "public-api.txt"
CRATE = "mcp_tasks"
# Auto traits worth seeing change; Freeze and UnsafeUnpin are compiler internals.
AUTO_TRAITS = {"Send", "Sync", "Unpin", "UnwindSafe", "RefUnwindSafe"}
# Implemented by `#[derive]`s for the compiler's own use, not nameable on stable.
SKIPPED_TRAITS = {"StructuralPartialEq", "TrivialClone"}


def build_json():
    """Runs rustdoc with JSON output and returns the path of the file it wrote."""
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    command = [
        "cargo", "rustdoc", "-p", "mcp-tasks", "--lib", "--all-features", "--",
        "-Z", "unstable-options", "--output-format", "json", "--document-hidden-items",
    ]
    if subprocess.run(command, cwd=ROOT, env=env).returncode != 0:
        sys.exit(2)
    metadata = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    target = json.loads(metadata.stdout)["target_directory"]
    return Path(target) / "doc" / f"{CRATE}.json"


class Api:
    def __init__(self, doc):
        self.doc = doc
        self.index = doc["index"]
        self.paths = doc["paths"]
        self.item_paths = {}  # local item id -> every public path, as segment lists
        self.extern_uses = []  # (path, rendered target) of re-exported foreign items
        self.override = {}  # id -> path used while rendering one item's lines

    # --- the walk -------------------------------------------------------------------

    def walk(self):
        root = self.index[str(self.doc["root"])]
        self._module(root, [CRATE], set())
        self.canonical = {
            int(i): min(paths, key=lambda p: (len(p), p))
            for i, paths in self.item_paths.items()
        }

    def _module(self, module, prefix, seen):
        for child in module["inner"]["module"]["items"]:
            item = self.index.get(str(child))
            if item is None:
                continue
            inner = item["inner"]
            if "use" in inner:
                use = inner["use"]
                target = self.index.get(str(use["id"])) if use["id"] is not None else None
                if use["is_glob"]:
                    if target is not None and "module" in target["inner"]:
                        self._module(target, prefix, seen)
                    continue
                if target is not None and target["crate_id"] == 0:
                    self._add(target, prefix + [use["name"]], seen)
                else:
                    self.extern_uses.append((prefix + [use["name"]], use))
            else:
                self._add(item, prefix + [item["name"]], seen)

    def _add(self, item, path, seen):
        paths = self.item_paths.setdefault(str(item["id"]), [])
        if path not in paths:
            paths.append(path)
        if "module" in item["inner"] and (item["id"], tuple(path)) not in seen:
            seen.add((item["id"], tuple(path)))
            self._module(item, path, seen)

    # --- names ----------------------------------------------------------------------

    def name_of(self, id_, written):
        if id_ is not None:
            if id_ in self.override:
                return "::".join(self.override[id_])
            if id_ in self.canonical:
                return "::".join(self.canonical[id_])
            summary = self.paths.get(str(id_))
            if summary is not None:
                return "::".join(summary["path"])
        return written

    # --- types ----------------------------------------------------------------------

    def ty(self, t):
        if t is None:
            return "()"
        (kind, v), = t.items() if isinstance(t, dict) else ((t, None),)
        if kind == "resolved_path":
            return self.path(v)
        if kind == "dyn_trait":
            parts = [self.poly_trait(p) for p in v["traits"]]
            if v.get("lifetime"):
                parts.append(v["lifetime"])
            return "dyn " + " + ".join(parts)
        if kind in ("generic", "primitive"):
            return v
        if kind == "function_pointer":
            header = v["header"]
            prefix = self.hrtb(v["generic_params"])
            if header["is_unsafe"]:
                prefix += "unsafe "
            inputs = ", ".join(self.ty(t) for _, t in v["sig"]["inputs"])
            out = v["sig"]["output"]
            return f"{prefix}fn({inputs})" + (f" -> {self.ty(out)}" if out else "")
        if kind == "tuple":
            if len(v) == 1:
                return f"({self.ty(v[0])},)"
            return "(" + ", ".join(self.ty(t) for t in v) + ")"
        if kind == "slice":
            return f"[{self.ty(v)}]"
        if kind == "array":
            return f"[{self.ty(v['type'])}; {v['len']}]"
        if kind == "impl_trait":
            return "impl " + " + ".join(self.bound(b) for b in v)
        if kind == "infer":
            return "_"
        if kind == "raw_pointer":
            return ("*mut " if v["is_mutable"] else "*const ") + self.ty(v["type"])
        if kind == "borrowed_ref":
            lifetime = v["lifetime"] + " " if v["lifetime"] else ""
            mutable = "mut " if v["is_mutable"] else ""
            return f"&{lifetime}{mutable}{self.ty(v['type'])}"
        if kind == "qualified_path":
            args = self.args(v.get("args"))
            if v.get("trait") is None:
                return f"{self.ty(v['self_type'])}::{v['name']}{args}"
            return f"<{self.ty(v['self_type'])} as {self.path(v['trait'])}>::{v['name']}{args}"
        if kind == "pat":
            return self.ty(v["type"])
        return json.dumps(t)

    def path(self, p):
        return self.name_of(p.get("id"), p["path"]) + self.args(p.get("args"))

    def args(self, a):
        if not a:
            return ""
        if a == "return_type_notation":
            return "(..)"
        (kind, v), = a.items()
        if kind == "parenthesized":
            inputs = ", ".join(self.ty(t) for t in v["inputs"])
            return f"({inputs})" + (f" -> {self.ty(v['output'])}" if v.get("output") else "")
        parts = [self.generic_arg(g) for g in v["args"]]
        for c in v.get("constraints", []):
            name = c["name"] + self.args(c.get("args"))
            (bkind, b), = c["binding"].items()
            if bkind == "equality":
                parts.append(f"{name} = {self.term(b)}")
            else:
                parts.append(f"{name}: " + " + ".join(self.bound(x) for x in b))
        return "<" + ", ".join(parts) + ">" if parts else ""

    def term(self, t):
        if "type" in t:
            return self.ty(t["type"])
        return t["constant"]["expr"]

    def generic_arg(self, g):
        if g == "infer":
            return "_"
        (kind, v), = g.items()
        if kind == "lifetime":
            return v
        if kind == "type":
            return self.ty(v)
        return v.get("expr", "_")

    def poly_trait(self, p):
        return self.hrtb(p.get("generic_params", [])) + self.path(p["trait"])

    def hrtb(self, params):
        names = [g["name"] for g in params]
        return f"for<{', '.join(names)}> " if names else ""

    def bound(self, b):
        (kind, v), = b.items()
        if kind == "trait_bound":
            modifier = {"maybe": "?", "maybe_const": "~const "}.get(v["modifier"], "")
            return self.hrtb(v["generic_params"]) + modifier + self.path(v["trait"])
        if kind == "outlives":
            return v
        if kind == "use":
            return "use<" + ", ".join(
                x if isinstance(x, str) else next(iter(x.values())) for x in v
            ) + ">"
        return json.dumps(b)

    def generics(self, g, skip_synthetic=True, defaults=True):
        params = []
        for p in g["params"]:
            (kind, v), = p["kind"].items()
            if kind == "lifetime":
                out = p["name"] + (": " + " + ".join(v["outlives"]) if v["outlives"] else "")
            elif kind == "type":
                if v["is_synthetic"] and skip_synthetic:
                    continue
                out = p["name"]
                if v["bounds"]:
                    out += ": " + " + ".join(self.bound(b) for b in v["bounds"])
                if v.get("default") is not None and defaults:
                    out += " = " + self.ty(v["default"])
            else:
                out = f"const {p['name']}: {self.ty(v['type'])}"
                if v.get("default") is not None and defaults:
                    out += f" = {v['default']}"
            params.append(out)
        return "<" + ", ".join(params) + ">" if params else ""

    def where(self, g):
        preds = []
        for w in g["where_predicates"]:
            (kind, v), = w.items()
            if kind == "bound_predicate":
                preds.append(
                    self.hrtb(v.get("generic_params", []))
                    + self.ty(v["type"]) + ": " + " + ".join(self.bound(b) for b in v["bounds"])
                )
            elif kind == "lifetime_predicate":
                preds.append(v["lifetime"] + ": " + " + ".join(v["outlives"]))
            else:
                preds.append(self.ty(v["lhs"]) + " == " + self.term(v["rhs"]))
        return " where " + ", ".join(preds) if preds else ""

    # --- items ----------------------------------------------------------------------

    @staticmethod
    def marks(item):
        out = ""
        for a in item.get("attrs", []):
            if a == "non_exhaustive":
                out += "#[non_exhaustive] "
            elif isinstance(a, dict) and "other" in a and "doc(hidden)" in a["other"]:
                out += "#[doc(hidden)] "
        if item.get("deprecation") is not None:
            out += "#[deprecated] "
        return out

    def function(self, item, path, provided=False):
        f = item["inner"]["function"]
        h = f["header"]
        qualifiers = "".join(
            word + " " for word, on in
            (("const", h["is_const"]), ("async", h["is_async"]), ("unsafe", h["is_unsafe"]))
            if on
        )
        inputs = []
        for name, t in f["sig"]["inputs"]:
            if name == "self":
                if t == {"generic": "Self"}:
                    inputs.append("self")
                    continue
                ref = t.get("borrowed_ref") if isinstance(t, dict) else None
                if ref is not None and ref["type"] == {"generic": "Self"}:
                    lifetime = ref["lifetime"] + " " if ref["lifetime"] else ""
                    inputs.append(f"&{lifetime}{'mut ' if ref['is_mutable'] else ''}self")
                    continue
            inputs.append(f"{name}: {self.ty(t)}")
        out = f["sig"]["output"]
        ret = f" -> {self.ty(out)}" if out is not None else ""
        line = (
            f"{self.marks(item)}pub {qualifiers}fn {path}{self.generics(f['generics'])}"
            f"({', '.join(inputs)}){ret}{self.where(f['generics'])}"
        )
        return line + (" (provided)" if provided else "")

    def lines_for(self, id_, path):
        item = self.index[str(id_)]
        inner = item["inner"]
        (kind, v), = inner.items()
        name = "::".join(path)
        marks = self.marks(item)
        out = []
        if kind == "module":
            out.append(f"{marks}pub mod {name}")
        elif kind == "function":
            out.append(self.function(item, name))
        elif kind == "constant":
            out.append(f"{marks}pub const {name}: {self.ty(v['type'])}")
        elif kind == "static":
            mutable = "mut " if v["is_mutable"] else ""
            out.append(f"{marks}pub static {mutable}{name}: {self.ty(v['type'])}")
        elif kind == "type_alias":
            g = v["generics"]
            out.append(
                f"{marks}pub type {name}{self.generics(g)}{self.where(g)} = {self.ty(v['type'])}"
            )
        elif kind == "macro":
            out.append(f"{marks}macro {name}!")
        elif kind == "proc_macro":
            out.append(f"{marks}proc macro {name}")
        elif kind in ("struct", "union"):
            g = v["generics"]
            head = f"{marks}pub {kind} {name}{self.generics(g)}"
            if kind == "struct" and isinstance(v["kind"], dict) and "tuple" in v["kind"]:
                fields = [
                    "pub " + self.ty(self.index[str(f)]["inner"]["struct_field"])
                    if f is not None else "_"
                    for f in v["kind"]["tuple"]
                ]
                head += "(" + ", ".join(fields) + ")"
            out.append(head + self.where(g))
            if kind == "union":
                fields = v["fields"]
            elif isinstance(v["kind"], dict) and "plain" in v["kind"]:
                fields = v["kind"]["plain"]["fields"]
            else:
                fields = []
            out += self.fields(fields, path)
            out += self.impls(v["impls"], path)
        elif kind == "enum":
            g = v["generics"]
            out.append(f"{marks}pub enum {name}{self.generics(g)}{self.where(g)}")
            for variant_id in v["variants"]:
                variant = self.index[str(variant_id)]
                vk = variant["inner"]["variant"]["kind"]
                vpath = path + [variant["name"]]
                vname = self.marks(variant) + "pub " + "::".join(vpath)
                if vk == "plain":
                    out.append(vname)
                elif "tuple" in vk:
                    fields = [
                        self.ty(self.index[str(f)]["inner"]["struct_field"]) if f is not None else "_"
                        for f in vk["tuple"]
                    ]
                    out.append(f"{vname}({', '.join(fields)})")
                else:
                    out.append(vname + " { .. }")
                    out += self.fields(vk["struct"]["fields"], vpath)
            out += self.impls(v["impls"], path)
        elif kind == "trait":
            g = v["generics"]
            bounds = ": " + " + ".join(self.bound(b) for b in v["bounds"]) if v["bounds"] else ""
            auto = "auto " if v["is_auto"] else ""
            unsafe = "unsafe " if v["is_unsafe"] else ""
            out.append(f"{marks}pub {unsafe}{auto}trait {name}{self.generics(g)}{bounds}{self.where(g)}")
            for member_id in v["items"]:
                out += self.assoc(self.index[str(member_id)], path, in_trait=True)
            for impl_id in v["implementations"]:
                impl = self.index[str(impl_id)]["inner"]["impl"]
                target = impl["for"].get("resolved_path") if isinstance(impl["for"], dict) else None
                if target is not None and target.get("id") is not None and target["id"] in self.canonical:
                    continue  # listed with the type
                if impl["blanket_impl"] is not None and self.index[str(impl_id)]["crate_id"] != 0:
                    continue
                out += self.impl_lines(impl)
        else:
            out.append(f"{marks}pub {kind} {name}")
        return out

    def fields(self, field_ids, path):
        out = []
        for f in field_ids:
            field = self.index[str(f)]
            if field["visibility"] not in ("public", "default"):
                continue
            out.append(
                f"{self.marks(field)}pub {'::'.join(path + [field['name']])}: "
                f"{self.ty(field['inner']['struct_field'])}"
            )
        return out

    def assoc(self, member, path, in_trait=False):
        (kind, v), = member["inner"].items()
        name = "::".join(path + [member["name"]])
        marks = self.marks(member)
        if kind == "function":
            return [self.function(member, name, provided=in_trait and v["has_body"])]
        if kind == "assoc_const":
            default = " (provided)" if in_trait and v.get("value") is not None else ""
            return [f"{marks}pub const {name}: {self.ty(v['type'])}{default}"]
        if kind == "assoc_type":
            bounds = ": " + " + ".join(self.bound(b) for b in v["bounds"]) if v["bounds"] else ""
            value = f" = {self.ty(v['type'])}" if v.get("type") is not None else ""
            return [f"{marks}pub type {name}{self.generics(v['generics'])}{bounds}{value}"]
        return [f"{marks}pub {kind} {name}"]

    def impls(self, impl_ids, path):
        out = []
        for impl_id in impl_ids:
            impl_item = self.index[str(impl_id)]
            impl = impl_item["inner"]["impl"]
            if impl["trait"] is None:
                for member_id in impl["items"]:
                    member = self.index[str(member_id)]
                    if member["visibility"] == "public":
                        out += self.assoc(member, path)
                continue
            trait_name = impl["trait"]["path"].split("::")[-1]
            if impl["blanket_impl"] is not None or trait_name in SKIPPED_TRAITS:
                continue
            if impl["is_synthetic"] and trait_name not in AUTO_TRAITS:
                continue
            out += self.impl_lines(impl)
        return out

    def impl_lines(self, impl):
        g = impl["generics"]
        negative = "!" if impl["is_negative"] else ""
        unsafe = "unsafe " if impl["is_unsafe"] else ""
        trait = self.path(impl["trait"])
        for_ = self.ty(impl["for"])
        head = f"{unsafe}impl{self.generics(g, defaults=False)} {negative}{trait} for {for_}{self.where(g)}"
        members = []
        for member_id in impl["items"]:
            member = self.index[str(member_id)]
            if "assoc_type" in member["inner"]:
                value = self.ty(member["inner"]["assoc_type"]["type"])
                members.append(f"    type {member['name']} = {value}")
            elif "assoc_const" in member["inner"]:
                members.append(f"    const {member['name']}")
        # One entry: the associated types stay under their impl line.
        return ["\n".join([head] + sorted(members))]

    # --- the listing ----------------------------------------------------------------

    def listing(self):
        blocks = {}
        for id_, paths in self.item_paths.items():
            for path in paths:
                # Under this path, the item's own name in its lines is this path.
                self.override = {int(id_): path}
                head, *members = self.lines_for(int(id_), path)
                # The item's line, then its fields, variants and own items, then the
                # traits it implements.
                name = "::".join(path)
                impls, parts, items = set(), set(), set()
                for member in members:
                    if member.startswith(("impl", "unsafe impl")):
                        impls.add(member)
                    elif member.split("] ")[-1].startswith(f"pub {name}::"):
                        parts.add(member)  # a field or a variant: no keyword
                    else:
                        items.add(member)
                blocks[name] = [head] + sorted(parts) + sorted(items) + sorted(impls)
        self.override = {}
        lines = [line for key in sorted(blocks) for line in blocks[key]]
        for path, use in sorted(self.extern_uses, key=lambda e: e[0]):
            summary = self.paths.get(str(use["id"])) if use["id"] is not None else None
            source = "::".join(summary["path"]) if summary else use["source"]
            lines.append(f"pub use {'::'.join(path)} = {source}")
        return lines

    def duplicates(self):
        out = []
        for id_, paths in self.item_paths.items():
            if len(paths) > 1:
                out.append(sorted("::".join(p) for p in paths))
        return sorted(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when public-api.txt differs")
    parser.add_argument("--print", action="store_true", help="print instead of writing")
    parser.add_argument("--json", type=Path, help="rustdoc JSON to read instead of building")
    options = parser.parse_args()

    source = options.json or build_json()
    api = Api(json.loads(source.read_text()))
    api.walk()
    text = "".join(line + "\n" for line in api.listing())

    duplicates = api.duplicates()
    items = len(api.item_paths)
    print(f"public-api: {items} items, {text.count(chr(10))} lines", file=sys.stderr)
    for paths in duplicates:
        print("public-api: one item, several paths: " + ", ".join(paths), file=sys.stderr)

    if options.print:
        sys.stdout.write(text)
    elif options.check:
        current = LISTING.read_text() if LISTING.exists() else ""
        if current != text:
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True),
                "public-api.txt (checked in)", "public-api.txt (this build)",
            ))
            print(
                "public-api: the public API differs from public-api.txt; if the change is "
                "meant, run `python3 scripts/public-api.py` and commit the new listing",
                file=sys.stderr,
            )
            return 1
        print("public-api: public-api.txt is current", file=sys.stderr)
    else:
        LISTING.write_text(text)
        print(f"public-api: wrote {LISTING.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
