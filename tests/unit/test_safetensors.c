/* tests/unit/test_safetensors.c — safetensors state files: a round trip of
 * every dtype with metadata (bit-exact), the atomic write (no PATH.tmp left,
 * an existing file replaced whole), and every kind of corrupt or truncated
 * file refused with its exact message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ir.h"
#include "runtime.h"

static char dir[] = "/tmp/tgc_st_XXXXXX";
static char path[600];

static rt_tensor *make(ir_dtype dt, int rank, int64_t d0, int64_t d1) {
  ir_type t = {.dtype = dt, .rank = rank, .dims = {d0, d1}};
  rt_tensor *x = rt_tensor_new(&t);
  for (int64_t i = 0; i < ir_type_numel(&t); i++) rt_tensor_set(x, i, dt == IR_DT_BOOL ? (double)(i % 2) : 0.25 * (double)i - 1.5);
  return x;
}

static void test_round_trip(void) {
  rt_tensor *ts[6] = {make(IR_DT_F64, 2, 2, 3), make(IR_DT_F32, 1, 5, 0), make(IR_DT_I32, 2, 1, 4),
                      make(IR_DT_BOOL, 1, 3, 0), make(IR_DT_BF16, 0, 0, 0), make(IR_DT_I64, 1, 0, 0)};
  rt_named_tensor nt[6] = {{"W", ts[0]}, {"l.0.b", ts[1]}, {"ids", ts[2]}, {"mask", ts[3]}, {"s", ts[4]}, {"empty", ts[5]}};
  rt_meta_entry meta[2] = {{"step", "42"}, {"note", "a \"quoted\" value"}};
  char err[1024];
  CHECK_EQ_INT(rt_safetensors_write(path, nt, 6, meta, 2, err, sizeof err), 0);
  char tmp[700];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(access(tmp, F_OK) != 0); /* renamed away */
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

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(path, sizeof path, "%s/state.safetensors", dir);
  test_round_trip();
  test_corrupt();
  remove(path);
  rmdir(dir);
  return check_done();
}
