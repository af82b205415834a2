#!/usr/bin/env python3
"""Fails when the modules (or folders) of the crate depend on each other in a cycle.

Builds the module dependency graph of `src/` and reports every strongly connected
component of more than one module, with one offending source line per edge.

Nodes: one module per file. `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs` is
`a::b`. `src/lib.rs` is the crate root: a facade, not a node.

Edges, read from code only (comments, doc comments and string literals are blanked;
a `#[cfg(test)] mod tests { .. }` block is dropped, braces matched, since tests may
use anything; a `#[cfg(test)] mod tests;` file is no node):
  * every path that starts with `crate::` (or `$crate::` in a macro), `super::` or
    `self::`, in `use` declarations and in expressions, types and patterns alike;
  * `use` paths that start with the name of a child module (`use memory::X`);
  * a path is resolved to the deepest module that exists as a file:
    `crate::a::b::Item` is `a::b` when `src/a/b.rs` (or `src/a/b/mod.rs`) exists,
    else `a`. `super` is taken relative to the file's module (inline `mod x { }`
    blocks are accounted for);
  * `crate::Item` names the root facade: it is followed to the module that
    `lib.rs` re-exports `Item` from (or the module that defines a
    `#[macro_export]` macro), since that module is the real dependency.

Folders: inside each folder (and at the top level) every child module stands for
its whole subtree; a cycle between two subtrees is reported too, even when no two
files form one (`store/janitor.rs` -> `observe` and `observe` -> `store/mod.rs`).

Not edges: a module's references to itself; a parent declaring its descendants
(`mod child;`) or re-exporting them (`pub use child::X`, `pub(crate) use
self::child::X`, any visibility) -- that is its facade. A descendant referring to an
ancestor's items is an ordinary edge (child -> ancestor), and so is an ancestor
*using* (not re-exporting) a descendant's item.

Usage: scripts/check-module-cycles.py [--src DIR] [--dot] [--edges]
  --src DIR   the source tree (default: the src/ beside this script's directory)
  --dot       print the graph in Graphviz DOT instead (cycle edges in red); exits 0
  --edges     also list every edge with the first line that makes it

Exit status: 0 when the graph has no cycle (prints `module graph: N modules, M edges,
no cycle`), 1 when it has one (every cycle is printed), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import bisect
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


# --------------------------------------------------------------------------- lexing


def blank_comments_and_strings(text: str) -> str:
    """Replaces comments (doc comments included) and the contents of string and char
    literals with spaces. Newlines are kept, so offsets and line numbers still match."""
    out = list(text)
    n = len(text)
    raw = re.compile(r'(?:b|c)?r(#*)"')

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    def string_end(start: int) -> int:
        """The offset of the closing quote of a string whose contents begin at `start`."""
        j = start
        while j < n and text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return j

    def ident_char(c: str) -> bool:
        return c.isalnum() or c == "_"

    i = 0
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c == '"':
            j = string_end(i + 1)
            blank(i + 1, j)
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}') or a lifetime / label ('a, 'static).
            if text.startswith("\\", i + 1):
                j = i + 3
                while j < n and text[j] not in "'\n":
                    j += 1
                blank(i + 1, j)
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'" and text[i + 1] != "\n":
                blank(i + 1, i + 2)
                i += 3
            else:
                i += 1
        elif ident_char(c):
            j = i
            while j < n and ident_char(text[j]):
                j += 1
            word, after = text[i:j], text[j] if j < n else ""
            m = raw.match(text, i) if word in ("r", "br", "cr") else None
            if m:
                close = '"' + m.group(1)
                k = text.find(close, m.end())
                k = n if k < 0 else k
                blank(m.end(), k)
                i = k + len(close)
            elif word in ("b", "c") and after == '"':
                k = string_end(j + 1)
                blank(j + 1, k)
                i = k + 1
            elif word == "b" and after == "'":
                k = j + 1 + (2 if text.startswith("\\", j + 1) else 1)
                while k < n and text[k] not in "'\n":
                    k += 1
                blank(j + 1, k)
                i = k + 1
            else:
                i = j
        else:
            i += 1
    return "".join(out)


def matching_brace(code: str, open_at: int) -> int:
    """The offset just past the `}` closing the `{` at `open_at`."""
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(code)


ATTRS = r"(?:#\s*\[[^\]]*\]\s*)*"
VIS = r"(?:pub\s*(?:\([^)]*\))?\s*)?"
TEST_BLOCK = re.compile(
    r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]\s*" + ATTRS + VIS + r"mod\s+(" + IDENT + r")\s*([{;])"
)


def strip_test_modules(code: str) -> tuple[str, set[str]]:
    """Blanks every `#[cfg(test)] mod name { .. }` block.

    Returns the code and the names of `#[cfg(test)] mod name;` file modules."""
    test_files: set[str] = set()
    out = list(code)
    for m in TEST_BLOCK.finditer(code):
        if m.group(2) == ";":
            test_files.add(m.group(1))
            continue
        end = matching_brace(code, m.end() - 1)
        for k in range(m.start(), end):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out), test_files


# --------------------------------------------------------------------------- use trees


@dataclass
class UseDecl:
    start: int
    end: int
    public: bool
    paths: list[list[str]]
    aliases: dict[int, str]

    def names(self):
        """(path, the name it is bound to) for every leaf."""
        for k, segs in enumerate(self.paths):
            yield segs, self.aliases.get(k, segs[-1])


USE_START = re.compile(r"(?<![\w$])(pub\s*(?:\([^)]*\))?\s*)?\buse\s+")


def parse_use_tree(
    s: str, pos: int, prefix: list[str], out: list[list[str]], aliases: dict[int, str]
) -> int:
    """Parses one use tree at s[pos:], appending every leaf path to `out` (and the
    `as` name of leaf `k`, if any, to `aliases[k]`)."""
    segs = list(prefix)
    ws = re.compile(r"\s*")
    pos = ws.match(s, pos).end()
    if s.startswith("::", pos):  # `use ::extern_crate::..`
        segs.append("::")
        pos += 2
    while True:
        pos = ws.match(s, pos).end()
        if s.startswith("{", pos):
            pos += 1
            while True:
                pos = ws.match(s, pos).end()
                if s.startswith("}", pos):
                    return pos + 1
                pos = parse_use_tree(s, pos, segs, out, aliases)
                pos = ws.match(s, pos).end()
                if s.startswith(",", pos):
                    pos += 1
                elif s.startswith("}", pos):
                    return pos + 1
                else:
                    raise ValueError("bad use list")
        if s.startswith("*", pos):
            out.append(segs + ["*"])
            return pos + 1
        m = re.compile(r"\$?" + IDENT).match(s, pos)
        if not m:
            raise ValueError("bad use path")
        segs.append(m.group(0))
        pos = ws.match(s, m.end()).end()
        if s.startswith("::", pos):
            pos += 2
            continue
        m = re.compile(r"as\s+(" + IDENT + r")").match(s, pos)
        if m:
            pos = m.end()
            aliases[len(out)] = m.group(1)
        out.append(segs)
        return pos


def find_uses(code: str) -> list[UseDecl]:
    uses = []
    for m in USE_START.finditer(code):
        paths: list[list[str]] = []
        aliases: dict[int, str] = {}
        try:
            end = parse_use_tree(code, m.end(), [], paths, aliases)
        except ValueError:
            continue  # e.g. `impl Trait + use<'a>`
        rest = re.compile(r"\s*;").match(code, end)
        if not rest:
            continue
        uses.append(UseDecl(m.start(), rest.end(), m.group(1) is not None, paths, aliases))
    return uses


# --------------------------------------------------------------------------- modules


@dataclass
class Module:
    name: tuple[str, ...]
    path: Path
    lines: list[str] = field(default_factory=list)
    code: str = ""
    line_starts: list[int] = field(default_factory=list)
    inline: list[tuple[int, int]] = field(default_factory=list)

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def inline_depth(self, offset: int) -> int:
        return sum(1 for a, b in self.inline if a <= offset < b)


def show(name: tuple[str, ...]) -> str:
    return "::".join(name) if name else "crate"


def load(path: Path, name: tuple[str, ...]) -> Module:
    text = path.read_text(encoding="utf-8")
    code = blank_comments_and_strings(text)
    code, _ = strip_test_modules(code)
    mod = Module(name, path, text.splitlines(), code)
    mod.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    for m in re.finditer(r"(?<![\w$])mod\s+" + IDENT + r"\s*\{", code):
        mod.inline.append((m.end() - 1, matching_brace(code, m.end() - 1)))
    return mod


def discover(src: Path) -> tuple[dict[tuple[str, ...], Module], Module]:
    modules: dict[tuple[str, ...], Module] = {}
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src).with_suffix("")
        parts = tuple(rel.parts)
        if parts in (("lib",), ("main",)) or parts[0] == "bin":
            continue
        if parts[-1] == "mod":
            parts = parts[:-1]
        if parts in modules:
            sys.exit(f"error: two files for module {show(parts)}: {modules[parts].path}, {path}")
        modules[parts] = load(path, parts)
    root_file = src / "lib.rs"
    if not root_file.exists():
        root_file = src / "main.rs"
    if not root_file.exists():
        sys.exit(f"error: no lib.rs or main.rs under {src}")
    root = load(root_file, ())
    # `#[cfg(test)] mod x;` file modules are tests: not part of the graph.
    for mod in [root, *modules.values()]:
        _, test_files = strip_test_modules(blank_comments_and_strings(mod.path.read_text()))
        for child in test_files:
            modules.pop(mod.name + (child,), None)
    return modules, root


# --------------------------------------------------------------------------- resolution


class Resolver:
    def __init__(self, modules: dict[tuple[str, ...], Module], root: Module):
        self.modules = modules
        self.facade: dict[str, tuple[str, ...]] = {}
        # Names the crate root re-exports, and `#[macro_export]` macros (which live at
        # the root), mapped to the module that really defines them.
        # Every name the root binds, so that a `crate::name` naming nothing is reported.
        self.root_names: set[str] = set(re.findall(
            r"\b(?:fn|struct|enum|union|trait|type|const|static|mod|macro_rules!)\s+(" + IDENT + ")",
            root.code,
        ))
        for use in find_uses(root.code):
            for segs, name in use.names():
                self.root_names.add(name)
                target = self.resolve(segs, (), 0)
                if target:
                    self.facade[name] = target
        macro = re.compile(r"#\s*\[\s*macro_export\s*\]\s*" + ATTRS + r"macro_rules!\s*(" + IDENT + ")")
        for mod in modules.values():
            for m in macro.finditer(mod.code):
                self.facade[m.group(1)] = mod.name
                self.root_names.add(m.group(1))
        self.unresolved: list[str] = []

    def resolve(self, segs: list[str], here: tuple[str, ...], depth: int) -> tuple[str, ...] | None:
        """The deepest file module `segs` names, seen from module `here` nested `depth`
        inline modules deep; () for the crate root; None for an external path."""
        segs = [s for s in segs if s != "*"]
        if not segs:
            return None
        first = segs[0]
        if first in ("crate", "$crate"):
            base, rest = (), segs[1:]
        elif first == "super":
            base, rest = here, segs
            while rest and rest[0] == "super":
                rest = rest[1:]
                if depth:
                    depth -= 1
                elif base:
                    base = base[:-1]
                else:
                    return None
        elif first == "self":
            base, rest = here, segs[1:]
        elif here + (first,) in self.modules and depth == 0:
            base, rest = here, segs
        else:
            return None  # an external crate, a prelude name or a local item
        target = base
        for seg in rest:
            if seg == "self":
                continue
            if target + (seg,) in self.modules:
                target = target + (seg,)
            else:
                if target == () and seg in self.facade:
                    return self.facade[seg]
                break
        return target


INLINE_PATH = re.compile(r"(?<![\w$])(\$crate|crate|super|self)((?:::" + IDENT + r")+)")
VIS_IN = re.compile(r"pub\s*\(\s*in\s+[^)]*\)")


@dataclass
class Edge:
    src: tuple[str, ...]
    dst: tuple[str, ...]
    file: Path
    line: int
    text: str


def is_descendant(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether `a` is strictly below `b`."""
    return len(a) > len(b) and a[: len(b)] == b


def edges_of(mod: Module, res: Resolver, shown) -> list[Edge]:
    found: list[Edge] = []

    def add(target: tuple[str, ...] | None, offset: int, public_use: bool, segs=()) -> None:
        if target == () and len(segs) > 1 and segs[0] in ("crate", "$crate") and segs[1] != "*":
            if segs[1] not in res.root_names and (segs[1],) not in res.modules:
                line = mod.line_of(offset)
                res.unresolved.append(f"{shown(mod.path)}:{line}: `{'::'.join(segs)}` names no module")
        if target is None or target == () or target == mod.name:
            return
        if public_use and is_descendant(target, mod.name):
            return  # the module's facade: re-exporting its own descendants
        line = mod.line_of(offset)
        found.append(Edge(mod.name, target, mod.path, line, mod.lines[line - 1].strip()))

    # `pub(in crate::a)` restricts visibility; it is no dependency on `a`.
    code = VIS_IN.sub(lambda m: "pub" + " " * (len(m.group(0)) - 3), mod.code)
    covered = []
    for use in find_uses(code):
        covered.append((use.start, use.end))
        depth = mod.inline_depth(use.start)
        for segs in use.paths:
            add(res.resolve(segs, mod.name, depth), use.start, use.public, segs)
    for m in INLINE_PATH.finditer(code):
        if any(a <= m.start() < b for a, b in covered):
            continue
        segs = [m.group(1)] + m.group(2)[2:].split("::")
        add(res.resolve(segs, mod.name, mod.inline_depth(m.start())), m.start(), False, segs)
    # Paths relative to a child module outside `use`: `memory::helper()` in `store`.
    children = [k[-1] for k in res.modules if len(k) == len(mod.name) + 1 and k[:-1] == mod.name]
    if children:
        rel = re.compile(r"(?<![\w$:])(" + "|".join(map(re.escape, children)) + r")::(?=[A-Za-z_])")
        for m in rel.finditer(code):
            if any(a <= m.start() < b for a, b in covered):
                continue
            add(res.resolve([m.group(1)], mod.name, mod.inline_depth(m.start())), m.start(), False)
    return found


# --------------------------------------------------------------------------- graph


def strongly_connected(nodes, succ) -> list[list]:
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    out: list[list] = []
    counter = [0]

    def visit(v) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(succ.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(max(1000, 10 * len(nodes)))
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def elementary_cycles(members: set, succ) -> list[list]:
    """For every edge inside a component, the shortest cycle through it; deduplicated."""
    seen, out = set(), []
    for s in sorted(members):
        for d in sorted(succ.get(s, ())):
            if d not in members:
                continue
            # shortest path d -> s inside the component
            prev = {d: None}
            queue = [d]
            for v in queue:
                if v == s:
                    break
                for w in sorted(succ.get(v, ())):
                    if w in members and w not in prev:
                        prev[w] = v
                        queue.append(w)
            path = [s]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])
            loop = [s] + list(reversed(path))[:-1]  # s -> d -> ... (s not repeated)
            k = loop.index(min(loop))
            key = tuple(loop[k:] + loop[:k])
            if key not in seen:
                seen.add(key)
                out.append(list(key))
    out.sort(key=lambda c: (len(c), c))
    return out


def folder_level_cycles(modules, first_edge) -> list[tuple[tuple, list, list]]:
    """Cycles between folders: inside each folder (and at the top level), every child
    module stands for its whole subtree, and the edges between different subtrees are
    kept. The folder's own file (its facade) is left out: its edges are checked file
    by file. Returns (folder, members, one edge per member pair) for each cycle."""
    folders = {name[:depth] for name in modules for depth in range(len(name))}
    found = []
    for folder in sorted(folders):
        n = len(folder) + 1
        succ: dict[tuple, set] = {}
        witness: dict[tuple, Edge] = {}
        for (s, d), e in first_edge.items():
            if s[:len(folder)] != folder or d[:len(folder)] != folder:
                continue
            if len(s) < n or len(d) < n or s[:n] == d[:n]:
                continue
            succ.setdefault(s[:n], set()).add(d[:n])
            witness.setdefault((s[:n], d[:n]), e)
        nodes = sorted({x for x in succ} | {y for ys in succ.values() for y in ys})
        for comp in strongly_connected(nodes, succ):
            if len(comp) < 2:
                continue
            members = set(comp)
            edges = [witness[(a, b)] for a in sorted(members) for b in sorted(succ.get(a, ()))
                     if b in members]
            found.append((folder, sorted(comp), edges))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent / "src",
                    help="the source tree (default: the crate's src/)")
    ap.add_argument("--dot", action="store_true", help="print the graph in Graphviz DOT")
    ap.add_argument("--edges", action="store_true", help="also list every edge with its line")
    args = ap.parse_args()
    if not args.src.is_dir():
        print(f"error: {args.src} is not a directory", file=sys.stderr)
        return 2

    def shown(path: Path) -> Path:
        """`src/a/b.rs`, relative to the directory that holds the source tree."""
        return path.relative_to(args.src.resolve().parent)

    args.src = args.src.resolve()
    modules, root = discover(args.src)
    res = Resolver(modules, root)
    first_edge: dict[tuple, Edge] = {}
    for name in sorted(modules):
        for e in edges_of(modules[name], res, shown):
            first_edge.setdefault((e.src, e.dst), e)
    succ: dict[tuple, set] = {}
    for s, d in first_edge:
        succ.setdefault(s, set()).add(d)

    for warning in res.unresolved:
        print(f"warning: {warning}", file=sys.stderr)

    cycles = [c for c in strongly_connected(list(modules), succ) if len(c) > 1]
    cycles.sort(key=lambda c: (-len(c), c))
    folder_cycles = folder_level_cycles(modules, first_edge)

    if args.dot:
        in_cycle = {n: i for i, c in enumerate(cycles) for n in c}
        print("digraph modules {")
        print("  rankdir=LR;")
        print('  node [shape=box, fontname="monospace"];')
        for name in sorted(modules):
            style = ', color=red' if name in in_cycle else ""
            print(f'  "{show(name)}" [label="{show(name)}"{style}];')
        for (s, d), e in sorted(first_edge.items()):
            red = s in in_cycle and in_cycle.get(d) == in_cycle[s]
            attrs = f' [color=red, tooltip="{shown(e.file)}:{e.line}"]' if red else ""
            print(f'  "{show(s)}" -> "{show(d)}"{attrs};')
        print("}")
        return 0

    if args.edges:
        for (s, d), e in sorted(first_edge.items()):
            print(f"{show(s)} → {show(d)}   {shown(e.file)}:{e.line}: {e.text}")
        print()

    for folder, comp, edges in folder_cycles:
        where = f"inside {show(folder)}" if folder else "at the top level"
        print(f"folder cycle {where}: {', '.join(show(n) for n in comp)}")
        for e in edges:
            print(f"    {show(e.src)} → {show(e.dst)}   {shown(e.file)}:{e.line}: {e.text}")
    if not cycles and not folder_cycles:
        print(f"module graph: {len(modules)} modules, {len(first_edge)} edges, no cycle "
              f"(files and folders)")
        return 0
    if not cycles:
        return 1

    print(f"module graph: {len(modules)} modules, {len(first_edge)} edges, "
          f"{len(cycles)} cycle{'s' if len(cycles) != 1 else ''}")
    for comp in cycles:
        members = set(comp)
        print(f"\ncycle among {len(comp)} modules: {', '.join(show(n) for n in comp)}")
        for loop in elementary_cycles(members, succ):
            print(f"  {' → '.join(show(n) for n in loop + loop[:1])}")
        print("  edges:")
        for s in comp:
            for d in sorted(succ.get(s, ())):
                if d in members:
                    e = first_edge[(s, d)]
                    print(f"    {show(s)} → {show(d)}   {shown(e.file)}:{e.line}: {e.text}")
    return 1


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--dot | head` is no error
    sys.exit(main())
