"""The ``topic add: <sentence>`` and ``topic remove: <n>`` email commands (issue 45).

From headers can be forged, so neither command changes anything by itself: like ``subscribe``,
the answer is a mail to the address's owner with a signed link (:data:`Purpose.OWN_TOPIC
<newsletter.services.link_tokens.Purpose>`, three days) whose page has one button. The command travels inside
the link (no pending row), with the reader's id and address binding, so a link works for that
reader only. The answer quotes nothing of the request but the sentence itself, checked first
(:func:`~newsletter.subscribe.own_topics.check_sentence`: one line, no HTML, no links); a command that
cannot be used is answered with the help text and a fixed reason.

``topic add: <sentence> like: 2401.04088 2312.00752`` names example papers after ``like:``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from newsletter.models import OwnTopic, Subscriber
from newsletter.services.link_tokens import Purpose, TokenError
from newsletter.subscribe.own_topics import OwnTopicEditor, OwnTopicRefused
from newsletter.subscribe.rules import LIVE

_COMMAND = re.compile(
    r"^\s*(?:(?:re|fwd?|aw|wg)\s*:\s*)*[-/]?\s*topic\s+(add|remove)\b\s*:?\s*(.*)$",
    re.IGNORECASE,
)
_LIKE = re.compile(r"\s+like\s*:\s*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class OwnTopicCommand:
    """A ``topic add``/``topic remove`` command as its confirmation link carries it."""

    action: str
    """``add`` or ``remove``."""
    text: str
    """The sentence to add, or the sentence of the topic to remove."""
    examples: tuple[str, ...] = ()
    topic_id: int | None = None
    """``remove``: the topic's id (a removed or changed topic is not removed again)."""
    text_hash: str = ""

    def payload(self, subscriber: Subscriber, binding: str) -> dict[str, Any]:
        """What the confirmation link signs."""
        out: dict[str, Any] = {"s": subscriber.id, "h": binding, "a": self.action}
        out["t"] = self.text
        if self.examples:
            out["x"] = list(self.examples)
        if self.topic_id is not None:
            out["i"], out["k"] = self.topic_id, self.text_hash
        return out

    @classmethod
    def read(cls, data: object) -> OwnTopicCommand:
        """The command a link's payload names; raises :class:`TokenError`."""
        if not isinstance(data, dict) or data.get("a") not in ("add", "remove"):
            raise TokenError("this link is not valid")
        text, examples = data.get("t"), data.get("x", [])
        tid, key = data.get("i"), data.get("k", "")
        if (
            not isinstance(text, str)
            or not isinstance(examples, list)
            or not all(isinstance(x, str) for x in examples)
            or not (tid is None or isinstance(tid, int))
            or not isinstance(key, str)
            or (data["a"] == "remove" and tid is None)
        ):
            raise TokenError("this link is not valid")
        return cls(data["a"], text, tuple(examples), tid, key)

    def apply(self, editor: OwnTopicEditor, subscriber: Subscriber) -> str:
        """Carry the command out for ``subscriber``; what the page says. Adding the same
        sentence twice is one topic; a topic already removed or changed is left alone. Raises
        :class:`OwnTopicRefused`."""
        if self.action == "add":
            editor.add(subscriber, self.text, self.examples)
            return "Your own topic was added; it shows in your next digest."
        mine = {o.id: o for o in editor.mine(subscriber)}
        found = mine.get(self.topic_id or 0)
        if found is None or found.text_hash != self.text_hash:
            return "That topic was removed or changed already; nothing was done."
        editor.remove(subscriber, found.id)
        return "Your own topic was removed."


def parse_own_command(subject: str, body: str) -> tuple[str, str] | None:
    """``(add|remove, the rest of the line)`` when the subject, else the first non-empty line
    of the body, is a ``topic add``/``topic remove`` command; the rest as written."""
    candidates = [subject]
    for line in body.splitlines():
        if line.strip():
            candidates.append(line)
            break
    for text in candidates:
        m = _COMMAND.match(text)
        if m is not None:
            return m.group(1).lower(), m.group(2).strip()
    return None


def add_command(editor: OwnTopicEditor, subscriber: Subscriber, rest: str) -> OwnTopicCommand:
    """``topic add: <sentence> [like: ids]`` checked as the manage page checks it (and the
    limit on topics); raises :class:`OwnTopicRefused`."""
    parts = _LIKE.split(rest, maxsplit=1)
    sentence, examples = parts[0], (parts[1] if len(parts) > 1 else "")
    text, ids = editor.check(sentence, examples)
    if len(editor.mine(subscriber)) >= editor.settings.max:
        raise OwnTopicRefused("text", "you have the most own topics allowed: remove one first")
    return OwnTopicCommand("add", text, ids)


def remove_command(editor: OwnTopicEditor, subscriber: Subscriber, rest: str) -> OwnTopicCommand:
    """``topic remove: <n>``: the reader's n-th own topic; raises :class:`OwnTopicRefused`."""
    if not editor.on:
        raise OwnTopicRefused("topic", "own topics are turned off on this service")
    mine: tuple[OwnTopic, ...] = editor.mine(subscriber)
    n = rest.strip().lstrip("#")
    if not n.isdigit() or not 1 <= int(n) <= len(mine):
        raise OwnTopicRefused("topic", "no own topic has that number (write topic remove: 1)")
    own = mine[int(n) - 1]
    return OwnTopicCommand("remove", own.text, own.examples, own.id, own.text_hash)


def read_own_token(service: Any, token: str) -> tuple[OwnTopicCommand, Subscriber | None]:
    """The command a confirmation link carries and its reader (``None``: erased, or no longer
    subscribed). Raises :class:`TokenError`."""
    data = service.tokens.read(Purpose.OWN_TOPIC, token)
    command = OwnTopicCommand.read(data)
    assert isinstance(data, dict)
    sid = data.get("s")
    sub = service.store.subscriber_by_id(sid) if isinstance(sid, int) else None
    if sub is None or not service.tokens.made_for(data, sub.email) or sub.status not in LIVE:
        return command, None
    return command, sub
