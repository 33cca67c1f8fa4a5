/* tests/unit/test_docs_lists.c — docs/language.md's list of builtin
 * functions ("## Every builtin and operator": the "- ..." lines under
 * "Builtin functions") is the frontend's table (fe_builtin_name), both ways:
 * every builtin is listed, and every name listed is a builtin. (docs/ir.md's
 * list of ops is checked against ops.def by docs.ir_ops.) Runs from the
 * repository root. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"

/* The names in backticks on the "- " lines of the section's builtin list. */
static int listed_names(const char *text, char names[][64], int max) {
  const char *sec = strstr(text, "\n## Every builtin and operator\n");
  if (!sec) return -1;
  const char *list = strstr(sec, "\nBuiltin functions");
  const char *end = strstr(sec + 1, "\n## ");
  if (!list || (end && list > end)) return -1;
  int n = 0;
  for (const char *p = strstr(list, "\n- "); p && (!end || p < end); p = strstr(p + 1, "\n- ")) {
    const char *eol = strchr(p + 1, '\n');
    /* a list item runs on over indented continuation lines */
    while (eol && eol[1] == ' ') eol = strchr(eol + 1, '\n');
    if (!eol) eol = p + strlen(p);
    for (const char *q = p; q < eol;) {
      const char *a = memchr(q, '`', (size_t)(eol - q));
      if (!a) break;
      const char *b = memchr(a + 1, '`', (size_t)(eol - a - 1));
      if (!b) break;
      if (n < max && b - a - 1 < 64 && b - a - 1 > 0 && a[1] != '%') {
        memcpy(names[n], a + 1, (size_t)(b - a - 1));
        names[n][b - a - 1] = 0;
        n++;
      }
      q = b + 1;
    }
  }
  return n;
}

int main(void) {
  FILE *f = fopen("docs/language.md", "rb");
  CHECK(f != NULL);
  if (!f) return check_done();
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  static char names[256][64];
  int n = listed_names(text, names, 256);
  CHECK(n > 0);
  int builtins = 0;
  for (const char *b; (b = fe_builtin_name(builtins)); builtins++) {
    bool found = false;
    for (int i = 0; i < n; i++) found = found || strcmp(names[i], b) == 0;
    if (!found) fprintf(stderr, "docs/language.md does not list the builtin '%s'\n", b);
    CHECK(found);
  }
  for (int i = 0; i < n; i++) {
    bool known = false;
    for (int k = 0; fe_builtin_name(k); k++) known = known || strcmp(names[i], fe_builtin_name(k)) == 0;
    if (!known) fprintf(stderr, "docs/language.md lists '%s', which is no builtin\n", names[i]);
    CHECK(known);
  }
  printf("docs/language.md lists the %d builtins (%d names)\n", builtins, n);
  return check_done();
}
