#!/usr/bin/env python3
"""Reports the cycles among the modules of every crate in the workspace.

One node per `.rs` file. An edge A -> B means A's code names a path inside module B: a `use`
(re-exports included), or a path in an expression or type (`crate::b::x`, `super::x`,
`self::child::x`, `child::x`). A name that a module only imports or re-exports leads to the module
that defines it. Declaring `mod child;` is not an edge, nor are comments, strings or method calls.

Prints one line per cycle (`<src dir>: a.rs -> b.rs -> a.rs`) and exits 1 if there is any: the
shortest cycle through each import that lies on one, so that every import to break shows up once
at least; with `--all`, every elementary cycle (many more, around the same imports).
Usage: .ci/module_cycles.py [--all] [workspace root]
"""

import re
import sys
from pathlib import Path

# Comments, strings and character literals: no paths in them count.
NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|(?<!\w)(?:b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?\'(?:\\.|[^\'\\])\')', re.S)
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;')
PUB_IN = re.compile(r'pub\s*\(\s*in\s+[^)]*\)')
TOKENS = re.compile(
    r'(?P<mod>\bmod\s+(?P<name>\w+)\s*(?P<end>[;{]))'
    r'|(?P<use>\buse\s+(?P<tree>[\w:{}\s,*]+?)\s*;)'
    r'|(?P<path>(?<![\w:$])\$?\w+(?:\s*::\s*(?:\w+|\*))+)'
    r'|(?P<open>\{)|(?P<close>\})'
)
KEYWORDS = ('crate', 'self', 'super')


def use_paths(tree):
    """The paths of a `use` tree, each with the name it binds: `a::{b, c as d}` -> ([a, b], b), ([a, c], d)."""
    tree = re.sub(r'\s+', ' ', tree).strip()
    depth, split = 0, None
    for i, ch in enumerate(tree):
        depth += {'{': 1, '}': -1}.get(ch, 0)
        if ch == '{' and depth == 1:
            split = i
            break
    if split is None:
        parts = tree.split(' as ')
        segs = [s.strip() for s in parts[0].split('::') if s.strip()]
        if segs and segs[-1] == 'self':
            segs = segs[:-1]
        return [(segs, parts[1].strip() if len(parts) > 1 else (segs[-1] if segs else None))]
    prefix = [s.strip() for s in tree[:split].split('::') if s.strip()]
    inner, items, depth, start = tree[split + 1:tree.rindex('}')], [], 0, 0
    for i, ch in enumerate(inner + ','):
        depth += {'{': 1, '}': -1}.get(ch, 0)
        if ch == ',' and depth == 0:
            if inner[start:i].strip():
                items.append(inner[start:i])
            start = i + 1
    return [(prefix + segs, name) for item in items for segs, name in use_paths(item)]


class Crate:
    """The modules of one crate root, and what each file names."""

    def __init__(self, root):
        self.files = {}      # module path (tuple) of each file -> Path
        self.modules = set()  # every module path, inline modules included
        self.bindings = {}   # module path -> {name: (scope, segments)} from its `use`s
        self.refs = []       # (file, scope, segments): every path a file names
        self.load(root, (), mod_rs=True)

    def load(self, file, module, mod_rs):
        self.files[module] = file
        self.modules.add(module)
        raw = file.read_text()
        overrides = {name: path for path, name in PATH_ATTR.findall(raw)}
        text = PUB_IN.sub('', NOISE.sub(' ', raw))
        stack, depth = [], 0  # inline modules: (name, depth at which they close)
        for m in TOKENS.finditer(text):
            scope = module + tuple(name for name, _ in stack)
            if m['mod']:
                child = scope + (m['name'],)
                self.modules.add(child)
                if m['end'] == '{':
                    stack.append((m['name'], depth))
                    depth += 1
                else:
                    self.load_child(file, module, child, mod_rs, overrides.get(m['name']))
            elif m['use']:
                for segs, name in use_paths(m['tree']):
                    if segs:
                        self.refs.append((file, scope, segs))
                        if name not in (None, '*', '_'):
                            self.bindings.setdefault(scope, {})[name] = (scope, segs)
            elif m['path']:
                segs = [s.strip() for s in m['path'].replace('$crate', 'crate').split('::')]
                self.refs.append((file, scope, segs))
            elif m['open']:
                depth += 1
            elif m['close']:
                depth -= 1
                if stack and stack[-1][1] == depth:
                    stack.pop()

    def load_child(self, parent, module, child, mod_rs, override):
        if override:
            candidates = [parent.parent / override]
        else:
            base = parent.parent if mod_rs else parent.parent / parent.stem
            base = base.joinpath(*child[len(module):-1])
            candidates = [base / f'{child[-1]}.rs', base / child[-1] / 'mod.rs']
        for path in candidates:
            if path.is_file():
                self.load(path, child, mod_rs=bool(override) or path.name == 'mod.rs')
                return

    def resolve(self, scope, segs, depth=0):
        """The module a path leads to, from `scope`; None for another crate or a local name."""
        module, rest = scope, list(segs)
        if rest[0] == 'crate':
            module, rest = (), rest[1:]
        elif rest[0] in KEYWORDS:
            while rest and rest[0] in ('self', 'super'):
                module, rest = (module[:-1] if rest[0] == 'super' else module), rest[1:]
        elif module + (rest[0],) not in self.modules and rest[0] not in self.bindings.get(module, {}):
            return None
        for i, seg in enumerate(rest):
            if module + (seg,) in self.modules:
                module += (seg,)
            elif seg in self.bindings.get(module, {}) and depth < 16:
                bound_scope, bound = self.bindings[module][seg]
                return self.resolve(bound_scope, bound + rest[i + 1:], depth + 1)
            else:
                break
        return module

    def file_of(self, module):
        while module not in self.files:
            module = module[:-1]
        return self.files[module]

    def edges(self):
        graph = {f: set() for f in self.files.values()}
        for file, scope, segs in self.refs:
            target = self.resolve(scope, segs)
            if target is not None and self.file_of(target) != file:
                graph[file].add(self.file_of(target))
        return graph


def shortest_path(graph, src, dst):
    """The shortest path of imports from `src` to `dst`, or None."""
    prev, todo = {src: None}, [src]
    for node in todo:
        for nxt in sorted(graph[node]):
            if nxt not in prev:
                prev[nxt] = node
                todo.append(nxt)
    if dst not in prev:
        return None
    path = [dst]
    while prev[path[-1]] is not None:
        path.append(prev[path[-1]])
    return path[::-1]


def cycles(graph, every):
    """The shortest cycle through each import that lies on one (so every import to break shows up),
    or with `every` each elementary cycle; each once, starting from its smallest file."""
    found = []

    def add(cycle):
        i = cycle.index(min(cycle))
        cycle = cycle[i:] + cycle[:i] + [cycle[i]]
        if cycle not in found:
            found.append(cycle)

    def walk(start, path):
        for nxt in sorted(graph[path[-1]]):
            if nxt == start:
                add(path)
            elif nxt > start and nxt not in path and shortest_path(graph, nxt, start):
                walk(start, path + [nxt])

    for a in sorted(graph):
        if every:
            walk(a, [a])
        for b in sorted(graph[a]) if not every else []:
            back = shortest_path(graph, b, a)
            if back:
                add([a] + back[:-1])
    return sorted(found)


def crate_roots(src):
    roots = [src / name for name in ('lib.rs', 'main.rs') if (src / name).is_file()]
    roots += sorted((src / 'bin').glob('*.rs')) + sorted((src / 'bin').glob('*/main.rs'))
    return roots


def main():
    args = [a for a in sys.argv[1:] if a != '--all']
    workspace = Path(args[0] if args else Path(__file__).resolve().parent.parent)
    lines = []
    for src in sorted(workspace.glob('*/src')) + sorted(workspace.glob('examples/*/src')):
        for root in crate_roots(src):
            for cycle in cycles(Crate(root).edges(), every='--all' in sys.argv):
                line = f'{src.relative_to(workspace)}: ' + ' -> '.join(str(f.relative_to(src)) for f in cycle)
                if line not in lines:
                    lines.append(line)
    print('\n'.join(lines) if lines else 'no module cycles')
    return 1 if lines else 0


if __name__ == '__main__':
    sys.exit(main())
