"""Text from outside: made safe to store and print, and words as the ranker sees them.

* :func:`strip_controls` and :func:`one_line_text` make untrusted text (feeds, names) safe to
  store, log and print: no terminal escape sequence, no control character.
* The rest is shared by config validation (a keyword must have words to match) and ranking, so
  validating a config does not import the scorer.

* :func:`tokenize` folds case, accents and possessives, splits on punctuation and hyphens and
  stems each word with :func:`stem`, a light stemmer: plurals (Harman's S-stemmer), the
  inflections ``-ed``/``-ing`` and the derivations ``-ization``/``-ation``/``-izer`` (Porter2's
  steps 1b and 2 for these suffixes only), British ``-ise``, and a final ``e``. So "quantized",
  "quantizing", "quantization" and "quantise" are one word, while "distributed" and
  "distribution", or "general" and "generation", stay apart (full Porter2 would merge
  "parallelism" with "parallel"; the judged set in ``tests/rank/relevance/`` compares the variants).
* :func:`compound_parts` gives the words inside a title's CamelCase compounds ("NeRF" in
  "BirdNeRF"), which the ranker counts for one-word keywords.
* :func:`abbreviations` finds "long form (SF)" definitions in a text with the Schwartz–Hearst
  algorithm (Schwartz & Hearst, *A simple algorithm for identifying abbreviation definitions in
  biomedical text*, PSB 2003); :data:`KNOWN_ACRONYMS` is a short shipped list of the field's
  unambiguous ones. The ranker uses both to match ``LLM inference`` with "large language model
  inference" without the operator listing both.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

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
    return collapse_spaces(strip_controls(text))


_SPACE = re.compile(r"\s")
_PIECE = 65_536


def collapse_spaces(text: str) -> str:
    """``" ".join(text.split())``, a piece of about 64 KB at a time: the same string, without
    a string per word alive at once (a megabyte of "we we we" made a million: 60 MB)."""
    if len(text) <= _PIECE:
        return " ".join(text.split())
    pieces: list[str] = []
    start = 0
    while start < len(text):
        space = _SPACE.search(text, start + _PIECE)  # the pieces end at whitespace: no word split
        end = space.start() if space else len(text)
        piece = " ".join(text[start:end].split())
        if piece:
            pieces.append(piece)
        start = end
    return " ".join(pieces)


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` with the noun that agrees: "1 paper", "2 papers", "1 entry", "3 entries"."""
    if n == 1:
        return f"{n} {singular}"
    if plural is None:
        plural = singular[:-1] + "ies" if re.search(r"[^aeiou]y$", singular) else singular + "s"
    return f"{n} {plural}"


# ---------------------------------------------------------------------------- words

_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")
WORD_PATTERN = re.compile(r"[^\W_]+")
"""A word as matching sees it: a run of letters and digits (no underscores, no hyphens)."""
_WORD_CHARS = re.compile(r"\w+")


def _raw_words(text: str) -> list[str]:
    r"""``WORD_PATTERN.findall(text)``: runs of letters and digits (``\w+`` is the same runs when
    the text has no underscore, and a fifth faster)."""
    return _WORD_CHARS.findall(text) if "_" not in text else WORD_PATTERN.findall(text)


_VOWELS = frozenset("aeiouy")
_DOUBLES = ("bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt")


def _plural(token: str) -> str:
    """Harman's S-stemmer, for lowercase tokens longer than 3."""
    if len(token) <= 3 or not token.endswith("s") or not token[-2].isalpha():
        return token
    if token.endswith("ies") and not token.endswith(("eies", "aies")) and len(token) > 4:
        return token[:-3] + "y"
    if token.endswith("sses"):
        return token[:-2]
    if token.endswith(("ss", "is")) or (token.endswith("us") and len(token) > 4):
        return token  # class, analysis, status (but "gpus" is a plural)
    return token[:-1]


def _has_vowel(s: str) -> bool:
    return any(c in _VOWELS for c in s)


_BRITISH = re.compile(r"is(e|ed|ing|ation|er)$")
_DERIVATIONS = (("ization", "ize"), ("izer", "ize"), ("ation", "ate"))


@lru_cache(maxsize=131072)
def stem(token: str) -> str:
    """The light stem of a lowercase word: plural, -ed/-ing, -ization/-ation/-izer, final e.

    Words of three letters or fewer only lose a plural s; words with digits are left alone.
    """
    if not token.isalpha():
        return token
    w = _plural(token)
    if len(w) <= 3:
        return w
    if len(w) >= 6:
        w = _BRITISH.sub(r"iz\1", w)  # quantise, quantised, quantisation -> quantiz...
    for suffix, repl in _DERIVATIONS:  # Porter2 step 2, these suffixes only
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + repl
            break
    else:
        for suffix in ("ing", "ed"):  # Porter2 step 1b
            if w.endswith(suffix) and not w.endswith("eed"):
                rest = w[: -len(suffix)]
                if len(rest) >= 3 and _has_vowel(rest):
                    w = rest[:-1] if rest.endswith(_DOUBLES) else rest  # embedding -> embed
                break
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]  # Porter2 step 5: generate, generated, generation -> generat
    return w


def _acronym(token: str) -> bool:
    core = token[:-1] if len(token) >= 3 and token[-1] == "s" else token
    return 2 <= len(core) <= 6 and core.isupper()


def _read_word(token: str) -> str:
    if _acronym(token):  # LLM, GPUs, CUDA: only an acronym's plural s is dropped
        return (token[:-1] if token[-1] == "s" else token).lower()
    return stem(token.casefold())


class _Words(dict[str, str]):
    """Raw word → its key, computed on first sight. A plain dict lookup per word (about half
    the cost of an ``lru_cache`` hit, which also reorders its list); emptied when it is full."""

    def __missing__(self, token: str) -> str:
        if len(self) >= WORD_CACHE:
            self.clear()
        found = self[token] = _read_word(token)
        return found


WORD_CACHE = 131072
"""Distinct raw words whose keys are kept (a run's papers use some tens of thousands)."""
word_key = _Words().__getitem__
"""A raw word's key (folded, stemmed; an acronym keeps its letters): what tokens are made of."""


def _strip(text: str) -> str:
    if not text.isascii():
        text = "".join(
            c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
        )
    return _POSSESSIVE.sub("", text) if "'" in text or "’" in text else text


def fold(text: str) -> str:
    """Lowercase, accents and possessives removed: the text every matcher sees."""
    return _strip(text).casefold()


def tokenize(text: str) -> list[str]:
    """Normalized, stemmed word tokens; punctuation and hyphens separate words."""
    return list(map(word_key, _raw_words(_strip(text))))


_HUMP = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
"""The pieces of a CamelCase word: "BirdNeRF" is Bird, Ne, RF; "LPViT" is LP, Vi, T."""
_COMPOUND = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
MAX_HUMPS = 6
"""A longer CamelCase word is not split (its sub-words would be many and rarely meant)."""
MIN_PART = 3
"""Sub-words shorter than this are left out ("Ne" and "RF" of "NeRF" are no words)."""


@lru_cache(maxsize=65536)
def _word_parts(word: str) -> tuple[str, ...]:
    humps = _HUMP.findall(word)
    if not 2 <= len(humps) <= MAX_HUMPS or "".join(humps) != word:
        return ()
    parts: list[str] = []
    for i in range(len(humps)):
        for j in range(i + 1, len(humps) + 1):
            part = "".join(humps[i:j])
            if part != word and len(part) >= MIN_PART and not part.isdigit():
                parts.append(word_key(part))
    return tuple(dict.fromkeys(parts))


def compound_parts(text: str) -> list[str]:
    """The tokens hidden inside the CamelCase compounds of ``text``, each once.

    "BirdNeRF" holds "bird" and "nerf" (and "birdne", which no keyword is); "LPViT" holds
    "vit"; "DeepSolarEye" holds "deep", "solar", "eye", "deepsolar" and "solareye". Every
    contiguous run of the word's pieces of at least :data:`MIN_PART` characters, except the
    whole word (which :func:`tokenize` already gives). Hyphenated compounds ("NeRF-XL") need
    nothing: the tokenizer splits them. The ranker counts a part in a title only when it is a
    keyword on its own (a one-word term), so "NeRF" inside "BirdNeRF" matches the keyword NeRF.
    """
    out: dict[str, None] = {}
    for word in _raw_words(text):
        if len(word) > MIN_PART and _COMPOUND.search(word):
            for part in _word_parts(_strip(word)):
                out.setdefault(part)
    return list(out)


def phrase_terms(phrase: str) -> tuple[tuple[str, ...], ...]:
    """The token sequences a keyword matches: itself, and for a hyphenated word its closed form.

    ``pre-training`` matches "pre-training", "pre training" and "pretraining".
    """
    words = tuple(tokenize(phrase))
    if not words:
        return ()
    out = [words]
    if "-" in phrase:
        closed = tuple(tokenize(re.sub(r"(?<=\w)-(?=\w)", "", phrase)))
        if closed and closed != words:
            out.append(closed)
    return tuple(out)


def author_key(name: str) -> str:
    """A name as followed-author matching compares it: folded words."""
    return " ".join(WORD_PATTERN.findall(fold(name)))


def category_key(name: str) -> str:
    """An arXiv category as matching compares it."""
    return name.strip().casefold()


# ---------------------------------------------------------------------------- acronyms

KNOWN_ACRONYMS: dict[str, tuple[str, ...]] = {
    "LLM": ("large language model",),
    "MLLM": ("multimodal large language model",),
    "VLM": ("vision-language model", "vision language model"),
    "LM": ("language model",),
    "MoE": ("mixture of experts", "mixture-of-experts"),
    "NAS": ("neural architecture search",),
    "GNN": ("graph neural network",),
    "RL": ("reinforcement learning",),
    "RLHF": ("reinforcement learning from human feedback",),
    "DPO": ("direct preference optimization",),
    "KV": ("key-value",),
    "RAG": ("retrieval-augmented generation", "retrieval augmented generation"),
    "ViT": ("vision transformer",),
    "NeRF": ("neural radiance field",),
    "SSM": ("state space model", "state-space model"),
    "LoRA": ("low-rank adaptation",),
    "PEFT": ("parameter-efficient fine-tuning",),
    "PTQ": ("post-training quantization",),
    "QAT": ("quantization-aware training",),
    "GAN": ("generative adversarial network",),
    "VAE": ("variational autoencoder",),
    "CNN": ("convolutional neural network",),
    "RNN": ("recurrent neural network",),
    "LSTM": ("long short-term memory",),
    "NLP": ("natural language processing",),
    "ASR": ("automatic speech recognition",),
    "GEMM": ("general matrix multiplication", "general matrix multiply"),
    "HPC": ("high-performance computing",),
    "SLO": ("service-level objective",),
}
"""The field's common, unambiguous acronyms; papers add their own (:func:`abbreviations`)."""

_PAREN = re.compile(r"\(([^()]{1,24})\)")
_WORDS = re.compile(r"\S+")


def _short_form(inside: str) -> str | None:
    sf = re.split(r"[;,] ", inside.strip())[0].strip()
    if not 2 <= len(sf) <= 10 or len(sf.split()) > 2:
        return None
    if not sf[0].isalnum() or not any(c.isalpha() for c in sf):
        return None
    if not any(c.isupper() for c in sf):
        return None  # "(e.g.)", "(see below)": an acronym has a capital
    if len(sf) >= 3 and sf.endswith("s") and sf[:-1].isupper():
        sf = sf[:-1]  # (LLMs) defines LLM
    return sf


def _best_long_form(sf: str, words: list[str]) -> str | None:
    """Schwartz–Hearst: match the short form's characters right to left inside the long form."""
    lf = " ".join(words)
    s, li = len(sf) - 1, len(lf) - 1
    while s >= 0:
        c = sf[s].lower()
        if not c.isalnum():
            s -= 1
            continue
        while li >= 0 and (lf[li].lower() != c or (s == 0 and li > 0 and lf[li - 1].isalnum())):
            li -= 1
        if li < 0:
            return None
        s -= 1
        li -= 1
    start = lf.rfind(" ", 0, li + 1) + 1
    out = lf[start:].strip(" ,;:")
    if len(out) <= len(sf) or sf.lower() in out.lower().split():
        return None
    return out


def definitions(text: str) -> Iterator[tuple[str, str, int, int]]:
    """(short form, long form, start, end of "(SF)") for each "long form (SF)" in a text.

    The Schwartz–Hearst algorithm: a parenthesized short form of 2–10 characters with a
    capital, and the shortest run of at most ``min(|SF| + 5, 2·|SF|)`` preceding words whose
    letters contain the short form's in order, its first letter starting a word.
    """
    for m in _PAREN.finditer(text):
        sf = _short_form(m.group(1))
        if sf is None:
            continue
        n = min(len(sf) + 5, 2 * len(sf))
        # The last n words before the parenthesis (split on whitespace, as ``\S+`` runs).
        before = text[max(0, m.start() - 400) : m.start()].rsplit(None, n)
        candidates = before[-n:]
        # The long form stops at a clause boundary.
        for i in range(len(candidates) - 1, -1, -1):
            if candidates[i].endswith((".", ";", ":", ")")) and i < len(candidates) - 1:
                candidates = candidates[i + 1 :]
                break
        lf = _best_long_form(sf, candidates)
        if lf:
            yield sf, lf, m.start(), m.end()


def abbreviations(text: str) -> Iterator[tuple[str, str]]:
    """(short form, long form) pairs a text defines as "long form (SF)" (Schwartz–Hearst)."""
    for sf, lf, _, _ in definitions(text):
        yield sf, lf


def _defined(
    texts: tuple[str, ...],
) -> tuple[dict[str, tuple[str, str]], list[list[tuple[int, int]]], dict[str, tuple[str, ...]]]:
    """The acronyms ``texts`` define, for :func:`read_defined` and :func:`defined_words`:
    {acronym key: (acronym, long form)}, per text the spans of its "(SF)" definitions, and
    {a use as written: the long form's tokens} (a use as defined, or its plural "LLMs" for LLM
    unless that is defined itself)."""
    found: dict[str, tuple[str, str]] = {}
    spans: list[list[tuple[int, int]]] = []
    for text in texts:
        mine: list[tuple[int, int]] = []
        for sf, lf, start, end in definitions(text):
            keys = tokenize(sf)
            if len(keys) == 1 and keys[0] not in tokenize(lf):
                found.setdefault(keys[0], (sf, lf))
                mine.append((start, end))
        spans.append(mine)
    by_form = {sf: tuple(tokenize(lf)) for sf, lf in found.values()}
    uses = {**{sf + "s": long for sf, long in by_form.items()}, **by_form}
    return found, spans, uses


def read_defined(*texts: str) -> tuple[list[list[str]], dict[str, tuple[str, str]]]:
    """Tokens of each text with its own acronyms read as their long forms.

    A paper that writes "speculative decoding (SD)" and then "SD" five times mentions
    speculative decoding six times. The definitions of all ``texts`` (a title and an abstract)
    apply to each; the "(SD)" itself is dropped, and only uses written exactly as defined (case
    included) are replaced, so "IT" defined as information technology leaves "it" alone.
    Returns the token lists and {acronym key: (acronym, long form)}.
    """
    found, spans, uses = _defined(texts)
    out: list[list[str]] = []
    for text, mine in zip(texts, spans, strict=True):
        for start, end in reversed(mine):
            text = text[:start] + " " + text[end:]
        raws = _raw_words(_strip(text))
        if uses.keys().isdisjoint(raws):
            out.append(list(map(word_key, raws)))
            continue
        # Every word read as usual, then each use replaced by its long form's tokens.
        toks = list(map(word_key, raws))
        for i in reversed([i for i, raw in enumerate(raws) if uses.get(raw)]):
            toks[i : i + 1] = uses[raws[i]]
        out.append(toks)
    return out, found


Word = tuple[int, int, tuple[str, ...]]
"""A word of a text as read: (start, end) in the text, and the tokens it reads as."""


def defined_words(*texts: str) -> list[list[Word]]:
    """Each text's words where they stand, read as :func:`read_defined` reads them: a use of
    an acronym the texts define reads as its long form's tokens, the "(SF)" of a definition
    and a possessive "s" are no words. So the tokens a matcher found can be traced back to the
    words the paper wrote (:func:`written`). One pass over each text."""
    _, spans, uses = _defined(texts)
    out: list[list[Word]] = []
    for text, mine in zip(texts, spans, strict=True):
        for start, end in mine:
            text = text[:start] + " " * (end - start) + text[end:]  # the offsets stay
        words: list[Word] = []
        for m in WORD_PATTERN.finditer(text):
            start = m.start()
            if m.group() == "s" and start >= 2 and text[start - 1] in "'’":
                before = text[start - 2]
                if before.isalnum() or before == "_":
                    continue  # "model's": the possessive is no word
            word = m.group()
            if word.isascii():  # most words: read as they are
                words.append((start, m.end(), uses.get(word) or (word_key(word),)))
                continue
            toks: list[str] = []
            for raw in _raw_words(_strip(word)):
                toks.extend(uses.get(raw) or (word_key(raw),))
            if toks:
                words.append((start, m.end(), tuple(toks)))
        out.append(words)
    return out


MAX_WRITTEN = 64
"""Occurrences of a term :func:`written` looks at (a title or an abstract has a few)."""


_FLAT: dict[int, tuple[list[Word], list[str], list[int], dict[str, list[int]]]] = {}
"""Recent word lists flattened to their tokens (for :func:`written`), by identity (256)."""


def _flattened(words: list[Word]) -> tuple[list[str], list[int], dict[str, list[int]]]:
    """``words``' tokens in order, the word each token belongs to, and where each token is;
    kept for the next call on the same list (a paper's reasons ask about its words often)."""
    found = _FLAT.get(id(words))
    if found is not None and found[0] is words:
        return found[1], found[2], found[3]
    flat: list[str] = []
    owner: list[int] = []
    for n, (_, _, toks) in enumerate(words):
        flat.extend(toks)
        owner.extend([n] * len(toks))
    where: dict[str, list[int]] = {}
    for i, tok in enumerate(flat):  # where each token stands: a term is looked for only there
        where.setdefault(tok, []).append(i)
    if len(_FLAT) >= 256:
        _FLAT.clear()
    _FLAT[id(words)] = (words, flat, owner, where)
    return flat, owner, where


def written(text: str, words: list[Word], term: tuple[str, ...]) -> list[str]:
    """The runs of ``text``'s words (:func:`defined_words`) that read as ``term``, as the text
    writes them, first first: "LLM Serving" for ("large", "language", "model", "serv") in a
    paper that defines LLM; a term that starts or ends inside an acronym's long form takes the
    acronym whole. Looks only where the term's first token stands (:func:`_flattened`)."""
    flat, owner, where = _flattened(words) if term else ([], [], {})
    out: list[str] = []
    size = len(term)
    for i in where.get(term[0], ()) if term else ():
        if i + size <= len(flat) and tuple(flat[i : i + size]) == term:
            start, end = words[owner[i]][0], words[owner[i + size - 1]][1]
            out.append(text[start:end])
            if len(out) >= MAX_WRITTEN:
                break
    return out
