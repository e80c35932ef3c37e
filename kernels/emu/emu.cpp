/* emu.cpp — the SIMT emulation's runtime: blocks of fibers, barriers, warp
 * collectives, launch checks and fault reports (see emu.h for the semantics).
 *
 * A fiber is a stack and a saved stack pointer. ifd_emu_switch (x86-64 assembly below)
 * saves the callee-saved registers on the current stack, swaps stack pointers and
 * restores the other side: a few ns, where swapcontext makes a sigprocmask syscall. The
 * floating-point control state (MXCSR, x87 control word) is the host thread's and is
 * not switched: kernels never change rounding modes. A fiber that blocks hands over
 * straight to the next ready fiber of the pass (one switch per blocking). Other CPUs
 * fall back to ucontext. Stacks are mmap'd with a guard
 * page below, kept per host thread and reused; under ASan they are unpoisoned on reuse
 * and every switch is announced (__sanitizer_start/finish_switch_fiber). */
#include "emu.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define IFD_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IFD_EMU_ASAN 1
#endif
#endif
#ifdef IFD_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace ifd_simt {

thread_local thread_ctx *cur;
thread_local grid_ctx *cur_grid;

/* ---- context switch ------------------------------------------------------------------- */
#if defined(__x86_64__)
extern "C" void ifd_emu_switch(void **save_sp, void *new_sp);
extern "C" void ifd_emu_trampoline(void);
__asm__(".text\n"
        ".globl ifd_emu_switch\n"
        ".type ifd_emu_switch,@function\n"
        "ifd_emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size ifd_emu_switch,.-ifd_emu_switch\n"
        ".globl ifd_emu_trampoline\n"
        ".type ifd_emu_trampoline,@function\n"
        "ifd_emu_trampoline:\n"
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size ifd_emu_trampoline,.-ifd_emu_trampoline\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");
#endif

enum fstate { F_READY, F_BARRIER, F_WARP, F_DONE };

/* A suspended context: a fiber's or the scheduler's. */
struct ctx {
#if defined(__x86_64__)
    void *sp;
#else
    ucontext_t uc;
#endif
};

struct fiber {
    thread_ctx t;
    fstate st;
    unsigned char *stack; /* usable area [stack, stack + stack_bytes) */
    ctx c;
    /* what it waits at */
    const char *file;
    int line;
    int bar_op, bar_pred, bar_res;
    warp_op wop;
    unsigned wmask;
    uint64_t wval, wres;
    int warg, wwidth;
};

struct block_ctx {
    fiber *f;
    unsigned n;
    fiber *running;
    const unsigned *perm; /* this pass's order of the threads */
    unsigned pos;         /* index in perm of the running fiber */
    ctx sched;
    kernel_fn fn;
    void *arg;
    /* the scheduler's stack, for ASan's switch announcements (learned at the block's
     * first fiber entry) */
    bool sched_known;
    const void *sched_stack_bottom;
    size_t sched_stack_size;
};

/* ---- per-host-thread state ------------------------------------------------------------ */
struct stack_pool {
    std::vector<unsigned char *> maps; /* each: guard page + stack */
    ~stack_pool() {
        for (unsigned char *m : maps) munmap(m, map_bytes());
    }
    static size_t stack_bytes() {
        static size_t b = 0;
        if (!b) {
            const char *e = getenv("IFD_EMU_STACK_KB");
            long kb = e ? atol(e) : 0;
            b = (size_t)(kb >= 16 && kb <= 65536 ? kb : 128) * 1024;
        }
        return b;
    }
    static size_t map_bytes() { return stack_bytes() + 4096; }
    unsigned char *get(unsigned i) {
        while (maps.size() <= i) {
            void *m = mmap(NULL, map_bytes(), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) return NULL;
            mprotect(m, 4096, PROT_NONE); /* overflow faults instead of corrupting */
            maps.push_back((unsigned char *)m);
        }
        return maps[i] + 4096;
    }
};
static thread_local stack_pool t_stacks;
static thread_local char t_err[1024];
static thread_local order t_order = ORDER_FORWARD;
static thread_local uint64_t t_seed = 1;
static thread_local bool t_order_set = false;
static thread_local uint64_t t_launches = 0;
static long g_faults = 0;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void order_from_env(void) {
    if (t_order_set) return;
    t_order_set = true;
    const char *e = getenv("IFD_EMU_ORDER");
    if (!e) return;
    if (!strncmp(e, "reverse", 7)) t_order = ORDER_REVERSE;
    else if (!strncmp(e, "random", 6)) {
        t_order = ORDER_RANDOM;
        if (e[6] == ':') t_seed = strtoull(e + 7, NULL, 10);
    }
}
void set_order(order o, uint64_t seed) {
    t_order_set = true;
    t_order = o;
    t_seed = seed;
}
order get_order(void) {
    order_from_env();
    return t_order;
}
const char *last_error(void) { return t_err; }
void clear_error(void) { t_err[0] = 0; }
long n_faults(void) { return __atomic_load_n(&g_faults, __ATOMIC_SEQ_CST); }

static int fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fault(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_err, sizeof t_err, fmt, ap);
    va_end(ap);
    fprintf(stderr, "simt-emu: %s\n", t_err);
    __atomic_fetch_add(&g_faults, 1, __ATOMIC_SEQ_CST);
    return -1;
}

/* A permutation of 0..n-1 in the current order. */
static void permute(std::vector<unsigned> &p, unsigned n, uint64_t salt) {
    p.resize(n);
    for (unsigned i = 0; i < n; i++) p[i] = t_order == ORDER_REVERSE ? n - 1 - i : i;
    if (t_order == ORDER_RANDOM) {
        uint64_t s = t_seed * 0x2545f4914f6cdd1dull + salt;
        for (unsigned i = n; i > 1; i--) {
            unsigned j = (unsigned)(splitmix(&s) % i);
            unsigned x = p[i - 1];
            p[i - 1] = p[j];
            p[j] = x;
        }
    }
}

/* ---- fibers ------------------------------------------------------------------------- */
static thread_local block_ctx *t_blk;

/* Save the running context into from and resume to (whose stack is [to_stack, +to_size),
 * announced to ASan; exiting: from is never resumed). */
static void jump(ctx *from, ctx *to, const void *to_stack, size_t to_size, bool exiting) {
#ifdef IFD_EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(exiting ? NULL : &fake, to_stack, to_size);
#else
    (void)to_stack, (void)to_size, (void)exiting;
#endif
#if defined(__x86_64__)
    ifd_emu_switch(&from->sp, to->sp);
#else
    swapcontext(&from->uc, &to->uc);
#endif
#ifdef IFD_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

/* The running fiber f blocks (or exits): switch straight to the next ready fiber of this
 * pass, or back to the scheduler when the pass is over (one switch per blocking, not
 * two). */
static void to_scheduler(fiber *f, bool exiting) {
    block_ctx *b = t_blk;
    fiber *next = NULL;
    for (unsigned k = b->pos + 1; k < b->n; k++) {
        fiber *g = &b->f[b->perm[k]];
        if (g->st == F_READY) {
            next = g;
            b->pos = k;
            break;
        }
    }
    if (next) {
        b->running = next;
        cur = &next->t;
        jump(&f->c, &next->c, next->stack, stack_pool::stack_bytes(), exiting);
    } else {
        b->pos = b->n;
        jump(&f->c, &b->sched, b->sched_stack_bottom, b->sched_stack_size, exiting);
    }
}

static void fiber_main(void *p) {
    fiber *f = (fiber *)p;
#ifdef IFD_EMU_ASAN
    /* the block's first fiber is entered from the scheduler: learn its stack then */
    if (!t_blk->sched_known) {
        __sanitizer_finish_switch_fiber(NULL, &t_blk->sched_stack_bottom, &t_blk->sched_stack_size);
        t_blk->sched_known = true;
    } else {
        __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
    }
#endif
    block_ctx *b = t_blk;
    b->fn(b->arg);
    f->st = F_DONE;
    to_scheduler(f, true);
    abort(); /* never resumed */
}

#if !defined(__x86_64__)
static void fiber_entry_uc(unsigned hi, unsigned lo) {
    fiber_main((void *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
#endif

static void fiber_init(fiber *f, unsigned char *stack) {
    size_t bytes = stack_pool::stack_bytes();
    f->stack = stack;
#ifdef IFD_EMU_ASAN
    __asan_unpoison_memory_region(stack, bytes);
#endif
#if defined(__x86_64__)
    /* Frame read by ifd_emu_switch's restore: [r15][r14][r13][r12][rbx][rbp][ret]
     * with the slot above ret 16-byte aligned (the trampoline calls with rsp % 16 == 0). */
    uintptr_t top = ((uintptr_t)(stack + bytes)) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 16); /* 16 bytes of headroom; ret slot at top-24 */
    *--sp = (uint64_t)(uintptr_t)&ifd_emu_trampoline; /* ret */
    *--sp = 0;                                          /* rbp */
    *--sp = 0;                                          /* rbx */
    *--sp = (uint64_t)(uintptr_t)f;                     /* r12: the argument */
    *--sp = (uint64_t)(uintptr_t)&fiber_main;           /* r13: the entry */
    *--sp = 0;                                          /* r14 */
    *--sp = 0;                                          /* r15 */
    f->c.sp = sp;
#else
    getcontext(&f->c.uc);
    f->c.uc.uc_stack.ss_sp = stack;
    f->c.uc.uc_stack.ss_size = bytes;
    f->c.uc.uc_link = NULL;
    uintptr_t a = (uintptr_t)f;
    makecontext(&f->c.uc, (void (*)(void))fiber_entry_uc, 2, (unsigned)(a >> 32), (unsigned)a);
#endif
}

/* Run one pass: from the first ready fiber of perm, each blocking fiber hands over to the
 * next ready one (to_scheduler); the last hands back here. */
static void run_pass(block_ctx *b, const unsigned *perm) {
    b->perm = perm;
    unsigned k = 0;
    while (k < b->n && b->f[perm[k]].st != F_READY) k++;
    if (k == b->n) return;
    fiber *f = &b->f[perm[k]];
    b->pos = k;
    b->running = f;
    cur = &f->t;
    jump(&b->sched, &f->c, f->stack, stack_pool::stack_bytes(), false);
    cur = NULL;
    b->running = NULL;
}

static fiber *self(const char *what) {
    if (!t_blk || !t_blk->running) {
        fprintf(stderr, "simt-emu: %s called outside a kernel\n", what);
        abort();
    }
    return t_blk->running;
}

/* ---- collectives (fiber side) -------------------------------------------------------- */
void sync_block(const char *file, int line) { (void)sync_block_op(-1, 0, file, line); }

int sync_block_op(int op, int pred, const char *file, int line) {
    fiber *f = self("__syncthreads");
    f->st = F_BARRIER;
    f->file = file;
    f->line = line;
    f->bar_op = op;
    f->bar_pred = pred != 0;
    to_scheduler(f, false);
    return f->bar_res;
}

uint64_t warp_collective(warp_op op, unsigned mask, uint64_t v, int arg, int width, const char *file,
                         int line) {
    fiber *f = self("a warp collective");
    f->st = F_WARP;
    f->wop = op;
    f->wmask = mask;
    f->wval = v;
    f->warg = arg;
    f->wwidth = width;
    f->file = file;
    f->line = line;
    to_scheduler(f, false);
    return f->wres;
}

unsigned active_mask(void) {
    fiber *f = self("__activemask");
    block_ctx *b = t_blk;
    unsigned w0 = f->t.linear & ~31u, m = 0;
    for (unsigned l = 0; l < 32 && w0 + l < b->n; l++)
        if (b->f[w0 + l].st != F_DONE) m |= 1u << l;
    return m;
}

/* ---- collectives (scheduler side) ---------------------------------------------------- */
static const char *op_name(warp_op op) {
    static const char *n[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                              "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp",
                              "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                              "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync", "mma"};
    return (unsigned)op < sizeof n / sizeof n[0] ? n[op] : "?";
}

/* Try to complete the warp collectives of warp w. Returns 1 if some completed, 0 if none
 * could, -1 on a fault (reported). */
static int resolve_warp(block_ctx *b, unsigned w, const char *kname) {
    unsigned w0 = w * 32, nl = b->n - w0 < 32 ? b->n - w0 : 32;
    fiber *lane = b->f + w0;
    int progressed = 0;
    for (unsigned l = 0; l < nl; l++) {
        fiber *f = &lane[l];
        if (f->st != F_WARP) continue;
        unsigned m = f->wmask;
        if (!(m & (1u << l)))
            return fault("kernel %s: %s at %s:%d by lane %u of warp %u, whose mask %08x leaves it out",
                         kname, op_name(f->wop), f->file, f->line, l, w, m);
        bool ready = true;
        for (unsigned j = 0; j < 32; j++) {
            if (!(m & (1u << j))) continue;
            if (j >= nl || lane[j].st == F_DONE)
                return fault("kernel %s: %s at %s:%d with mask %08x names lane %u of warp %u, which %s",
                             kname, op_name(f->wop), f->file, f->line, m, j, w,
                             j >= nl ? "does not exist (block too small)" : "has exited");
            if (lane[j].st != F_WARP) { ready = false; continue; }
            if (lane[j].wmask != m || lane[j].wop != f->wop)
                return fault("kernel %s: warp %u diverges: lane %u at %s (%s:%d, mask %08x), lane %u at %s "
                             "(%s:%d, mask %08x)",
                             kname, w, l, op_name(f->wop), f->file, f->line, m, j,
                             op_name(lane[j].wop), lane[j].file, lane[j].line, lane[j].wmask);
        }
        if (!ready) continue;
        /* complete: every lane of m */
        uint64_t acc = 0;
        switch (f->wop) {
        case W_BALLOT:
        case W_ANY:
        case W_ALL: {
            unsigned bits = 0;
            for (unsigned j = 0; j < 32; j++)
                if ((m & (1u << j)) && lane[j].wval) bits |= 1u << j;
            acc = f->wop == W_BALLOT ? bits : f->wop == W_ANY ? (bits != 0) : (bits == m);
            break;
        }
        case W_REDUCE_ADD:
        case W_REDUCE_MIN:
        case W_REDUCE_MAX:
        case W_REDUCE_AND:
        case W_REDUCE_OR:
        case W_REDUCE_XOR: {
            bool first = true;
            uint32_t r = 0;
            for (unsigned j = 0; j < 32; j++) {
                if (!(m & (1u << j))) continue;
                uint32_t x = (uint32_t)lane[j].wval;
                if (first) { r = x; first = false; continue; }
                switch (f->wop) {
                case W_REDUCE_ADD: r += x; break;
                case W_REDUCE_MIN: r = x < r ? x : r; break;
                case W_REDUCE_MAX: r = x > r ? x : r; break;
                case W_REDUCE_AND: r &= x; break;
                case W_REDUCE_OR: r |= x; break;
                default: r ^= x; break;
                }
            }
            acc = r;
            break;
        }
        default: break;
        }
        for (unsigned j = 0; j < 32; j++) {
            if (!(m & (1u << j))) continue;
            fiber *g = &lane[j];
            int wd = g->wwidth;
            if (wd < 1 || wd > 32 || (wd & (wd - 1)))
                return fault("kernel %s: %s at %s:%d with width %d (not a power of two <= 32)", kname,
                             op_name(g->wop), g->file, g->line, wd);
            unsigned seg = j & ~(unsigned)(wd - 1), src = j;
            switch (g->wop) {
            case W_SHFL: src = seg + ((unsigned)g->warg & (unsigned)(wd - 1)); break;
            case W_SHFL_UP: src = j - seg >= (unsigned)g->warg ? j - (unsigned)g->warg : j; break;
            case W_SHFL_DOWN: src = j + (unsigned)g->warg < seg + (unsigned)wd ? j + (unsigned)g->warg : j; break;
            case W_SHFL_XOR: {
                unsigned s = j ^ (unsigned)g->warg;
                src = s < seg + (unsigned)wd && s < 32 ? s : j;
                break;
            }
            default: break;
            }
            if (g->wop <= W_SHFL_XOR) {
                if (!(m & (1u << src)))
                    return fault("kernel %s: %s at %s:%d: lane %u reads lane %u, outside mask %08x", kname,
                                 op_name(g->wop), g->file, g->line, j, src, m);
                g->wres = lane[src].wval;
            } else {
                g->wres = acc;
            }
        }
        for (unsigned j = 0; j < 32; j++)
            if (m & (1u << j)) lane[j].st = F_READY;
        progressed = 1;
    }
    return progressed;
}

/* Release the block barrier if every live thread waits at it. 1 released, 0 not yet, -1
 * fault. */
static int resolve_barrier(block_ctx *b, const char *kname) {
    fiber *first = NULL;
    int cnt = 0;
    unsigned live = 0;
    for (unsigned i = 0; i < b->n; i++) {
        fiber *f = &b->f[i];
        if (f->st == F_DONE) continue;
        live++;
        if (f->st != F_BARRIER) return 0;
        if (!first) first = f;
        else if (f->line != first->line || strcmp(f->file, first->file) != 0 || f->bar_op != first->bar_op)
            return fault("kernel %s: divergent __syncthreads: thread %u waits at %s:%d, thread %u at %s:%d",
                         kname, first->t.linear, first->file, first->line, f->t.linear, f->file, f->line);
        cnt += f->bar_pred;
    }
    if (!first) return 0;
    int res = first->bar_op == 0 ? cnt : first->bar_op == 1 ? (cnt == (int)live) : first->bar_op == 2 ? (cnt > 0) : 0;
    for (unsigned i = 0; i < b->n; i++)
        if (b->f[i].st == F_BARRIER) {
            b->f[i].bar_res = res;
            b->f[i].st = F_READY;
        }
    return 1;
}

static int report_stuck(block_ctx *b, const char *kname) {
    char where[600];
    size_t k = 0;
    int shown = 0;
    for (unsigned i = 0; i < b->n && shown < 6; i++) {
        fiber *f = &b->f[i];
        if (f->st == F_DONE) continue;
        k += (size_t)snprintf(where + k, sizeof where - k, " thread %u at %s %s:%d;", f->t.linear,
                              f->st == F_BARRIER ? "__syncthreads" : op_name(f->wop), f->file, f->line);
        if (k >= sizeof where) break;
        shown++;
    }
    return fault("kernel %s: the block cannot go on (a barrier or warp collective some threads "
                 "never reach):%s",
                 kname, where);
}

/* ---- launch -------------------------------------------------------------------------- */
static int run_block(block_ctx *b, const std::vector<unsigned> &tperm, const char *kname) {
    for (;;) {
        bool any_live = false;
        run_pass(b, tperm.data());
        for (unsigned i = 0; i < b->n; i++)
            if (b->f[i].st != F_DONE) any_live = true;
        if (!any_live) return 0;
        int progressed = 0;
        for (unsigned w = 0; w * 32 < b->n; w++) {
            int r = resolve_warp(b, w, kname);
            if (r < 0) return -1;
            progressed |= r;
        }
        int r = resolve_barrier(b, kname);
        if (r < 0) return -1;
        progressed |= r;
        if (!progressed) return report_stuck(b, kname);
    }
}

int launch(const char *name, dim3 grid, dim3 block, size_t smem, kernel_fn fn, void *arg) {
    order_from_env();
    if (t_blk)
        return fault("kernel %s launched from inside kernel (dynamic parallelism is not emulated)", name);
    uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !nthreads || nthreads > 1024 || block.x > 1024 ||
        block.y > 1024 || block.z > 64 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        return fault("kernel %s: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u)", name,
                     grid.x, grid.y, grid.z, block.x, block.y, block.z);
    if (smem > 232448)
        return fault("kernel %s: %zu bytes of dynamic shared memory (the most on sm_90 is 232448)",
                     name, smem);
    unsigned n = (unsigned)nthreads;
    std::vector<fiber> fibers(n);
    unsigned char *dyn = (unsigned char *)malloc(smem ? smem : 16);
    if (!dyn) return fault("kernel %s: out of host memory", name);
    block_ctx b;
    memset((void *)&b, 0, sizeof b);
    b.f = fibers.data();
    b.n = n;
    b.fn = fn;
    b.arg = arg;
    for (unsigned i = 0; i < n; i++) {
        if (!t_stacks.get(i)) {
            free(dyn);
            return fault("kernel %s: cannot map fiber stacks (%s)", name, strerror(errno));
        }
    }
    grid_ctx g;
    g.bdim = block;
    g.gdim = grid;
    g.dyn_smem = dyn;
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    std::vector<unsigned> tperm;
    uint64_t launch_no = ++t_launches;
    /* block order: a permutation of the linear block ids (grids beyond 2^24 blocks only
     * forward/reverse, without a table) */
    std::vector<unsigned> bperm;
    bool table = nblocks <= (1u << 24);
    if (table) permute(bperm, (unsigned)nblocks, launch_no * 977);
    int rc = 0;
    t_blk = &b;
    cur_grid = &g;
    for (uint64_t k = 0; k < nblocks && rc == 0; k++) {
        uint64_t lb = table ? bperm[k] : (t_order == ORDER_REVERSE ? nblocks - 1 - k : k);
        g.bid.x = (unsigned)(lb % grid.x);
        g.bid.y = (unsigned)((lb / grid.x) % grid.y);
        g.bid.z = (unsigned)(lb / ((uint64_t)grid.x * grid.y));
        memset(dyn, 0xA5, smem);
        for (unsigned i = 0; i < n; i++) {
            fiber *f = &fibers[i];
            f->t.linear = i;
            f->t.tid.x = i % block.x;
            f->t.tid.y = (i / block.x) % block.y;
            f->t.tid.z = i / (block.x * block.y);
            f->t.blk = &b;
            f->st = F_READY;
            fiber_init(f, t_stacks.get(i));
        }
        permute(tperm, n, launch_no * 31 + k);
        b.sched_known = false;
        if (run_block(&b, tperm, name) != 0) {
            size_t l = strlen(t_err);
            if (l + 40 < sizeof t_err)
                snprintf(t_err + l, sizeof t_err - l, " (block %u,%u,%u)", g.bid.x, g.bid.y, g.bid.z);
            rc = -1;
        }
    }
    t_blk = NULL;
    cur_grid = NULL;
    free(dyn);
    return rc;
}

static thread_local capture_hook t_hook;
capture_hook get_capture_hook(void) { return t_hook; }
void set_capture_hook(capture_hook h) { t_hook = h; }
int captured_run(captured_launch *l) { return launch(l->name, l->grid, l->block, l->smem, l->fn, l->arg); }
void captured_free(captured_launch *l) {
    if (!l) return;
    l->del(l->arg);
    delete l;
}

} /* namespace ifd_simt */
