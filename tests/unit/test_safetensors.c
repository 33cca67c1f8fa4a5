/* tests/unit/test_safetensors.c — safetensors state files: a round trip of
 * every dtype with metadata (bit-exact), the atomic write (no temporary file
 * left, an existing file replaced whole), and every kind of corrupt or
 * truncated file refused with its exact message. The save target: a path
 * that is a device, folder, FIFO or symbolic link is refused and left as it
 * was; temporary files of dead writers are removed, a live writer's kept;
 * two processes saving to one path at once never collide. The data_crc32
 * checksum against a bitwise CRC-32, and a flipped data byte refused.
 * rt_write_file_atomic's failure leaves the previous file whole.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ir.h"
#include "rt_io.h"

static char dir[] = "/tmp/tgc_st_XXXXXX";
static char path[600];

static rt_tensor *make(ir_dtype dt, int rank, int64_t d0, int64_t d1) {
  ir_type t = {.dtype = dt, .rank = rank, .dims = {d0, d1}};
  rt_tensor *x = rt_tensor_new(&t);
  for (int64_t i = 0; i < ir_type_numel(&t); i++) rt_tensor_set(x, i, dt == IR_DT_BOOL ? (double)(i % 2) : 0.25 * (double)i - 1.5);
  return x;
}

/* Entries of dir named state.safetensors.tmp.* (temporary files of path). */
static int count_temps(void) {
  int n = 0;
  DIR *dp = opendir(dir);
  for (struct dirent *e; dp && (e = readdir(dp));) n += strncmp(e->d_name, "state.safetensors.tmp.", 22) == 0;
  if (dp) closedir(dp);
  return n;
}

static void test_round_trip(void) {
  rt_tensor *ts[6] = {make(IR_DT_F64, 2, 2, 3), make(IR_DT_F32, 1, 5, 0), make(IR_DT_I32, 2, 1, 4),
                      make(IR_DT_BOOL, 1, 3, 0), make(IR_DT_BF16, 0, 0, 0), make(IR_DT_I64, 1, 0, 0)};
  rt_named_tensor nt[6] = {{"W", ts[0]}, {"l.0.b", ts[1]}, {"ids", ts[2]}, {"mask", ts[3]}, {"s", ts[4]}, {"empty", ts[5]}};
  rt_meta_entry meta[2] = {{"step", "42"}, {"note", "a \"quoted\" value"}};
  char err[1024];
  CHECK_EQ_INT(rt_safetensors_write(path, nt, 6, meta, 2, err, sizeof err), 0);
  CHECK_EQ_INT(count_temps(), 0); /* renamed away */
  rt_safetensors *f = rt_safetensors_read(path, err, sizeof err);
  CHECK(f != NULL);
  if (!f) {
    fprintf(stderr, "%s\n", err);
  } else {
    CHECK_EQ_INT(rt_safetensors_count(f), 6);
    for (int i = 0; i < 6; i++) {
      const rt_tensor *x = rt_safetensors_find(f, nt[i].name);
      CHECK(x != NULL);
      if (x) {
        CHECK(ir_type_equal(&x->type, &ts[i]->type));
        CHECK(x->nbytes == ts[i]->nbytes && (x->nbytes == 0 || memcmp(x->data, ts[i]->data, x->nbytes) == 0));
      }
    }
    CHECK(rt_safetensors_find(f, "nope") == NULL);
    CHECK_STR(rt_safetensors_meta(f, "step"), "42");
    CHECK_STR(rt_safetensors_meta(f, "note"), "a \"quoted\" value");
    CHECK(rt_safetensors_meta(f, "missing") == NULL);
    rt_safetensors_free(f);
  }
  /* the header is padded to 8 bytes, as the format recommends */
  FILE *fp = fopen(path, "rb");
  unsigned char len8[8];
  CHECK(fread(len8, 1, 8, fp) == 8);
  fclose(fp);
  CHECK_EQ_INT(len8[0] % 8, 0);
  /* overwrite: the new content replaces the old whole */
  CHECK_EQ_INT(rt_safetensors_write(path, nt, 1, NULL, 0, err, sizeof err), 0);
  f = rt_safetensors_read(path, err, sizeof err);
  CHECK(f && rt_safetensors_count(f) == 1);
  rt_safetensors_free(f);
  /* a duplicate name is refused */
  rt_named_tensor dup[2] = {{"W", ts[0]}, {"W", ts[1]}};
  CHECK_EQ_INT(rt_safetensors_write(path, dup, 2, NULL, 0, err, sizeof err), -1);
  char want[900];
  snprintf(want, sizeof want, "%s: tensor name 'W' is reserved or used twice", path);
  CHECK_STR(err, want);
  for (int i = 0; i < 6; i++) rt_tensor_free(ts[i]);
}

/* Writes [u64 hlen][header][data] with hlen = strlen(header) unless given. */
static void write_raw(const char *header, uint64_t hlen, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  if (hlen == UINT64_MAX - 1) hlen = strlen(header);
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
  fwrite(len8, 1, 8, fp);
  fwrite(header, 1, strlen(header), fp);
  if (n) fwrite(data, 1, n, fp);
  fclose(fp);
}

static void expect_refused(const char *what, const char *msg) {
  char err[1024], want[1200];
  rt_safetensors *f = rt_safetensors_read(path, err, sizeof err);
  CHECK(f == NULL);
  rt_safetensors_free(f);
  snprintf(want, sizeof want, "%s: %s", path, msg);
  if (!f && strcmp(err, want) != 0) fprintf(stderr, "case %s:\n", what);
  CHECK_STR(err, want);
}

#define AUTO (UINT64_MAX - 1)

static void test_corrupt(void) {
  double data[4] = {1, 2, 3, 4};
  FILE *fp = fopen(path, "wb");
  fputs("abcde", fp);
  fclose(fp);
  expect_refused("short", "truncated: 5 bytes, too short to hold the 8-byte header length");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 1000, data, 16);
  expect_refused("long header length", "truncated or corrupt: the header length 1000 is more than the 71 bytes that follow");
  write_raw("", UINT64_MAX, NULL, 0);
  expect_refused("huge header length",
                 "truncated or corrupt: the header length 18446744073709551615 is more than the 0 bytes that follow");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}", AUTO, data, 16);
  expect_refused("bad json", "corrupt header: bad JSON at byte 54: '}' expected near end of file");
  write_raw("[1, 2]", AUTO, NULL, 0);
  expect_refused("not an object", "corrupt header: the JSON is not an object");

  /* truncated data: the last tensor goes past the end */
  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
            "\"b\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[16,32]}}",
            AUTO, data, 28);
  expect_refused("truncated data", "tensor 'b': data_offsets [16, 32] go past the end of the data (28 bytes)");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
            "\"b\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[8,24]}}",
            AUTO, data, 24);
  expect_refused("overlap", "corrupt: tensors 'a' and 'b' overlap");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[16,24]}}",
            AUTO, data, 24);
  expect_refused("hole", "corrupt: data bytes 8..16 belong to no tensor");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", AUTO, data, 24);
  expect_refused("trailing", "corrupt: 8 bytes after the last tensor");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[0,16]}}", AUTO, data, 16);
  expect_refused("size mismatch", "tensor 'a': data_offsets span 16 bytes but f64[3] needs 24");

  write_raw("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", AUTO, data, 2);
  expect_refused("dtype", "tensor 'a': unsupported dtype \"F8_E4M3\"");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[-2],\"data_offsets\":[0,16]}}", AUTO, data, 16);
  expect_refused("negative dim", "tensor 'a': shape entries must be non-negative integers");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}", AUTO, data, 16);
  expect_refused("huge shape", "tensor 'a': shape is too large");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[16,0]}}", AUTO, data, 16);
  expect_refused("reversed offsets", "tensor 'a': data_offsets must be [begin, end] with 0 <= begin <= end");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[2]}}", AUTO, data, 16);
  expect_refused("missing offsets",
                 "tensor 'a': needs \"dtype\" (a string), \"shape\" and \"data_offsets\" (arrays)");

  write_raw("{\"__metadata__\":{\"step\":3}}", AUTO, NULL, 0);
  expect_refused("metadata", "corrupt header: metadata \"step\" is not a string");

  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
            "\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
            AUTO, data, 16);
  expect_refused("duplicate key", "corrupt header: bad JSON at byte 57: duplicate object key near '\"a\"'");

  char missing[700], err[1024], want[900];
  snprintf(missing, sizeof missing, "%s/none.safetensors", dir);
  CHECK(rt_safetensors_read(missing, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: cannot open: No such file or directory", missing);
  CHECK_STR(err, want);

  /* an empty state (no tensors) is valid */
  write_raw("{}", AUTO, NULL, 0);
  rt_safetensors *f = rt_safetensors_read(path, err, sizeof err);
  CHECK(f && rt_safetensors_count(f) == 0);
  rt_safetensors_free(f);
}

/* A save target that is not a regular file is refused by the check and by
 * the write itself, and is left as it was. */
static void test_target_not_regular(void) {
  double v = 1;
  ir_type ty = {.dtype = IR_DT_F64, .rank = 0};
  rt_tensor *x = rt_tensor_new(&ty);
  rt_tensor_set(x, 0, v);
  rt_named_tensor nt[1] = {{"x", x}};
  char fifo[700], link[700], sub[700], err[1024], want[1200];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  snprintf(link, sizeof link, "%s/link", dir);
  snprintf(sub, sizeof sub, "%s/sub", dir);
  CHECK_EQ_INT(mkfifo(fifo, 0600), 0);
  CHECK_EQ_INT(symlink("state.safetensors", link), 0);
  CHECK_EQ_INT(mkdir(sub, 0700), 0);
  const char *paths[4] = {fifo, link, sub, "/dev/null"};
  const char *kinds[4] = {"a FIFO", "a symbolic link", "a directory", "a character device"};
  for (int i = 0; i < 4; i++) {
    snprintf(want, sizeof want, "%s: exists and is not a regular file (%s); not replacing it", paths[i], kinds[i]);
    CHECK_EQ_INT(rt_safetensors_check_target(paths[i], NULL, err, sizeof err), -1);
    CHECK_STR(err, want);
    CHECK_EQ_INT(rt_safetensors_write(paths[i], nt, 1, NULL, 0, err, sizeof err), -1);
    CHECK_STR(err, want);
  }
  struct stat st;
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
  /* a folder that does not exist */
  char lost[800];
  snprintf(lost, sizeof lost, "%s/no/such/state.safetensors", dir);
  snprintf(want, sizeof want, "%s: cannot create a file in %s/no/such: No such file or directory", lost, dir);
  CHECK_EQ_INT(rt_safetensors_check_target(lost, NULL, err, sizeof err), -1);
  CHECK_STR(err, want);
  CHECK_EQ_INT(rt_safetensors_write(lost, nt, 1, NULL, 0, err, sizeof err), -1);
  CHECK_STR(err, want);
  remove(fifo);
  remove(link);
  rmdir(sub);
  rt_tensor_free(x);
}

/* Temporary files of path: a dead writer's are removed, a live one's (this
 * process) and look-alikes that are not temporary files of path are kept. */
static int fill_text(FILE *f, void *ctx) { return fputs(ctx, f) < 0 ? -1 : 0; }

/* A disk that fills half-way: the fill writes part, then fails with ENOSPC. */
static int fill_then_full(FILE *f, void *ctx) {
  fputs(ctx, f);
  errno = ENOSPC;
  return -1;
}

/* rt_write_file_atomic (--trace's writer): a failed write names the errno,
 * leaves the previous file as it was and no temporary file. */
static void test_atomic_file(void) {
  char err[1024], want[1400], buf[64] = "";
  CHECK_EQ_INT(rt_write_file_atomic(path, fill_text, "previous", err, sizeof err), 0);
  CHECK_EQ_INT(rt_write_file_atomic(path, fill_then_full, "truncat", err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: writing %s.tmp.%ld.", path, path, (long)getpid());
  CHECK(strncmp(err, want, strlen(want)) == 0);
  CHECK(strstr(err, " failed: No space left on device") != NULL);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  if (f) {
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
  }
  CHECK(strcmp(buf, "previous") == 0);
  CHECK_EQ_INT(count_temps(), 0);
  remove(path);
}

static void test_stale_temps(void) {
  char dead[800], live[800], other[800], odd[800], err[1024];
  snprintf(dead, sizeof dead, "%s.tmp.999999999.0123abcd", path); /* beyond any pid_max */
  snprintf(live, sizeof live, "%s.tmp.%ld.0123abcd", path, (long)getpid());
  snprintf(other, sizeof other, "%s/other.safetensors.tmp.999999999.0123abcd", dir);
  snprintf(odd, sizeof odd, "%s.tmp.999999999.notahex", path);
  const char *files[4] = {dead, live, other, odd};
  for (int i = 0; i < 4; i++) {
    FILE *f = fopen(files[i], "w");
    CHECK(f != NULL);
    if (f) fclose(f);
  }
  int removed = -1;
  CHECK_EQ_INT(rt_safetensors_check_target(path, &removed, err, sizeof err), 0);
  CHECK_EQ_INT(removed, 1);
  CHECK(access(dead, F_OK) != 0);
  CHECK(access(live, F_OK) == 0);
  CHECK(access(other, F_OK) == 0);
  CHECK(access(odd, F_OK) == 0);
  for (int i = 1; i < 4; i++) remove(files[i]);
  CHECK_EQ_INT(count_temps(), 0); /* the check's own probe file is gone too */
}

/* Two processes save to one path 40 times each, at the same time: every
 * save succeeds, the file is always one of the two whole, no temporary
 * file is left. */
static void test_two_writers(void) {
  pid_t pids[2];
  for (int w = 0; w < 2; w++) {
    pids[w] = fork();
    if (pids[w] == 0) {
      ir_type ty = {.dtype = IR_DT_F64, .rank = 1, .dims = {1000}};
      rt_tensor *x = rt_tensor_new(&ty);
      for (int i = 0; i < 1000; i++) rt_tensor_set(x, i, w);
      rt_named_tensor nt[1] = {{"x", x}};
      char err[1024];
      int bad = 0;
      for (int k = 0; k < 40; k++) bad += rt_safetensors_write(path, nt, 1, NULL, 0, err, sizeof err) != 0;
      if (bad) fprintf(stderr, "writer %d: %s\n", w, err);
      rt_tensor_free(x);
      _exit(bad ? 1 : 0);
    }
  }
  for (int w = 0; w < 2; w++) {
    int status = 0;
    CHECK(waitpid(pids[w], &status, 0) == pids[w]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  char err[1024];
  rt_safetensors *f = rt_safetensors_read(path, err, sizeof err);
  CHECK(f != NULL);
  const rt_tensor *x = f ? rt_safetensors_find(f, "x") : NULL;
  CHECK(x != NULL);
  if (x) {
    double v0 = rt_tensor_get(x, 0);
    CHECK(v0 == 0 || v0 == 1);
    int same = 0;
    for (int i = 0; i < 1000; i++) same += rt_tensor_get(x, i) == v0;
    CHECK_EQ_INT(same, 1000);
  }
  rt_safetensors_free(f);
  CHECK_EQ_INT(count_temps(), 0);
}

/* CRC-32 bit by bit (reflected, polynomial 0xEDB88320): the textbook
 * definition, independent of zlib's tables. */
static uint32_t crc32_reference(const unsigned char *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
  }
  return c ^ 0xffffffffu;
}

/* Every written file carries data_crc32 = the CRC-32 of its data bytes
 * (checked against the bitwise reference, itself checked on the standard
 * "123456789" -> cbf43926); a flipped data byte, a malformed value and a
 * caller's attempt to set the key are refused with exact messages. */
static void test_checksum(void) {
  CHECK_EQ_INT(crc32_reference((const unsigned char *)"123456789", 9), 0xcbf43926u);
  rt_tensor *a = make(IR_DT_F64, 2, 2, 3), *b = make(IR_DT_I32, 1, 5, 0);
  rt_named_tensor nt[2] = {{"a", a}, {"b", b}};
  char err[1024], want[1200];
  CHECK_EQ_INT(rt_safetensors_write(path, nt, 2, NULL, 0, err, sizeof err), 0);
  size_t len = 0;
  FILE *fp = fopen(path, "rb");
  unsigned char buf[4096];
  if (fp) len = fread(buf, 1, sizeof buf, fp), fclose(fp);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
  CHECK_EQ_INT(len, 8 + hlen + 48 + 20);
  char crc[16];
  snprintf(crc, sizeof crc, "%08x", (unsigned)crc32_reference(buf + 8 + hlen, len - 8 - hlen));
  rt_safetensors *f = rt_safetensors_read(path, err, sizeof err);
  CHECK(f != NULL);
  if (f) CHECK_STR(rt_safetensors_meta(f, RT_SAFETENSORS_CRC_KEY), crc);
  rt_safetensors_free(f);
  /* one bit of the data flipped: refused, naming both sums */
  buf[len - 1] ^= 0x01;
  char crc2[16];
  snprintf(crc2, sizeof crc2, "%08x", (unsigned)crc32_reference(buf + 8 + hlen, len - 8 - hlen));
  fp = fopen(path, "wb");
  fwrite(buf, 1, len, fp);
  fclose(fp);
  snprintf(want, sizeof want, "corrupt: the tensor bytes have CRC-32 %s but the header says %s", crc2, crc);
  expect_refused("flipped bit", want);
  /* a value that is not 8 hex digits */
  write_raw("{\"__metadata__\":{\"data_crc32\":\"12345678z\"}}", AUTO, NULL, 0);
  expect_refused("crc text", "corrupt header: metadata \"data_crc32\" is \"12345678z\", not 8 hexadecimal digits");
  /* files of other writers have none: accepted */
  write_raw("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", AUTO, buf, 8);
  f = rt_safetensors_read(path, err, sizeof err);
  CHECK(f != NULL);
  rt_safetensors_free(f);
  rt_meta_entry meta[1] = {{RT_SAFETENSORS_CRC_KEY, "00000000"}};
  CHECK_EQ_INT(rt_safetensors_write(path, nt, 2, meta, 1, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: metadata key 'data_crc32' is reserved (the writer sets it)", path);
  CHECK_STR(err, want);
  rt_tensor_free(a);
  rt_tensor_free(b);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(path, sizeof path, "%s/state.safetensors", dir);
  test_round_trip();
  test_corrupt();
  test_checksum();
  test_target_not_regular();
  test_stale_temps();
  test_atomic_file();
  test_two_writers();
  remove(path);
  rmdir(dir);
  return check_done();
}
