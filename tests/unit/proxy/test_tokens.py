"""Prompt token counts for load accounting: a real tokenizer.json when configured, with clear errors otherwise."""

import pytest

from ascend_pd.errors import InputError
from ascend_pd.proxy.tokens import TokenizerTokens

tokenizers = pytest.importorskip("tokenizers")  # optional dependency of --tokenizer


def word_level_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(path))
    return path


def test_counts_come_from_the_tokenizer_file(tmp_path):
    counter = TokenizerTokens(str(word_level_tokenizer(tmp_path / "tokenizer.json")))
    assert counter.count("the cat sat on the mat") == 6  # six whitespace words, unknown ones as [UNK]
    assert counter.count("") == 0


def test_a_missing_tokenizer_file_names_the_flag_and_the_fix(tmp_path):
    with pytest.raises(InputError) as error:
        TokenizerTokens(str(tmp_path / "missing.json"))
    assert error.value.field == "--tokenizer" and "tokenizer.json" in error.value.fix
