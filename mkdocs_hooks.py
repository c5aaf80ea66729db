"""mkdocs hooks: the docs pages show and link the generated diagrams from ``diagrams/`` (outside
``docs/``) through ``../diagrams/`` links, which also work when the pages are read on their own.
The site gets those files (the pictures and their DOT and Mermaid sources) and the links point at
them. Each diagram is shown at its natural size, in a box that scrolls sideways when the picture
is wider than the page's column (``docs/stylesheets/diagrams.css``): shrunk to the column, the
largest ones would have text under 9 px."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

DIAGRAMS = Path(__file__).resolve().parent / "diagrams"
SUFFIXES = (".svg", ".dot", ".mmd")
_PICTURE = re.compile(r'<p>\s*(<img\b[^>]*\bsrc="([^"]*?([^"/]+\.svg))"[^>]*>)\s*</p>')


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


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    """Put each generated diagram the page shows in a ``diagram`` box (see the module)."""

    def boxed(found: re.Match[str]) -> str:
        if not (DIAGRAMS / found[3]).is_file():
            return found[0]
        return f'<div class="diagram">{found[1]}</div>'

    return _PICTURE.sub(boxed, html)
