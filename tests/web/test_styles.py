"""Every text box on the web pages is styled like the others (issue 29 item 10: the manage
page's "Your name" box was left to the browser's default look)."""

from __future__ import annotations

import re
from pathlib import Path

WEB = Path(__file__).resolve().parent.parent.parent / "templates" / "web"


def test_every_kind_of_text_box_has_the_box_style() -> None:
    css = (WEB / "web.css").read_text(encoding="utf-8")
    styled = set(re.findall(r"input\[type=(\w+)\]", css.split("\n@media", 1)[0]))
    dark = set(re.findall(r"input\[type=(\w+)\]", css.split("\n@media", 1)[1]))
    kinds = {
        kind
        for page in WEB.glob("*.html")
        for kind in re.findall(r'<input type="(\w+)"', page.read_text(encoding="utf-8"))
    } - {"hidden", "checkbox", "radio", "submit"}
    assert "text" in kinds  # the manage page's name
    assert kinds <= styled, kinds - styled
    assert kinds <= dark, kinds - dark
