/* tests/unit/test_mixed_fold.c — mixed precision's casts folded into the
 * optimizer update (passes/training.c fold_grad_casts / fold_param_casts,
 * passes/optimizer.c, fuse-elementwise steps 2a and 4a, the trainer's
 * copies), bit for bit.
 *
 * For examples/gpt.tg and examples/llama.tg (tiny) in bf16, with adamw
 * (clipping and weight decay, or neither), sgd, two micro-batches, and f16
 * (loss scaling: gradients stay f32, the copies fold), on the cpu and on
 * cuda-emu (the generated CUDA C), a run with the fold is compared with one
 * built with no_cast_fold (the casts in the step, as before the fold):
 *  - the structure: with the fold no step node casts a parameter and, with
 *    one micro-batch and no loss scaling, the gradient outputs are bf16 and
 *    no step node widens one; every update node that casts a gradient is a
 *    fused node that also writes a new parameter (the widening inside the
 *    update's pass), and so is every one writing a copy;
 *  - the training: after N steps, a save, a fresh trainer that loads it
 *    (the copies made again from the loaded parameters) and N more, both
 *    state files (parameters and optimizer states) are equal byte for byte.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "testtrain.h"

/* The expression text of fused node n, "" for another op. */
static const char *expr_of(const ir_node *n) {
  const ir_attr *e = n->op == IR_OP_FUSED ? ir_node_attr(n, "expr") : NULL;
  return e && e->s ? e->s : "";
}

static void check_structure(const pass_training *t, ir_dtype dt, bool grads_narrow) {
  const ir_graph *s = t->step, *u = t->update;
  CHECK(t->copy_input != NULL);
  int copies = 0;
  for (int i = 0; t->copy_input && i < t->n_params; i++) {
    CHECK((t->copy_input[i] >= 0) == (t->copy_output[i] >= 0));
    /* the matrices are folded; a bias (read by an elementwise add) is not */
    const char *nm = s->params[i]->name;
    if (s->params[i]->type.rank == 2) CHECK(t->copy_input[i] >= 0);
    if (strstr(nm, "_b") && strstr(nm, "c_")) CHECK(t->copy_input[i] < 0);
    if (t->copy_input[i] < 0 || t->copy_output[i] < 0) continue;
    copies++;
    CHECK_EQ_INT(s->inputs[t->copy_input[i]]->type.dtype, dt);
    CHECK_EQ_INT(u->outputs[t->copy_output[i]].value->type.dtype, dt);
    /* the copy is written by the node that writes the new parameter */
    CHECK(u->outputs[t->copy_output[i]].value->def == u->outputs[i].value->def);
  }
  CHECK(copies > 0);
  for (int i = 0; i < s->n_nodes; i++) { /* a folded parameter: read by no step node */
    const ir_node *n = s->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      for (int j = 0; j < t->n_params; j++) CHECK(t->copy_input[j] < 0 || n->in[k] != s->params[j]);
  }
  for (int i = 0; i < t->n_params; i++) {
    const ir_value *g = s->outputs[t->grad_output[i]].value;
    CHECK_EQ_INT(g->type.dtype, grads_narrow ? dt : IR_DT_F32);
    if (grads_narrow) CHECK(!g->def || !strstr(expr_of(g->def), "cast f32"));
  }
  int widened = 0;
  for (int i = 0; i < u->n_nodes; i++) {
    const ir_node *n = u->nodes[i];
    bool reads_grad = false;
    for (int k = 0; k < n->n_in; k++) reads_grad |= !n->in[k]->def && n->in[k]->type.dtype == dt;
    if (!reads_grad || n->op == IR_OP_COUNT_NONFINITE || n->op == IR_OP_SUM_SQUARES) continue;
    widened++;
    CHECK(n->op == IR_OP_FUSED && n->n_out >= 2); /* the update's pass, not a cast of its own */
  }
  CHECK(!grads_narrow || widened >= t->n_params);
}

static void run(const char *path, const char *tag, setup c, const char *dir) {
  char a1[600], a2[600], b2[600];
  snprintf(a1, sizeof a1, "%s/%s_fold_half.safetensors", dir, tag);
  snprintf(a2, sizeof a2, "%s/%s_fold.safetensors", dir, tag);
  snprintf(b2, sizeof b2, "%s/%s_nofold.safetensors", dir, tag);
  c.path = path;
  session a, r, b;
  CHECK_EQ_INT(session_open(&a, &c), 0);
  check_structure(a.prog, (ir_dtype)c.dtype, c.micro == 1 && c.dtype == IR_DT_BF16);
  CHECK_EQ_INT(session_steps(&a, 3), 0);
  CHECK_EQ_INT(session_save(&a, a1), 0);
  session_close(&a);
  CHECK_EQ_INT(session_open(&r, &c), 0);
  char err[1024];
  CHECK_EQ_INT(session_load(&r, a1, err, sizeof err), 0);
  CHECK_EQ_INT(session_steps(&r, 3), 0);
  CHECK_EQ_INT(session_save(&r, a2), 0);
  session_close(&r);
  c.no_cast_fold = true;
  CHECK_EQ_INT(session_open(&b, &c), 0);
  CHECK(b.prog->copy_input == NULL);
  CHECK_EQ_INT(session_steps(&b, 6), 0);
  CHECK_EQ_INT(session_save(&b, b2), 0);
  session_close(&b);
  size_t na = 0, nb = 0;
  char *x = read_whole_file(a2, &na), *y = read_whole_file(b2, &nb);
  CHECK(x && y && na == nb && na > 0 && memcmp(x, y, na) == 0);
  if (!(x && y && na == nb && memcmp(x, y, na) == 0)) fprintf(stderr, "%s: the states differ\n", tag);
  else printf("%s: folded = unfolded, %zu bytes of state, bit for bit\n", tag, na);
  free(x), free(y);
  unlink(a1), unlink(a2), unlink(b2);
}

int main(void) {
  char dir[] = "/tmp/tgc_mixed_fold_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  pass_optimizer adamw = pass_optimizer_defaults(PASS_OPT_ADAMW), sgd = pass_optimizer_defaults(PASS_OPT_SGD);
  adamw.weight_decay = 0.1;
  adamw.clip_norm = 1.0;
  pass_optimizer plain = pass_optimizer_defaults(PASS_OPT_ADAMW);
  rt_schedule sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.01};
  const rt_backend *backends[2] = {&rt_cpu_backend, &rt_cuda_emu_backend};
  static const char *const models[2] = {"examples/gpt.tg", "examples/llama.tg"};
  for (int b = 0; b < 2; b++)
    for (int m = 0; m < 2; m++) {
      char tag[64];
      setup c = {.config = "tiny", .data = "copy", .opt = plain, .sched = sched, .micro = 1, .seed = 3,
                 .dtype = IR_DT_BF16, .backend = backends[b]};
      snprintf(tag, sizeof tag, "%s %s bf16 adamw", backends[b]->name, models[m] + 9);
      run(models[m], tag, c, dir);
      if (b == 1) continue; /* the rest on the cpu */
      c.opt = adamw;
      snprintf(tag, sizeof tag, "%s bf16 adamw clip wd", models[m] + 9);
      run(models[m], tag, c, dir);
      c.opt = sgd;
      c.micro = 2;
      snprintf(tag, sizeof tag, "%s bf16 sgd 2 micro-batches", models[m] + 9);
      run(models[m], tag, c, dir);
      c.opt = plain, c.micro = 1, c.dtype = IR_DT_F16;
      snprintf(tag, sizeof tag, "%s f16 (loss scaling)", models[m] + 9);
      run(models[m], tag, c, dir);
    }
  rmdir(dir);
  return check_done();
}
