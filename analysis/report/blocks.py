"""A report as a list of blocks, rendered to Markdown and to one self-contained HTML page.

Blocks are plain data (headings, paragraphs, tables, figures, code, the summary box, the
table of contents, folded code); the renderers are pure functions of them, so the same
blocks always give the same bytes. The HTML page embeds figures as base64 PNG and its CSS
inline: it opens without network or files. Headings of level 2 get stable ids (from their
text) that the table of contents links to.
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
    "folded",
    "heading",
    "numeric_columns",
    "para",
    "summary_box",
    "table",
    "to_html",
    "to_markdown",
    "toc",
]


@dataclass(frozen=True)
class Block:
    """One element of a report. ``kind``: heading, para, table, figure, code, summary,
    toc or details; ``style`` of a para: "" (plain), "note", "warning" or "partial"."""

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


def folded(title: str, text: str) -> Block:
    """A preformatted block folded away under ``title`` (HTML ``<details>``)."""
    return Block("details", text=text, name=title)


def fold(title: str) -> Block:
    """Opens a folded part (HTML ``<details>``) titled ``title``; :func:`end_fold` closes it."""
    return Block("fold", text=title)


def end_fold() -> Block:
    """Closes the folded part opened by :func:`fold`."""
    return Block("endfold")


def summary_box(title: str, lines: Sequence[str], warnings: Sequence[str] = ()) -> Block:
    """The box that opens the report: the answer as ``lines``, then ``warnings``."""
    return Block(
        "summary", text=title, rows=(tuple(lines), tuple(warnings)), headers=("answer", "warn")
    )


def toc() -> Block:
    """The table of contents: every level-2 heading after it, linked."""
    return Block("toc", text="Contents")


def _slug(text: str, taken: set[str]) -> str:
    """GitHub's anchor of a heading (lower case, punctuation dropped, spaces → "-", "-1"…
    on repeats), so report.md's contents links work where GitHub renders it too."""
    base = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-") or "section"
    slug, n = base, 1
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def heading_ids(blocks: Sequence[Block]) -> dict[int, str]:
    """Index of each level-2 heading in ``blocks`` → its id (unique, stable)."""
    taken: set[str] = {"summary", "contents"}
    return {
        i: _slug(b.text, taken)
        for i, b in enumerate(blocks)
        if b.kind == "heading" and b.level == 2
    }


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
    ids = heading_ids(blocks)
    for i, b in enumerate(blocks):
        if b.kind == "heading":
            out.append(f"{'#' * b.level} {b.text}")
        elif b.kind == "summary":
            lines, warns = b.rows
            out.append(f"> **{b.text}**")
            out.append(">")
            out.extend(f"> - {line}" for line in lines)
            out.extend(f"> - **Warning:** {w}" for w in warns)
        elif b.kind == "toc":
            out.append(
                f"**{b.text}:** "
                + " · ".join(f"[{blocks[j].text}](#{ids[j]})" for j in sorted(ids) if j > i)
            )
        elif b.kind == "fold":
            out.append(f"<details><summary>{html.escape(b.text)}</summary>")
        elif b.kind == "endfold":
            out.append("</details>")
        elif b.kind == "details":
            out.append(f"<details><summary>{html.escape(b.name)}</summary>")
            out.append("")
            out.append("```")
            out.append(b.text)
            out.append("```")
            out.append("")
            out.append("</details>")
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
h2 { font-size: 1.25em; margin: 1.3em 0 .5em; border-bottom: 1px solid #eee; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
.tbl { overflow-x: auto; max-width: 100%; margin: .6em 0 1.2em; }
table { border-collapse: collapse; font-size: .85em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f4f6f8; vertical-align: bottom; } th.n, td.n { text-align: right; }
td.s { white-space: nowrap; } td.n { white-space: nowrap; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-style: italic; padding: .2em 0; }
figure { margin: 1em 0 1.8em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .9em; color: #444; max-width: 900px; }
code { background: #f3f4f6; padding: 0 .25em; font-size: .9em; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: .8em; }
.note { color: #444; background: #f6f8fa; border-left: 4px solid #9ab; padding: .4em .8em; }
.warning { background: #fff8e1; border-left: 4px solid #f0b400; padding: .4em .8em; }
.summary { background: #eef5ff; border: 2px solid #3b78c2; border-radius: 6px;
           padding: .3em 1em .5em; margin: .8em 0; }
.summary h2 { margin: .3em 0; border: 0; font-size: 1.15em; }
.summary ul { margin: .2em 0; padding-left: 1.2em; } .summary li.warn { color: #8a5a00; }
.toc { font-size: .9em; margin: .6em 0 1em; line-height: 1.7; }
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr));
        gap: 0 1.2em; } .figs figure { margin: .6em 0 1em; } .figs figcaption { font-size: .8em; }
details { margin: .6em 0; } details summary { cursor: pointer; font-weight: bold; }
.partial { background: #fdecea; border: 2px solid #d93025; padding: .6em .9em;
           font-weight: bold; color: #a50e0e; }
""".strip()


_CODE = re.compile(r"`([^`]+)`")


def _h(s: str) -> str:
    """Escaped text; `inline code` (Markdown backticks) becomes <code>."""
    return _CODE.sub(r"<code>\1</code>", html.escape(s, quote=True))


def _short(cell: str) -> str:
    """The class of a short text cell: kept on one line (a table of many short cells
    would otherwise wrap every row into two)."""
    return ' class="s"' if len(cell) <= 24 else ""


def _figure_run(blocks: Sequence[Block], i: int) -> tuple[int, int]:
    """[start, end) of the run of consecutive figure blocks holding block ``i``."""
    lo, hi = i, i + 1
    while lo > 0 and blocks[lo - 1].kind == "figure":
        lo -= 1
    while hi < len(blocks) and blocks[hi].kind == "figure":
        hi += 1
    return lo, hi


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
    ids = heading_ids(blocks)
    for i, b in enumerate(blocks):
        if b.kind == "heading":
            hid = f' id="{ids[i]}"' if i in ids else ""
            out.append(f"<h{b.level}{hid}>{_h(b.text)}</h{b.level}>")
        elif b.kind == "summary":
            lines, warns = b.rows
            out.append(f'<section class="summary" id="summary"><h2>{_h(b.text)}</h2><ul>')
            out.extend(f"<li>{_h(line)}</li>" for line in lines)
            out.extend(f'<li class="warn">Warning: {_h(w)}</li>' for w in warns)
            out.append("</ul></section>")
        elif b.kind == "toc":
            links = " · ".join(
                f'<a href="#{ids[j]}">{_h(blocks[j].text)}</a>' for j in sorted(ids) if j > i
            )
            out.append(f'<nav class="toc" id="contents"><b>{_h(b.text)}:</b> {links}</nav>')
        elif b.kind == "details":
            out.append(f"<details><summary>{_h(b.name)}</summary><pre>{_h(b.text)}</pre></details>")
        elif b.kind == "fold":
            out.append(f"<details><summary>{_h(b.text)}</summary>")
        elif b.kind == "endfold":
            out.append("</details>")
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
                + "".join(f"<td{c or _short(v)}>{_h(v)}</td>" for c, v in zip(cls, r, strict=True))
                + "</tr>"
                for r in b.rows
            )
            out.append("</table></div>")
        elif b.kind == "figure":
            run = _figure_run(blocks, i)
            if run[0] == i and run[1] - run[0] > 1:
                out.append('<div class="figs">')
            data = base64.b64encode(b.png).decode("ascii")
            out.append(
                f'<figure id="{_h(b.name)}"><img alt="{_h(b.name)}" '
                f'src="data:image/png;base64,{data}">'
                f"<figcaption>{_h(b.text)}</figcaption></figure>"
            )
            if run[1] - 1 == i and run[1] - run[0] > 1:
                out.append("</div>")
        elif b.kind == "code":
            out.append(f"<pre>{_h(b.text)}</pre>")
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"
