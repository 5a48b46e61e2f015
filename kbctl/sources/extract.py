"""Turn an HTML page into markdown main text (headings as `#` lines, tables kept) and a title, with trafilatura.

Options chosen against trafilatura 2.3 (see tests/test_fetch.py for the pages they were checked on):
- `output_format="markdown"`, `include_formatting=True`: headings come out as `#`/`##` lines, emphasis kept.
- `include_tables=True`: tables as markdown tables. `include_links=False`, `include_images=False`,
  `include_comments=False`: link text is kept, link targets, images and reader comments are not.
- `favor_recall=True`: without it, pages whose content is not in a <main>/<article>-like container lose their
  headings (trafilatura's recovery path keeps only paragraphs); with it, headings survive on such pages.
- `prune_xpath` (below): recall also lets navigation and footers back in, so the obvious boilerplate
  (nav, header, footer, aside, ARIA landmarks, cookie/consent banners) is removed before extraction. A page
  that has nothing else then yields no text, rather than its menu.
"""

from __future__ import annotations

import re

import lxml.etree
import lxml.html

from kbctl.errors import SourceError

__all__ = ["extract_html"]


def _has_token(attr: str, *needles: str) -> str:
    lowered = f"translate(@{attr}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"
    return " or ".join(f"contains({lowered}, '{needle}')" for needle in needles)


_BOILERPLATE_XPATH = [
    "//nav",
    "//footer",
    "//aside",
    "//header[not(ancestor::article) and not(ancestor::main)]",
    "//*[@role='navigation' or @role='banner' or @role='contentinfo' or @role='complementary' or @role='search']",
    f"//*[{_has_token('id', 'cookie', 'consent', 'gdpr')} or {_has_token('class', 'cookie', 'consent', 'gdpr')}]",
]

_TITLE_SPACE = re.compile(r"\s+")


def _html_title(html: str) -> str | None:
    """The <title> element's text, when trafilatura's metadata has no title."""
    try:
        tree = lxml.html.document_fromstring(html.encode("utf-8"), parser=lxml.html.HTMLParser(encoding="utf-8"))
    except (lxml.etree.ParserError, ValueError):
        return None
    titles = tree.xpath("//title")
    if not titles:
        return None
    title = _TITLE_SPACE.sub(" ", titles[0].text_content()).strip()
    return title or None


def extract_html(html: str, url: str) -> tuple[str, str | None]:
    """(markdown main text, title) of one page; the text is "" when the page has no main text."""
    if not html.strip():
        return "", None
    try:
        import trafilatura  # on first use: importing it costs ~0.3 s, which commands without URL sources skip

        text = trafilatura.extract(
            html,
            url=url,
            output_format="markdown",
            include_formatting=True,
            include_tables=True,
            include_links=False,
            include_images=False,
            include_comments=False,
            favor_recall=True,
            prune_xpath=_BOILERPLATE_XPATH,
        )
        metadata = trafilatura.extract_metadata(html, default_url=url)
    except (lxml.etree.LxmlError, ValueError) as exc:
        raise SourceError(f"cannot parse HTML: {exc}") from exc
    title = metadata.title if metadata is not None and metadata.title else _html_title(html)
    return unescape_markdown(text or "").strip(), title


# trafilatura escapes Markdown punctuation in running text (`VPN\_7731`, `\*`, `\[`): text that agents read and
# that exact-term matching compares. These are unescaped; `#`, `>`, `-`, `+`, `|`, `.`, a backtick and `\` stay
# escaped, since unescaped they could start a heading, quote, list, table cell or code span where the page had plain
# text.
_ESCAPED = re.compile(r"\\([_*\[\]<(){}!~])")
_CODE_SPAN = re.compile(r"(?<!\\)(`+)(?:(?!\1).)+?\1")  # opened by a backtick that is not escaped


def unescape_markdown(text: str) -> str:
    """`text` (trafilatura's Markdown) without the backslash escapes of punctuation that carries no structure,
    outside code: fenced blocks and inline code spans are left as they are."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append(line)
            continue
        if fenced or "\\" not in line:
            lines.append(line)
            continue
        parts, last = [], 0
        for code in _CODE_SPAN.finditer(line):
            parts.append(_ESCAPED.sub(r"\1", line[last : code.start()]))
            parts.append(code.group(0))
            last = code.end()
        parts.append(_ESCAPED.sub(r"\1", line[last:]))
        lines.append("".join(parts))
    return "\n".join(lines)
