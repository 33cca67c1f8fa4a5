/* tests/unit/test_fifo_inputs.c — no reader of user files blocks on a FIFO
 * (or a device): a FIFO with no writer used to hang open(2) before the "not
 * a regular file" check. Each reader gets a FIFO and /dev/zero and must
 * return at once with its exact message; alarm(10) turns a hang into a
 * failure. Readers: ir_read_file (the model file, .tg/.ir, target files),
 * rt_npy_read (--input NAME=@F.npy), rt_safetensors_read (--resume),
 * rt_data_open (--data tokens:PATH, text:PATH).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ir.h"
#include "rt_io.h"

static char dir[] = "/tmp/tgc_fifo_XXXXXX";

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_fifo_inputs: a reader blocked for 10 s\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(1);
}

static void check_readers(const char *path) {
  char err[1024], want[1200];
  /* ir_read_file reports through a diag */
  char *buf = NULL;
  size_t blen = 0, len = 0;
  FILE *out = open_memstream(&buf, &blen);
  ir_diag *d = ir_diag_new(out);
  CHECK(ir_read_file(path, 1u << 20, &len, d) == NULL);
  ir_diag_free(d);
  fclose(out);
  snprintf(want, sizeof want, "tgc: error: '%s' is not a regular file\n", path);
  CHECK_STR(buf, want);
  free(buf);

  snprintf(want, sizeof want, "%s: not a regular file", path);
  CHECK(rt_npy_read(path, err, sizeof err) == NULL);
  CHECK_STR(err, want);
  CHECK(rt_safetensors_read(path, err, sizeof err) == NULL);
  CHECK_STR(err, want);
  const char *kinds[2] = {"tokens:", "text:"};
  for (int k = 0; k < 2; k++) {
    char spec[800];
    snprintf(spec, sizeof spec, "%s%s", kinds[k], path);
    CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
    CHECK_STR(err, want);
  }
  CHECK_EQ_INT(ir_open_regular(path), -2);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(10);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char fifo[600];
  snprintf(fifo, sizeof fifo, "%s/model.tg", dir);
  CHECK_EQ_INT(mkfifo(fifo, 0600), 0);
  check_readers(fifo);
  check_readers("/dev/zero");
  check_readers(dir); /* a folder */
  /* a missing file: the errno message */
  char missing[700], err[1024], want[900];
  snprintf(missing, sizeof missing, "%s/none", dir);
  CHECK_EQ_INT(ir_open_regular(missing), -1);
  CHECK(rt_npy_read(missing, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: cannot open: No such file or directory", missing);
  CHECK_STR(err, want);
  remove(fifo);
  rmdir(dir);
  return check_done();
}
