// codegen/prelude/emu.h — the CUDA surface for the host C++ compiler: what
// makes kernel source written for NVRTC compile, unchanged, into a shared
// object the cuda-emu emulator (runtime/cuda_emu/) runs on the CPU.
//
// Model (docs/cuda.md): every CUDA thread is a fiber; the emulator runs a
// block's fibers on one OS thread (blocks of a grid spread over OpenMP
// threads) and switches fibers only where CUDA threads wait for each other
// — __syncthreads, __syncwarp, shuffles, votes, MMA. So threads really
// interleave at barriers: a missing barrier reads stale shared memory, a
// wrong shuffle reads the wrong lane, as they would on a GPU.
//   - threadIdx & co. read the thread state at the base of the fiber's
//     region (emu_abi.h), found by masking the stack pointer;
//   - warp collectives follow PTX's shfl/vote semantics: mask, width
//     (segments), out-of-range lanes keep their own value; reading a lane
//     that is not taking part gives an undefined value, here all bits set
//     (NaN as a float);
//   - atomics are real atomics (blocks run on several OS threads);
//   - TGC_SHARED arrays live in the block's shared memory at offsets
//     computed when the module loads (so launches check shared memory
//     before running), are filled with 0xff bytes at each block start, and
//     under TGC_RACECHECK every element access is reported to the race
//     checker;
//   - fast-math intrinsics (__expf, __fdividef, rsqrtf, ...) are computed
//     to full float accuracy: a GPU's are approximations, so tests compare
//     against them with a tolerance.
// Everything module-global lives in an anonymous namespace: each module is
// one translation unit, loaded RTLD_LOCAL, sharing nothing with another.
#ifndef TGC_EMU_H
#define TGC_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>
#include <utility>

#include "emu_abi.h"

#define TGC_EMU 1
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// Shared memory is declared with TGC_SHARED / TGC_DYNAMIC_SHARED, which the
// emulator can size and check; a plain __shared__ would be invisible to it.
#define __shared__ static_assert(false, "declare shared memory with TGC_SHARED or TGC_DYNAMIC_SHARED");

// ---------------------------------------------------------------------------
// Vector types
// ---------------------------------------------------------------------------
typedef tgc_emu_dim3 uint3;
struct dim3 {
  unsigned int x, y, z;
  dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
  dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
#define TGC_EMU_VEC2(T, name, align) \
  struct __attribute__((aligned(align))) name { T x, y; }; \
  static inline name make_##name(T x, T y) { return name{x, y}; }
#define TGC_EMU_VEC4(T, name, align) \
  struct __attribute__((aligned(align))) name { T x, y, z, w; }; \
  static inline name make_##name(T x, T y, T z, T w) { return name{x, y, z, w}; }
TGC_EMU_VEC2(float, float2, 8)
TGC_EMU_VEC4(float, float4, 16)
TGC_EMU_VEC2(int, int2, 8)
TGC_EMU_VEC4(int, int4, 16)
TGC_EMU_VEC2(unsigned int, uint2, 8)
TGC_EMU_VEC4(unsigned int, uint4, 16)
TGC_EMU_VEC2(double, double2, 16)
#undef TGC_EMU_VEC2
#undef TGC_EMU_VEC4
static const int warpSize = 32;

namespace tgc_emu {

// The calling CUDA thread: the base of the fiber region holding the stack.
static inline tgc_emu_thread *self() {
  uintptr_t sp;
#if defined(__x86_64__)
  __asm__("mov %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
  __asm__("mov %0, sp" : "=r"(sp));
#else
  sp = (uintptr_t)__builtin_frame_address(0);
#endif
  return reinterpret_cast<tgc_emu_thread *>(sp & ~(uintptr_t)(TGC_EMU_FIBER_BYTES - 1));
}

[[noreturn]] static inline void fault(int cuda_error, const char *message) {
  tgc_emu_thread *t = self();
  t->host->fault(t, cuda_error, message);
  __builtin_unreachable();
}

// The types CUDA's shuffles and __match_any_sync take natively (the prelude
// adds none): the emulator accepts no source NVRTC would refuse.
template <class T> struct shuffle_type {
  static const bool ok = std::is_same<T, int>::value || std::is_same<T, unsigned int>::value ||
                         std::is_same<T, long>::value || std::is_same<T, unsigned long>::value ||
                         std::is_same<T, long long>::value || std::is_same<T, unsigned long long>::value ||
                         std::is_same<T, float>::value || std::is_same<T, double>::value;
};

template <class T> static inline unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a warp collective moves up to 8 bytes");
  unsigned long long b = 0;
  memcpy(&b, &v, sizeof v);
  return b;
}
template <class T> static inline T from_bits(unsigned long long b) {
  T v;
  memcpy(&v, &b, sizeof v);
  return v;
}
static inline unsigned long long warp(int op, unsigned int mask, unsigned long long value, int arg, int width) {
  tgc_emu_thread *t = self();
  return t->host->warp(t, op, mask, value, arg, width);
}

// ---- the module's registry: kernels and TGC_SHARED arrays ----
namespace {
enum { kMaxKernels = 1024, kMaxShared = 4096 };
tgc_emu_kernel g_kernels[kMaxKernels];
tgc_emu_shared g_shared[kMaxShared];
tgc_emu_module g_module;
int g_nkernels, g_nshared;

int register_kernel(const char *name, int line, int nparams, void (*invoke)(void **)) {
  if (g_nkernels == kMaxKernels) {
    g_module.error = "more kernels in one module than the emulator's limit (1024)";
    return -1;
  }
  tgc_emu_kernel &k = g_kernels[g_nkernels];
  k.name = name, k.line = line, k.nparams = nparams, k.invoke = invoke;
  return g_nkernels++;
}

int register_shared(int line, unsigned long long elem_bytes, unsigned long long count, unsigned long long align) {
  if (g_nshared == kMaxShared) {
    g_module.error = "more TGC_SHARED arrays in one module than the emulator's limit (4096)";
    return 0;
  }
  tgc_emu_shared &s = g_shared[g_nshared];
  s.name = "?", s.line = line, s.kernel = -1;
  s.elem_bytes = elem_bytes, s.count = count, s.align = align < 16 ? 16 : align;
  return g_nshared++;
}

// Each array belongs to the kernel whose TGC_REGISTER is the first at or
// after its line; arrays are laid out in declaration order.
void layout() {
  for (int i = 0; i < g_nshared; i++) {
    int best = -1;
    for (int k = 0; k < g_nkernels; k++)
      if (g_kernels[k].line >= g_shared[i].line && (best < 0 || g_kernels[k].line < g_kernels[best].line)) best = k;
    g_shared[i].kernel = best;
  }
  for (int k = 0; k < g_nkernels; k++) {
    unsigned long long at = 0;
    for (int i = 0; i < g_nshared; i++) {
      if (g_shared[i].kernel != k) continue;
      at = (at + g_shared[i].align - 1) / g_shared[i].align * g_shared[i].align;
      g_shared[i].offset = at;
      at += g_shared[i].elem_bytes * g_shared[i].count;
    }
    g_kernels[k].static_smem = at;
    g_kernels[k].dyn_offset = (at + 15) / 16 * 16;
  }
}

// One TGC_SHARED declaration: registered when the module loads (the static
// member is instantiated by its use in the kernel body), so the kernel's
// static shared memory is known before any launch.
template <int Line, int Counter, unsigned long long Elem, unsigned long long Count, unsigned long long Align>
struct shared_slot {
  static const int id;
};
template <int Line, int Counter, unsigned long long Elem, unsigned long long Count, unsigned long long Align>
const int shared_slot<Line, Counter, Elem, Count, Align>::id = register_shared(Line, Elem, Count, Align);

template <class T> T *shared_base(int id, const char *name) {
  tgc_emu_thread *t = self();
  tgc_emu_shared &s = g_shared[id];
  s.name = name;
  if (s.kernel < 0 || t->kernel != &g_kernels[s.kernel]) {
    static thread_local char msg[256];
    snprintf(msg, sizeof msg,
             "TGC_SHARED array '%s' (line %d) runs in kernel %s but is declared in %s (declare shared arrays in the "
             "kernel body)",
             name, s.line, t->kernel->name, s.kernel < 0 ? "no kernel" : g_kernels[s.kernel].name);
    fault(700, msg);
  }
  return reinterpret_cast<T *>(t->smem + s.offset);
}

// Racecheck: an element of a TGC_SHARED array whose reads and writes are
// reported to the emulator's race checker.
template <class T> struct shared_ref;
// &a[i]: a pointer the atomics recognize (reported as atomic accesses); any
// other use of it escapes the checker.
template <class T> struct shared_address {
  T *p;
  const shared_ref<T> *r;
  operator T *() const { return p; }
};
template <class T> struct shared_ref {
  T *p;
  int id;
  unsigned long long index;
  void note(int kind) const {
    tgc_emu_thread *t = self();
    t->host->shared_access(t, &g_shared[id], index, kind);
  }
  operator T() const {
    note(TGC_EMU_READ);
    return *p;
  }
  const shared_ref &operator=(T v) const {
    note(TGC_EMU_WRITE);
    *p = v;
    return *this;
  }
  const shared_ref &operator=(const shared_ref &o) const { return *this = (T)o; }
#define TGC_EMU_COMPOUND(op)                    \
  const shared_ref &operator op##=(T v) const { \
    T old = *this;                              \
    return *this = old op v;                    \
  }
  TGC_EMU_COMPOUND(+)
  TGC_EMU_COMPOUND(-)
  TGC_EMU_COMPOUND(*)
  TGC_EMU_COMPOUND(/)
#undef TGC_EMU_COMPOUND
  shared_address<T> operator&() const { return shared_address<T>{p, this}; }
};
template <class T> struct shared_array {
  T *base;
  int id;
  shared_array(int id_, const char *name) : base(shared_base<T>(id_, name)), id(id_) {}
  // as a plain pointer (tile + offset, a T * parameter): such accesses are
  // not checked, but the source compiles as it does on the GPU
  operator T *() const { return base; }
  shared_ref<T> operator[](unsigned long long i) const {
    if (i >= g_shared[id].count) {
      static thread_local char msg[256];
      snprintf(msg, sizeof msg, "shared array '%s' index %llu is out of bounds [0, %llu)", g_shared[id].name, i,
               g_shared[id].count);
      fault(700, msg);
    }
    return shared_ref<T>{base + i, id, i};
  }
};
}  // namespace

// ---- kernels: calling one with cuLaunchKernel's void **params ----
template <class... A, size_t... I>
static inline void call_kernel(void (*f)(A...), void **params, std::index_sequence<I...>) {
  f(*static_cast<typename std::remove_cv<A>::type *>(params[I])...);
}
template <class... A> constexpr int param_count(void (*)(A...)) { return (int)sizeof...(A); }
template <class... A> static inline void invoke_with(void (*f)(A...), void **params) {
  call_kernel(f, params, std::index_sequence_for<A...>{});
}

// ---- tensor cores (tgc_mma_*_16x8x16): the warp's fragments gathered, the
// 16x8 tile computed per lane for its own four outputs ----
static inline void mma_16x8x16(float d[4], const unsigned int a[4], const unsigned int b[2], const float c[4],
                               float (*to_f32)(unsigned short)) {
  tgc_emu_thread *t = self();
  unsigned int all_a[32][4], all_b[32][2];
  t->host->warp_gather(t, 0xffffffffu, a, all_a, sizeof all_a[0]);
  t->host->warp_gather(t, 0xffffffffu, b, all_b, sizeof all_b[0]);
  // element (row, col) of A (16x16) and B (16x8) from the fragments
  auto a_at = [&](int row, int col) {
    int g = row & 7, half = row >> 3, kblock = col >> 3, tid = (col & 7) >> 1;
    unsigned int w = all_a[g * 4 + tid][half + 2 * kblock];
    return to_f32((unsigned short)((col & 1) ? w >> 16 : w & 0xffffu));
  };
  auto b_at = [&](int row, int col) {
    int kblock = row >> 3, tid = (row & 7) >> 1;
    unsigned int w = all_b[col * 4 + tid][kblock];
    return to_f32((unsigned short)((row & 1) ? w >> 16 : w & 0xffffu));
  };
  int g = (int)(t->lane >> 2), tid = (int)(t->lane & 3);
  for (int i = 0; i < 4; i++) {
    int row = g + (i >> 1) * 8, col = 2 * tid + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; k++) acc += a_at(row, k) * b_at(k, col);
    d[i] = acc;
  }
}

// ---- bf16 / half bit conversions (CUDA's: round to nearest even, NaN to
// 0x7fff, overflow to infinity, subnormals kept) ----
static inline unsigned short f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}
static inline float bf16_to_f32(unsigned short h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static inline unsigned short f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, u = x & 0x7fffffffu;
  if (u > 0x7f800000u) return 0x7fffu;                   // NaN
  if (u >= 0x47800000u) return (unsigned short)(sign | 0x7c00u);  // >= 65536 (and inf): inf
  if (u >= 0x38800000u) {                                 // normal half
    uint32_t m = u - 0x38000000u;                         // rebias 127 -> 15
    uint32_t r = m >> 13, rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;  // a carry may reach inf: correct
    return (unsigned short)(sign | r);
  }
  if (u < 0x33000000u) return (unsigned short)sign;       // below half the smallest subnormal
  // subnormal half: value = mant * 2^(e - 150); half subnormal unit 2^-24
  uint32_t e = u >> 23, mant = (u & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e;                              // 14..24 (e in 102..112)
  uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (r & 1u))) r++;
  return (unsigned short)(sign | r);
}
static inline float f16_to_f32(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 31) x = sign | 0x7f800000u | (m << 13);
  else if (e) x = sign | ((e + 112u) << 23) | (m << 13);
  else if (!m) x = sign;
  else {  // subnormal: normalize
    int s = 0;
    while (!(m & 0x400u)) m <<= 1, s++;
    x = sign | ((uint32_t)(113 - s) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

}  // namespace tgc_emu

static inline unsigned short tgc_f32_to_bf16_bits(float f) { return tgc_emu::f32_to_bf16(f); }
static inline float tgc_bf16_bits_to_f32(unsigned short h) { return tgc_emu::bf16_to_f32(h); }
static inline unsigned short tgc_f32_to_f16_bits(float f) { return tgc_emu::f32_to_f16(f); }
static inline float tgc_f16_bits_to_f32(unsigned short h) { return tgc_emu::f16_to_f32(h); }

// ---------------------------------------------------------------------------
// Built-in variables, shared memory, registration
// ---------------------------------------------------------------------------
#define threadIdx (::tgc_emu::self()->thread_idx)
#define blockIdx (::tgc_emu::self()->block_idx)
#define blockDim (::tgc_emu::self()->block_dim)
#define gridDim (::tgc_emu::self()->grid_dim)

#define TGC_EMU_SLOT(T, N) \
  ::tgc_emu::shared_slot<__LINE__, __COUNTER__, sizeof(T), (unsigned long long)(N), alignof(T)>::id
#ifdef TGC_RACECHECK
#define TGC_SHARED(T, name, N) const ::tgc_emu::shared_array<T> name(TGC_EMU_SLOT(T, N), #name)
#else
#define TGC_SHARED(T, name, N) T *const name = ::tgc_emu::shared_base<T>(TGC_EMU_SLOT(T, N), #name)
#endif
#define TGC_DYNAMIC_SHARED(T, name) T *const name = reinterpret_cast<T *>(::tgc_emu::self()->dyn_smem)
#define TGC_REGISTER(kernel)                                                                               \
  static const int tgc_emu_registered_##kernel = ::tgc_emu::register_kernel(                               \
      #kernel, __LINE__, ::tgc_emu::param_count(&kernel), [](void **params) { ::tgc_emu::invoke_with(&kernel, params); });
#define TGC_CHECK_ALIGNED(p, bytes, what) ::tgc_emu::check_aligned((const void *)(p), (bytes), (what))

namespace tgc_emu {
static inline void check_aligned(const void *p, unsigned int bytes, const char *what) {
  if ((uintptr_t)p % bytes) {
    static thread_local char msg[160];
    snprintf(msg, sizeof msg, "%s: %u-byte access at %p is misaligned", what, bytes, p);
    fault(716, msg);  // CUDA_ERROR_MISALIGNED_ADDRESS
  }
}
}  // namespace tgc_emu

// ---------------------------------------------------------------------------
// Synchronization, warp collectives
// ---------------------------------------------------------------------------
static inline void __syncthreads() {
  tgc_emu_thread *t = tgc_emu::self();
  t->host->barrier(t, TGC_EMU_BAR_SYNC, 0);
}
static inline int __syncthreads_count(int pred) {
  tgc_emu_thread *t = tgc_emu::self();
  return t->host->barrier(t, TGC_EMU_BAR_COUNT, pred != 0);
}
static inline int __syncthreads_and(int pred) {
  tgc_emu_thread *t = tgc_emu::self();
  return t->host->barrier(t, TGC_EMU_BAR_AND, pred != 0);
}
static inline int __syncthreads_or(int pred) {
  tgc_emu_thread *t = tgc_emu::self();
  return t->host->barrier(t, TGC_EMU_BAR_OR, pred != 0);
}
static inline void __syncwarp(unsigned int mask = 0xffffffffu) { tgc_emu::warp(TGC_EMU_SYNCWARP, mask, 0, 0, 32); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __nanosleep(unsigned int) {}
static inline unsigned int __activemask() {
  tgc_emu_thread *t = tgc_emu::self();
  return t->host->activemask(t);
}

#define TGC_EMU_SHUFFLE_TYPE(T) \
  static_assert(tgc_emu::shuffle_type<T>::ok, "CUDA shuffles take int, unsigned, long, long long (and unsigned), float or double")
template <class T> static inline T __shfl_sync(unsigned int mask, T var, int src_lane, int width = 32) {
  TGC_EMU_SHUFFLE_TYPE(T);
  return tgc_emu::from_bits<T>(tgc_emu::warp(TGC_EMU_SHFL_IDX, mask, tgc_emu::to_bits(var), src_lane, width));
}
template <class T> static inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = 32) {
  TGC_EMU_SHUFFLE_TYPE(T);
  return tgc_emu::from_bits<T>(tgc_emu::warp(TGC_EMU_SHFL_UP, mask, tgc_emu::to_bits(var), (int)delta, width));
}
template <class T> static inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = 32) {
  TGC_EMU_SHUFFLE_TYPE(T);
  return tgc_emu::from_bits<T>(tgc_emu::warp(TGC_EMU_SHFL_DOWN, mask, tgc_emu::to_bits(var), (int)delta, width));
}
template <class T> static inline T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = 32) {
  TGC_EMU_SHUFFLE_TYPE(T);
  return tgc_emu::from_bits<T>(tgc_emu::warp(TGC_EMU_SHFL_XOR, mask, tgc_emu::to_bits(var), lane_mask, width));
}
static inline unsigned int __ballot_sync(unsigned int mask, int pred) {
  return (unsigned int)tgc_emu::warp(TGC_EMU_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned int mask, int pred) {
  return (int)tgc_emu::warp(TGC_EMU_ANY, mask, pred != 0, 0, 32);
}
static inline int __all_sync(unsigned int mask, int pred) {
  return (int)tgc_emu::warp(TGC_EMU_ALL, mask, pred != 0, 0, 32);
}
static inline unsigned int __reduce_add_sync(unsigned int mask, unsigned int v) {
  return (unsigned int)tgc_emu::warp(TGC_EMU_REDUCE_ADD, mask, v, 0, 32);
}
static inline int __reduce_add_sync(unsigned int mask, int v) {
  return (int)tgc_emu::warp(TGC_EMU_REDUCE_ADD, mask, (unsigned int)v, 1, 32);
}
static inline unsigned int __reduce_min_sync(unsigned int mask, unsigned int v) {
  return (unsigned int)tgc_emu::warp(TGC_EMU_REDUCE_MIN, mask, v, 0, 32);
}
static inline int __reduce_min_sync(unsigned int mask, int v) {
  return (int)tgc_emu::warp(TGC_EMU_REDUCE_MIN, mask, (unsigned int)v, 1, 32);
}
static inline unsigned int __reduce_max_sync(unsigned int mask, unsigned int v) {
  return (unsigned int)tgc_emu::warp(TGC_EMU_REDUCE_MAX, mask, v, 0, 32);
}
static inline int __reduce_max_sync(unsigned int mask, int v) {
  return (int)tgc_emu::warp(TGC_EMU_REDUCE_MAX, mask, (unsigned int)v, 1, 32);
}
static inline unsigned int __reduce_and_sync(unsigned int mask, unsigned int v) {
  return (unsigned int)tgc_emu::warp(TGC_EMU_REDUCE_AND, mask, v, 0, 32);
}
static inline unsigned int __reduce_or_sync(unsigned int mask, unsigned int v) {
  return (unsigned int)tgc_emu::warp(TGC_EMU_REDUCE_OR, mask, v, 0, 32);
}
static inline unsigned int __reduce_xor_sync(unsigned int mask, unsigned int v) {
  return (unsigned int)tgc_emu::warp(TGC_EMU_REDUCE_XOR, mask, v, 0, 32);
}
template <class T> static inline unsigned int __match_any_sync(unsigned int mask, T v) {
  TGC_EMU_SHUFFLE_TYPE(T);
  return (unsigned int)tgc_emu::warp(TGC_EMU_MATCH_ANY, mask, tgc_emu::to_bits(v), (int)sizeof(T), 32);
}

// ---------------------------------------------------------------------------
// Atomics: blocks run on several OS threads, so these are real atomics.
// ---------------------------------------------------------------------------
// Exactly CUDA's overloads (a source using one CUDA lacks must not compile
// here either):
//   atomicAdd     int, unsigned, unsigned long long, float, double
//   atomicSub     int, unsigned
//   atomicExch    int, unsigned, unsigned long long, float
//   atomicMin/Max int, unsigned, unsigned long long, long long
//   atomicAnd/Or/Xor  int, unsigned, unsigned long long
//   atomicCAS     int, unsigned, unsigned long long, unsigned short
//   atomicInc     unsigned
#define TGC_EMU_ATOMIC_RMW(name, builtin, T) \
  static inline T name(T *a, T v) { return builtin(a, v, __ATOMIC_SEQ_CST); }
#define TGC_EMU_ATOMIC_MINMAX(name, cmp, T)                                                              \
  static inline T name(T *a, T v) {                                                                      \
    T old = __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                        \
    while (v cmp old && !__atomic_compare_exchange_n(a, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) { \
    }                                                                                                    \
    return old;                                                                                          \
  }
#define TGC_EMU_ATOMIC_CAS(T)                                                                    \
  static inline T atomicCAS(T *a, T compare, T v) {                                              \
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
    return compare;                                                                              \
  }
TGC_EMU_ATOMIC_RMW(atomicAdd, __atomic_fetch_add, int)
TGC_EMU_ATOMIC_RMW(atomicAdd, __atomic_fetch_add, unsigned int)
TGC_EMU_ATOMIC_RMW(atomicAdd, __atomic_fetch_add, unsigned long long)
TGC_EMU_ATOMIC_RMW(atomicSub, __atomic_fetch_sub, int)
TGC_EMU_ATOMIC_RMW(atomicSub, __atomic_fetch_sub, unsigned int)
TGC_EMU_ATOMIC_RMW(atomicExch, __atomic_exchange_n, int)
TGC_EMU_ATOMIC_RMW(atomicExch, __atomic_exchange_n, unsigned int)
TGC_EMU_ATOMIC_RMW(atomicExch, __atomic_exchange_n, unsigned long long)
TGC_EMU_ATOMIC_RMW(atomicAnd, __atomic_fetch_and, int)
TGC_EMU_ATOMIC_RMW(atomicAnd, __atomic_fetch_and, unsigned int)
TGC_EMU_ATOMIC_RMW(atomicAnd, __atomic_fetch_and, unsigned long long)
TGC_EMU_ATOMIC_RMW(atomicOr, __atomic_fetch_or, int)
TGC_EMU_ATOMIC_RMW(atomicOr, __atomic_fetch_or, unsigned int)
TGC_EMU_ATOMIC_RMW(atomicOr, __atomic_fetch_or, unsigned long long)
TGC_EMU_ATOMIC_RMW(atomicXor, __atomic_fetch_xor, int)
TGC_EMU_ATOMIC_RMW(atomicXor, __atomic_fetch_xor, unsigned int)
TGC_EMU_ATOMIC_RMW(atomicXor, __atomic_fetch_xor, unsigned long long)
TGC_EMU_ATOMIC_MINMAX(atomicMax, >, int)
TGC_EMU_ATOMIC_MINMAX(atomicMax, >, unsigned int)
TGC_EMU_ATOMIC_MINMAX(atomicMax, >, unsigned long long)
TGC_EMU_ATOMIC_MINMAX(atomicMax, >, long long)
TGC_EMU_ATOMIC_MINMAX(atomicMin, <, int)
TGC_EMU_ATOMIC_MINMAX(atomicMin, <, unsigned int)
TGC_EMU_ATOMIC_MINMAX(atomicMin, <, unsigned long long)
TGC_EMU_ATOMIC_MINMAX(atomicMin, <, long long)
TGC_EMU_ATOMIC_CAS(int)
TGC_EMU_ATOMIC_CAS(unsigned int)
TGC_EMU_ATOMIC_CAS(unsigned long long)
TGC_EMU_ATOMIC_CAS(unsigned short)
#undef TGC_EMU_ATOMIC_RMW
#undef TGC_EMU_ATOMIC_MINMAX
#undef TGC_EMU_ATOMIC_CAS

// Floating-point add through a compare-and-swap on the bits.
#define TGC_EMU_ATOMIC_ADD_FLOAT(T, U)                                                               \
  static inline T atomicAdd(T *a, T v) {                                                             \
    U *bits = reinterpret_cast<U *>(a);                                                              \
    U old = __atomic_load_n(bits, __ATOMIC_SEQ_CST), desired;                                        \
    do {                                                                                             \
      desired = (U)tgc_emu::to_bits(tgc_emu::from_bits<T>(old) + v);                                 \
    } while (!__atomic_compare_exchange_n(bits, &old, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)); \
    return tgc_emu::from_bits<T>(old);                                                               \
  }
TGC_EMU_ATOMIC_ADD_FLOAT(float, unsigned int)
TGC_EMU_ATOMIC_ADD_FLOAT(double, unsigned long long)
#undef TGC_EMU_ATOMIC_ADD_FLOAT
static inline float atomicExch(float *a, float v) {
  return tgc_emu::from_bits<float>(
      __atomic_exchange_n(reinterpret_cast<unsigned int *>(a), (unsigned int)tgc_emu::to_bits(v), __ATOMIC_SEQ_CST));
}
static inline unsigned int atomicInc(unsigned int *a, unsigned int limit) {
  unsigned int old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
  while (!__atomic_compare_exchange_n(a, &old, old >= limit ? 0u : old + 1u, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST)) {
  }
  return old;
}
#ifdef TGC_RACECHECK
// An atomic on a TGC_SHARED element (atomicAdd(&bins[k], 1)): reported as an
// atomic access — atomics do not race with each other, but do with plain
// accesses.
#define TGC_EMU_SHARED_ATOMIC(name)                                                                  \
  template <class T, class V>                                                                        \
  static inline T name(const tgc_emu::shared_address<T> &a, V v) {                                  \
    a.r->note(TGC_EMU_ATOMIC);                                                                       \
    return name(a.p, (T)v);                                                                          \
  }
TGC_EMU_SHARED_ATOMIC(atomicAdd)
TGC_EMU_SHARED_ATOMIC(atomicSub)
TGC_EMU_SHARED_ATOMIC(atomicExch)
TGC_EMU_SHARED_ATOMIC(atomicMax)
TGC_EMU_SHARED_ATOMIC(atomicMin)
TGC_EMU_SHARED_ATOMIC(atomicAnd)
TGC_EMU_SHARED_ATOMIC(atomicOr)
TGC_EMU_SHARED_ATOMIC(atomicXor)
#undef TGC_EMU_SHARED_ATOMIC
template <class T, class V>
static inline T atomicCAS(const tgc_emu::shared_address<T> &a, V compare, V v) {
  a.r->note(TGC_EMU_ATOMIC);
  return atomicCAS(a.p, (T)compare, (T)v);
}
#endif

// ---------------------------------------------------------------------------
// Intrinsics and math
// ---------------------------------------------------------------------------
static inline unsigned int __float_as_uint(float f) { return tgc_emu::from_bits<unsigned int>(tgc_emu::to_bits(f)); }
static inline float __uint_as_float(unsigned int u) { return tgc_emu::from_bits<float>(u); }
static inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
static inline float __int_as_float(int i) { return __uint_as_float((unsigned int)i); }
static inline long long __double_as_longlong(double d) { return (long long)tgc_emu::to_bits(d); }
static inline double __longlong_as_double(long long l) { return tgc_emu::from_bits<double>((unsigned long long)l); }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned int)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * b) >> 32);
}
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
template <class T> static inline T __ldg(const T *p) { return *p; }

// glibc declares these names itself (as its own exp, log, ...): macros,
// defined after <math.h>, send them to the accurate functions.
#define __expf(x) expf(x)
#define __exp10f(x) exp10f(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf(x, y)
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x != x ? 0.0f : x; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned int x) { return (float)x; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

// ---------------------------------------------------------------------------
// The module's entry point: the emulator's one symbol in the shared object.
// ---------------------------------------------------------------------------
extern "C" __attribute__((visibility("default"))) const tgc_emu_module *tgc_emu_module_get(void) {
  using namespace tgc_emu;
  g_module.abi_version = TGC_EMU_ABI_VERSION;
#ifdef TGC_RACECHECK
  g_module.racecheck = 1;
#endif
  layout();
  g_module.nkernels = g_nkernels;
  g_module.kernels = g_kernels;
  g_module.nshared = g_nshared;
  g_module.shared = g_shared;
  return &g_module;
}

#endif
