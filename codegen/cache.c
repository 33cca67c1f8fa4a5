/* codegen/cache.c — the disk cache of compiled CUDA code.
 *
 * DIR is $TGC_CACHE_DIR, else $HOME/.cache/tgc. An entry is one file
 * DIR/cuda/<hex key>.tgcc:
 *     "TGCCACHE"  u32 version  u32 nblobs  key[32]
 *     nblobs x (u32 tag, u32 zero, u64 size)
 *     the blobs' bytes, in order
 *     SHA-256 of everything above
 * (integers little-endian). Readers verify all of it; anything wrong
 * removes the file and counts as corrupt + miss. Writers write a unique
 * temporary file in the same directory (mkstemp), fsync it and rename it
 * over the entry: concurrent writers of one key leave one complete entry,
 * and a crash leaves at most a stray temporary, never a torn entry. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen.h"

#define CACHE_MAGIC "TGCCACHE"
#define CACHE_VERSION 1u
#define HEADER_BYTES (8 + 4 + 4 + 32)
#define BLOB_HEADER_BYTES 16
#define MAX_BLOBS 16

struct cg_cache {
  char *dir;       /* DIR */
  char *entries;   /* DIR/cuda */
  cg_cache_stats stats;
  pthread_mutex_t lock; /* of stats: parts compile on several threads (parts.c) */
};

static void count(cg_cache *c, int64_t *counter) {
  pthread_mutex_lock(&c->lock);
  (*counter)++;
  pthread_mutex_unlock(&c->lock);
}

void cg_cache_count_compile(cg_cache *c) { count(c, &c->stats.compiles); }

/* mkdir -p */
static int make_dirs(const char *path, char *err, size_t errlen) {
  char *p = strdup(path);
  if (!p) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char saved = *s;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      cg_errf(err, errlen, "cannot create the cache directory %s: %s", p, strerror(errno));
      free(p);
      return -1;
    }
    *s = saved;
    if (!saved) break;
  }
  free(p);
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
    cg_errf(err, errlen, "cache directory %s is not a directory", path);
    return -1;
  }
  return 0;
}

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", a, b);
  return s;
}

cg_cache *cg_cache_open(const char *dir, char *err, size_t errlen) {
  char *owned = NULL;
  if (!dir || !*dir) dir = getenv("TGC_CACHE_DIR");
  if (!dir || !*dir) {
    const char *home = getenv("HOME");
    if (!home || !*home) {
      cg_errf(err, errlen, "no cache directory: neither TGC_CACHE_DIR nor HOME is set");
      return NULL;
    }
    owned = join(home, ".cache/tgc");
    dir = owned;
  }
  cg_cache *c = calloc(1, sizeof *c);
  if (c) pthread_mutex_init(&c->lock, NULL);
  if (!c || !dir || !(c->dir = strdup(dir)) || !(c->entries = join(dir, "cuda"))) {
    cg_errf(err, errlen, "out of memory");
    free(owned);
    cg_cache_free(c);
    return NULL;
  }
  free(owned);
  if (make_dirs(c->entries, err, errlen) != 0) {
    cg_cache_free(c);
    return NULL;
  }
  return c;
}

void cg_cache_free(cg_cache *c) {
  if (!c) return;
  pthread_mutex_destroy(&c->lock);
  free(c->dir);
  free(c->entries);
  free(c);
}

const char *cg_cache_dir(const cg_cache *c) { return c->dir; }

cg_cache_stats *cg_cache_stats_of(cg_cache *c) { return &c->stats; }

void cg_cache_entry_path(const cg_cache *c, const cg_hash *key, char *buf, size_t len) {
  char hex[65];
  cg_hash_hex(key, hex);
  snprintf(buf, len, "%s/%s.tgcc", c->entries, hex);
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* The whole file, or NULL (absent or unreadable). */
static uint8_t *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc(n > 0 ? (size_t)n : 1)) &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
      *size = (size_t)n;
    } else {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  return buf;
}

/* Checks an entry's bytes: the blob count, or -1 when anything is off. */
static int verify(const uint8_t *buf, size_t size, const cg_hash *key, cg_blob *blobs, int max) {
  if (size < HEADER_BYTES + 32 || memcmp(buf, CACHE_MAGIC, 8) != 0) return -1;
  if (get_u32(buf + 8) != CACHE_VERSION || memcmp(buf + 16, key->bytes, 32) != 0) return -1;
  uint32_t n = get_u32(buf + 12);
  if (n > MAX_BLOBS || (int)n > max) return -1;
  size_t body = size - 32;
  cg_sha256 s;
  cg_hash sum;
  cg_sha256_init(&s);
  cg_sha256_update(&s, buf, body);
  cg_sha256_final(&s, &sum);
  if (memcmp(sum.bytes, buf + body, 32) != 0) return -1;
  size_t at = HEADER_BYTES + (size_t)n * BLOB_HEADER_BYTES;
  if (at > body) return -1;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *h = buf + HEADER_BYTES + (size_t)i * BLOB_HEADER_BYTES;
    uint64_t len = get_u64(h + 8);
    if (get_u32(h + 4) != 0 || len > body - at) return -1;
    blobs[i].tag = get_u32(h);
    blobs[i].data = buf + at;
    blobs[i].size = (size_t)len;
    at += (size_t)len;
  }
  return at == body ? (int)n : -1;
}

int cg_cache_get(cg_cache *c, const cg_hash *key, cg_blob *blobs, int max, void **storage) {
  char path[4096];
  cg_cache_entry_path(c, key, path, sizeof path);
  size_t size = 0;
  uint8_t *buf = read_file(path, &size);
  *storage = NULL;
  if (!buf) {
    count(c, &c->stats.misses);
    return 0;
  }
  int n = verify(buf, size, key, blobs, max);
  if (n < 0) {
    free(buf);
    unlink(path);
    count(c, &c->stats.corrupt);
    count(c, &c->stats.misses);
    return 0;
  }
  count(c, &c->stats.hits);
  *storage = buf;
  return n;
}

int cg_cache_put(cg_cache *c, const cg_hash *key, const cg_blob *blobs, int n, char *err, size_t errlen) {
  if (n < 0 || n > MAX_BLOBS) {
    cg_errf(err, errlen, "cache entry of %d blobs (at most %d)", n, MAX_BLOBS);
    count(c, &c->stats.store_failures);
    return -1;
  }
  size_t size = HEADER_BYTES + (size_t)n * BLOB_HEADER_BYTES + 32;
  for (int i = 0; i < n; i++) size += blobs[i].size;
  uint8_t *buf = malloc(size);
  if (!buf) {
    cg_errf(err, errlen, "out of memory");
    count(c, &c->stats.store_failures);
    return -1;
  }
  memcpy(buf, CACHE_MAGIC, 8);
  put_u32(buf + 8, CACHE_VERSION);
  put_u32(buf + 12, (uint32_t)n);
  memcpy(buf + 16, key->bytes, 32);
  size_t at = HEADER_BYTES + (size_t)n * BLOB_HEADER_BYTES;
  for (int i = 0; i < n; i++) {
    uint8_t *h = buf + HEADER_BYTES + (size_t)i * BLOB_HEADER_BYTES;
    put_u32(h, blobs[i].tag);
    put_u32(h + 4, 0);
    put_u64(h + 8, blobs[i].size);
    if (blobs[i].size) memcpy(buf + at, blobs[i].data, blobs[i].size);
    at += blobs[i].size;
  }
  cg_sha256 s;
  cg_hash sum;
  cg_sha256_init(&s);
  cg_sha256_update(&s, buf, at);
  cg_sha256_final(&s, &sum);
  memcpy(buf + at, sum.bytes, 32);

  char path[4096], tmp[4096];
  cg_cache_entry_path(c, key, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", c->entries);
  int fd = mkstemp(tmp);
  int rc = -1;
  if (fd < 0) {
    cg_errf(err, errlen, "cannot write to the cache directory %s: %s", c->entries, strerror(errno));
  } else {
    size_t done = 0;
    while (done < size) {
      ssize_t w = write(fd, buf + done, size - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      done += (size_t)w;
    }
    int ok = done == size && fchmod(fd, 0644) == 0 && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0) {
      rc = 0;
    } else {
      cg_errf(err, errlen, "cannot write cache entry %s: %s", path, strerror(errno));
      unlink(tmp);
    }
  }
  free(buf);
  if (rc == 0) count(c, &c->stats.stores);
  else count(c, &c->stats.store_failures);
  return rc;
}
