"""What a reader sees of a markdown body Streamlit renders (st.error, st.info, st.caption, ...).

CommonMark through markdown-it-py (installed with rich) stands in for Streamlit's renderer. GFM's
autolinks of bare URLs, www. and e-mail addresses, which CommonMark lacks, are looked for in the
text outside code spans: Streamlit finds them after the escapes are read (checked in chromium).
"""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark")
#: What GFM links by itself in text, as its autolink-literal extension finds it.
_AUTOLINK = re.compile(r"https?://|www\.|[-.\w+]+@[-\w]+\.[-\w]|mailto:|xmpp:", re.IGNORECASE)


#: The one link a page writes itself: the trace explorer on a trace id (``waterfall.explorer_link``).
_EXPLORER_LINK = re.compile(r'<a href="traces\?trace=[0-9a-f]{32}">([0-9a-f]{32})</a>')


def seen(body: str) -> str:
    """The text ``body`` shows; fails when it renders a link (but the explorer's own, to a trace id),
    an image, raw HTML or emphasis."""
    rendered = _EXPLORER_LINK.sub(r"\1", _MARKDOWN.renderInline(body))
    tags = re.findall(r"<[^>]+>", rendered)
    assert not [tag for tag in tags if tag not in ("<code>", "</code>")], rendered
    outside_code = re.sub(r"<code>.*?</code>", " ", rendered)
    assert not _AUTOLINK.search(html.unescape(outside_code)), rendered
    return html.unescape(re.sub(r"<[^>]+>", "", rendered))


#: Markdown an id, a file name or a span attribute could carry: an external image, a link, raw HTML,
#: LaTeX, a Streamlit colour directive, a bare URL, www. and an e-mail address.
INJECTED = ("![x](https://evil.example/p.png) [click](https://evil.example) <img src=x> $x^2$ :red[x] "
            "https://evil.example/a www.evil.example me@evil.example **bold** x`y``z")
