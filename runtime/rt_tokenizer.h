/* runtime/rt_tokenizer.h — tokenizers read from a Hugging Face
 * `tokenizer.json` (runtime/tokenizer/): WordPiece (BERT: BertNormalizer,
 * BertPreTokenizer, `##` continuations, [UNK], the [CLS]/[SEP] template) and
 * byte-level BPE (GPT-2, Llama 3: the byte-to-unicode map, the GPT-2 or
 * Llama 3 split pattern scanned by hand, merges by rank). Text in, token ids
 * out, and back; what is supported and how it matches the reference library
 * is in docs/tokenizers.md. */
#ifndef TGC_RT_TOKENIZER_H
#define TGC_RT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_tokenizer rt_tokenizer;

/* Reads and checks path. NULL with a message in err ("PATH: ..." or
 * "PATH:LINE:COL: ...") when it cannot be read, is not JSON, or asks for a
 * model, normalizer, pre-tokenizer, post-processor or decoder tgc does not
 * implement. */
rt_tokenizer *rt_tokenizer_load(const char *path, char *err, size_t errlen);
void rt_tokenizer_free(rt_tokenizer *t);

/* "WordPiece" or "BPE". */
const char *rt_tokenizer_model(const rt_tokenizer *t);
/* One more than the largest id (model vocabulary and added tokens). */
int64_t rt_tokenizer_vocab_size(const rt_tokenizer *t);

/* The ids of text (len bytes of UTF-8); with add_special, the
 * post-processor's special tokens too ([CLS] ... [SEP]) and the file's
 * truncation applied, as the reference library's encode does (its padding is
 * not: the ids stay unpadded). *ids is malloc'd (free it); 0, or -1 with err. */
int rt_tokenizer_encode(const rt_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                        size_t *n, char *err, size_t errlen);

/* Truncation to max_length ids (special tokens included) from now on, in
 * place of the file's: as the reference library's encode(...,
 * truncation=True, max_length=N) does (sentence-transformers passes its
 * max_seq_length so). The file's direction is kept (right without one). */
void rt_tokenizer_set_max_length(rt_tokenizer *t, int64_t max_length);

/* The text of ids (malloc'd, NUL-terminated; *len its bytes: the text may
 * hold a NUL itself); skip_special leaves special tokens out, as the
 * reference library's decode does by default. NULL with err when an id is
 * not in the vocabulary. */
char *rt_tokenizer_decode(const rt_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, size_t *len,
                          char *err, size_t errlen);

#endif
