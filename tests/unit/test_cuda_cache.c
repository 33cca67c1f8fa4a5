/* tests/unit/test_cuda_cache.c — codegen/sha256.c, codegen/cache.c and the
 * ptxas-info parser of codegen/nvrtc.c; needs no CUDA library.
 *
 *   - SHA-256 of the FIPS 180-4 example messages (and a million 'a's);
 *   - the cache: where it lives ($TGC_CACHE_DIR, else $HOME/.cache/tgc),
 *     a round trip of blobs, a miss, and each kind of damage (a flipped
 *     byte in a blob, a flipped checksum, a truncated file, an entry
 *     renamed to another key, an empty file) is rejected, removed and
 *     counted, never returned;
 *   - the parser on NVRTC's real log text (entry functions, a called
 *     function's spills counted against its kernel) and on the emulator's
 *     lines. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"

static char tmp[256];

static void check_sha(const char *msg, size_t n, int repeat, const char *want) {
  cg_sha256 s;
  cg_hash h;
  char hex[65];
  cg_sha256_init(&s);
  for (int i = 0; i < repeat; i++) cg_sha256_update(&s, msg, n);
  cg_sha256_final(&s, &h);
  cg_hash_hex(&h, hex);
  CHECK_STR(hex, want);
}

static void test_sha256(void) {
  check_sha("", 0, 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha("abc", 3, 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  check_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, 1,
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  check_sha("aaaaaaaaaa", 10, 100000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* fields are length-prefixed: ("ab","c") and ("a","bc") differ */
  cg_sha256 s1, s2;
  cg_hash h1, h2;
  cg_sha256_init(&s1);
  cg_sha256_field(&s1, "ab", 2);
  cg_sha256_field(&s1, "c", 1);
  cg_sha256_final(&s1, &h1);
  cg_sha256_init(&s2);
  cg_sha256_field(&s2, "a", 1);
  cg_sha256_field(&s2, "bc", 2);
  cg_sha256_final(&s2, &h2);
  CHECK(memcmp(h1.bytes, h2.bytes, 32) != 0);
}

static cg_hash key_of(const char *text) {
  cg_sha256 s;
  cg_hash h;
  cg_sha256_init(&s);
  cg_sha256_update(&s, text, strlen(text));
  cg_sha256_final(&s, &h);
  return h;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Flips one byte of the file at offset (from the end when negative). */
static void flip_byte(const char *path, long offset) {
  FILE *f = fopen(path, "r+b");
  if (!f) return;
  fseek(f, offset, offset < 0 ? SEEK_END : SEEK_SET);
  long at = ftell(f);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x40, f);
  fclose(f);
}

/* Writes the test entry for key, then damages it with `damage`. */
typedef void (*damage_fn)(const char *path, cg_cache *c);
static void dmg_blob(const char *path, cg_cache *c) { (void)c, flip_byte(path, 200); }
static void dmg_checksum(const char *path, cg_cache *c) { (void)c, flip_byte(path, -1); }
static void dmg_truncate(const char *path, cg_cache *c) {
  (void)c;
  if (truncate(path, file_size(path) - 40) != 0) perror("truncate");
}
static void dmg_empty(const char *path, cg_cache *c) {
  (void)c;
  if (truncate(path, 0) != 0) perror("truncate");
}
/* another key's (valid) entry under this key's name */
static void dmg_other_key(const char *path, cg_cache *c) {
  cg_hash other = key_of("other");
  char other_path[4096];
  cg_blob b = {7, "x", 1};
  char err[256];
  cg_cache_put(c, &other, &b, 1, err, sizeof err);
  cg_cache_entry_path(c, &other, other_path, sizeof other_path);
  rename(other_path, path);
}

static void test_cache(void) {
  char err[512], want[600], path[4096];
  /* where: TGC_CACHE_DIR, else $HOME/.cache/tgc */
  char home[300];
  snprintf(home, sizeof home, "%s/home", tmp);
  setenv("HOME", home, 1);
  unsetenv("TGC_CACHE_DIR");
  cg_cache *c = cg_cache_open(NULL, err, sizeof err);
  CHECK(c != NULL);
  snprintf(want, sizeof want, "%s/.cache/tgc", home);
  if (c) CHECK_STR(cg_cache_dir(c), want);
  cg_cache_free(c);
  snprintf(want, sizeof want, "%s/env-cache", tmp);
  setenv("TGC_CACHE_DIR", want, 1);
  c = cg_cache_open(NULL, err, sizeof err);
  if (c) CHECK_STR(cg_cache_dir(c), want);
  cg_cache_free(c);
  /* a directory that cannot be made */
  snprintf(want, sizeof want, "%s/a-file", tmp);
  fclose(fopen(want, "w"));
  CHECK(cg_cache_open(want, err, sizeof err) == NULL);
  char want_err[700];
  snprintf(want_err, sizeof want_err, "cannot create the cache directory %s/cuda: Not a directory", want);
  CHECK_STR(err, want_err);

  snprintf(want, sizeof want, "%s/cache", tmp);
  c = cg_cache_open(want, err, sizeof err);
  CHECK(c != NULL);
  if (!c) return;
  cg_cache_stats *st = cg_cache_stats_of(c);
  cg_hash key = key_of("kernel source");
  char big[1000];
  for (int i = 0; i < 1000; i++) big[i] = (char)(i * 7);
  cg_blob in[3] = {{1, big, sizeof big}, {2, "ptx text", 8}, {3, "", 0}};
  cg_blob out[4];
  void *storage = NULL;
  CHECK_EQ_INT(cg_cache_get(c, &key, out, 4, &storage), 0);
  CHECK_EQ_INT(st->misses, 1);
  CHECK_EQ_INT(cg_cache_put(c, &key, in, 3, err, sizeof err), 0);
  CHECK_EQ_INT(st->stores, 1);
  CHECK_EQ_INT(cg_cache_get(c, &key, out, 4, &storage), 3);
  CHECK_EQ_INT(st->hits, 1);
  CHECK(out[0].tag == 1 && out[0].size == 1000 && memcmp(out[0].data, big, 1000) == 0);
  CHECK(out[1].tag == 2 && out[1].size == 8 && memcmp(out[1].data, "ptx text", 8) == 0);
  CHECK(out[2].tag == 3 && out[2].size == 0);
  free(storage);
  /* fewer slots than blobs: not trusted either */
  CHECK_EQ_INT(cg_cache_get(c, &key, out, 2, &storage), 0);

  /* every kind of damage is a miss that removes the entry */
  damage_fn damages[] = {dmg_blob, dmg_checksum, dmg_truncate, dmg_empty, dmg_other_key};
  for (int d = 0; d < 5; d++) {
    int64_t corrupt = st->corrupt;
    CHECK_EQ_INT(cg_cache_put(c, &key, in, 3, err, sizeof err), 0);
    cg_cache_entry_path(c, &key, path, sizeof path);
    damages[d](path, c);
    CHECK_EQ_INT(cg_cache_get(c, &key, out, 4, &storage), 0);
    CHECK(storage == NULL);
    CHECK_EQ_INT(st->corrupt, corrupt + 1);
    CHECK(access(path, F_OK) != 0);
  }
  /* no temporary file is left behind */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls -A %s/cache/cuda | grep -c '^\\.tmp' > /dev/null", tmp);
  CHECK(system(cmd) != 0);
  cg_cache_free(c);
}

static void test_ptxas_parse(void) {
  const char *log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k2' for 'sm_80'\n"
      "ptxas info    : Function properties for k2\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]\n"
      "ptxas info    : Compile time = 2.135 ms\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z6helperv\n"
      "ptxas         .     16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Function properties for k\n"
      "ptxas         .     32 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 372 bytes cmem[0]\n"
      "tgc-emu info  : Function 'e' for 'sm_80': 2048 bytes smem, 3 parameters (registers and spills are not "
      "emulated)\n";
  cg_kernel_info *k = NULL;
  int n = cg_ptxas_info_parse(log, &k);
  CHECK_EQ_INT(n, 3);
  if (n == 3) {
    CHECK_STR(k[0].name, "k2");
    CHECK_STR(k[0].arch, "sm_80");
    CHECK_EQ_INT(k[0].registers, 8);
    CHECK_EQ_INT(k[0].barriers, 0);
    CHECK_EQ_INT(k[0].smem_bytes, 0);
    CHECK_EQ_INT(k[0].spill_store_bytes, 0);
    CHECK_STR(k[1].name, "k");
    CHECK_STR(k[1].arch, "sm_90");
    CHECK_EQ_INT(k[1].registers, 255);
    CHECK_EQ_INT(k[1].barriers, 1);
    CHECK_EQ_INT(k[1].smem_bytes, 1024);
    /* its own spills plus those of the function it calls */
    CHECK_EQ_INT(k[1].stack_bytes, 32);
    CHECK_EQ_INT(k[1].spill_store_bytes, 16);
    CHECK_EQ_INT(k[1].spill_load_bytes, 12);
    CHECK_STR(k[2].name, "e");
    CHECK_EQ_INT(k[2].registers, -1);
    CHECK_EQ_INT(k[2].smem_bytes, 2048);
    CHECK_EQ_INT(k[2].spill_store_bytes, -1);
  }
  free(k);
  /* a helper's spills with no line of the kernel's own afterwards still count */
  const char *log2 =
      "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
      "ptxas info    : Function properties for _Z6helperv\n"
      "ptxas         .     16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 0 barriers\n";
  n = cg_ptxas_info_parse(log2, &k);
  CHECK_EQ_INT(n, 1);
  if (n == 1) {
    CHECK_EQ_INT(k[0].spill_store_bytes, 12);
    CHECK_EQ_INT(k[0].spill_load_bytes, 8);
    CHECK_EQ_INT(k[0].registers, 40);
  }
  free(k);
  CHECK_EQ_INT(cg_ptxas_info_parse("", &k), 0);
  free(k);
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/tgc-cache-XXXXXX");
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 2;
  }
  test_sha256();
  test_cache();
  test_ptxas_parse();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return check_done();
}
