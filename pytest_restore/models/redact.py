"""One redaction for every text that leaves a model client: the API keys of the environment.

Every provider names the environment variable its key is read from
(``ModelProvider.key_env``); defining a provider class adds its variable to
:data:`KEY_VARIABLES`. :func:`redact_keys` removes the value of each of those
variables that is set, in every form :class:`KeyRedactor` covers, from a
text: a reply, an error body, a served model id, a batch's error line or an
imported answer. Whatever path a text took (a live call, a batch round, a
``batch import``), it passes here before a cache, a record, a report, a
ledger or a terminal line sees it.
"""

from __future__ import annotations

import base64
import os
from functools import lru_cache
from urllib.parse import quote

#: The shortest run of the key's characters that is redacted where it appears (a server
#: echoing part of the key); shorter runs are too likely to be ordinary text.
MIN_KEY_FRAGMENT = 10
#: Said in place of anything redacted.
REDACTED = "[redacted]"
#: The environment variables API keys are read from, one per provider that declares one.
KEY_VARIABLES: set[str] = set()
#: Latin upper case to lower case, one character for one, so positions in a folded text
#: are positions in the text (``str.lower`` may change a text's length).
_ASCII_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class KeyRedactor:
    """Removes an API key from text in the forms a server can send it back in.

    Covered: the exact key, the key in any letter case, any run of at least
    :data:`MIN_KEY_FRAGMENT` consecutive characters of it (a truncated echo
    such as ``sk-proj-AbC...``), its percent-encoding, and its base64 in the
    standard and URL-safe alphabets at any of the three byte alignments (as in
    a Basic-auth header), fragments of those included. Not covered: other
    transformations (hex, reversed, hashed, split by other text). Matching
    ignores letter case, so a base64 fragment in another case is redacted too
    (harmless: it is noise in a reply).
    """

    def __init__(self, *keys: str) -> None:
        """A redactor of each of ``keys`` (empty ones are ignored)."""
        keys = tuple(k for k in keys if k)
        size = min([MIN_KEY_FRAGMENT, *(len(k) for k in keys)])
        self.size = size
        windows: set[str] = set()
        for key in keys:
            forms = {key, quote(key, safe="")}
            raw = key.encode("utf-8")
            for pad in range(3):
                for encode in (base64.b64encode, base64.urlsafe_b64encode):
                    encoded = encode(b"\0" * pad + raw).decode("ascii").rstrip("=")
                    # drop the characters that also encode the padding bytes or a partial last group
                    start = (pad * 4 + 2) // 3
                    forms.add(encoded[start : len(encoded) - 2])
            windows.update(
                form.translate(_ASCII_FOLD)[i : i + size]
                for form in forms
                if len(form) >= size
                for i in range(len(form) - size + 1)
            )
        self._windows = windows

    def __call__(self, text: str) -> str:
        """``text`` with every covered form of the key replaced by ``[redacted]``."""
        size = self.size
        if not self._windows or len(text) < size:
            return text
        folded = text.translate(_ASCII_FOLD)
        windows = self._windows
        spans: list[list[int]] = []
        for i in range(len(folded) - size + 1):
            if folded[i : i + size] in windows:
                if spans and i <= spans[-1][1]:
                    spans[-1][1] = i + size
                else:
                    spans.append([i, i + size])
        if not spans:
            return text
        out, last = [], 0
        for start, end in spans:
            out += [text[last:start], REDACTED]
            last = end
        out.append(text[last:])
        return "".join(out)


@lru_cache(maxsize=8)
def _redactor(keys: tuple[str, ...]) -> KeyRedactor:
    return KeyRedactor(*keys)


def environment_keys() -> tuple[str, ...]:
    """The values of the declared key variables that are set, in a stable order."""
    return tuple(sorted({value for name in KEY_VARIABLES if (value := os.environ.get(name))}))


def redact_keys(text: str) -> str:
    """``text`` without any API key of the environment (every declared provider's), in any covered form.

    The one function every text that leaves a model client passes through,
    whatever its path (live, batch, import).
    """
    keys = environment_keys()
    return _redactor(keys)(text) if keys and text else text
