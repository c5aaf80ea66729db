"""A Griffe extension for the docs site: the docstrings' Sphinx roles become links, and private
base classes are not shown.

The docstrings write cross references as Sphinx roles (``:class:`Agent```,
``:meth:`~fsm_agent.Agent.abandon```, ``:func:`.shrink```), which mkdocstrings would print as
they are. When the site is built, each role is resolved in the scope of the object whose
docstring holds it and becomes an optional autorefs reference: a link when the target is on a
page of the site, else the name as code. A role naming nothing in the package (``:class:`dict```)
is code. The source docstrings stay as they are.
"""

from __future__ import annotations

import html
import re
from typing import Any

from griffe import (
    Alias,
    AliasResolutionError,
    Class,
    CyclicAliasError,
    Expr,
    Extension,
    GriffeLoader,
    Module,
    NameResolutionError,
    Object,
)

ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const|type):"
    r"`(?:(?P<title>[^`<]*?)\s*<(?P<titled>[^`>]+)>|(?P<target>[^`]+))`"
)
"""A Python-domain role: ``:class:`X```, ``:func:`~a.b```, ``:meth:`.x```, ``:mod:`t <a.b>```."""

_UNRESOLVED = (KeyError, ValueError, AliasResolutionError, CyclicAliasError, NameResolutionError)


class SphinxRoles(Extension):
    """Rewrites each docstring's roles to autorefs references and drops private bases."""

    def on_package(self, *, pkg: Module, loader: GriffeLoader, **kwargs: Any) -> None:
        """Rewrite every docstring of ``pkg`` once it is loaded, when all its names resolve."""
        objects = _objects(pkg)
        for obj in objects:
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, obj, loader, objects)
        for obj in objects:
            if isinstance(obj, Class):
                obj.bases = [base for base in obj.bases if not _private(base)]


def convert(text: str, scope: Object, loader: GriffeLoader, objects: list[Object]) -> str:
    """``text`` with each role replaced by a reference resolved from ``scope``."""

    def replace(match: re.Match[str]) -> str:
        target = (match["titled"] or match["target"]).strip()
        shown = match["title"]
        no_link = target.startswith("!")
        short = target.startswith("~")
        target = target.lstrip("!~")
        if not shown:
            shown = target.rpartition(".")[2] if short else target.lstrip(".")
        path = None if no_link else resolve(target, scope, loader, objects)
        code = f"`{shown}`"
        if path is None:
            return code
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    return ROLE.sub(replace, text)


def resolve(target: str, scope: Object, loader: GriffeLoader, objects: list[Object]) -> str | None:
    """The canonical path ``target`` names, seen from ``scope``; ``None`` when nothing in the
    loaded packages has that name.

    A dotted name is tried as a full path, then with its first part looked up in ``scope`` and
    its parents (as Python would); a name with a leading dot that does not resolve so is matched
    against the ends of every path of the package (Sphinx's search), and must match one only.
    """
    if target.startswith("."):
        if (near := resolve(target[1:], scope, loader, objects)) is not None:
            return near
        found = {_canonical(o) for o in objects if o.path.endswith(target)} - {None}
        return found.pop() if len(found) == 1 else None
    head, _, rest = target.partition(".")
    candidates = [target]
    try:
        candidates.append(f"{scope.resolve(head)}.{rest}" if rest else scope.resolve(head))
    except _UNRESOLVED:
        # A method named from another member of its class may be inherited.
        owner = scope if isinstance(scope, Class) else scope.parent
        if isinstance(owner, Class) and head in owner.all_members:
            candidates.append(f"{owner.path}.{target}")
    for path in candidates:
        try:
            found_obj = loader.modules_collection[path]
        except _UNRESOLVED:
            continue
        return _canonical(found_obj)
    return None


def _canonical(obj: Object | Alias) -> str | None:
    """The path under which the object is defined, the one its docs anchor carries."""
    try:
        return obj.final_target.path if isinstance(obj, Alias) else obj.path
    except _UNRESOLVED:
        return None


def _objects(obj: Object) -> list[Object]:
    """``obj`` and every object defined (not imported) under it."""
    found = [obj]
    for member in obj.members.values():
        if not isinstance(member, Alias):
            found.extend(_objects(member))
    return found


def _private(base: str | Expr) -> bool:
    """Whether a base class is private: its name (``_PolicyModel``) or a module on its path
    (``fsm_agent.providers._base.ProviderBase``) starts with an underscore."""
    written = base if isinstance(base, str) else getattr(base, "canonical_path", str(base))
    return any(part.startswith("_") for part in written.partition("[")[0].split("."))
