/* runtime/io/safetensors.c — reading and writing training state in the
 * safetensors format (https://github.com/huggingface/safetensors):
 *
 *   [8 bytes: header length N, little-endian u64]
 *   [N bytes: JSON header, padded with spaces to a multiple of 8]
 *   [tensor bytes: little-endian, row-major, back to back in header order]
 *
 * The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the first byte after the header) and
 * holds a "__metadata__" map of strings.
 *
 * Writing is crash-safe (rt_write_file_atomic, which --trace uses too): a
 * temporary file next to PATH
 * (PATH.tmp.<pid>.<random>, created exclusively, so two writers never share
 * one) is written, flushed, fsynced and renamed over PATH, then the
 * directory is fsynced, so PATH is always either the old file or the new
 * one, whole. PATH itself must be a regular file or absent: a device, a
 * folder, a FIFO or a symbolic link is never replaced.
 * rt_safetensors_check_target, run before a long job, also proves the folder
 * writable and removes temporary files of PATH whose writer is dead.
 *
 * Every file tgc writes carries metadata "data_crc32": the CRC-32 (zlib's,
 * the polynomial of gzip and PNG) of all tensor bytes in file order, as 8
 * hex digits; reading checks it when present, so a flipped data byte is
 * refused instead of resumed from. The header has its own, the last
 * metadata entry "header_crc32": the CRC-32 of the header's bytes (padding
 * included) with its own 8 digits read as "00000000"; also checked when
 * present (tgc states older than it lack it: train_state.c decides by the
 * format's version whether it must be there). (By hand: python3 -c "import zlib,sys;
 * d=open(sys.argv[1],'rb').read(); n=int.from_bytes(d[:8],'little');
 * print('%08x' % zlib.crc32(d[8+n:]))" FILE.)
 *
 * Reading trusts nothing: every size in the header is checked against the
 * real file size before anything is allocated, offsets must tile the data
 * area exactly (no overlap, no hole, no trailing bytes), and the byte count
 * of every tensor must match its dtype and shape. Errors read
 * "PATH: problem" (see the messages below; tests/unit/test_safetensors.c
 * checks them).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "internal.h"
#include "rt_io.h"

/* Headers larger than this are refused (the format's own limit is 100 MB). */
#define ST_MAX_HEADER 100000000ull

struct rt_safetensors {
  int n;
  char **names;
  rt_tensor **tensors;
  int n_meta;
  char **meta_keys, **meta_values;
};

static const struct {
  ir_dtype dt;
  const char *name;
} st_dtypes[] = {{IR_DT_F64, "F64"}, {IR_DT_F32, "F32"}, {IR_DT_BF16, "BF16"}, {IR_DT_F16, "F16"},
                 {IR_DT_I32, "I32"}, {IR_DT_I64, "I64"}, {IR_DT_BOOL, "BOOL"}};

static const char *st_dtype_name(ir_dtype dt) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
    if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
  return NULL;
}

static int st_dtype_from_name(const char *s) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
    if (strcmp(st_dtypes[i].name, s) == 0) return (int)st_dtypes[i].dt;
  return -1;
}

/* The CRC-32 of n tensors' bytes, in the order given. */
static uint32_t data_crc32(const rt_tensor *const *ts, int n) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (int i = 0; i < n; i++)
    if (ts[i]->nbytes) crc = crc32_z(crc, ts[i]->data, ts[i]->nbytes);
  return (uint32_t)crc;
}

static bool host_is_little_endian(void) {
  uint16_t x = 1;
  unsigned char c;
  memcpy(&c, &x, 1);
  return c == 1;
}


/* ---------------------------------------------------------------------- */
/* writing                                                                 */
/* ---------------------------------------------------------------------- */

/* Where the 8 hex digits of "header_crc32":"<value>" lie in the header's n
 * bytes (NULL: not there in that form). The header's checksum is the CRC-32
 * of its n bytes (padding included) with those digits read as "00000000". */
static char *header_crc_digits(char *hdr, size_t n, const char *value) {
  char pat[64];
  int pl = snprintf(pat, sizeof pat, "\"%s\":\"%.8s\"", RT_SAFETENSORS_HEADER_CRC_KEY, value);
  for (size_t i = 0; pl > 0 && i + (size_t)pl <= n; i++)
    if (memcmp(hdr + i, pat, (size_t)pl) == 0) return hdr + i + pl - 9;
  return NULL;
}

/* The folder of path ("." when it has none). */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strdup(".");
  if (slash == path) return strdup("/");
  return strndup(path, (size_t)(slash - path));
}

static int fsync_dir_of(const char *path) {
  char *dir = dir_of(path);
  if (!dir) return -1;
  int fd = open(dir, O_RDONLY);
  free(dir);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* PATH must be absent or a regular file (lstat: a symbolic link is not
 * followed, and not replaced either). */
static int check_replaceable(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return 0;
    rt_path_errf(err, errlen, path, "cannot check it: %s", strerror(errno));
    return -1;
  }
  if (S_ISREG(st.st_mode)) return 0;
  const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISLNK(st.st_mode)  ? "a symbolic link"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "a special file";
  rt_path_errf(err, errlen, path, "exists and is not a regular file (%s); not replacing it", kind);
  return -1;
}

/* Creates a fresh temporary file PATH.tmp.<pid>.<8 hex digits> (O_EXCL: a
 * name another writer holds is never reused). Returns the fd and the name
 * in *tmp_out (malloc'd), or -1 with errno set. */
static int create_temp(const char *path, char **tmp_out) {
  static uint64_t counter;
  size_t n = strlen(path) + 48;
  char *tmp = malloc(n);
  if (!tmp) return -1;
  for (int attempt = 0; attempt < 100; attempt++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (++counter * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    snprintf(tmp, n, "%s.tmp.%ld.%08x", path, (long)getpid(), (unsigned)(x & 0xffffffffu));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *tmp_out = tmp;
      return fd;
    }
    if (errno != EEXIST) break;
  }
  int e = errno;
  free(tmp);
  errno = e;
  return -1;
}

/* Whether name is "<base>.tmp.<pid>.<8 hex>" with no such process alive. */
static bool is_stale_temp(const char *name, const char *base) {
  size_t bl = strlen(base);
  if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp.", 5) != 0) return false;
  const char *p = name + bl + 5;
  char *end;
  errno = 0;
  long pid = strtol(p, &end, 10);
  if (end == p || *end != '.' || errno || pid <= 0) return false;
  if (strlen(end + 1) != 8 || strspn(end + 1, "0123456789abcdef") != 8) return false;
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int rt_safetensors_check_target(const char *path, int *removed, char *err, size_t errlen) {
  if (removed) *removed = 0;
  if (check_replaceable(path, err, errlen) != 0) return -1;
  char *dir = dir_of(path), *tmp = NULL;
  if (!dir) {
    rt_path_errf(err, errlen, path, "out of memory");
    return -1;
  }
  /* proven writable by creating (and removing) a file there: access(2)
   * says yes to root on a read-only mount's folders */
  int fd = create_temp(path, &tmp);
  if (fd < 0) {
    rt_path_errf(err, errlen, path, "cannot create a file in %s: %s", dir, strerror(errno));
    free(dir);
    return -1;
  }
  close(fd);
  unlink(tmp);
  free(tmp);
  /* temporary files of PATH whose writer was killed before its rename */
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  DIR *dp = opendir(dir);
  for (struct dirent *e; dp && (e = readdir(dp));) {
    if (!is_stale_temp(e->d_name, base)) continue;
    size_t n = strlen(dir) + strlen(e->d_name) + 2;
    char *full = malloc(n);
    if (full) {
      snprintf(full, n, "%s/%s", dir, e->d_name);
      if (unlink(full) == 0 && removed) (*removed)++;
    }
    free(full);
  }
  if (dp) closedir(dp);
  free(dir);
  return 0;
}

int rt_write_file_atomic(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx, char *err, size_t errlen) {
  if (check_replaceable(path, err, errlen) != 0) return -1;
  char *tmp = NULL;
  int fd = create_temp(path, &tmp);
  FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!f) {
    char *dir = dir_of(path);
    rt_path_errf(err, errlen, path, "cannot create a file in %s: %s", dir ? dir : ".", strerror(errno));
    free(dir);
    if (fd >= 0) close(fd), unlink(tmp);
    free(tmp);
    return -1;
  }
  errno = 0;
  bool ok = fill(f, ctx) == 0 && !ferror(f);
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int saved = errno;
  ok = (fclose(f) == 0) && ok;
  if (!ok) {
    rt_path_errf(err, errlen, path, "writing %s failed: %s", tmp, strerror(saved ? saved : errno ? errno : EIO));
    remove(tmp);
    free(tmp);
    return -1;
  }
  if (rename(tmp, path) != 0) {
    rt_path_errf(err, errlen, path, "cannot rename %s over it: %s", tmp, strerror(errno));
    remove(tmp);
    free(tmp);
    return -1;
  }
  free(tmp);
  if (fsync_dir_of(path) != 0) {
    rt_path_errf(err, errlen, path, "cannot fsync its directory: %s", strerror(errno));
    return -1;
  }
  return 0;
}

/* A safetensors file's bytes after the header is encoded. */
typedef struct {
  const char *hdr;
  size_t hlen, padded;
  const rt_named_tensor *tensors;
  int n;
} st_body;

static int write_body(FILE *f, void *ctx) {
  const st_body *b = ctx;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)b->padded >> (8 * i));
  bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(b->hdr, 1, b->hlen, f) == b->hlen;
  for (size_t i = b->hlen; ok && i < b->padded; i++) ok = fputc(' ', f) != EOF;
  for (int i = 0; ok && i < b->n; i++)
    ok = b->tensors[i].t->nbytes == 0 ||
         fwrite(b->tensors[i].t->data, 1, b->tensors[i].t->nbytes, f) == b->tensors[i].t->nbytes;
  return ok ? 0 : -1;
}

int rt_safetensors_write(const char *path, const rt_named_tensor *tensors, int n, const rt_meta_entry *meta,
                         int n_meta, char *err, size_t errlen) {
  if (!host_is_little_endian()) {
    rt_path_errf(err, errlen, path, "writing safetensors needs a little-endian host");
    return -1;
  }
  if (check_replaceable(path, err, errlen) != 0) return -1;
  json_t *root = json_object();
  json_t *md = json_object();
  json_object_set_new(root, "__metadata__", md);
  for (int i = 0; i < n_meta; i++) {
    json_t *v = json_string(meta[i].value);
    if (strcmp(meta[i].key, RT_SAFETENSORS_CRC_KEY) == 0 || strcmp(meta[i].key, RT_SAFETENSORS_HEADER_CRC_KEY) == 0) {
      rt_path_errf(err, errlen, path, "metadata key '%s' is reserved (the writer sets it)", meta[i].key);
      json_decref(v);
      json_decref(root);
      return -1;
    }
    if (!v || json_object_set_new(md, meta[i].key, v) != 0) {
      rt_path_errf(err, errlen, path, "metadata '%s' is not valid UTF-8", meta[i].key);
      json_decref(root);
      return -1;
    }
  }
  { /* the checksum of the tensor bytes, in the order they are written */
    const rt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    if (!ts) {
      rt_path_errf(err, errlen, path, "out of memory");
      json_decref(root);
      return -1;
    }
    for (int i = 0; i < n; i++) ts[i] = tensors[i].t;
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", (unsigned)data_crc32(ts, n));
    free(ts);
    json_object_set_new(md, RT_SAFETENSORS_CRC_KEY, json_string(crc));
    json_object_set_new(md, RT_SAFETENSORS_HEADER_CRC_KEY, json_string("00000000")); /* set below */
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const rt_tensor *t = tensors[i].t;
    const char *dn = st_dtype_name(t->type.dtype);
    if (!dn || strcmp(tensors[i].name, "__metadata__") == 0 || json_object_get(root, tensors[i].name)) {
      rt_path_errf(err, errlen, path, dn ? "tensor name '%s' is reserved or used twice" : "tensor '%s' has no safetensors dtype",
           tensors[i].name);
      json_decref(root);
      return -1;
    }
    json_t *e = json_object(), *shape = json_array(), *offs = json_array();
    json_object_set_new(e, "dtype", json_string(dn));
    for (int d = 0; d < t->type.rank; d++) json_array_append_new(shape, json_integer(t->type.dims[d]));
    json_object_set_new(e, "shape", shape);
    json_array_append_new(offs, json_integer((json_int_t)off));
    off += t->nbytes;
    json_array_append_new(offs, json_integer((json_int_t)off));
    json_object_set_new(e, "data_offsets", offs);
    if (json_object_set_new(root, tensors[i].name, e) != 0) {
      rt_path_errf(err, errlen, path, "tensor name '%s' is not valid UTF-8", tensors[i].name);
      json_decref(root);
      return -1;
    }
  }
  char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!hdr) {
    rt_path_errf(err, errlen, path, "cannot encode the header (are the names valid UTF-8?)");
    return -1;
  }
  size_t hlen = strlen(hdr);
  size_t padded = (hlen + 7) / 8 * 8;
  char *full = malloc(padded + 1);
  if (!full) {
    free(hdr);
    rt_path_errf(err, errlen, path, "out of memory");
    return -1;
  }
  memcpy(full, hdr, hlen);
  memset(full + hlen, ' ', padded - hlen);
  full[padded] = 0;
  free(hdr);
  hdr = full;
  char *digits = header_crc_digits(hdr, padded, "00000000");
  char crc[16];
  snprintf(crc, sizeof crc, "%08x", (unsigned)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef *)hdr, padded));
  if (!digits) { /* written above, once, in this form */
    fprintf(stderr, "%s:%d: internal error: no \"%s\" in the header written\n", __FILE__, __LINE__,
            RT_SAFETENSORS_HEADER_CRC_KEY);
    abort();
  }
  memcpy(digits, crc, 8);

  st_body body = {hdr, padded, padded, tensors, n};
  int rc = rt_write_file_atomic(path, write_body, &body, err, errlen);
  free(hdr);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* reading                                                                 */
/* ---------------------------------------------------------------------- */

void rt_safetensors_free(rt_safetensors *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) {
    free(f->names[i]);
    rt_tensor_free(f->tensors[i]);
  }
  for (int i = 0; i < f->n_meta; i++) {
    free(f->meta_keys[i]);
    free(f->meta_values[i]);
  }
  free(f->names);
  free(f->tensors);
  free(f->meta_keys);
  free(f->meta_values);
  free(f);
}

int rt_safetensors_count(const rt_safetensors *f) { return f->n; }
const char *rt_safetensors_name(const rt_safetensors *f, int i) { return f->names[i]; }
const rt_tensor *rt_safetensors_tensor(const rt_safetensors *f, int i) { return f->tensors[i]; }

const rt_tensor *rt_safetensors_find(const rt_safetensors *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->names[i], name) == 0) return f->tensors[i];
  return NULL;
}

int rt_safetensors_meta_count(const rt_safetensors *f) { return f->n_meta; }
const char *rt_safetensors_meta_key(const rt_safetensors *f, int i) { return f->meta_keys[i]; }

const char *rt_safetensors_meta(const rt_safetensors *f, const char *key) {
  for (int i = 0; i < f->n_meta; i++)
    if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
  return NULL;
}

/* One tensor entry of the header, checked. */
typedef struct {
  const char *name;
  ir_type type;
  uint64_t begin, end;
} st_entry;

static int cmp_entry(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_entry(const char *path, const char *name, json_t *e, uint64_t data_len, st_entry *out, char *err,
                       size_t errlen) {
  out->name = name;
  if (!json_is_object(e)) {
    rt_path_errf(err, errlen, path, "tensor '%s': header entry is not an object", name);
    return -1;
  }
  json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape"),
         *offs = json_object_get(e, "data_offsets");
  if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs)) {
    rt_path_errf(err, errlen, path, "tensor '%s': needs \"dtype\" (a string), \"shape\" and \"data_offsets\" (arrays)", name);
    return -1;
  }
  int d = st_dtype_from_name(json_string_value(dt));
  if (d < 0) {
    rt_path_errf(err, errlen, path, "tensor '%s': unsupported dtype \"%s\"", name, json_string_value(dt));
    return -1;
  }
  out->type.dtype = (ir_dtype)d;
  size_t rank = json_array_size(shape);
  if (rank > IR_MAX_RANK) {
    rt_path_errf(err, errlen, path, "tensor '%s': rank %zu is more than %d", name, rank, IR_MAX_RANK);
    return -1;
  }
  out->type.rank = (int)rank;
  int64_t numel = 1;
  for (size_t i = 0; i < rank; i++) {
    json_t *v = json_array_get(shape, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
      rt_path_errf(err, errlen, path, "tensor '%s': shape entries must be non-negative integers", name);
      return -1;
    }
    int64_t dim = json_integer_value(v);
    if (dim > 0 && numel > IR_MAX_ELEMENTS / dim) {
      rt_path_errf(err, errlen, path, "tensor '%s': shape is too large", name);
      return -1;
    }
    numel *= dim;
    out->type.dims[i] = dim;
  }
  json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
  if (json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
      json_integer_value(en) < json_integer_value(b)) {
    rt_path_errf(err, errlen, path, "tensor '%s': data_offsets must be [begin, end] with 0 <= begin <= end", name);
    return -1;
  }
  out->begin = (uint64_t)json_integer_value(b);
  out->end = (uint64_t)json_integer_value(en);
  if (out->end > data_len) {
    rt_path_errf(err, errlen, path, "tensor '%s': data_offsets [%llu, %llu] go past the end of the data (%llu bytes)", name,
         (unsigned long long)out->begin, (unsigned long long)out->end, (unsigned long long)data_len);
    return -1;
  }
  uint64_t want = (uint64_t)numel * ir_dtype_size(out->type.dtype);
  if (out->end - out->begin != want) {
    char tb[160];
    rt_path_errf(err, errlen, path, "tensor '%s': data_offsets span %llu bytes but %s needs %llu", name,
         (unsigned long long)(out->end - out->begin), ir_type_str(&out->type, tb, sizeof tb),
         (unsigned long long)want);
    return -1;
  }
  return 0;
}

/* The tensors (read in file order) against metadata "data_crc32", when the
 * file has it. */
static int check_crc(const rt_safetensors *f, const char *path, char *err, size_t errlen) {
  const char *want = rt_safetensors_meta(f, RT_SAFETENSORS_CRC_KEY);
  if (!want) return 0;
  if (strlen(want) != 8 || strspn(want, "0123456789abcdef") != 8) {
    rt_path_errf(err, errlen, path, "corrupt header: metadata \"%s\" is \"%.40s\", not 8 hexadecimal digits",
                 RT_SAFETENSORS_CRC_KEY, want);
    return -1;
  }
  char got[16];
  snprintf(got, sizeof got, "%08x", (unsigned)data_crc32((const rt_tensor *const *)f->tensors, f->n));
  if (strcmp(got, want) != 0) {
    rt_path_errf(err, errlen, path, "corrupt: the tensor bytes have CRC-32 %s but the header says %s", got, want);
    return -1;
  }
  return 0;
}

static rt_safetensors *read_file(const char *path, bool with_data, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!host_is_little_endian()) {
    rt_path_errf(err, errlen, path, "reading safetensors needs a little-endian host");
    return NULL;
  }
  int fd = ir_open_regular(path);
  FILE *fp = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!fp) {
    if (fd == -2) rt_path_errf(err, errlen, path, "not a regular file");
    else rt_path_errf(err, errlen, path, "cannot open: %s", strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  rt_safetensors *f = NULL;
  json_t *root = NULL;
  char *hdr = NULL;
  st_entry *ents = NULL;
  struct stat st;
  if (fstat(fileno(fp), &st) != 0) {
    rt_path_errf(err, errlen, path, "cannot open: %s", strerror(errno));
    goto bad;
  }
  uint64_t size = (uint64_t)st.st_size;
  unsigned char len8[8];
  if (size < 8 || fread(len8, 1, 8, fp) != 8) {
    rt_path_errf(err, errlen, path, "truncated: %llu bytes, too short to hold the 8-byte header length",
         (unsigned long long)size);
    goto bad;
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen > size - 8) {
    rt_path_errf(err, errlen, path, "truncated or corrupt: the header length %llu is more than the %llu bytes that follow",
         (unsigned long long)hlen, (unsigned long long)(size - 8));
    goto bad;
  }
  if (hlen > ST_MAX_HEADER || hlen < 2) {
    rt_path_errf(err, errlen, path, "corrupt: implausible header length %llu", (unsigned long long)hlen);
    goto bad;
  }
  hdr = malloc(hlen);
  if (!hdr || fread(hdr, 1, hlen, fp) != hlen) {
    rt_path_errf(err, errlen, path, "cannot read the %llu-byte header", (unsigned long long)hlen);
    goto bad;
  }
  json_error_t je;
  root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    rt_path_errf(err, errlen, path, "corrupt header: bad JSON at byte %d: %s", je.position, je.text);
    goto bad;
  }
  if (!json_is_object(root)) {
    rt_path_errf(err, errlen, path, "corrupt header: the JSON is not an object");
    goto bad;
  }
  json_t *hc = json_object_get(json_object_get(root, "__metadata__"), RT_SAFETENSORS_HEADER_CRC_KEY);
  if (hc) { /* the header's own checksum, when the file has one */
    const char *want = json_string_value(hc);
    if (!want || strlen(want) != 8 || strspn(want, "0123456789abcdef") != 8) {
      rt_path_errf(err, errlen, path, "corrupt header: metadata \"%s\" is \"%.40s\", not 8 hexadecimal digits",
                   RT_SAFETENSORS_HEADER_CRC_KEY, want ? want : "");
      goto bad;
    }
    char *digits = header_crc_digits(hdr, hlen, want);
    if (!digits) {
      rt_path_errf(err, errlen, path, "corrupt header: metadata \"%s\" is not written as \"%s\":\"<8 hexadecimal digits>\"",
                   RT_SAFETENSORS_HEADER_CRC_KEY, RT_SAFETENSORS_HEADER_CRC_KEY);
      goto bad;
    }
    char wanted[9], got[16];
    memcpy(wanted, digits, 8), wanted[8] = 0;
    memcpy(digits, "00000000", 8);
    snprintf(got, sizeof got, "%08x", (unsigned)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef *)hdr, hlen));
    if (strcmp(got, wanted) != 0) {
      rt_path_errf(err, errlen, path, "corrupt header: its bytes have CRC-32 %s but metadata \"%s\" says %s", got,
                   RT_SAFETENSORS_HEADER_CRC_KEY, wanted);
      goto bad;
    }
  }
  uint64_t data_len = size - 8 - hlen;
  size_t cap = json_object_size(root);
  f = calloc(1, sizeof *f);
  ents = calloc(cap + 1, sizeof *ents);
  if (!f || !ents) goto oom;
  f->names = calloc(cap + 1, sizeof *f->names);
  f->tensors = calloc(cap + 1, sizeof *f->tensors);
  if (!f->names || !f->tensors) goto oom;
  int ne = 0;
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (strcmp(key, "__metadata__") == 0) {
      if (!json_is_object(val)) {
        rt_path_errf(err, errlen, path, "corrupt header: \"__metadata__\" is not an object");
        goto bad;
      }
      size_t nm = json_object_size(val);
      f->meta_keys = calloc(nm + 1, sizeof *f->meta_keys);
      f->meta_values = calloc(nm + 1, sizeof *f->meta_values);
      if (!f->meta_keys || !f->meta_values) goto oom;
      const char *mk;
      json_t *mv;
      json_object_foreach(val, mk, mv) {
        if (!json_is_string(mv)) {
          rt_path_errf(err, errlen, path, "corrupt header: metadata \"%s\" is not a string", mk);
          goto bad;
        }
        f->meta_keys[f->n_meta] = strdup(mk);
        f->meta_values[f->n_meta] = strdup(json_string_value(mv));
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1]) goto oom;
      }
      continue;
    }
    if (parse_entry(path, key, val, data_len, &ents[ne], err, errlen) != 0) goto bad;
    ne++;
  }
  /* The tensors must tile the data area exactly. */
  qsort(ents, (size_t)ne, sizeof *ents, cmp_entry);
  uint64_t at = 0;
  for (int i = 0; i < ne; i++) {
    if (ents[i].begin < at) {
      rt_path_errf(err, errlen, path, "corrupt: tensors '%s' and '%s' overlap", ents[i - 1].name, ents[i].name);
      goto bad;
    }
    if (ents[i].begin > at) {
      rt_path_errf(err, errlen, path, "corrupt: data bytes %llu..%llu belong to no tensor", (unsigned long long)at,
           (unsigned long long)ents[i].begin);
      goto bad;
    }
    at = ents[i].end;
  }
  if (at != data_len) {
    rt_path_errf(err, errlen, path, "corrupt: %llu bytes after the last tensor", (unsigned long long)(data_len - at));
    goto bad;
  }
  /* Sizes are now bounded by the file size: allocate and read. */
  for (int i = 0; i < ne && with_data; i++) {
    rt_tensor *t = rt_tensor_new(&ents[i].type);
    if (!t) goto oom;
    f->tensors[f->n] = t;
    f->names[f->n] = strdup(ents[i].name);
    f->n++;
    if (!f->names[f->n - 1]) goto oom;
    if (t->nbytes && (fseeko(fp, (off_t)(8 + hlen + ents[i].begin), SEEK_SET) != 0 ||
                      fread(t->data, 1, t->nbytes, fp) != t->nbytes)) {
      rt_path_errf(err, errlen, path, "cannot read the data of tensor '%s'", ents[i].name);
      goto bad;
    }
  }
  if (with_data && check_crc(f, path, err, errlen) != 0) goto bad;
  free(ents);
  free(hdr);
  json_decref(root);
  fclose(fp);
  return f;
oom:
  rt_path_errf(err, errlen, path, "out of memory");
bad:
  free(ents);
  free(hdr);
  if (root) json_decref(root);
  rt_safetensors_free(f);
  fclose(fp);
  return NULL;
}

rt_safetensors *rt_safetensors_read(const char *path, char *err, size_t errlen) {
  return read_file(path, true, err, errlen);
}

rt_safetensors *rt_safetensors_read_header(const char *path, char *err, size_t errlen) {
  return read_file(path, false, err, errlen);
}
