#!/usr/bin/env python3
"""Fails when an #include under src/ or include/ runs against coil's layers.

The layers and what each may include are the table between the `layers:` markers of
docs/architecture.md ("Layers"): this script reads it from there, so the rule and its
documentation are one text. A file belongs to the longest folder of the table that holds it;
it may include files of its own folder and of the folders its row lists, nothing else. Also
checked: every file under src/ and include/ belongs to a row (a new folder needs one), every
quoted include resolves to a file of the tree (the directory of the includer, src/ or include/:
the include paths of coil's targets), every folder a row names exists, and the table has no
cycle. Includes inside raw string literals (the sources of generated benchmark and probe
modules) are not coil's own and are skipped.

    python3 scripts/check_layers.py          (ctest -L style runs it as `layers`)
    python3 scripts/check_layers.py --graph  (prints the folder-level include graph)
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DOC = "docs/architecture.md"
BEGIN, END = "<!-- layers: begin", "<!-- layers: end"

RAW_STRING = re.compile(r'R"([^(\s\\]{0,16})\((.*?)\)\1"', re.S)
INCLUDE = re.compile(r'\s*#\s*include\s*"([^"]+)"')
FOLDER = re.compile(r"`([^`]+)`")


def read_table():
    """{folder: set of folders it may include}, from the doc's table."""
    text = open(os.path.join(ROOT, DOC), encoding="utf-8").read()
    try:
        start = text.index(BEGIN)
        end = text.index(END, start)
    except ValueError:
        sys.exit(f"{DOC}: no table between '{BEGIN}' and '{END}' markers")
    table = {}
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        folder = FOLDER.findall(cells[0])
        if len(folder) != 1:
            sys.exit(f"{DOC}: a layer row names one folder: {line.strip()}")
        table[folder[0].rstrip("/")] = {f.rstrip("/") for f in FOLDER.findall(cells[-1])}
    if not table:
        sys.exit(f"{DOC}: the layers table has no rows")
    return table


def layer_of(path, table):
    best = None
    for folder in table:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def find_cycle(table):
    state = {}

    def visit(node, stack):
        state[node] = 1
        for dep in sorted(table.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep] if dep in stack else [node, dep]
            if dep not in state:
                cycle = visit(dep, stack + [dep])
                if cycle:
                    return cycle
        state[node] = 2
        return None

    for node in sorted(table):
        if node not in state:
            cycle = visit(node, [node])
            if cycle:
                return cycle
    return None


def sources():
    for top in ("include", "src"):
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs.sort()
            for f in sorted(files):
                if f.endswith((".h", ".cpp", ".c", ".hpp")):
                    yield os.path.relpath(os.path.join(d, f), ROOT)


def includes(path):
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    # Blank raw strings but keep their newlines, so that line numbers stay right.
    text = RAW_STRING.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for number, line in enumerate(text.split("\n"), 1):
        m = INCLUDE.match(line)
        if m:
            yield number, m.group(1)


def resolve(path, inc):
    for cand in (os.path.join(os.path.dirname(path), inc), os.path.join("src", inc),
                 os.path.join("include", inc)):
        cand = os.path.normpath(cand)
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def main():
    table = read_table()
    errors = []
    for folder, deps in sorted(table.items()):
        if not os.path.isdir(os.path.join(ROOT, folder)):
            errors.append(f"{DOC}: layer {folder} is not a folder")
        for dep in sorted(deps - set(table)):
            errors.append(f"{DOC}: {folder} may include {dep}, which has no row")
    cycle = find_cycle(table)
    if cycle:
        errors.append(f"{DOC}: the layers table has a cycle: {' -> '.join(cycle)}")

    graph = {}
    for path in sources():
        layer = layer_of(path, table)
        if layer is None:
            errors.append(f"{path}: in no layer of {DOC} (add its folder to the table)")
            continue
        for number, inc in includes(path):
            target = resolve(path, inc)
            if target is None:
                errors.append(f'{path}:{number}: #include "{inc}" is not a file under its '
                              "folder, src/ or include/")
                continue
            to = layer_of(target, table)
            if to is None or to == layer:
                continue
            graph.setdefault((layer, to), []).append(f"{path}:{number}")
            if to not in table[layer]:
                errors.append(f'{path}:{number}: #include "{inc}": {layer} may not include '
                              f"{to} (allowed: {', '.join(sorted(table[layer])) or 'nothing'}; "
                              f"{DOC}, Layers)")

    if "--graph" in sys.argv:
        for (a, b), where in sorted(graph.items()):
            print(f"{a} -> {b}  ({len(where)})")
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} layering error(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
