"""report.html: report.md made HTML by markdown-it, with the page's style, a table of contents (its sections), each
figure embedded (one file, readable offline) and each verdict cell coloured. Nothing here writes the report's
content: that is the Markdown's."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from pathlib import Path

from markdown_it import MarkdownIt

from toksel.summaries.claims import CONTROL_TEXT

STYLE = """body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;width:100%;font-size:13px;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
td.holds,td.good{background:#e6f4ea}td.fails,td.bad{background:#fce8e6;font-weight:bold}
td.inconclusive{background:#fef7e0}td.missing{background:#f1f1f1}td.exploratory{background:#e8f0fe}
img{max-width:100%;border:1px solid #eee}.reading{line-height:1.9}.token{padding:1px 2px;border-radius:3px}
blockquote{border:2px solid #d73027;background:#fce8e6;padding:.1em 1em;margin:1em 0;font-size:15px}
li{margin:.3em 0}.legend .token{margin-right:.6em}
nav.contents{border:1px solid #ddd;background:#fafafa;padding:.5em 1em;margin:1em 0}nav.contents li{margin:.1em 0}"""

# The report's own inline HTML: the calibration table's anchors and the readings' shaded tokens. Any other tag-like
# text is a word of the text ("<cls>") and is shown as such.
OWN_TAGS = re.compile(r"</?(a|span)\b")
KINDS = {"calibrated": "good", "described": "missing", "not computed": "missing"}  # cells of one word or two


def cell_kind(text: str) -> str:
    """The class that colours a table cell holding a verdict, a control's verdict or a calibration's standing."""
    text = text.strip("*")
    verdict = text.split(" (")[0]
    if verdict in ("holds", "fails", "inconclusive"):
        return verdict
    if text.startswith(("exploratory", "not tested")):
        return "exploratory"
    if text.startswith("not run"):
        return "missing"
    if text.endswith(CONTROL_TEXT[True]):  # a control that behaved (summaries.claims.control_text), or did not
        return "good"
    if text.endswith(CONTROL_TEXT[False]):
        return "bad"
    return "bad" if text.startswith("uncalibrated:") else KINDS.get(text, "")


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def page(markdown: str, title: str, images: Mapping[str, Path]) -> str:
    """The HTML page of `markdown`; images: each image link of the Markdown and the file embedded for it."""
    parser = MarkdownIt("commonmark", {"html": True}).enable("table")
    tokens = parser.parse(markdown)
    for token, following in zip(tokens, tokens[1:], strict=False):
        if token.type == "td_open" and (kind := cell_kind(following.content)):
            token.attrSet("class", kind)
        for child in token.children or []:
            if child.type == "html_inline" and not OWN_TAGS.match(child.content):
                child.type = "text"
            elif child.type == "image":
                child.attrSet("src", _data_uri(images[str(child.attrGet("src"))]))
    sections = []  # the table of contents: each section (##) with the anchor its heading gets
    for token, following in zip(tokens, tokens[1:], strict=False):
        if token.type == "heading_open" and token.tag == "h2":
            anchor = "section-" + re.sub(r"[^a-z0-9]+", "-", following.content.lower()).strip("-")
            token.attrSet("id", anchor)
            sections.append((following.content, anchor))
    body = parser.renderer.render(tokens, parser.options, {})
    if sections:  # after the title
        contents = "".join(f"<li><a href='#{anchor}'>{html.escape(text)}</a></li>" for text, anchor in sections)
        body = body.replace("</h1>\n", f"</h1>\n<nav class='contents'><b>Contents</b><ol>{contents}</ol></nav>\n", 1)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n{body}</body></html>\n")
