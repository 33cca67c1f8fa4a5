/* tests/unit/test_npy.c — .npy reading and writing (runtime/io/npy.c).
 *
 * Round trips every dtype at rank 0, 1 and 2 (bf16 comes back as f32 with
 * the same values), checks the exact v1.0 header the writer produces (padded
 * to 64 bytes), reads v2/v3 and hand-written header variants, then writes
 * malformed files into /tmp and checks each exact "path: message".
 * Values must round-trip exactly (tolerance 0).
 */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "rt_io.h"

static char tmpdir_path[256];

static const char *tmp_path(const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", tmpdir_path, name);
  return buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(2);
  }
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

/* Writes a .npy with the given version, header text and data_bytes of data. */
static void write_npy(const char *path, int major, const char *header, size_t data_bytes) {
  size_t hl = strlen(header);
  size_t pre = major == 1 ? 10 : 12;
  size_t n = pre + hl + data_bytes;
  unsigned char *buf = calloc(n ? n : 1, 1);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  buf[8] = (unsigned char)(hl & 0xff);
  buf[9] = (unsigned char)(hl >> 8);
  if (major != 1) buf[10] = (unsigned char)(hl >> 16), buf[11] = (unsigned char)(hl >> 24);
  memcpy(buf + pre, header, hl);
  write_bytes(path, buf, n);
  free(buf);
}

static void round_trip(ir_dtype dt, int rank, const int64_t *dims) {
  ir_type ty = {.dtype = dt, .rank = rank};
  for (int d = 0; d < rank; d++) ty.dims[d] = dims[d];
  rt_tensor *t = rt_tensor_new(&ty);
  CHECK(t != NULL);
  if (!t) return;
  int64_t n = ir_type_numel(&ty);
  for (int64_t i = 0; i < n; i++) {
    double v = dt == IR_DT_BOOL ? (double)(i % 2) : ir_dtype_is_float(dt) ? 0.375 * (double)i - 1.5 : (double)(i * 7 - 5);
    rt_tensor_set(t, i, v);
  }
  char err[512] = "";
  char name[64];
  snprintf(name, sizeof name, "rt_%s_%d.npy", ir_dtype_name(dt), rank);
  const char *path = tmp_path(name);
  CHECK_EQ_INT(rt_npy_write(path, t, err, sizeof err), 0);
  rt_tensor *r = rt_npy_read(path, err, sizeof err);
  CHECK(r != NULL);
  if (!r) {
    fprintf(stderr, "  %s\n", err);
    rt_tensor_free(t);
    return;
  }
  CHECK_EQ_INT(r->type.dtype, dt == IR_DT_BF16 ? IR_DT_F32 : dt);
  CHECK_EQ_INT(r->type.rank, rank);
  for (int d = 0; d < rank; d++) CHECK_EQ_INT(r->type.dims[d], dims[d]);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) bad += rt_tensor_get(r, i) != rt_tensor_get(t, i);
  CHECK_EQ_INT(bad, 0);
  if (dt != IR_DT_BF16) CHECK(r->nbytes == t->nbytes && memcmp(r->data, t->data, t->nbytes) == 0);
  /* the data starts at a multiple of 64 bytes */
  FILE *f = fopen(path, "rb");
  unsigned char pre[10];
  CHECK(f && fread(pre, 1, 10, f) == 10);
  if (f) fclose(f);
  CHECK_EQ_INT((10 + (pre[8] | pre[9] << 8)) % 64, 0);
  rt_tensor_free(t);
  rt_tensor_free(r);
}

static void test_round_trips(void) {
  static const int64_t dims2[] = {2, 3}, dims1[] = {5};
  for (int dt = 0; dt < IR_NUM_DTYPES; dt++) {
    round_trip((ir_dtype)dt, 0, NULL);
    round_trip((ir_dtype)dt, 1, dims1);
    round_trip((ir_dtype)dt, 2, dims2);
  }
  static const int64_t zero[] = {0, 4};
  round_trip(IR_DT_F32, 2, zero);
}

static void test_exact_header(void) {
  ir_type ty = {.dtype = IR_DT_F64, .rank = 2, .dims = {2, 3}};
  rt_tensor *t = rt_tensor_new(&ty);
  char err[256];
  const char *path = tmp_path("hdr.npy");
  CHECK_EQ_INT(rt_npy_write(path, t, err, sizeof err), 0);
  FILE *f = fopen(path, "rb");
  char buf[128] = {0};
  size_t got = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  CHECK_EQ_INT(got, 128); /* 64 header + 48 data = 112 ... */
  const char *want = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
  CHECK(memcmp(buf, "\x93NUMPY\x01\x00", 8) == 0);
  CHECK_EQ_INT((unsigned char)buf[8] | (unsigned char)buf[9] << 8, 118);
  CHECK(memcmp(buf + 10, want, strlen(want)) == 0);
  CHECK_EQ_INT(buf[127], '\n');
  CHECK_EQ_INT(buf[126], ' ');
  rt_tensor_free(t);
}

static void test_header_variants(void) {
  char err[512];
  struct {
    int major;
    const char *header;
    size_t data;
    ir_dtype dt;
    int rank;
    int64_t d0;
  } ok[] = {
      {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 12, IR_DT_F32, 1, 3},
      {3, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1), }\n", 16, IR_DT_I64, 2, 2},
      {1, "{\"shape\": (4), \"descr\": \"|b1\", \"fortran_order\": False}", 4, IR_DT_BOOL, 1, 4},
      {1, "{'descr':'<f2','fortran_order':False,'shape':(2L,3L)}   \n", 12, IR_DT_F16, 2, 2},
      {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", 4, IR_DT_I32, 0, 0},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    const char *path = tmp_path("variant.npy");
    write_npy(path, ok[i].major, ok[i].header, ok[i].data);
    rt_tensor *t = rt_npy_read(path, err, sizeof err);
    CHECK(t != NULL);
    if (!t) {
      fprintf(stderr, "  variant %zu: %s\n", i, err);
      continue;
    }
    CHECK_EQ_INT(t->type.dtype, ok[i].dt);
    CHECK_EQ_INT(t->type.rank, ok[i].rank);
    if (ok[i].rank) CHECK_EQ_INT(t->type.dims[0], ok[i].d0);
    rt_tensor_free(t);
  }
}

/* One malformed file and the exact message it must give. */
static void expect_error(const char *path, const char *msg) {
  char err[1024] = "", want[2048];
  rt_tensor *t = rt_npy_read(path, err, sizeof err);
  CHECK(t == NULL);
  rt_tensor_free(t);
  snprintf(want, sizeof want, "%s: %s", path, msg);
  CHECK_STR(err, want);
}

static void test_malformed(void) {
  const char *p = tmp_path("bad.npy");
  const char *hdr24 = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }\n";

  write_bytes(p, "PK\x03\x04 not numpy at all", 22);
  expect_error(p, "not a .npy file (bad magic)");
  write_bytes(p, "", 0);
  expect_error(p, "not a .npy file (bad magic)");
  write_bytes(p, "\x93NUMPY\x01", 7);
  expect_error(p, "truncated header");
  write_npy(p, 4, hdr24, 24);
  expect_error(p, "unsupported .npy format version 4.0");
  {
    unsigned char b[20] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 200, 0, '{'};
    write_bytes(p, b, sizeof b);
    expect_error(p, "truncated header (header length 200, file has 20 bytes)");
  }
  {
    unsigned char b[16] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0x00, 0x28, 0x6b, 0xee, '{'};
    write_bytes(p, b, sizeof b);
    expect_error(p, "header length 4000000000 too large");
  }
  write_npy(p, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", 12);
  expect_error(p, "unsupported dtype '>f4' (supported: <f8 <f4 <f2 <i4 <i8 |b1)");
  write_npy(p, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", 3);
  expect_error(p, "unsupported dtype '|u1' (supported: <f8 <f4 <f2 <i4 <i8 |b1)");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (3,), }", 24);
  expect_error(p, "fortran_order True is not supported (write C order)");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, }", 24);
  expect_error(p, "malformed header: missing key 'shape'");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), 'foo': 1}", 24);
  expect_error(p, "malformed header: unknown key 'foo'");
  write_npy(p, 1, "{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (3,)}", 24);
  expect_error(p, "malformed header: duplicate key 'descr'");
  write_npy(p, 1, "['descr', '<f8']", 24);
  expect_error(p, "malformed header: expected '{'");
  write_npy(p, 1, "{'descr: '<f8'", 24);
  expect_error(p, "malformed header: expected ':' after 'descr: '");
  write_npy(p, 1, "{'descr': '<f8", 24);
  expect_error(p, "malformed header: unterminated string");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2.5)}", 24);
  expect_error(p, "malformed header: expected ',' or ')' in shape");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,)} x", 24);
  expect_error(p, "malformed header: unexpected text after the dict");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': 0, 'shape': (3,)}", 24);
  expect_error(p, "malformed header: fortran_order must be True or False");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1)}", 8);
  expect_error(p, "shape has more than 8 dimensions");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776, 1099511627776)}", 8);
  expect_error(p, "shape too large (more than 2^48 elements)");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,)}", 8);
  expect_error(p, "shape too large (more than 2^48 elements)");
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, -1)}", 8);
  expect_error(p, "negative dimension -1 in shape");
  write_npy(p, 1, hdr24, 20);
  expect_error(p, "truncated data: expected 24 bytes, file has 20");
  write_npy(p, 1, hdr24, 28);
  expect_error(p, "trailing data: expected 24 bytes, file has 28");
  /* a huge (but legal) shape with a tiny file: rejected before allocating */
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (65536, 65536, 1024)}", 8);
  expect_error(p, "truncated data: expected 35184372088832 bytes, file has 8");

  expect_error(tmp_path("does_not_exist.npy"), "cannot open: No such file or directory");
  expect_error(tmpdir_path, "not a regular file");
  unlink(p);
}

static void test_write_errors(void) {
  ir_type ty = {.dtype = IR_DT_F32, .rank = 1, .dims = {2}};
  rt_tensor *t = rt_tensor_new(&ty);
  char err[1024], want[2048];
  const char *p = tmp_path("no/such/dir/x.npy");
  CHECK_EQ_INT(rt_npy_write(p, t, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: cannot open for writing: No such file or directory", p);
  CHECK_STR(err, want);
  rt_tensor_free(t);
}

int main(void) {
  snprintf(tmpdir_path, sizeof tmpdir_path, "/tmp/tgc_test_npy_XXXXXX");
  if (!mkdtemp(tmpdir_path)) {
    perror("mkdtemp");
    return 2;
  }
  test_round_trips();
  test_exact_header();
  test_header_variants();
  test_malformed();
  test_write_errors();
  /* clean up the files this test wrote */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_path);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir_path);
  return check_done();
}
