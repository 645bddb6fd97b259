"""What a reader sees of a markdown body Streamlit renders (st.error, st.info, st.caption, ...).

CommonMark through markdown-it-py (installed with rich) stands in for Streamlit's renderer; GFM's
bare-URL autolinks, which CommonMark lacks, are checked on the source text.
"""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark")


def seen(body: str) -> str:
    """The text ``body`` shows; fails when it renders a link, an image or raw HTML."""
    rendered = _MARKDOWN.renderInline(body)
    tags = re.findall(r"<[^>]+>", rendered)
    assert not [tag for tag in tags if not re.fullmatch(r"</?(em|strong|code)>", tag)], rendered
    assert "://" not in body and "www." not in body, body  # a bare URL GFM would link
    return html.unescape(re.sub(r"<[^>]+>", "", rendered))


#: Markdown an id, a file name or a span attribute could carry: an external image, a link, raw HTML,
#: LaTeX, a Streamlit colour directive and a bare URL.
INJECTED = "![x](https://evil.example/p.png) [click](https://evil.example) <img src=x> $x^2$ :red[x] www.evil.example"
