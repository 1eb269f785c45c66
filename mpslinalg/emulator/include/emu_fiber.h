// User-space context switch for lane fibers. swapcontext() makes a sigprocmask syscall per switch (~170 ns);
// these switches save only the callee-saved registers (~9 ns).
#pragma once
#include <sys/mman.h>
#include <cstddef>

namespace emu {
typedef void (*FiberFn)(void*);

#if defined(__x86_64__) && !defined(EMU_USE_UCONTEXT)
extern "C" void emu_switch_ctx(void** save_sp, void* new_sp);
extern "C" void emu_fiber_start();
// Expanded once per library (in the translation unit holding the kernel table).
#define EMU_DEFINE_FIBER_ASM() __asm__( \
    ".text\n" \
    ".globl emu_switch_ctx\n.hidden emu_switch_ctx\n.type emu_switch_ctx,@function\n" \
    "emu_switch_ctx:\n" \
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n" \
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n" \
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n" \
    "  ret\n" \
    ".size emu_switch_ctx, .-emu_switch_ctx\n" \
    ".globl emu_fiber_start\n.hidden emu_fiber_start\n.type emu_fiber_start,@function\n" \
    "emu_fiber_start:\n" \
    "  movq %r12, %rdi\n  andq $-16, %rsp\n  callq *%r13\n  ud2\n" \
    ".size emu_fiber_start, .-emu_fiber_start\n");
// Builds the frame that emu_switch_ctx pops: r15 r14 r13(fn) r12(arg) rbx rbp, then the return address.
inline void* fiber_init(void* stack_top, FiberFn fn, void* arg) {
  void** sp = (void**)(((size_t)stack_top & ~(size_t)15) - 8 * 8);
  sp[0] = nullptr; sp[1] = nullptr; sp[2] = (void*)fn; sp[3] = arg; sp[4] = nullptr; sp[5] = nullptr;
  sp[6] = (void*)&emu_fiber_start; sp[7] = nullptr;
  return sp;
}
inline void fiber_switch(void** save, void* to) { emu_switch_ctx(save, to); }
#elif defined(__aarch64__) && !defined(EMU_USE_UCONTEXT)
extern "C" void emu_switch_ctx(void** save_sp, void* new_sp);
extern "C" void emu_fiber_start();
// Expanded once per library (in the translation unit holding the kernel table).
#define EMU_DEFINE_FIBER_ASM() __asm__( \
    ".text\n" \
    ".globl emu_switch_ctx\n.hidden emu_switch_ctx\n.type emu_switch_ctx,%function\n" \
    "emu_switch_ctx:\n" \
    "  sub sp, sp, #176\n" \
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n" \
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n" \
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n  stp d14, d15, [sp, #144]\n" \
    "  mov x2, sp\n  str x2, [x0]\n  mov sp, x1\n" \
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n" \
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n" \
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n  ldp d14, d15, [sp, #144]\n" \
    "  add sp, sp, #176\n  ret\n" \
    ".size emu_switch_ctx, .-emu_switch_ctx\n" \
    ".globl emu_fiber_start\n.hidden emu_fiber_start\n.type emu_fiber_start,%function\n" \
    "emu_fiber_start:\n  mov x0, x19\n  blr x20\n  brk #0\n" \
    ".size emu_fiber_start, .-emu_fiber_start\n");
inline void* fiber_init(void* stack_top, FiberFn fn, void* arg) {
  void** sp = (void**)(((size_t)stack_top & ~(size_t)15) - 176);
  for (int i = 0; i < 22; ++i) sp[i] = nullptr;
  sp[0] = arg; sp[1] = (void*)fn; sp[11] = (void*)&emu_fiber_start;
  return sp;
}
inline void fiber_switch(void** save, void* to) { emu_switch_ctx(save, to); }
#else
#include <ucontext.h>
#define EMU_DEFINE_FIBER_ASM()
// Fallback: the "stack pointer" slot holds a ucontext_t* instead.
struct UFiber { ucontext_t uc; };
inline void* fiber_init(void* stack_top, FiberFn fn, void* arg) {
  static const size_t kCtx = (sizeof(UFiber) + 63) & ~(size_t)63;
  UFiber* f = (UFiber*)(((size_t)stack_top - kCtx) & ~(size_t)63);
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = (char*)stack_top - (256 << 10) + 4096;
  f->uc.uc_stack.ss_size = (size_t)((char*)f - (char*)f->uc.uc_stack.ss_sp) & ~(size_t)15;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, (void (*)())fn, 1, arg);
  return f;
}
inline void fiber_switch(void** save, void* to) {
  UFiber self; *save = &self; swapcontext(&self.uc, &((UFiber*)to)->uc);
}
#endif

// Lane stacks: lazily committed by the kernel, a PROT_NONE guard page below each, reused across lanes.
static const size_t kStackSize = 256 << 10;
static const size_t kGuard = 4096;
static const int kMaxPooled = 256;
struct StackPool {
  void* free_[1100]; int nfree = 0;
  void* get() {
    if (nfree) return free_[--nfree];
    void* m = mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    mprotect(m, kGuard, PROT_NONE);
    return m;
  }
  void put(void* s) { if (nfree < 1100) free_[nfree++] = s; else munmap(s, kStackSize); }
  // Keep a bounded pool: every compiled library has its own pool per thread.
  void trim() { while (nfree > kMaxPooled) munmap(free_[--nfree], kStackSize); }
  ~StackPool() { while (nfree) munmap(free_[--nfree], kStackSize); }
};
}  // namespace emu
