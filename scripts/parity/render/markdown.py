"""Any text as one inert line of Markdown (:func:`md_text`): what every page uses for text
it did not write itself (a remote host's description, a config label, a framework's error
message), so that a newline, a ``|`` or a ``#`` in it cannot break a table, start a
heading or inject HTML. ``tables.markdown_to_html`` reads the escapes back.
"""

from __future__ import annotations

import re

#: Characters :func:`md_text` escapes with a backslash wherever they stand: Markdown's
#: code, emphasis, link and table syntax, HTML tags and entities, strike-through.
_MD_ALWAYS = frozenset("\\`*[]<>|&~")
#: Line breaks (one space each in :func:`md_text`'s output) and other characters it shows
#: as U+FFFD: C0 and C1 controls, DEL, and the bidirectional overrides that make text read
#: other than it is.
LINE_BREAKS = frozenset("\n\r\t\v\f\x85\u2028\u2029")
_MD_HIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: A line that starts so is a heading, a list item, a thematic break or a setext underline
#: (a quote's ``>`` is escaped anyway); a number such as ``-1.5`` or ``1.5`` is none.
_MD_LINE_START = re.compile(r"^(?:#{1,6}(?=\s|$)|[-+](?=\s|$)|[-=]+\s*$|\d{1,9}[.)](?=\s|$))")


def md_text(value, cell: bool = False) -> str:
    """``value`` (any object; None is ``""``) as inert inline Markdown that reads as the
    text itself: one line (a line break is a space; other control characters and
    bidirectional overrides are U+FFFD), every character Markdown, GitHub's tables or HTML
    would read as syntax escaped with a backslash (``\\ ` * [ ] < > | & ~``, an ``_`` that
    is not inside a word, a leading ``# ``, ``- ``, ``+ ``, ``1. `` or ``---``). Safe in a table
    cell, a list item, a heading or a paragraph; :func:`markdown_to_html` shows it as the
    text. For any text this workflow did not write itself: what a remote host reports
    (its host name, system, CPU, error messages), what a trace or probe result records
    (host, CPU, versions, a framework's message), free text of a config. ``cell``: the
    text is a table cell, which never starts a line (a lone ``-`` stays as it is)."""
    if value is None:
        return ""
    text = (
        value
        if isinstance(value, str)
        else (repr(value) if isinstance(value, float) else str(value))
    )
    text = "".join(" " if c in LINE_BREAKS else c for c in text)
    text = _MD_HIDDEN.sub("\ufffd", text)
    out = []
    for i, c in enumerate(text):
        if c in _MD_ALWAYS:
            out.append("\\" + c)
        elif c == "_" and not (
            0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        ):
            out.append("\\_")
        else:
            out.append(c)
    escaped = "".join(out)
    m = None if cell else _MD_LINE_START.match(escaped)
    if m:
        k = len(m.group()) - len(m.group().lstrip("0123456789"))
        escaped = escaped[:k] + "\\" + escaped[k:]
    return escaped
