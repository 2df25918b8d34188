#!/usr/bin/env python3
"""The layout's rules (docs/ARCHITECTURE.md), checked on the sources; exits 1 on a breach.

1. The halves meet only over HTTP: src/control_plane/ and src/cli/ import nothing from the
   agent, and src/agent/ nothing from the control plane.
2. Decision code has no `.await` and no client: the pure folders (every file in them) and the
   few pure files beside the I/O they serve.
3. No import circle between the files of src/, counting every path a file names.
4. The agent's rooms keep their order: apply, then k8s, then policy, then sync, then objects
   (the slim Kubernetes types the watches read); none imports from a room above it.
5. No file over 400 lines unless its opening comment says why ("Longer than 400 lines: ...").
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
MAX_LINES = 400
# The pure wings: every file in these folders, now and to come, is decision code.
PURE_FOLDERS = [
    "src/agent/sync",
    "src/agent/policy",
    "src/control_plane/decisions",
]
# Decision code that lives beside the I/O it serves: the front door's checks, the API's
# request rules, the store's row diff, the kubectl plugin's view (each with its tests folder).
PURE_FILES = [
    "src/control_plane/http/front_door.rs",
    "src/control_plane/http/validation.rs",
    "src/control_plane/store/changes.rs",
    "src/kubectl_plugin/view.rs",
    "src/kubectl_plugin/view",
]
PURE = PURE_FOLDERS + PURE_FILES
# The agent's rooms, top to bottom: a room imports nothing from a room above it.
AGENT_ORDER = ["src/agent/apply", "src/agent/k8s", "src/agent/policy", "src/agent/sync", "src/agent/objects"]
NO_IO = re.compile(r"\.await\b|\bkube::Client\b|\bClient::|\bApi<|\breqwest::")
FORBIDDEN = {
    "src/control_plane": re.compile(r"\b(crate|wsync)::agent\b"),
    "src/cli": re.compile(r"\b(crate|wsync)::agent\b"),
    "src/agent": re.compile(r"\b(crate|wsync)::control_plane\b"),
    "src/kubectl_plugin": re.compile(r"\b(crate|wsync)::(agent|control_plane)\b"),
}


def rel(path):
    return path.relative_to(ROOT).as_posix()


def code_lines(path):
    """The file's lines without comments, so that prose may name what code may not."""
    return [line.split("//", 1)[0] for line in path.read_text().splitlines()]


def module_path(path):
    """src/agent/sync/ledger.rs -> ["agent", "sync", "ledger"]; mod.rs and lib.rs name their directory."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def files_by_module():
    return {tuple(module_path(p)): p for p in SRC.rglob("*.rs")}


def resolve(path, used, modules):
    """The file a `use` path names: the longest module prefix that is a file of its own."""
    here = module_path(path)
    words = used.split("::")
    if words[0] == "crate":
        target = words[1:]
    elif words[0] in ("self", "super"):
        target = list(here)
        while words and words[0] in ("self", "super"):
            if words[0] == "super":
                target = target[:-1]
            words = words[1:]
        target += words
    elif tuple(here + [words[0]]) in modules:
        target = list(here) + words  # a child module, named bare
    else:
        return None
    for end in range(len(target), -1, -1):
        candidate = modules.get(tuple(target[:end]))
        if candidate is not None:
            return candidate
    return None


USE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
INLINE = re.compile(r"(?<![\w:])(\w+(?:::\w+)+)")


def expand(tree):
    """`a::{b, c::{d, self}}` -> a::b, a::c::d, a::c; aliases and globs name their prefix."""
    tree = re.sub(r"\s+", "", tree)
    depth, split = 0, None
    for i, ch in enumerate(tree):
        if ch == "{" and depth == 0:
            split = i
            break
    if split is None:
        path = re.sub(r"as\w+$", "", tree.replace("::*", ""))
        return [path] if path else []
    prefix, inner = tree[:split].rstrip(":"), tree[split + 1 : tree.rindex("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    out = []
    for part in filter(None, parts):
        for sub in expand(part):
            out.append(prefix if sub == "self" else f"{prefix}::{sub}" if prefix else sub)
    return out


def production_text(path):
    """The file's code without comments, up to its first `#[cfg(test)]` (its tests)."""
    lines = []
    for line in code_lines(path):
        if re.match(r"\s*#\[cfg\(test\)\]", line):
            break
        lines.append(line)
    return "\n".join(lines)


def imports(path, modules):
    """Every file `path` names: in `use` trees, braces expanded, and in paths inline, whether
    they start at `crate`, `super`, `self` or a child module."""
    here = module_path(path)
    text = production_text(path)
    named = [p for match in USE.finditer(text) for p in expand(match.group(1))]
    rest = USE.sub("", text)
    for match in INLINE.finditer(rest):
        first = match.group(1).split("::")[0]
        if first in ("crate", "super", "self") or tuple(here + [first]) in modules:
            named.append(match.group(1))
    found = set()
    for used in named:
        target = resolve(path, used, modules)
        if target is not None and target != path:
            found.add(target)
    return found


def is_test_file(path):
    return path.name == "tests.rs" or "verifier" in path.name


def cycles(graph):
    """Every import circle, as a list of files, found by depth-first search."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def room_of(path):
    """The agent room a file belongs to, as its index in AGENT_ORDER; None outside them."""
    name = rel(path)
    for index, room in enumerate(AGENT_ORDER):
        if name == room + ".rs" or name.startswith(room + "/"):
            return index
    return None


def back_arrows(graph):
    """Imports from a lower agent room into a higher one."""
    found = []
    for path, targets in sorted(graph.items()):
        here = room_of(path)
        for target in sorted(targets):
            there = room_of(target)
            if here is not None and there is not None and there < here:
                found.append(f"back arrow: {rel(path)} imports {rel(target)} ({AGENT_ORDER[there]} is above)")
    return found


def matching_lines(prefix, pattern, what):
    base = ROOT / prefix
    paths = [base] if base.is_file() else sorted(base.rglob("*.rs"))
    return [
        f"{rel(path)}:{number}: {what}: {line.strip()}"
        for path in paths
        for number, line in enumerate(code_lines(path), 1)
        if pattern.search(line)
    ]


def main():
    problems = []
    for prefix, pattern in FORBIDDEN.items():
        problems += matching_lines(prefix, pattern, "crosses between the halves")
    for prefix in PURE:
        if not (ROOT / prefix).exists():
            problems.append(f"{prefix}: named as decision code, and not there")
        problems += matching_lines(prefix, NO_IO, "I/O in decision code")
    modules = files_by_module()
    graph = {path: imports(path, modules) for path in modules.values() if not is_test_file(path)}
    for circle in cycles(graph):
        problems.append("import circle: " + " -> ".join(rel(p) for p in circle))
    problems += back_arrows(graph)
    for path in sorted(list(SRC.rglob("*.rs")) + list((ROOT / "tests").rglob("*.rs")) + list((ROOT / "benches").rglob("*.rs"))):
        text = path.read_text()
        count = text.count("\n")
        opening = "\n".join(line for line in text.splitlines()[:15] if line.startswith("//"))
        if count > MAX_LINES and "Longer than 400 lines:" not in opening:
            problems.append(f"{rel(path)}: {count} lines, and its opening comment does not say why")
    for problem in problems:
        print(problem)
    if problems:
        sys.exit(1)
    print(f"layout: {len(graph)} files, no import circle, no back arrow, halves apart, decision code free of I/O")


if __name__ == "__main__":
    main()
