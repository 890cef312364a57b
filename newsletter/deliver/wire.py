"""Message bodies encoded once for every reader who shares a rendering, with slots for theirs.

Readers whose digests have the same sections (the same topics, no votes) get the same message
but for a few values: their address, their links, the prefix of their more/less links. Their
shared rendering arrives here as pieces, text and :class:`Slot`, and is encoded once: the HTML
part as the 7bit body :func:`~newsletter.deliver.mime.as_7bit` writes (CRLF line ends, lines
checked against 998 octets, dot lines found), the text part line by line in quoted-printable,
as :class:`~newsletter.deliver.mime.QuotedPrintable` encodes it. A reader's body is then a join
of the encoded pieces with their values (:meth:`WireHtml.fill`, :meth:`WireText.fill`): the
bytes :class:`~newsletter.deliver.mime.MimeWriter` writes for their message rendered alone
(``tests/edition/test_shared_messages.py`` holds them equal), without a pass over the 60 KB.

What a slot's value can do to the lines around it is checked per reader: a value with a line
break, a non-ASCII character in the HTML, or an HTML line pushed past 998 octets makes
:meth:`WireHtml.fill` return ``None``, and the caller renders that reader's message alone.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from newsletter.deliver.mime import DOT_LINE, QuotedPrintable, longest_line_over, qp_line
from newsletter.models import Slot

MAX_OCTETS = 998
"""A line of a 7bit body: at most 998 octets before its CRLF (RFC 5322 2.1.1)."""

_QP = QuotedPrintable()
"""Whole lines of shared text parts, encoded with a paragraph cache (they repeat across shapes)."""
_QP_LINE = functools.lru_cache(maxsize=16384)(qp_line)
_ENCODED: dict[str, bytes] = {}
"""Static HTML pieces as encoded, shared by the shapes that hold them: the pieces between two
more/less links are a section's cards, the same in every shape with that section."""
_ENCODED_BYTES = 8_000_000
"""Bytes of pieces the table keeps (it starts afresh beyond; the shapes keep theirs)."""
_encoded_bytes = 0


def _encoded(piece: str) -> bytes:
    """``piece`` with CRLF line ends as ASCII bytes, one object for every shape that has it."""
    global _encoded_bytes
    found = _ENCODED.get(piece)
    if found is None:
        if _encoded_bytes > _ENCODED_BYTES:
            _ENCODED.clear()
            _encoded_bytes = 0
        found = _ENCODED[piece] = piece.replace("\n", "\r\n").encode("ascii")
        _encoded_bytes += len(found)
    return found


Pieces = Sequence[str | Slot]


class _Run:
    """Static pieces joined by one slot's value (a section's more/less link prefix)."""

    __slots__ = ("code", "parts")

    def __init__(self, code: str, parts: tuple[bytes, ...]) -> None:
        self.code = code
        self.parts = parts


class WireHtml:
    """The HTML part as a 7bit body, encoded once: CRLF bytes and slots."""

    __slots__ = ("dotted", "line_starts", "lines", "segments", "size")

    def __init__(
        self,
        segments: tuple[bytes | Slot | _Run, ...],
        lines: tuple[tuple[int, tuple[str, ...]], ...],
        line_starts: frozenset[str],
        dotted: bool,
        size: int,
    ) -> None:
        self.segments = segments
        self.lines = lines
        """Per distinct set of slots sharing a line: the longest static length of such a line."""
        self.line_starts = line_starts
        """Slots that begin a line (a value starting with a dot makes a dot line)."""
        self.dotted = dotted
        self.size = size

    @classmethod
    def build(cls, pieces: Pieces) -> WireHtml | None:
        """The encoded part, or ``None`` when the shared text cannot go 7bit (non-ASCII, or a
        line over 998 octets whatever the readers' values) or ends in a slot."""
        if not pieces or isinstance(pieces[-1], Slot):
            return None
        if not pieces[-1].endswith("\n"):
            pieces = [*pieces[:-1], pieces[-1] + "\n"]  # a 7bit body ends with a line break
        longest: dict[tuple[str, ...], int] = {}
        starts: set[str] = set()
        dotted = False
        static = 0  # the current line: its static length and its slots
        codes: list[str] = []
        size = 0
        segments: list[bytes | Slot | _Run] = []
        for piece in pieces:
            if isinstance(piece, Slot):
                if static == 0:  # nothing but slots before it: it may begin the line
                    starts.add(piece.code)
                codes.append(piece.code)
                segments.append(piece)
                continue
            if not piece.isascii() or "\r" in piece:
                return None
            size += len(piece)
            segments.append(_encoded(piece))
            first = piece.find("\n")
            # A dot after nothing but slots may begin the line (a reader's value may be empty).
            if static == 0 and piece.startswith("."):
                dotted = True
            if first < 0:
                static += len(piece)
                continue
            if not _close(longest, static + first, codes):
                return None
            last = piece.rfind("\n")
            inner = piece[first + 1 : last + 1]  # whole lines
            if longest_line_over(inner, MAX_OCTETS):
                return None
            dotted = dotted or inner.startswith(".") or DOT_LINE.search(inner) is not None
            static, codes = len(piece) - last - 1, []
            if static and piece[last + 1] == ".":
                dotted = True
        if not _close(longest, static, codes):
            return None
        return cls(
            _runs(segments),
            tuple((n, c) for c, n in longest.items()),
            frozenset(starts),
            dotted,
            size,
        )

    def fill(self, values: Mapping[str, str]) -> tuple[bytes, bool] | None:
        """This reader's part and whether a line begins with a dot; ``None`` when their values
        do not fit a 7bit body (the caller then writes their message alone)."""
        for static, codes in self.lines:
            if static + sum(len(values[c]) for c in codes) > MAX_OCTETS:
                return None
        encoded: dict[str, bytes] = {}
        for code, value in values.items():
            if not value.isascii() or "\n" in value or "\r" in value:
                return None
            encoded[code] = value.encode("ascii")
        out: list[bytes] = []
        add = out.append
        for seg in self.segments:
            if type(seg) is bytes:
                add(seg)
            elif type(seg) is Slot:
                add(encoded[seg.code])
            else:
                add(encoded[seg.code].join(seg.parts))  # type: ignore[union-attr]
        dotted = self.dotted or any(values[c].startswith(".") for c in self.line_starts)
        return b"".join(out), dotted


def _close(longest: dict[tuple[str, ...], int], static: int, codes: list[str]) -> bool:
    """Record a finished line; False when it is over 998 octets with no slot in it."""
    if not codes:
        return static <= MAX_OCTETS
    key = tuple(sorted(codes))
    if static > longest.get(key, -1):
        longest[key] = static
    return True


def _runs(segments: list[bytes | Slot | _Run]) -> tuple[bytes | Slot | _Run, ...]:
    """Merge ``bytes, P, bytes, P, bytes`` (the same slot between static pieces) into one
    :class:`_Run`: a join instead of a value per link."""
    out: list[bytes | Slot | _Run] = []
    i = 0
    while i < len(segments):
        seg = segments[i]
        if isinstance(seg, bytes) and i + 2 < len(segments):
            nxt = segments[i + 1]
            if isinstance(nxt, Slot) and isinstance(segments[i + 2], bytes):
                parts = [seg]
                j = i + 1
                while (
                    j + 1 < len(segments)
                    and isinstance(segments[j], Slot)
                    and segments[j].code == nxt.code  # type: ignore[union-attr]
                    and isinstance(segments[j + 1], bytes)
                ):
                    parts.append(segments[j + 1])  # type: ignore[arg-type]
                    j += 2
                if len(parts) > 2:
                    out.append(_Run(nxt.code, tuple(parts)))
                    i = j
                    continue
        out.append(seg)
        i += 1
    return tuple(out)


class WireText:
    """The text part in quoted-printable, encoded once: encoded lines, and the lines that hold
    a slot (encoded per reader)."""

    __slots__ = ("blocks", "dotted", "size")

    def __init__(
        self, blocks: tuple[bytes | tuple[str | Slot, ...], ...], dotted: bool, size: int
    ) -> None:
        self.blocks = blocks
        """Runs of encoded lines (joined), and lines with slots, in order; joined by CRLF."""
        self.dotted = dotted
        self.size = size

    @classmethod
    def build(cls, pieces: Pieces) -> WireText | None:
        """The encoded part, or ``None`` when it ends in a slot (its last line break is the
        reader's) or holds a carriage return."""
        if not pieces or isinstance(pieces[-1], Slot):
            return None
        blocks: list[bytes | tuple[str | Slot, ...]] = []
        line: list[str | Slot] = []  # the current line, when it holds a slot or text
        dotted = False
        size = 0

        def end_line(tail: str) -> None:
            nonlocal dotted
            if any(isinstance(p, Slot) for p in line):
                blocks.append((*line, tail) if tail else tuple(line))
            else:
                enc = _QP_LINE("".join([*(p for p in line if isinstance(p, str)), tail]))
                dotted = dotted or enc.startswith(b".") or b"\n." in enc
                blocks.append(enc)
            line.clear()

        for piece in pieces:
            if isinstance(piece, Slot):
                line.append(piece)
                continue
            size += len(piece)
            if "\r" in piece:  # line ends to mend across pieces: the writer does it whole
                return None
            first = piece.find("\n")
            if first < 0:
                if piece:
                    line.append(piece)
                continue
            end_line(piece[:first])
            last = piece.rfind("\n")
            if last > first:  # whole lines: encoded with the paragraph cache
                enc, dots = _QP.encode_flagged(piece[first + 1 : last + 1])
                blocks.append(enc[:-2])  # without the break after the last line (joined below)
                dotted = dotted or dots
            if piece[last + 1 :]:
                line.append(piece[last + 1 :])
        if line:
            end_line("")
        blocks.append(b"")  # the text ends with a line break, as the encoder makes it
        return cls(tuple(blocks), dotted, size)

    def fill(self, values: Mapping[str, str]) -> tuple[bytes, bool] | None:
        """This reader's part, and whether a line of it begins with a dot; ``None`` when a
        value holds a carriage return (the writer mends line ends across the whole text)."""
        out: list[bytes] = []
        dotted = self.dotted
        for block in self.blocks:
            if type(block) is bytes:
                out.append(block)
                continue
            line = "".join(p if type(p) is str else values[p.code] for p in block)  # type: ignore[union-attr]
            if "\r" in line:
                return None
            for enc in map(_QP_LINE, line.split("\n")):
                dotted = dotted or enc.startswith(b".") or b"\n." in enc
                out.append(enc)
        return b"\r\n".join(out), dotted
