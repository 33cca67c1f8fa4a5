/* ir/diag.c — diagnostics shared by every reader of user input.
 *
 * An error is printed as
 *     path:line:col: error: message
 *       3 |   z2 = sinn(2 * pi * z1)
 *         |        ^
 * when the source text of `path` was registered with ir_diag_add_source, and
 * as the first line alone otherwise. Errors past the limit are counted, not
 * printed. Also the safe whole-file reader used for every input file. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir_die.h"
#include "ir.h"

typedef struct {
  const char *path;
  const char *text;
  size_t len;
} diag_source;

struct ir_diag {
  FILE *out;
  int n_errors, max_errors;
  bool quiet; /* count, print nothing */
  diag_source *sources;
  int n_sources, cap_sources;
};

ir_diag *ir_diag_new(FILE *out) {
  ir_diag *d = calloc(1, sizeof *d);
  if (!d) IR_DIE("out of memory (d)");
  d->out = out ? out : stderr;
  d->max_errors = 20;
  return d;
}

void ir_diag_free(ir_diag *d) {
  if (!d) return;
  free(d->sources);
  free(d);
}

void ir_diag_add_source(ir_diag *d, const char *path, const char *text, size_t len) {
  if (d->n_sources == d->cap_sources) {
    d->cap_sources = d->cap_sources ? 2 * d->cap_sources : 4;
    d->sources = realloc(d->sources, d->cap_sources * sizeof *d->sources);
    if (!d->sources) IR_DIE("out of memory (d->sources)");
  }
  d->sources[d->n_sources++] = (diag_source){path, text, len};
}

int ir_diag_errors(const ir_diag *d) { return d->n_errors; }
void ir_diag_set_max_errors(ir_diag *d, int n) { d->max_errors = n; }
void ir_diag_set_quiet(ir_diag *d, bool quiet) { d->quiet = quiet; }

static const diag_source *find_source(const ir_diag *d, const char *path) {
  if (!path) return NULL;
  for (int i = d->n_sources - 1; i >= 0; i--)
    if (d->sources[i].path == path || strcmp(d->sources[i].path, path) == 0) return &d->sources[i];
  return NULL;
}

/* Prints the line `line` of src and a caret under column `col` (1-based,
 * counting bytes; tabs are echoed in the caret line so it stays aligned). */
static void quote_line(FILE *out, const diag_source *src, int line, int col) {
  const char *p = src->text, *end = src->text + src->len;
  for (int l = 1; l < line && p < end; p++)
    if (*p == '\n') l++;
  if (p > end) return;
  const char *eol = p;
  while (eol < end && *eol != '\n') eol++;
  if (eol > p && eol[-1] == '\r') eol--;
  int width = (int)(eol - p);
  if (width > 200) width = 200; /* keep minified/garbage lines readable */
  fprintf(out, "%5d | ", line);
  for (int i = 0; i < width; i++) {
    unsigned char c = (unsigned char)p[i];
    fputc(c == '\t' || (c >= 32 && c != 127) ? c : '?', out);
  }
  fputs("\n      | ", out);
  for (int i = 0; i < col - 1 && i < width; i++) fputc(p[i] == '\t' ? '\t' : ' ', out);
  fputs("^\n", out);
}

/* msg with every run of name characters ([A-Za-z0-9_.]) longer than
 * MAX_NAME_SHOWN bytes cut to its start and "...": names in messages come
 * from the input, and a 10 MB identifier must not be echoed in full. */
#define MAX_NAME_SHOWN 64
static void put_cut_names(FILE *out, const char *msg) {
  for (const char *p = msg; *p;) {
    size_t run = 0;
    while (p[run] && (isalnum((unsigned char)p[run]) || p[run] == '_' || p[run] == '.')) run++;
    if (run > MAX_NAME_SHOWN) {
      fprintf(out, "%.*s...", MAX_NAME_SHOWN - 4, p);
      p += run;
    } else if (run) {
      fwrite(p, 1, run, out);
      p += run;
    } else {
      fputc(*p++, out);
    }
  }
}

/* A message is composed in memory and written with one call: stderr is
 * unbuffered, and written piece by piece the lines of several ranks under
 * mpirun interleaved word by word ("exists and istgc: error: ..."). */
static void report_to(ir_diag *d, FILE *out, const char *kind, ir_loc loc, const char *fmt, va_list ap);

static void report(ir_diag *d, const char *kind, ir_loc loc, const char *fmt, va_list ap) {
  if (d->quiet) return;
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  report_to(d, m ? m : d->out, kind, loc, fmt, ap);
  if (m && fclose(m) == 0 && text) {
    fwrite(text, 1, len, d->out);
    fflush(d->out);
  }
  free(text);
}

static void report_to(ir_diag *d, FILE *out, const char *kind, ir_loc loc, const char *fmt, va_list ap) {
  if (loc.file && loc.line > 0)
    fprintf(out, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col > 0 ? loc.col : 1, kind);
  else if (loc.file)
    fprintf(out, "%s: %s: ", loc.file, kind);
  else
    fprintf(out, "tgc: %s: ", kind);
  char small[512], *msg = small;
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  if (n >= (int)sizeof small && (msg = malloc((size_t)n + 1))) vsnprintf(msg, (size_t)n + 1, fmt, aq);
  va_end(aq);
  put_cut_names(out, msg ? msg : small);
  if (msg != small) free(msg);
  fputc('\n', out);
  const diag_source *src = find_source(d, loc.file);
  if (src && loc.line > 0) quote_line(out, src, loc.line, loc.col > 0 ? loc.col : 1);
}

void ir_verror(ir_diag *d, ir_loc loc, const char *fmt, va_list ap) {
  d->n_errors++;
  if (d->n_errors <= d->max_errors) report(d, "error", loc, fmt, ap);
  else if (d->n_errors == d->max_errors + 1 && !d->quiet)
    fprintf(d->out, "tgc: too many errors; stopping the list here\n");
}

void ir_error(ir_diag *d, ir_loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(d, loc, fmt, ap);
  va_end(ap);
}

void ir_note(ir_diag *d, ir_loc loc, const char *fmt, ...) {
  if (d->n_errors > d->max_errors) return;
  va_list ap;
  va_start(ap, fmt);
  report(d, "note", loc, fmt, ap);
  va_end(ap);
}

void ir_error_plain(ir_diag *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(d, (ir_loc){0}, fmt, ap);
  va_end(ap);
}

int ir_open_regular(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  int flags = fcntl(fd, F_GETFL);
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    close(fd);
    return -2;
  }
  return fd;
}

char *ir_read_file(const char *path, size_t max_bytes, size_t *len, ir_diag *d) {
  int fd = ir_open_regular(path);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    if (fd == -2) ir_error_plain(d, "'%s' is not a regular file", path);
    else ir_error_plain(d, "cannot open '%s': %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    ir_error_plain(d, "cannot open '%s': %s", path, strerror(errno));
    fclose(f);
    return NULL;
  }
  if ((unsigned long long)st.st_size > max_bytes) {
    ir_error_plain(d, "'%s' is too large (%lld bytes; the limit is %zu)", path,
                   (long long)st.st_size, max_bytes);
    fclose(f);
    return NULL;
  }
  size_t cap = (size_t)st.st_size + 1, n = 0;
  char *buf = malloc(cap);
  if (!buf) IR_DIE("out of memory (buf)");
  for (;;) {
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    n += got;
    if (n < cap - 1) {
      if (ferror(f)) {
        ir_error_plain(d, "cannot read '%s': %s", path, strerror(errno));
        free(buf);
        fclose(f);
        return NULL;
      }
      break;
    }
    /* the file grew while we read it (or st_size lied, as for /proc) */
    if (cap - 1 >= max_bytes) {
      ir_error_plain(d, "'%s' is too large (the limit is %zu bytes)", path, max_bytes);
      free(buf);
      fclose(f);
      return NULL;
    }
    cap = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
    buf = realloc(buf, cap);
    if (!buf) IR_DIE("out of memory (buf)");
  }
  fclose(f);
  buf[n] = 0;
  *len = n;
  return buf;
}
