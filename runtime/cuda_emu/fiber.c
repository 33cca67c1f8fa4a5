/* runtime/cuda_emu/fiber.c — the context switch under the emulator's CUDA
 * threads.
 *
 * A fiber is a stack and a saved stack pointer. On x86-64 the switch is a
 * dozen instructions: push the callee-saved registers and the SSE/x87
 * control words, store the stack pointer, load the other fiber's, pop its
 * registers, return into it. A new fiber's stack is laid out as if it had
 * switched away at the start of rt_emu_fiber_start, which calls
 * entry(arg) on a 16-byte aligned stack and never returns. Other machines
 * use ucontext (slower: a system call per switch).
 *
 * Under AddressSanitizer each switch is announced with
 * __sanitizer_start/finish_switch_fiber so ASan knows which stack is
 * live; a fiber that will not run again switches away with a NULL fake
 * stack so ASan can drop it. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "emu_internal.h"

#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
void rt_emu_fiber_swap(void **save_sp, void *next_sp);
void rt_emu_fiber_start(void);
__asm__(".text\n"
        ".globl rt_emu_fiber_swap\n"
        ".hidden rt_emu_fiber_swap\n"
        ".type rt_emu_fiber_swap,@function\n"
        "rt_emu_fiber_swap:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size rt_emu_fiber_swap,.-rt_emu_fiber_swap\n"
        ".globl rt_emu_fiber_start\n"
        ".hidden rt_emu_fiber_start\n"
        ".type rt_emu_fiber_start,@function\n"
        "rt_emu_fiber_start:\n"
        "  movq %r12, %rdi\n"
        "  andq $-16, %rsp\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size rt_emu_fiber_start,.-rt_emu_fiber_start\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");

void rt_emu_fiber_init(emu_fiber_ctx *f, void *stack_lo, size_t stack_bytes, void (*entry)(void *), void *arg) {
  uintptr_t top = ((uintptr_t)stack_lo + stack_bytes) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)(top - 72);
  uint32_t mxcsr = 0x1f80; /* all exceptions masked, round to nearest */
  uint16_t fpucw = 0x037f; /* the same for x87 */
  memcpy(&sp[0], &mxcsr, 4);
  memcpy((char *)&sp[0] + 4, &fpucw, 2);
  sp[1] = 0;                     /* r15 */
  sp[2] = 0;                     /* r14 */
  sp[3] = (uint64_t)(uintptr_t)entry; /* r13 */
  sp[4] = (uint64_t)(uintptr_t)arg;   /* r12 */
  sp[5] = 0;                     /* rbx */
  sp[6] = 0;                     /* rbp */
  sp[7] = (uint64_t)(uintptr_t)rt_emu_fiber_start;
  sp[8] = 0;
  f->sp = sp;
  f->stack_lo = stack_lo;
  f->stack_bytes = stack_bytes;
}

static void swap(emu_fiber_ctx *from, emu_fiber_ctx *to) { rt_emu_fiber_swap(&from->sp, to->sp); }

#else
#include <ucontext.h>

/* makecontext passes ints: the pointers travel in two halves. */
static void trampoline(unsigned int fhi, unsigned int flo, unsigned int ahi, unsigned int alo) {
  void (*entry)(void *) = (void (*)(void *))(((uintptr_t)fhi << 32) | flo);
  entry((void *)(((uintptr_t)ahi << 32) | alo));
}

void rt_emu_fiber_init(emu_fiber_ctx *f, void *stack_lo, size_t stack_bytes, void (*entry)(void *), void *arg) {
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = stack_lo;
  f->uc.uc_stack.ss_size = stack_bytes;
  f->uc.uc_link = NULL;
  uintptr_t e = (uintptr_t)entry, a = (uintptr_t)arg;
  makecontext(&f->uc, (void (*)(void))trampoline, 4, (unsigned int)(e >> 32), (unsigned int)e,
              (unsigned int)(a >> 32), (unsigned int)a);
  f->stack_lo = stack_lo;
  f->stack_bytes = stack_bytes;
}

static void swap(emu_fiber_ctx *from, emu_fiber_ctx *to) { swapcontext(&from->uc, &to->uc); }
#endif

void rt_emu_fiber_switch(emu_fiber_ctx *from, emu_fiber_ctx *to, bool from_finished) {
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(from_finished ? NULL : &from->fake_stack, to->stack_lo, to->stack_bytes);
#else
  (void)from_finished;
#endif
  swap(from, to);
#ifdef EMU_ASAN
  /* back on `from`: learn where the fiber that switched here lives (the
   * scheduler's bounds are unknown until its first switch comes back) */
  const void *lo = NULL;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(from->fake_stack, &lo, &size);
  (void)lo, (void)size;
#endif
}

void rt_emu_fiber_entered(emu_fiber_ctx *self, emu_fiber_ctx *caller) {
#ifdef EMU_ASAN
  const void *lo = NULL;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(NULL, &lo, &size);
  /* the scheduler runs on an OS thread's stack: its bounds come from here */
  caller->stack_lo = (void *)lo;
  caller->stack_bytes = size;
#else
  (void)caller;
#endif
  (void)self;
}

void rt_emu_stack_unpoison(void *lo, size_t bytes) {
#ifdef EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(lo, bytes);
#else
  (void)lo, (void)bytes;
#endif
}
