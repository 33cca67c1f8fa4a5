/* runtime/io/npy.c — reading and writing numpy .npy files.
 *
 * Layout: "\x93NUMPY", major, minor, header length (uint16 LE for v1,
 * uint32 LE for v2/v3), then a Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and '\n', then the raw C-order data.
 *
 * The reader trusts nothing: the header length is capped, the dict is parsed
 * by a small recursive-descent parser (quoted keys in either quote style,
 * True/False, int tuples with optional trailing comma), the element count is
 * overflow-checked against IR_MAX_ELEMENTS, and the data size is compared to
 * the file size before anything is allocated. Every failure is
 * "path: message" in err and a NULL result.
 *
 * The writer emits v1.0 with the header padded so the data starts at a
 * multiple of 64 bytes; bf16 is written as <f4 since numpy has no bf16.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "rt_io.h"

#define NPY_MAX_HEADER (1u << 20)


/* numpy descr of each dtype as stored in a file (bf16 is widened to f32). */
const char *rt_npy_descr(ir_dtype dt) {
  switch (dt) {
  case IR_DT_F64: return "<f8";
  case IR_DT_F32: return "<f4";
  case IR_DT_BF16: return "<f4";
  case IR_DT_F16: return "<f2";
  case IR_DT_I32: return "<i4";
  case IR_DT_I64: return "<i8";
  case IR_DT_BOOL: return "|b1";
  default: return NULL;
  }
}

/* ---- header dict parser ------------------------------------------------ */

typedef struct {
  const char *s, *end;
  char msg[160]; /* first error */
  bool has_descr, has_fortran, has_shape;
  char descr[16];
  bool fortran;
  ir_type type; /* rank and dims from 'shape' */
} hdr_parser;

static void skip_ws(hdr_parser *p) {
  while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) p->s++;
}

static int fail(hdr_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(hdr_parser *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->msg, sizeof p->msg, fmt, ap);
  va_end(ap);
  return -1;
}

static bool accept(hdr_parser *p, char c) {
  skip_ws(p);
  if (p->s < p->end && *p->s == c) {
    p->s++;
    return true;
  }
  return false;
}

/* string := '...' | "..." (no escapes needed for the keys and descrs we accept) */
static int parse_string(hdr_parser *p, char *buf, size_t n) {
  skip_ws(p);
  if (p->s >= p->end || (*p->s != '\'' && *p->s != '"'))
    return fail(p, "malformed header: expected a quoted string");
  char q = *p->s++;
  size_t len = 0;
  while (p->s < p->end && *p->s != q) {
    if (len + 1 < n) buf[len++] = *p->s;
    else return fail(p, "malformed header: string too long");
    p->s++;
  }
  if (p->s >= p->end) return fail(p, "malformed header: unterminated string");
  p->s++;
  buf[len] = 0;
  return 0;
}

static int parse_bool(hdr_parser *p, bool *out) {
  skip_ws(p);
  size_t left = (size_t)(p->end - p->s);
  if (left >= 4 && memcmp(p->s, "True", 4) == 0) {
    p->s += 4, *out = true;
    return 0;
  }
  if (left >= 5 && memcmp(p->s, "False", 5) == 0) {
    p->s += 5, *out = false;
    return 0;
  }
  return fail(p, "malformed header: fortran_order must be True or False");
}

/* shape := '(' (int (',' int)* ','?)? ')' ; int may carry a Python 2 'L' */
static int parse_shape(hdr_parser *p) {
  if (!accept(p, '(')) return fail(p, "malformed header: shape must be a tuple");
  int rank = 0;
  int64_t numel = 1;
  for (;;) {
    if (accept(p, ')')) break;
    skip_ws(p);
    bool neg = false;
    if (p->s < p->end && *p->s == '-') neg = true, p->s++;
    if (p->s >= p->end || !isdigit((unsigned char)*p->s))
      return fail(p, "malformed header: expected an integer in shape");
    int64_t v = 0;
    bool big = false;
    while (p->s < p->end && isdigit((unsigned char)*p->s)) {
      if (v > (INT64_MAX - 9) / 10) big = true;
      else v = v * 10 + (*p->s - '0');
      p->s++;
    }
    if (p->s < p->end && *p->s == 'L') p->s++;
    if (neg && v != 0) return fail(p, "negative dimension -%lld in shape", (long long)v);
    if (rank >= IR_MAX_RANK) return fail(p, "shape has more than %d dimensions", IR_MAX_RANK);
    if (big || v > IR_MAX_ELEMENTS || (v != 0 && numel > IR_MAX_ELEMENTS / v))
      return fail(p, "shape too large (more than 2^48 elements)");
    numel *= v;
    p->type.dims[rank++] = v;
    if (accept(p, ',')) continue;
    if (accept(p, ')')) break;
    return fail(p, "malformed header: expected ',' or ')' in shape");
  }
  /* A bare "(3)" is an int in Python, not a tuple; numpy never writes it. */
  p->type.rank = rank;
  return 0;
}

/* dict := '{' (key ':' value (',' key ':' value)* ','?)? '}' */
static int parse_header(hdr_parser *p) {
  if (!accept(p, '{')) return fail(p, "malformed header: expected '{'");
  for (;;) {
    if (accept(p, '}')) break;
    char key[32];
    if (parse_string(p, key, sizeof key) != 0) return -1;
    if (!accept(p, ':')) return fail(p, "malformed header: expected ':' after '%s'", key);
    bool *seen;
    int r;
    if (strcmp(key, "descr") == 0) {
      seen = &p->has_descr;
      r = parse_string(p, p->descr, sizeof p->descr);
    } else if (strcmp(key, "fortran_order") == 0) {
      seen = &p->has_fortran;
      r = parse_bool(p, &p->fortran);
    } else if (strcmp(key, "shape") == 0) {
      seen = &p->has_shape;
      r = parse_shape(p);
    } else {
      return fail(p, "malformed header: unknown key '%s'", key);
    }
    if (r != 0) return -1;
    if (*seen) return fail(p, "malformed header: duplicate key '%s'", key);
    *seen = true;
    if (accept(p, ',')) continue;
    if (accept(p, '}')) break;
    return fail(p, "malformed header: expected ',' or '}'");
  }
  skip_ws(p);
  if (p->s != p->end) return fail(p, "malformed header: unexpected text after the dict");
  if (!p->has_descr) return fail(p, "malformed header: missing key 'descr'");
  if (!p->has_fortran) return fail(p, "malformed header: missing key 'fortran_order'");
  if (!p->has_shape) return fail(p, "malformed header: missing key 'shape'");
  return 0;
}

static int dtype_of_descr(const char *d) {
  static const struct { const char *descr; ir_dtype dt; } known[] = {
      {"<f8", IR_DT_F64}, {"<f4", IR_DT_F32}, {"<f2", IR_DT_F16}, {"<i4", IR_DT_I32},
      {"<i8", IR_DT_I64}, {"|b1", IR_DT_BOOL},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(d, known[i].descr) == 0) return (int)known[i].dt;
  return -1;
}

/* ---- reading ------------------------------------------------------------ */

rt_tensor *rt_npy_read(const char *path, char *err, size_t errlen) {
  int fd = ir_open_regular(path);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    if (fd == -2) rt_path_errf(err, errlen, path, "not a regular file");
    else rt_path_errf(err, errlen, path, "cannot open: %s", strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  rt_tensor *t = NULL;
  char *header = NULL;
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    rt_path_errf(err, errlen, path, "cannot open: %s", strerror(errno));
    goto done;
  }
  uint64_t file_size = (uint64_t)st.st_size;
  unsigned char pre[12];
  size_t got = fread(pre, 1, 8, f);
  if (got < 6 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    rt_path_errf(err, errlen, path, "not a .npy file (bad magic)");
    goto done;
  }
  if (got < 8) {
    rt_path_errf(err, errlen, path, "truncated header");
    goto done;
  }
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0) {
    rt_path_errf(err, errlen, path, "unsupported .npy format version %d.%d", major, minor);
    goto done;
  }
  size_t len_bytes = major == 1 ? 2 : 4;
  if (fread(pre + 8, 1, len_bytes, f) != len_bytes) {
    rt_path_errf(err, errlen, path, "truncated header");
    goto done;
  }
  uint32_t hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
  if (major > 1) hlen |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
  uint64_t data_start = 8 + len_bytes + (uint64_t)hlen;
  if (hlen > NPY_MAX_HEADER) {
    rt_path_errf(err, errlen, path, "header length %u too large", (unsigned)hlen);
    goto done;
  }
  if (data_start > file_size) {
    rt_path_errf(err, errlen, path, "truncated header (header length %u, file has %llu bytes)",
            (unsigned)hlen, (unsigned long long)file_size);
    goto done;
  }
  header = malloc(hlen + 1);
  if (!header || fread(header, 1, hlen, f) != hlen) {
    rt_path_errf(err, errlen, path, header ? "read error" : "out of memory");
    goto done;
  }
  header[hlen] = 0;
  hdr_parser p = {.s = header, .end = header + hlen};
  if (parse_header(&p) != 0) {
    rt_path_errf(err, errlen, path, "%s", p.msg);
    goto done;
  }
  int dt = dtype_of_descr(p.descr);
  if (dt < 0) {
    rt_path_errf(err, errlen, path, "unsupported dtype '%s' (supported: <f8 <f4 <f2 <i4 <i8 |b1)",
            p.descr);
    goto done;
  }
  if (p.fortran) {
    rt_path_errf(err, errlen, path, "fortran_order True is not supported (write C order)");
    goto done;
  }
  p.type.dtype = (ir_dtype)dt;
  uint64_t want = (uint64_t)rt_numel(&p.type) * ir_dtype_size(p.type.dtype);
  uint64_t have = file_size - data_start;
  if (have != want) {
    rt_path_errf(err, errlen, path, "%s data: expected %llu bytes, file has %llu",
            have < want ? "truncated" : "trailing", (unsigned long long)want,
            (unsigned long long)have);
    goto done;
  }
  t = rt_tensor_new(&p.type);
  if (!t) {
    rt_path_errf(err, errlen, path, "out of memory (%llu bytes)", (unsigned long long)want);
    goto done;
  }
  if (fread(t->data, 1, t->nbytes, f) != t->nbytes) {
    rt_path_errf(err, errlen, path, "truncated data");
    rt_tensor_free(t);
    t = NULL;
    goto done;
  }
  if (t->type.dtype == IR_DT_BOOL) /* any nonzero byte is true */
    for (size_t i = 0; i < t->nbytes; i++) ((uint8_t *)t->data)[i] = ((uint8_t *)t->data)[i] != 0;
done:
  free(header);
  fclose(f);
  return t;
}

/* ---- writing ------------------------------------------------------------ */

int rt_npy_write(const char *path, const rt_tensor *t, char *err, size_t errlen) {
  const char *descr = rt_npy_descr(t->type.dtype);
  if (!descr) {
    rt_path_errf(err, errlen, path, "cannot write dtype %d", (int)t->type.dtype);
    return -1;
  }
  char hdr[512];
  int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int d = 0; d < t->type.rank; d++)
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%lld", d ? ", " : "",
                  (long long)t->type.dims[d]);
  n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s), }", t->type.rank == 1 ? "," : "");
  /* pad with spaces so 10 + len is a multiple of 64, the last byte '\n' */
  int total = (10 + n + 1 + 63) / 64 * 64;
  while (10 + n + 1 < total) hdr[n++] = ' ';
  hdr[n++] = '\n';
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                           (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};

  FILE *f = fopen(path, "wb");
  if (!f) {
    rt_path_errf(err, errlen, path, "cannot open for writing: %s", strerror(errno));
    return -1;
  }
  bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n;
  if (ok && t->type.dtype == IR_DT_BF16) {
    int64_t count = rt_numel(&t->type);
    for (int64_t i = 0; ok && i < count; i++) {
      float v = ir_bf16_to_f32(((const uint16_t *)t->data)[i]);
      ok = fwrite(&v, sizeof v, 1, f) == 1;
    }
  } else if (ok && t->nbytes) {
    ok = fwrite(t->data, 1, t->nbytes, f) == t->nbytes;
  }
  if (fclose(f) != 0) ok = false;
  if (!ok) {
    rt_path_errf(err, errlen, path, "write failed: %s", strerror(errno));
    return -1;
  }
  return 0;
}
