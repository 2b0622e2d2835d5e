"""Prompt size in tokens for load accounting: a real tokenizer when one is configured, else an estimate."""

from __future__ import annotations

from typing import Protocol

from ascend_pd.errors import InputError

CHARS_PER_TOKEN = 4  # typical for BPE vocabularies on English text and code


class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...


class EstimatedTokens:
    def count(self, text: str) -> int:
        return -(-len(text) // CHARS_PER_TOKEN)


class TokenizerTokens:
    """Counts with a Hugging Face `tokenizer.json` through the `tokenizers` package (no torch, no transformers)."""

    def __init__(self, path: str):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise InputError("counting tokens needs the 'tokenizers' package", field="--tokenizer",
                             fix="pip install tokenizers, or drop --tokenizer to use the estimate") from None
        try:
            self._tokenizer = Tokenizer.from_file(path)
        except Exception as exc:  # tokenizers raises a bare Exception for a missing or malformed file
            raise InputError(f"cannot load tokenizer: {exc}", file=path, field="--tokenizer",
                             fix="point --tokenizer at a tokenizer.json file") from None

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)
