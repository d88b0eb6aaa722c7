"""Tokens: the regex tokenizer, or a BPE one from GX10_SIM_TOKENIZER (the chat encoding is in
deepseek_v4_encoding.py)."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from .errors import ApiError, SimFatal

TOKEN_PIECE_RE = re.compile(r" ?[^\W\d_]{1,4}| ?\d{1,3}| ?_| ?[^\w\s]|\s+")
VOCAB_SIZE = 128000
# DeepSeek's special tokens: FULLWIDTH VERTICAL LINE (U+FF5C), LOWER ONE EIGHTH BLOCK (U+2581).
_BAR, _SP = "\uff5c", "\u2581"
BOS = f"<{_BAR}begin{_SP}of{_SP}sentence{_BAR}>"
EOS = f"<{_BAR}end{_SP}of{_SP}sentence{_BAR}>"
USER, ASSISTANT = f"<{_BAR}User{_BAR}>", f"<{_BAR}Assistant{_BAR}>"
THINK, END_THINK = "<think>", "</think>"
TOOL_OUT = f"<{_BAR}tool{_SP}output{_SP}begin{_BAR}>"
END_TOOL_OUT = f"<{_BAR}tool{_SP}output{_SP}end{_BAR}>"
SPECIAL_TOKENS = {
    BOS: 0,
    EOS: 1,
    THINK: 128798,
    END_THINK: 128799,
    TOOL_OUT: 128814,
    END_TOOL_OUT: 128815,
    USER: 128803,
    ASSISTANT: 128804,
}
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(token) for token in SPECIAL_TOKENS) + ")")


class BpeTokenizer:
    """A real BPE tokenizer (Hugging Face `tokenizers`, tokenizer.json) in place of the regex one.

    The chat template's special tokens are added to it when the file lacks them, so they stay one
    token each; their ids are then the tokenizer's own (as with a real model's tokenizer)."""

    def __init__(self, path: str) -> None:
        try:
            # Only with GX10_SIM_TOKENIZER: the simulator otherwise runs on the standard library.
            from tokenizers import Tokenizer  # noqa: PLC0415
        except ImportError as exc:  # pragma: no cover - the image ships it
            raise SimFatal("ImportError", f"GX10_SIM_TOKENIZER={path}: {exc}") from exc
        try:
            self.tokenizer = Tokenizer.from_file(path)
        except Exception as exc:  # the library raises its own Exception type
            raise SimFatal("OSError", f"GX10_SIM_TOKENIZER={path}: {exc}") from exc
        self.path = path
        missing = [t for t in SPECIAL_TOKENS if self.tokenizer.token_to_id(t) is None]
        if missing:
            self.tokenizer.add_special_tokens(missing)
        self.special_ids = {t: int(self.tokenizer.token_to_id(t) or 0) for t in SPECIAL_TOKENS}

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """(ids, text pieces); a piece is the slice of `text` its token covers."""
        if not text:
            return [], []
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return list(enc.ids), [text[start:end] for start, end in enc.offsets]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))


_BPE: BpeTokenizer | None = None


def use_tokenizer(path: str | None) -> None:
    """Select the tokenizer every endpoint uses: a tokenizer.json, or None for the regex one."""
    global _BPE  # noqa: PLW0603 - one tokenizer for the whole process, chosen at start
    _BPE = BpeTokenizer(path) if path else None


def tokenizer_name() -> str:
    return _BPE.path if _BPE is not None else "gx10-sim-regex"


def encode(text: str) -> tuple[list[int], list[str]]:
    """(ids, pieces) of `text` with the active tokenizer; special tokens stay whole."""
    if _BPE is not None:
        return _BPE.encode(text)
    pieces: list[str] = []
    for part in _SPECIAL_RE.split(text):
        if part in SPECIAL_TOKENS:
            pieces.append(part)
        elif part:
            pieces += TOKEN_PIECE_RE.findall(part)
    return [token_id(piece) for piece in pieces], pieces


def decode(ids: Sequence[int]) -> str:
    if _BPE is not None:
        return _BPE.decode(ids)
    raise ApiError(400, "detokenize needs a tokenizer with a vocabulary (GX10_SIM_TOKENIZER)")


def special_id(token: str) -> int:
    return _BPE.special_ids[token] if _BPE is not None else SPECIAL_TOKENS[token]


def token_pieces(text: str) -> list[str]:
    """The pieces `text` tokenizes into; special tokens stay whole."""
    return encode(text)[1]


def token_id(piece: str) -> int:
    """The regex tokenizer's id of one piece."""
    special = SPECIAL_TOKENS.get(piece)
    if special is not None:
        return special
    return 2 + zlib.crc32(piece.encode("utf-8")) % VOCAB_SIZE


def tokenize(text: str, add_special_tokens: bool = False) -> list[int]:
    ids = encode(text)[0]
    return [special_id(BOS), *ids] if add_special_tokens else ids


def count_tokens(text: str) -> int:
    return len(encode(text)[0])
