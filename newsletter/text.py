"""Untrusted text made safe to store, log and print: no terminal escape sequence, no control."""

from __future__ import annotations

import re

# Terminal control sequences go whole, so that only their visible text stays: CSI (``ESC [`` or
# ``\x9b``, parameters, one final byte), and the string commands OSC, DCS, SOS, PM, APC (``ESC ]``
# and the like, or their C1 forms) up to BEL or ST, then any other escape (``ESC`` + a byte).
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[ -/]*[0-~]?"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def strip_controls(text: str) -> str:
    """``text`` without terminal escape sequences and C0/C1 control characters.

    Tab and newline stay; a CR becomes a newline (alone it would overwrite a terminal line). An
    OSC 8 hyperlink keeps its label, a colour sequence disappears, a lone control is dropped.
    """
    if text.isprintable():
        return text
    text = _SEQUENCE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    return _CONTROL.sub("", text)


def one_line_text(text: str) -> str:
    """:func:`strip_controls`, then whitespace (tab, newline) collapsed: for one-line fields."""
    return " ".join(strip_controls(text).split())
