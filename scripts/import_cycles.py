"""An import-linter contract: no import cycle between the package's modules (``make lint``).

Why a contract of our own: the layers contract checks imports between layers, not within one (``lerobot.integration``
and ``lerobot.mixture`` imported each other through imports inside functions), and import-linter's own
``acyclic_siblings`` looks at sibling packages, so a cycle through a package's ``__init__`` (``sdk`` ->
``sdk.factories`` -> ``sdk.serve`` -> ``sdk``) escapes it. This one takes every module as a node and every import
grimp finds as an edge, imports inside functions included; imports under ``if TYPE_CHECKING:`` are left out (they
never run: the usual way to name a type from a module that imports yours). The graph import-linter hands a contract
keeps them (the layers contract counts them), so this one builds its own without them.
"""

from __future__ import annotations

import itertools
from collections import deque

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.application import contract_utils
from importlinter.application.contract_utils import AlertLevel


class NoImportCycles(Contract):
    """No module imports, directly or through others, a module that imports it.

    Options:
        ignore_imports: ``importer -> imported`` imports left out of the check, each with a comment saying why and
            until when; one that no longer exists is an error (the exception is then to be removed).
    """

    type_name = "no_import_cycles"

    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        """Find the strongly connected components of the module graph without ``TYPE_CHECKING`` imports.

        Args:
            graph: import-linter's graph (unused beyond its root packages: it holds ``TYPE_CHECKING`` imports).
            verbose: import-linter's ``--verbose``.

        Returns:
            Kept when no component holds two modules; else, per cycle, its modules and one shortest loop through
            them with each import's line.
        """
        roots = self.session_options["root_packages"]
        runtime = grimp.build_graph(*roots, exclude_type_checking_imports=True, cache_dir=None)
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=runtime,
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]  # a field, read as its parsed value
            unmatched_alerting=AlertLevel.ERROR,
        )
        edges = {m: sorted(runtime.find_modules_directly_imported_by(m)) for m in sorted(runtime.modules)}
        cycles = []
        for component in strongly_connected(edges):
            if len(component) < 2:
                continue
            loop = shortest_loop(edges, set(component), min(component))
            steps = [(a, b, _lines(runtime, a, b)) for a, b in itertools.pairwise(loop)]
            cycles.append({"modules": sorted(component), "loop": steps})
        output.verbose_print(verbose, f"{len(cycles)} import cycle(s) among {len(edges)} modules")
        return ContractCheck(
            kept=not cycles,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"cycles": cycles},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        """Each cycle: its modules, one loop through them with the importing lines, and what to do."""
        roots = self.session_options["root_packages"]

        def short(module: str) -> str:  # the name inside its root package: lines stay readable
            root = next((r for r in roots if module.startswith(f"{r}.")), None)
            return module if root is None else module[len(root) + 1 :]

        for cycle in check.metadata["cycles"]:
            names = ", ".join(map(short, cycle["modules"]))
            output.print_error(f"Import cycle among {len(cycle['modules'])} modules of {', '.join(roots)}: {names}")
            for importer, imported, lines in cycle["loop"]:
                where = ", ".join(map(str, lines))
                output.print_error(f"  {short(importer)} -> {short(imported)} (line {where})", bold=False)
            output.new_line()
        output.print_error(
            "Move what the modules share into a module below them, or pass it as an argument; an import inside a "
            "function counts, one under `if TYPE_CHECKING:` does not.",
            bold=False,
        )


def _lines(graph: grimp.ImportGraph, importer: str, imported: str) -> list[int]:
    return sorted({d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)})


def strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit).

    Args:
        edges: ``{module: modules it imports}``, every module a key.

    Returns:
        The components, each a list of modules; a module in no cycle is a component of its own.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(component)
    return out


def shortest_loop(edges: dict[str, list[str]], component: set[str], start: str) -> list[str]:
    """The shortest chain of imports from ``start`` back to itself inside one strongly connected component.

    Args:
        edges: ``{module: modules it imports}``.
        component: The component's modules (``start`` among them).
        start: Where the loop starts and ends.

    Returns:
        ``[start, ..., start]``.
    """
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in edges[node]:
            if child not in component:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise ValueError(f"{start} is in no loop of its component")
