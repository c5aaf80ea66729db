"""mkdocs hooks: the docs pages show the generated diagrams from ``diagrams/`` (outside
``docs/``) through ``../diagrams/`` links, which also work when the pages are read on their own.
The site gets those files and the links point at them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

DIAGRAMS = Path(__file__).resolve().parent / "diagrams"


def on_files(files: Files, config: Any) -> Files:
    """Add every generated diagram as ``diagrams/NAME`` of the site."""
    for path in sorted(DIAGRAMS.glob("*.svg")):
        files.append(
            File(
                f"diagrams/{path.name}",
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
