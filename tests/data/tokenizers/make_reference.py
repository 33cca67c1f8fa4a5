#!/usr/bin/env python3
"""tests/data/tokenizers/make_reference.py — made the files of this folder,
once, with the reference library (pip install tokenizers; it ran with
tokenizers 0.23.3). tgc and its tests never run Python.

  corpus/NN.txt        the test texts (raw bytes: whitespace runs, newlines,
                       unicode, accents, CJK, emoji, numbers, punctuation,
                       unknown words, added tokens written in the text)
  bpe_gpt2.json        a small byte-level BPE trained here with GPT-2's
                       pipeline (ByteLevel pre-tokenizer with its regex,
                       merges written as "a b" strings, like GPT-2's file)
  wordpiece_bert.json  a small WordPiece trained here with BERT's pipeline
                       (BertNormalizer, BertPreTokenizer, [CLS] $A [SEP] as
                       BertProcessing), so WordPiece is tested without the
                       download
  bpe_llama3.json      the same with Llama 3's (Split on Llama 3's pattern,
                       ByteLevel without regex, ignore_merges, the
                       <|begin_of_text|> template; merges as ["a", "b"])
  ref/NAME/NN.json     {"ids": [...]} of Tokenizer.encode(text) for corpus/NN.txt
                       (the file's padding turned off: tgc does not pad)
  ref/NAME/NN.decoded  Tokenizer.decode(ids) of those ids, and a newline
NAME is gpt2, llama3, wordpiece, and minilm: all-MiniLM-L6-v2's WordPiece tokenizer.json
(fetched by tools/fetch-test-data.sh; not kept here).

The three small tokenizers were trained once, on this repository's docs and
README as they were then (plus the corpus for the BPE ones); a later run
reuses the files kept here, so adding a text to the corpus only adds its
references. --retrain trains them again (and changes every id).

Usage: make_reference.py [--retrain] [MINILM_TOKENIZER_JSON]
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))

CORPUS = [
    "Hello, world!",
    "Café naïve résumé Ångström façade Øresund Straße ÉCOLE crème brûlée",
    "你好，世界！東京は晴れです。안녕하세요 日本語のテキスト 漢字",
    "I love 🍕 and 😀😀! 👍🏽 👨‍👩‍👧 ❤️ ✨",
    "  leading and   multiple    spaces\t\ttabs\n\nnewlines \r\n trailing   ",
    "3.14159 1,000,000 2024-01-01 12345678901234567890 ½ ² ٣٤ 一二三 0x1F",
    "Wait... what?! (yes) [no] {maybe} \"quoted\" 'single' — en–dash «guillemets» ¿qué? ¡sí! a/b\\c",
    "xyzzyqqq blorptastic supercalifragilisticexpialidocious antidisestablishmentarianism",
    "I'm can't won't they're we've she'll he'd IT'S DON'T You'RE",
    "[CLS] hello [MASK] world [SEP] <|endoftext|> <|begin_of_text|>x",
    "Ελληνικά Русский текст العربية עברית हिन्दी ไทย",
    "zero\u200bwidth soft\u00adhyphen NBSP\u00a0here ctrl\x07bell replacement\ufffd end\x00",
    "a" * 150 + " ok " + "é" * 101,
    "def f(x):\n    return x**2 + 1  # comment\n\n\n",
    "",
    "   ",
    "https://example.com/path?q=1&r=2 user@example.org #hashtag @mention $100 50% +/-",
    "e\u0301 vs é, İstanbul, ΣΊΣΥΦΟΣ, ǅ title-case, ﬁne ligature, Ⅻ",
    "newer emoji: 🥲 🫠 and an unassigned \U000e0fff code point",
    "The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces; "
    "models see only their ids.\n\tIndented line\u3000with ideographic space.",
    # longer than all-MiniLM-L6-v2's truncation (128 ids with [CLS] and [SEP])
    " ".join(["Sentence %d: the tokenizer keeps only what fits, then adds the special tokens." % i
              for i in range(12)]),
]
TRAINED_ON = 20  # the BPE tokenizers were trained with the first 20 texts of the corpus

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def training_text():
    """The repository's docs and README (English), plus the corpus."""
    root = os.path.join(HERE, "..", "..", "..")
    texts = []
    for d in ["docs", "."]:
        for f in sorted(os.listdir(os.path.join(root, d))):
            if f.endswith(".md"):
                with open(os.path.join(root, d, f), encoding="utf-8") as fh:
                    texts.append(fh.read())
    return texts + CORPUS[:TRAINED_ON]


def train_gpt2():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    return tok


def train_llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def train_wordpiece():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    trainer = trainers.WordPieceTrainer(vocab_size=1500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        show_progress=False)
    tok.train_from_iterator(training_text()[:-TRAINED_ON], trainer)  # the corpus has words it never saw
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def save(tok, path, string_merges):
    d = json.loads(tok.to_str())
    if string_merges:  # GPT-2's own file writes each merge as "a b"
        d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in d["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    return Tokenizer.from_file(path)  # the reference ids come from the file as written


def write_refs(name, tok):
    tok.no_padding()
    out = os.path.join(HERE, "ref", name)
    os.makedirs(out, exist_ok=True)
    for i, text in enumerate(CORPUS):
        ids = tok.encode(text).ids
        with open(os.path.join(out, f"{i + 1:02d}.json"), "w") as f:
            f.write(json.dumps({"ids": ids}) + "\n")
        with open(os.path.join(out, f"{i + 1:02d}.decoded"), "w", encoding="utf-8", newline="") as f:
            f.write(tok.decode(ids) + "\n")


def kept_or_trained(path, train, string_merges):
    if os.path.exists(path) and "--retrain" not in sys.argv:
        return Tokenizer.from_file(path)
    return save(train(), path, string_merges)


def main():
    cdir = os.path.join(HERE, "corpus")
    os.makedirs(cdir, exist_ok=True)
    for i, text in enumerate(CORPUS):
        with open(os.path.join(cdir, f"{i + 1:02d}.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    write_refs("gpt2", kept_or_trained(os.path.join(HERE, "bpe_gpt2.json"), train_gpt2, True))
    write_refs("llama3", kept_or_trained(os.path.join(HERE, "bpe_llama3.json"), train_llama3, False))
    write_refs("wordpiece", kept_or_trained(os.path.join(HERE, "wordpiece_bert.json"), train_wordpiece, False))
    files = [a for a in sys.argv[1:] if a != "--retrain"]
    if files:
        write_refs("minilm", Tokenizer.from_file(files[0]))


if __name__ == "__main__":
    main()
