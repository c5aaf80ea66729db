"""mkdocs hooks: the docs pages show and link the generated diagrams from ``diagrams/`` (outside
``docs/``) through ``../diagrams/`` links, which also work when the pages are read on their own.
The site gets those files (the pictures and their DOT and Mermaid sources) and the links point at
them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

DIAGRAMS = Path(__file__).resolve().parent / "diagrams"
SUFFIXES = (".svg", ".dot", ".mmd")


def on_files(files: Files, config: Any) -> Files:
    """Add every generated diagram and its source as ``diagrams/NAME`` of the site."""
    for path in sorted(DIAGRAMS.rglob("*")):
        if path.suffix not in SUFFIXES:
            continue
        files.append(
            File(
                path.relative_to(DIAGRAMS.parent).as_posix(),
                str(DIAGRAMS.parent),
                config["site_dir"],
                config["use_directory_urls"],
            )
        )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point a top-level page's ``../diagrams/`` links at the diagrams the site holds."""
    if "/" in page.file.src_uri:
        return markdown
    return markdown.replace("](../diagrams/", "](diagrams/")
