"""A report as a list of blocks, rendered to Markdown and to one self-contained HTML page.

Blocks are plain data (headings, paragraphs, tables, figures, code); the renderers are
pure functions of them, so the same blocks always give the same bytes. The HTML page
embeds figures as base64 PNG and its CSS inline: it opens without network or files.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "Block",
    "code",
    "fig",
    "heading",
    "numeric_columns",
    "para",
    "table",
    "to_html",
    "to_markdown",
]


@dataclass(frozen=True)
class Block:
    """One element of a report. ``kind``: heading, para, table, figure or code; ``style``
    of a para: "" (plain), "note", "warning" or "partial"."""

    kind: str
    text: str = ""
    level: int = 2
    style: str = ""
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    name: str = ""
    png: bytes = field(default=b"", repr=False)


def heading(text: str, level: int = 2) -> Block:
    """A section heading (level 1 is the title)."""
    return Block("heading", text=text, level=level)


def para(text: str, style: str = "") -> Block:
    """A paragraph; ``style`` marks notes, warnings and the partial banner."""
    return Block("para", text=text, style=style)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], caption: str = "") -> Block:
    """A table of strings (already formatted)."""
    return Block(
        "table",
        text=caption,
        headers=tuple(headers),
        rows=tuple(tuple(r) for r in rows),
    )


def fig(name: str, caption: str, png: bytes) -> Block:
    """A figure written as ``figures/<name>.png``."""
    return Block("figure", text=caption, name=name, png=png)


def code(text: str) -> Block:
    """A preformatted block."""
    return Block("code", text=text)


# ---------------------------------------------------------------------- Markdown


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


# A cell reads as a number: "1,234", "-0.5", "2.1e+10", "4/8", "[1, 2]", "27.5 [17, 42]".
_NUMERIC = re.compile(r"^\[?[-+−]?(\d|\.\d)")


def numeric_columns(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> tuple[bool, ...]:
    """Per column, whether every filled cell reads as a number (aligned right); text
    columns are aligned left. A column without filled cells counts as text."""
    out = []
    for j in range(len(headers)):
        cells = [r[j] for r in rows if j < len(r) and r[j].strip() not in ("", "—")]
        out.append(bool(cells) and all(_NUMERIC.match(c) for c in cells))
    return tuple(out)


def to_markdown(blocks: Sequence[Block]) -> str:
    """Markdown (GitHub flavour); figures link to ``figures/<name>.png``."""
    out: list[str] = []
    for b in blocks:
        if b.kind == "heading":
            out.append(f"{'#' * b.level} {b.text}")
        elif b.kind == "para":
            prefix = {"warning": "> **Warning:** ", "partial": "> **PARTIAL:** ", "note": "> "}.get(
                b.style, ""
            )
            out.append(prefix + b.text)
        elif b.kind == "table":
            if b.text:
                out.append(f"*{b.text}*")
                out.append("")
            num = numeric_columns(b.headers, b.rows)
            out.append("| " + " | ".join(_md_cell(h) for h in b.headers) + " |")
            out.append("|" + "|".join("--:" if n else "---" for n in num) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows)
        elif b.kind == "figure":
            out.append(f"![{b.name}](figures/{b.name}.png)")
            out.append("")
            out.append(f"*{b.text}*")
        elif b.kind == "code":
            out.append("```")
            out.append(b.text)
            out.append("```")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# -------------------------------------------------------------------------- HTML

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #eee; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
.tbl { overflow-x: auto; max-width: 100%; margin: .6em 0 1.2em; }
table { border-collapse: collapse; font-size: .85em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f4f6f8; vertical-align: bottom; } th.n, td.n { text-align: right; }
td.n { white-space: nowrap; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-style: italic; padding: .2em 0; }
figure { margin: 1em 0 1.8em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .9em; color: #444; max-width: 900px; }
code { background: #f3f4f6; padding: 0 .25em; font-size: .9em; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: .8em; }
.note { color: #444; background: #f6f8fa; border-left: 4px solid #9ab; padding: .4em .8em; }
.warning { background: #fff8e1; border-left: 4px solid #f0b400; padding: .4em .8em; }
.partial { background: #fdecea; border: 2px solid #d93025; padding: .6em .9em;
           font-weight: bold; color: #a50e0e; }
""".strip()


_CODE = re.compile(r"`([^`]+)`")


def _h(s: str) -> str:
    """Escaped text; `inline code` (Markdown backticks) becomes <code>."""
    return _CODE.sub(r"<code>\1</code>", html.escape(s, quote=True))


def to_html(blocks: Sequence[Block], title: str) -> str:
    """One self-contained HTML page (inline CSS, figures as base64 PNG)."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(title)}</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
    ]
    for b in blocks:
        if b.kind == "heading":
            out.append(f"<h{b.level}>{_h(b.text)}</h{b.level}>")
        elif b.kind == "para":
            cls = f' class="{b.style}"' if b.style else ""
            label = {"warning": "Warning: ", "partial": "PARTIAL: "}.get(b.style, "")
            out.append(f"<p{cls}>{_h(label + b.text)}</p>")
        elif b.kind == "table":
            cls = [' class="n"' if n else "" for n in numeric_columns(b.headers, b.rows)]
            out.append('<div class="tbl"><table>')
            if b.text:
                out.append(f"<caption>{_h(b.text)}</caption>")
            if any(h.strip() for h in b.headers):
                out.append(
                    "<tr>"
                    + "".join(f"<th{c}>{_h(h)}</th>" for c, h in zip(cls, b.headers, strict=True))
                    + "</tr>"
                )
            out.extend(
                "<tr>"
                + "".join(f"<td{c}>{_h(v)}</td>" for c, v in zip(cls, r, strict=True))
                + "</tr>"
                for r in b.rows
            )
            out.append("</table></div>")
        elif b.kind == "figure":
            data = base64.b64encode(b.png).decode("ascii")
            out.append(
                f'<figure id="{_h(b.name)}"><img alt="{_h(b.name)}" '
                f'src="data:image/png;base64,{data}">'
                f"<figcaption>{_h(b.text)}</figcaption></figure>"
            )
        elif b.kind == "code":
            out.append(f"<pre>{_h(b.text)}</pre>")
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"
