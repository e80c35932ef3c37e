/* sample.cu — the device sampling op (sample.h): one block per row.
 *
 * A row runs sampler.h's pipeline with these block-wide steps, each a pass over the
 * row (a 152k-id row is 600 KB: it stays in L2 between passes):
 *   logprobs  (when asked, on the raw logits) the max, then sum exp(l - max) in double,
 *             each thread over a strided slice, the partial sums combined in a fixed
 *             tree; the top N by a radix select on (logit desc, id asc);
 *   penalties copy the row into work, apply the seen list (in parallel: its ids are
 *             distinct), logit_bias by one thread in list order, then the bans;
 *   argmax    of the penalized logits (lowest id on ties): the greedy token, and the
 *             fallback when every x is -inf; m = max x in the same pass;
 *   top_k     radix select by count of the k-th best key (x desc, id asc);
 *   Z         the sum of the integer weights q over the top_k survivors;
 *   top_p     radix select by mass: the member at which the best-first running sum of
 *             q (over the min_p survivors) reaches ceil(top_p * Z);
 *   draw      u = mulhi(philox(key, position), total), radix select by mass for u + 1.
 * The radix select (radix_cross) descends the 64-bit key 8 bits at a time: a shared
 * histogram of mass (and count, and the largest key) per digit, one warp finds the
 * digit where the running sum from the top crosses the target, and it stops early
 * once that digit holds one id. Sums are of integers (uint64), so the histogram's
 * atomic adds give the same bits in any order: that is what makes the token equal to
 * the CPU's, and the same whatever else is in the batch.
 *
 * Floating point is kept to single IEEE operations that the compiler may not fuse
 * (__fmul_rn, __fadd_rn, __fsub_rn; the host build of the emulation turns contraction
 * off below), in the order sampler.c uses. */
#if defined(IFD_SIMT_EMU) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sample.h"

#include "devrt.h"

IFD_NS_BEGIN

namespace {

constexpr int SAMP_THREADS = 512;
constexpr int SAMP_WARPS = SAMP_THREADS / IFD_WARP;

/* ---- the shared arithmetic (sampler.c repeats it on the host) ----------------------- */

__device__ __forceinline__ void philox4x32(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        const uint32_t h0 = (uint32_t)(p0 >> 32), l0 = (uint32_t)p0;
        const uint32_t h1 = (uint32_t)(p1 >> 32), l1 = (uint32_t)p1;
        const uint32_t n0 = h1 ^ c[1] ^ k0, n2 = h0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = l1;
        c[2] = n2;
        c[3] = l0;
    }
}

__device__ __forceinline__ uint64_t draw_bits(uint64_t key, uint64_t ctr) {
    uint32_t c[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), 0u, 0u};
    philox4x32(c, (uint32_t)key, (uint32_t)(key >> 32));
    return (uint64_t)c[0] | (uint64_t)c[1] << 32;
}

/* sampler_expneg, operation for operation. */
__device__ __forceinline__ float expneg(float d) {
    if (!(d >= -86.0f)) return 0.0f;
    if (d >= 0.0f) return 1.0f;
    const float t = __fmul_rn(d, 0x1.715476p+0f);
    const int k = (int)floorf(__fadd_rn(t, 0.5f));
    const float kf = (float)k;
    const float r = __fsub_rn(__fsub_rn(d, __fmul_rn(kf, 0x1.62e4p-1f)), __fmul_rn(kf, 0x1.7f7d1cp-20f));
    float p = 0x1.a01a02p-13f;
    p = __fadd_rn(__fmul_rn(p, r), 0x1.6c16c2p-10f);
    p = __fadd_rn(__fmul_rn(p, r), 0x1.111112p-7f);
    p = __fadd_rn(__fmul_rn(p, r), 0x1.555556p-5f);
    p = __fadd_rn(__fmul_rn(p, r), 0x1.555556p-3f);
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    return __fmul_rn(p, __uint_as_float((uint32_t)(k + 127) << 23));
}

__device__ __forceinline__ float clean(float x) { return x != x ? -INFINITY : x; }

/* The order key: larger is better. x (NaN already -inf; -0 as +0) descending, then id
 * ascending. The id is recovered as 0xffffffff - low word. */
__device__ __forceinline__ uint64_t order_key(float x, int32_t id) {
    uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t)u << 32 | (uint64_t)(0xffffffffu - (uint32_t)id);
}
__device__ __forceinline__ int32_t key_id(uint64_t k) { return (int32_t)(0xffffffffu - (uint32_t)k); }

/* ---- block reductions (fixed tree: lanes by xor shuffle, then warps in order) ------- */

struct red_smem {
    double d[SAMP_WARPS];
    unsigned long long u[SAMP_WARPS];
    float f[SAMP_WARPS];
    int32_t i[SAMP_WARPS];
};

__device__ double block_sum_d(double v, red_smem *sm) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(IFD_FULL_MASK, v, o);
    const int w = threadIdx.x / IFD_WARP, l = threadIdx.x % IFD_WARP;
    __syncthreads(); /* earlier readers of sm are done */
    if (l == 0) sm->d[w] = v;
    __syncthreads();
    double t = 0.0;
    for (int j = 0; j < SAMP_WARPS; j++) t += sm->d[j];
    return t;
}

__device__ unsigned long long block_sum_u(unsigned long long v, red_smem *sm) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(IFD_FULL_MASK, v, o);
    const int w = threadIdx.x / IFD_WARP, l = threadIdx.x % IFD_WARP;
    __syncthreads();
    if (l == 0) sm->u[w] = v;
    __syncthreads();
    unsigned long long t = 0;
    for (int j = 0; j < SAMP_WARPS; j++) t += sm->u[j];
    return t;
}

__device__ float block_max_f(float v, red_smem *sm) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(IFD_FULL_MASK, v, o));
    const int w = threadIdx.x / IFD_WARP, l = threadIdx.x % IFD_WARP;
    __syncthreads();
    if (l == 0) sm->f[w] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int j = 0; j < SAMP_WARPS; j++) t = fmaxf(t, sm->f[j]);
    return t;
}

/* (value, id) argmax, lowest id on ties; NaN never arrives (clean). */
__device__ int32_t block_argmax(float v, int32_t id, red_smem *sm) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(IFD_FULL_MASK, v, o);
        const int32_t oi = __shfl_xor_sync(IFD_FULL_MASK, id, o);
        if (ov > v || (ov == v && oi < id)) {
            v = ov;
            id = oi;
        }
    }
    const int w = threadIdx.x / IFD_WARP, l = threadIdx.x % IFD_WARP;
    __syncthreads();
    if (l == 0) {
        sm->f[w] = v;
        sm->i[w] = id;
    }
    __syncthreads();
    float bv = sm->f[0];
    int32_t bi = sm->i[0];
    for (int j = 1; j < SAMP_WARPS; j++)
        if (sm->f[j] > bv || (sm->f[j] == bv && sm->i[j] < bi)) {
            bv = sm->f[j];
            bi = sm->i[j];
        }
    return bi;
}

/* ---- radix select by mass ------------------------------------------------------------ */

struct radix_smem {
    unsigned long long mass[256];
    unsigned long long maxkey[256];
    unsigned int count[256];
    unsigned long long above; /* mass of the keys above the chosen digit's bucket */
    unsigned long long key;   /* the result once known */
    int digit;                /* the chosen digit, -1: target not reached */
    int done;
};

/* The member (in the set elem describes) at which the running sum of its measure, best
 * key first, reaches target: *out = its key; false if the whole set falls short.
 * elem(i, &key, &measure) returns whether id i is in the set. Every thread calls. */
template <typename F>
__device__ bool radix_cross(const F &elem, int32_t n, uint64_t target, uint64_t *out, radix_smem *rs) {
    uint64_t prefix = 0, above = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        __syncthreads(); /* the previous round's readers are done */
        for (int b = threadIdx.x; b < 256; b += blockDim.x) {
            rs->mass[b] = 0;
            rs->maxkey[b] = 0;
            rs->count[b] = 0;
        }
        __syncthreads();
        for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
            uint64_t k, m;
            if (!elem(i, &k, &m)) continue;
            if (shift < 56 && (k >> (shift + 8)) != prefix) continue;
            const int b = (int)((k >> shift) & 255u);
            if (m) atomicAdd(&rs->mass[b], (unsigned long long)m);
            atomicAdd(&rs->count[b], 1u);
            atomicMax(&rs->maxkey[b], (unsigned long long)k);
        }
        __syncthreads();
        if (threadIdx.x < IFD_WARP) {
            /* lane j owns digits 255 - 8j down to 248 - 8j: lane order is key order */
            const int lane = threadIdx.x;
            unsigned long long own = 0;
            for (int b = 0; b < 8; b++) own += rs->mass[255 - 8 * lane - b];
            unsigned long long incl = own; /* inclusive running sum over lanes 0..lane */
            for (int o = 1; o < IFD_WARP; o <<= 1) {
                const unsigned long long t = __shfl_up_sync(IFD_FULL_MASK, incl, o);
                if (lane >= o) incl += t;
            }
            const unsigned hit = __ballot_sync(IFD_FULL_MASK, above + incl >= target);
            if (hit == 0) {
                if (lane == 0) rs->digit = -1;
            } else if (lane == __ffs((int)hit) - 1) {
                uint64_t acc = above + incl - own;
                int d = 255 - 8 * lane;
                for (int b = 0; b < 8; b++, d--) {
                    if (acc + rs->mass[d] >= target) break;
                    acc += rs->mass[d];
                }
                rs->digit = d;
                rs->above = acc;
                rs->done = rs->count[d] == 1 || shift == 0;
                rs->key = rs->count[d] == 1 ? rs->maxkey[d] : ((prefix << 8) | (uint64_t)d);
            }
        }
        __syncthreads();
        const int d = rs->digit;
        if (d < 0) return false; /* only in the first round: the set falls short */
        if (rs->done) {
            *out = rs->key;
            return true;
        }
        prefix = (prefix << 8) | (uint64_t)d;
        above = rs->above;
    }
    *out = prefix; /* not reached: shift 0 sets done */
    return true;
}

/* ---- the row's element views ------------------------------------------------------- */

struct raw_view { /* logprobs: the raw logits, count 1 each */
    const float *l;
    __device__ bool operator()(int32_t i, uint64_t *k, uint64_t *m) const {
        *k = order_key(clean(l[i]), i);
        *m = 1;
        return true;
    }
};

struct row_view { /* sampling: x = l * inv_t, integer weights, the filters so far */
    const float *l;
    float inv_t, m, min_p;
    uint64_t k_top;  /* keys >= k_top survive top_k (0: all) */
    uint64_t k_p;    /* keys >= k_p survive top_p (0: all) */
    bool by_count;   /* measure 1 (top_k), else q */
    bool use_min_p;  /* apply min_p (top_p and the draw) */
    __device__ bool operator()(int32_t i, uint64_t *k, uint64_t *q) const {
        const float li = l[i];
        const float x = li != li ? -INFINITY : __fmul_rn(li, inv_t);
        *k = order_key(x, i);
        if (*k < k_top || *k < k_p) return false;
        if (by_count) {
            *q = 1;
            return true;
        }
        const float w = x == m ? 1.0f : expneg(__fsub_rn(x, m));
        if (use_min_p && !(w >= min_p)) return false;
        *q = (uint64_t)__fmul_rn(w, 0x1p42f);
        return true;
    }
};

struct samp_smem {
    red_smem red;
    radix_smem rad;
    samp_logprob top[SAMP_MAX_TOP];
    uint64_t top_key[SAMP_MAX_TOP];
    int n_top;
};

__global__ void __launch_bounds__(SAMP_THREADS)
k_sample(const float *logits, int32_t n_vocab, const samp_row *rows, const samp_pen *pen,
         int32_t n_pen_all, const samp_bias *bias, int32_t n_bias_all, const int32_t *ban,
         int32_t n_ban_all, const uint32_t *allow, int64_t n_allow_all, const int32_t *extra,
         int32_t n_extra_all, float *work, int32_t *tokens, samp_logprob *lp) {
    __shared__ samp_smem sm;
    const int32_t row = blockIdx.x;
    const samp_row p = rows[row];
    const float *raw = logits + (size_t)row * n_vocab;
    const int tid = threadIdx.x, nt = blockDim.x;

    /* logprobs of the raw logits: max, then the double sum in a fixed tree */
    double lse = 0.0;
    int n_top = 0;
    const bool want_lp = lp && p.n_logprobs >= 0;
    if (want_lp) {
        float mx = -INFINITY;
        for (int32_t i = tid; i < n_vocab; i += nt) mx = fmaxf(mx, clean(raw[i]));
        mx = block_max_f(mx, &sm.red);
        double s = 0.0;
        if (mx != -INFINITY && mx != INFINITY) /* +inf: lse is +inf, as logprobs.c's */
            for (int32_t i = tid; i < n_vocab; i += nt) {
                const float x = clean(raw[i]);
                if (x != -INFINITY) s += exp((double)x - (double)mx);
            }
        s = block_sum_d(s, &sm.red);
        lse = mx == -INFINITY ? -INFINITY : mx == INFINITY ? INFINITY : (double)mx + log(s);
        n_top = p.n_logprobs < SAMP_MAX_TOP ? p.n_logprobs : SAMP_MAX_TOP;
        if (n_top > n_vocab) n_top = n_vocab;
        if (n_top > 0) {
            uint64_t kth = 0;
            radix_cross(raw_view{raw}, n_vocab, (uint64_t)n_top, &kth, &sm.rad);
            if (tid == 0) sm.n_top = 0;
            __syncthreads();
            for (int32_t i = tid; i < n_vocab; i += nt) {
                const uint64_t k = order_key(clean(raw[i]), i);
                if (k >= kth) {
                    const int slot = atomicAdd(&sm.n_top, 1);
                    if (slot < SAMP_MAX_TOP) sm.top_key[slot] = k;
                }
            }
            __syncthreads();
            if (tid == 0) { /* exactly n_top keys, distinct: sort them best first */
                for (int a = 1; a < n_top; a++)
                    for (int b = a; b > 0 && sm.top_key[b] > sm.top_key[b - 1]; b--) {
                        const uint64_t t = sm.top_key[b];
                        sm.top_key[b] = sm.top_key[b - 1];
                        sm.top_key[b - 1] = t;
                    }
            }
            __syncthreads();
        }
    }

    /* penalties, logit_bias, bans into this row's work copy */
    const float *l = raw;
    const bool ok_pen = p.n_pen > 0 && p.pen_off >= 0 && p.pen_off <= n_pen_all - p.n_pen && pen;
    const bool ok_bias = p.n_bias > 0 && p.bias_off >= 0 && p.bias_off <= n_bias_all - p.n_bias && bias;
    const bool ok_ban = p.n_ban > 0 && p.ban_off >= 0 && p.ban_off <= n_ban_all - p.n_ban && ban;
    const float rep = p.repetition_penalty;
    const bool do_rep = rep > 0.0f && rep != 1.0f;
    const bool do_pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    const bool pen_on = ok_pen && (do_rep || do_pf);
    const int64_t n_words = ((int64_t)n_vocab + 31) / 32;
    const bool ok_allow = allow && p.allow_off >= 0 && p.allow_off <= n_allow_all - n_words;
    const bool ok_extra = ok_allow && extra && p.n_extra > 0 && p.n_extra <= SAMP_MAX_EXTRA && p.extra_off >= 0 &&
                          p.extra_off <= n_extra_all - p.n_extra;
    if (pen_on || ok_bias || ok_ban || ok_allow) {
        float *wr = work + (size_t)row * n_vocab;
        for (int32_t i = tid; i < n_vocab; i += nt) wr[i] = raw[i];
        __syncthreads();
        if (pen_on)
            for (int32_t j = tid; j < p.n_pen; j += nt) {
                const samp_pen e = pen[p.pen_off + j];
                if (e.id < 0 || e.id >= n_vocab) continue;
                float v = wr[e.id];
                if (do_rep) v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
                if (e.count > 0)
                    v = __fsub_rn(v, __fadd_rn(p.presence_penalty,
                                               __fmul_rn(p.frequency_penalty, (float)e.count)));
                wr[e.id] = v;
            }
        __syncthreads();
        if (ok_bias && tid == 0) /* in list order: an id listed twice adds twice, in order */
            for (int32_t j = 0; j < p.n_bias; j++) {
                const samp_bias e = bias[p.bias_off + j];
                if (e.id >= 0 && e.id < n_vocab) wr[e.id] = __fadd_rn(wr[e.id], e.bias);
            }
        __syncthreads();
        if (ok_allow) { /* the grammar's mask: the extras keep their value (thread 0's copy) */
            float keep[SAMP_MAX_EXTRA];
            if (ok_extra && tid == 0)
                for (int32_t j = 0; j < p.n_extra; j++) {
                    const int32_t id = extra[p.extra_off + j];
                    keep[j] = id >= 0 && id < n_vocab ? wr[id] : -INFINITY;
                }
            __syncthreads();
            const uint32_t *mw = allow + p.allow_off;
            for (int32_t i = tid; i < n_vocab; i += nt)
                if (!(mw[i >> 5] >> (i & 31) & 1u)) wr[i] = -INFINITY;
            __syncthreads();
            if (ok_extra && tid == 0)
                for (int32_t j = 0; j < p.n_extra; j++) {
                    const int32_t id = extra[p.extra_off + j];
                    if (id >= 0 && id < n_vocab) wr[id] = keep[j];
                }
        }
        __syncthreads();
        if (ok_ban)
            for (int32_t j = tid; j < p.n_ban; j += nt) {
                const int32_t id = ban[p.ban_off + j];
                if (id >= 0 && id < n_vocab) wr[id] = -INFINITY;
            }
        __syncthreads();
        l = wr;
    }

    /* argmax of the penalized logits, and m = max x */
    const bool greedy = !(p.temperature >= SAMP_GREEDY_EPS) || p.top_k == 1;
    const float inv_t = greedy ? 1.0f : __fdiv_rn(1.0f, p.temperature);
    float bv = -INFINITY, mx = -INFINITY;
    int32_t bi = 0;
    for (int32_t i = tid; i < n_vocab; i += nt) {
        const float v = clean(l[i]);
        if (v > bv) { /* i ascends per thread: the first of equal values stays */
            bv = v;
            bi = i;
        }
        if (!greedy && v != -INFINITY) mx = fmaxf(mx, __fmul_rn(v, inv_t));
    }
    if (bv == -INFINITY) bi = n_vocab; /* no finite-or-+inf value: loses to any id */
    int32_t token = block_argmax(bv, bi, &sm.red);
    if (token >= n_vocab) token = 0; /* all -inf: the lowest id, as sampler_argmax */
    const float m = greedy ? -INFINITY : block_max_f(mx, &sm.red);

    if (!greedy && m != -INFINITY) {
        row_view v{l, inv_t, m, p.min_p > 0.0f ? fminf(p.min_p, 1.0f) : 0.0f, 0, 0, true, false};
        if (p.top_k > 0 && p.top_k < n_vocab) radix_cross(v, n_vocab, (uint64_t)p.top_k, &v.k_top, &sm.rad);
        v.by_count = false;
        unsigned long long z = 0;
        for (int32_t i = tid; i < n_vocab; i += nt) {
            uint64_t k, q;
            if (v(i, &k, &q)) z += q;
        }
        z = block_sum_u(z, &sm.red);
        v.use_min_p = p.min_p > 0.0f;
        if (p.top_p > 0.0f && p.top_p < 1.0f) {
            uint64_t t = (uint64_t)ceil(__dmul_rn((double)p.top_p, (double)z));
            if (t < 1) t = 1;
            uint64_t kp;
            if (radix_cross(v, n_vocab, t, &kp, &sm.rad)) v.k_p = kp;
        }
        unsigned long long total = 0;
        for (int32_t i = tid; i < n_vocab; i += nt) {
            uint64_t k, q;
            if (v(i, &k, &q)) total += q;
        }
        total = block_sum_u(total, &sm.red);
        const uint64_t u = __umul64hi(draw_bits(p.key, p.position), total);
        uint64_t kd;
        if (radix_cross(v, n_vocab, u + 1, &kd, &sm.rad)) token = key_id(kd);
    }

    if (tid == 0) {
        tokens[row] = token;
        if (want_lp) {
            samp_logprob *o = lp + (size_t)row * (1 + SAMP_MAX_TOP);
            const float c = clean(raw[token]);
            o[0].id = token;
            o[0].logprob = (c == -INFINITY || lse == -INFINITY) ? -INFINITY : (float)((double)c - lse);
            for (int j = 0; j < n_top; j++) {
                const int32_t id = key_id(sm.top_key[j]);
                const float x = clean(raw[id]);
                o[1 + j].id = id;
                o[1 + j].logprob = (x == -INFINITY || lse == -INFINITY) ? -INFINITY : (float)((double)x - lse);
            }
        }
    }
}

} /* namespace */

size_t samp_scratch_bytes(int32_t n_rows, int32_t n_vocab) {
    if (n_rows <= 0 || n_vocab <= 0) return 0;
    return (size_t)n_rows * (size_t)n_vocab * sizeof(float);
}

int samp_sample(dev_stream s, const float *logits, int32_t n_rows, int32_t n_vocab,
                const samp_row *rows, const samp_pen *pen, int32_t n_pen_all,
                const samp_bias *bias, int32_t n_bias_all, const int32_t *ban, int32_t n_ban_all,
                const uint32_t *allow, int64_t n_allow_all, const int32_t *extra, int32_t n_extra_all,
                float *work, int32_t *tokens, samp_logprob *lp) {
    if (n_rows < 0 || n_vocab <= 0 || n_vocab > SAMP_MAX_VOCAB) return DEV_ERR;
    if (n_pen_all < 0 || n_bias_all < 0 || n_ban_all < 0 || n_allow_all < 0 || n_extra_all < 0) return DEV_ERR;
    if (n_rows == 0) return DEV_OK;
    if (!logits || !rows || !work || !tokens) return DEV_ERR;
    if ((n_pen_all > 0 && !pen) || (n_bias_all > 0 && !bias) || (n_ban_all > 0 && !ban) ||
        (n_allow_all > 0 && !allow) || (n_extra_all > 0 && !extra))
        return DEV_ERR;
    auto kf = k_sample;
    IFD_LAUNCH(kf, n_rows, SAMP_THREADS, 0, s, logits, n_vocab, rows, pen, n_pen_all, bias,
               n_bias_all, ban, n_ban_all, allow, n_allow_all, extra, n_extra_all, work, tokens, lp);
    return dev_check_launch();
}

IFD_NS_END
