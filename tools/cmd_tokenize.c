/* tools/cmd_tokenize.c — `tgc tokenize`: text to token ids (or back, with
 * --decode) through a Hugging Face tokenizer.json (runtime/rt_tokenizer.h,
 * docs/tokenizers.md). Flags, one library call, printing. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "rt_tokenizer.h"
#include "tool.h"

static const char *const tokenize_help =
    "usage: tgc tokenize --tokenizer FILE [TEXT] [--decode] [--json] [--no-special] [--keep-special]\n"
    "                    [--max-length N]\n"
    "\n"
    "Prints the token ids of TEXT (or of standard input when TEXT is left out, all of\n"
    "it, newlines included) under the tokenizer FILE, a Hugging Face tokenizer.json,\n"
    "on one line separated by spaces. The ids are the reference library's\n"
    "(tokenizers' Tokenizer.encode): added tokens such as [MASK] or <|endoftext|>\n"
    "written in the text are matched first, then the normalizer, the pre-tokenizer,\n"
    "the model, the file's truncation and the post-processor's special tokens\n"
    "([CLS] ... [SEP]); the file's padding is not applied.\n"
    "\n"
    "Supported (anything else in FILE is refused by name):\n"
    "  WordPiece  BERT: BertNormalizer (clean text, Chinese characters, accents,\n"
    "             lowercase), BertPreTokenizer, '##' continuations, [UNK]\n"
    "  BPE        byte level (GPT-2, Llama 3): ByteLevel, or Split on GPT-2's or\n"
    "             Llama 3's pattern then ByteLevel; merges by rank\n"
    "\n"
    "  --tokenizer FILE     the tokenizer.json to use (required)\n"
    "  --decode             the reverse: TEXT (or standard input) holds ids, separated by\n"
    "                       spaces or commas, or the JSON that --json prints; prints the text\n"
    "  --json               print {\"ids\": [...]} (with --decode: {\"text\": \"...\"})\n"
    "  --no-special         leave out the post-processor's special tokens ([CLS], [SEP])\n"
    "  --keep-special       --decode: print special tokens too (by default they are skipped)\n"
    "  --max-length N       truncate to N ids (special tokens included) in place of the file's\n"
    "                       truncation, as the reference's encode with max_length=N does\n"
    "                       (sentence-transformers passes its max_seq_length: 256 for\n"
    "                       all-MiniLM-L6-v2, whose tokenizer.json says 128)\n"
    "\n"
    "Example:\n"
    "  tgc tokenize --tokenizer tokenizer.json \"Hello, world!\"\n"
    "  tgc tokenize --tokenizer tokenizer.json --decode \"101 7592 1010 2088 999 102\"\n";

/* All of standard input (malloc'd), or NULL after reporting. */
static char *read_stdin(size_t *len) {
  size_t cap = 4096, n = 0;
  char *s = malloc(cap);
  for (;;) {
    if (!s) break;
    if (n + 1 == cap) {
      char *p = realloc(s, cap * 2);
      if (!p) break;
      s = p;
      cap *= 2;
    }
    size_t got = fread(s + n, 1, cap - 1 - n, stdin);
    n += got;
    if (got == 0) {
      if (ferror(stdin)) {
        fprintf(stderr, "tgc: error: tokenize: cannot read standard input: %s\n", strerror(errno));
        free(s);
        return NULL;
      }
      s[n] = 0;
      *len = n;
      return s;
    }
  }
  free(s);
  fprintf(stderr, "tgc: error: tokenize: out of memory reading standard input\n");
  return NULL;
}

/* The ids of text: integers separated by spaces, commas, brackets, or the
 * JSON {"ids": [...]}. 0, or 1 after reporting. */
static int parse_ids(const char *text, int32_t **ids, size_t *n) {
  const char *p = text;
  size_t cap = 0;
  *ids = NULL;
  *n = 0;
  for (;;) {
    while (*p && strchr(" \t\r\n,[]{}:", *p)) p++;
    if (strncmp(p, "\"ids\"", 5) == 0) {
      p += 5;
      continue;
    }
    if (!*p) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX || (*end && !strchr(" \t\r\n,[]{}:", *end))) {
      size_t k = strcspn(p, " \t\r\n,[]{}:");
      fprintf(stderr, "tgc: error: tokenize --decode: '%.*s' is not a token id (ids are integers >= 0)\n",
              (int)(k > 40 ? 40 : k), p);
      free(*ids);
      return 1;
    }
    if (*n == cap) {
      cap = cap ? 2 * cap : 64;
      int32_t *q = realloc(*ids, cap * sizeof *q);
      if (!q) IR_DIE("out of memory (q)");
      *ids = q;
    }
    (*ids)[(*n)++] = (int32_t)v;
    p = end;
  }
}

static int print_decoded(const rt_tokenizer *t, const char *input, bool json, bool keep_special) {
  int32_t *ids;
  size_t n;
  if (parse_ids(input, &ids, &n)) return 1;
  char err[512];
  size_t len;
  char *text = rt_tokenizer_decode(t, ids, n, !keep_special, &len, err, sizeof err);
  free(ids);
  if (!text) {
    fprintf(stderr, "tgc: error: tokenize --decode: %s\n", err);
    return 1;
  }
  if (json) {
    json_t *o = json_pack("{s:s%}", "text", text, len);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    /* jansson's compact form has no space after ':'; print it as the rest of tgc's JSON */
    if (s) printf("{\"text\": %s\n", s + strlen("{\"text\":"));
    free(s);
    json_decref(o);
  } else {
    fwrite(text, 1, len, stdout);
    putchar('\n');
  }
  free(text);
  return 0;
}

static int print_encoded(const rt_tokenizer *t, const char *text, size_t len, bool json, bool special) {
  int32_t *ids;
  size_t n;
  char err[512];
  if (rt_tokenizer_encode(t, text, len, special, &ids, &n, err, sizeof err)) {
    fprintf(stderr, "tgc: error: tokenize: %s\n", err);
    return 1;
  }
  if (json) fputs("{\"ids\": [", stdout);
  for (size_t i = 0; i < n; i++) printf("%s%d", i ? (json ? ", " : " ") : "", ids[i]);
  puts(json ? "]}" : "");
  free(ids);
  return 0;
}

int tool_cmd_tokenize(int argc, char **argv) {
  const char *path = NULL, *text = NULL;
  bool decode = false, json = false, special = true, keep_special = false;
  long long max_length = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(tokenize_help, stdout);
      return 0;
    }
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--tokenizer") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "tgc: error: --tokenizer needs a file name (see 'tgc tokenize --help')\n");
        return 1;
      }
      path = argv[++i];
    } else if (strncmp(a, "--tokenizer=", 12) == 0) {
      path = a + 12;
    } else if (strcmp(a, "--decode") == 0) {
      decode = true;
    } else if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (strcmp(a, "--no-special") == 0) {
      special = false;
    } else if (strcmp(a, "--keep-special") == 0) {
      keep_special = true;
    } else if (strcmp(a, "--max-length") == 0 || strncmp(a, "--max-length=", 13) == 0) {
      const char *v = a[12] == '=' ? a + 13 : i + 1 < argc ? argv[++i] : "";
      char *end;
      errno = 0;
      max_length = strtoll(v, &end, 10);
      if (!*v || *end || errno || max_length < 1) {
        fprintf(stderr, "tgc: error: --max-length needs an integer >= 1, got '%s' (see 'tgc tokenize --help')\n", v);
        return 1;
      }
    } else if (a[0] == '-' && a[1] && strcmp(a, "--") != 0) {
      fprintf(stderr, "tgc: error: unknown option '%s' (see 'tgc tokenize --help')\n", a);
      return 1;
    } else {
      if (strcmp(a, "--") == 0 && i + 1 < argc) a = argv[++i];
      if (text) {
        fprintf(stderr, "tgc: error: unexpected argument '%s' (one TEXT at a time; quote it) (see 'tgc tokenize "
                        "--help')\n", a);
        return 1;
      }
      text = a;
    }
  }
  if (!path) {
    fprintf(stderr, "tgc: error: tokenize: missing --tokenizer FILE (see 'tgc tokenize --help')\n");
    return 1;
  }
  if (decode && !special) {
    fprintf(stderr, "tgc: error: tokenize: --no-special is for encoding (with --decode: --keep-special)\n");
    return 1;
  }
  if (decode && max_length) {
    fprintf(stderr, "tgc: error: tokenize: --max-length is for encoding\n");
    return 1;
  }
  if (!decode && keep_special) {
    fprintf(stderr, "tgc: error: tokenize: --keep-special is for --decode (encoding: --no-special)\n");
    return 1;
  }
  char err[1024];
  rt_tokenizer *t = rt_tokenizer_load(path, err, sizeof err);
  if (!t) {
    fprintf(stderr, "tgc: error: --tokenizer: %s\n", err);
    return 1;
  }
  if (max_length) rt_tokenizer_set_max_length(t, max_length);
  size_t len = 0;
  char *input = NULL;
  if (!text) {
    input = read_stdin(&len);
    if (!input) {
      rt_tokenizer_free(t);
      return 1;
    }
    text = input;
  } else {
    len = strlen(text);
  }
  int rc = decode ? print_decoded(t, text, json, keep_special) : print_encoded(t, text, len, json, special);
  free(input);
  rt_tokenizer_free(t);
  return rc;
}
