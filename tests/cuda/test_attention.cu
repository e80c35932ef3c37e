// test_attention.cu — kernels/attention.cu against op_attention_ref (src/backend/cpu/ops_ref.c)
// on random inputs: head_dim 64 and 128, GQA 1/4/8, block sizes 16 and 32, ragged batches of
// decodes (one long enough for split-KV), cached-prefix prefill chunks, fresh prefills and
// verification rows, contexts that are not multiples of the block size, shuffled block
// tables, slots outside every context poisoned with NaN. Then batch invariance, bit for
// bit: the same rows as single decodes, in one prefill chunk, inside a ragged batch, after
// another split of the prompt into chunks, and with or without split-KV scratch. Then
// the launcher's size checks. And every KV cache dtype (k_attention_kv) against the
// reference reading the same stored rows.
#include "cuda_test.h"

#include <algorithm>
#include <vector>

#include "attention.h"
extern "C" {
#include "backend/cpu/ops.h"
#include "backend/kv_dtype.h"
}

// A ragged step: sequence s has n_q[s] new tokens at positions ctx[s]-n_q[s] .. ctx[s]-1.
struct att_world {
    int hd, n_heads, n_kv, bs;
    int n_blocks, mbps;
    std::vector<float> k, v;        // [n_blocks * bs][n_kv][hd]
    std::vector<int32_t> table;     // [n_tables][mbps]: per logical sequence
};

static const float kPoison = NAN;

// Build a KV pool holding n_tables sequences of up to ctx_max[i] keys in shuffled blocks;
// table entries past a sequence's blocks point at a NaN block, and so do the slots past
// its context in its last block.
static void world_init(att_world *w, int hd, int n_heads, int n_kv, int bs,
                       const std::vector<int> &ctx_max, uint64_t seed) {
    w->hd = hd, w->n_heads = n_heads, w->n_kv = n_kv, w->bs = bs;
    int need = 0, mb = 0;
    for (int c : ctx_max) {
        need += (c + bs - 1) / bs;
        mb = std::max(mb, (c + bs - 1) / bs);
    }
    w->mbps = mb + 24; // room for bounded grids beyond the contexts
    w->n_blocks = need + 3; // + free blocks (one of them the poison block)
    std::vector<int> perm(w->n_blocks);
    for (int i = 0; i < w->n_blocks; i++) perm[i] = i;
    uint64_t st = seed;
    for (int i = w->n_blocks - 1; i > 0; i--) std::swap(perm[i], perm[ct_next(&st) % (uint64_t)(i + 1)]);
    const size_t slot = (size_t)n_kv * hd;
    w->k.assign((size_t)w->n_blocks * bs * slot, kPoison);
    w->v.assign((size_t)w->n_blocks * bs * slot, kPoison);
    const int poison_block = perm[need];
    w->table.assign(ctx_max.size() * w->mbps, poison_block);
    int next = 0;
    for (size_t s = 0; s < ctx_max.size(); s++) {
        const int nb = (ctx_max[s] + bs - 1) / bs;
        for (int i = 0; i < nb; i++) w->table[s * w->mbps + i] = perm[next++];
        for (int p = 0; p < ctx_max[s]; p++) {
            const size_t sl = (size_t)w->table[s * w->mbps + p / bs] * bs + p % bs;
            ct_fill(&w->k[sl * slot], slot, seed * 7919 + s * 100003 + p * 2 + 1, -1, 1);
            ct_fill(&w->v[sl * slot], slot, seed * 7919 + s * 100003 + p * 2 + 2, -1, 1);
        }
    }
}

struct att_step {
    std::vector<int32_t> pos, seq_start, ctx, table; // table: [n_seqs][mbps]
    std::vector<int> which;                           // logical sequence of each step sequence
};

static void step_add(att_step *st, const att_world *w, int which, int n_q, int ctx) {
    if (st->seq_start.empty()) st->seq_start.push_back(0);
    for (int i = 0; i < n_q; i++) st->pos.push_back(ctx - n_q + i);
    st->seq_start.push_back((int32_t)st->pos.size());
    st->ctx.push_back(ctx);
    st->which.push_back(which);
    st->table.insert(st->table.end(), w->table.begin() + (size_t)which * w->mbps,
                     w->table.begin() + (size_t)(which + 1) * w->mbps);
}

// q rows of a step: a token's q depends only on (logical sequence, position), so the
// same row gets the same q in every step that contains it.
static std::vector<float> step_q(const att_step &st, const att_world *w) {
    const size_t qd = (size_t)w->n_heads * w->hd;
    std::vector<float> q(st.pos.size() * qd);
    for (size_t s = 0; s + 1 < st.seq_start.size(); s++)
        for (int t = st.seq_start[s]; t < st.seq_start[s + 1]; t++)
            ct_fill(&q[t * qd], qd, 555 + st.which[s] * 1000003ull + st.pos[t] * 17ull, -3, 3);
    return q;
}

struct dev_world {
    float *k, *v;
};

static dev_world world_upload(const att_world *w) {
    dev_world d;
    d.k = (float *)ct_upload(w->k.data(), w->k.size() * sizeof(float));
    d.v = (float *)ct_upload(w->v.data(), w->v.size() * sizeof(float));
    return d;
}

// Run one attention launch on a step: the step's q and batch arrays uploaded, launch(q,
// out, batch, scratch) called, out downloaded on success; returns the launch's status.
template <typename F>
static int run_launch(const att_world *w, const att_step &st, std::vector<float> *out, size_t scratch_bytes,
                      F launch) {
    const size_t qd = (size_t)w->n_heads * w->hd, T = st.pos.size();
    std::vector<float> q = step_q(st, w);
    float *dq = (float *)ct_upload(q.data(), q.size() * sizeof(float));
    float *dout = (float *)ct_alloc(T * qd * sizeof(float));
    int32_t *dpos = (int32_t *)ct_upload(st.pos.data(), T * 4);
    int32_t *dss = (int32_t *)ct_upload(st.seq_start.data(), st.seq_start.size() * 4);
    int32_t *dctx = (int32_t *)ct_upload(st.ctx.data(), st.ctx.size() * 4);
    int32_t *dbt = (int32_t *)ct_upload(st.table.data(), st.table.size() * 4);
    void *scr = scratch_bytes ? ct_alloc(scratch_bytes) : NULL;
    k_attn_batch b;
    b.n_tokens = (int32_t)T, b.n_seqs = (int32_t)st.ctx.size(), b.max_blocks_per_seq = w->mbps;
    b.positions = dpos, b.seq_start = dss, b.context_len = dctx, b.block_table = dbt;
    b.h_positions = st.pos.data(), b.h_seq_start = st.seq_start.data(), b.h_context_len = st.ctx.data();
    int rc = launch(dout, dq, &b, scr);
    if (rc == DEV_OK) rc = ct_sync();
    if (rc == DEV_OK) {
        out->resize(T * qd);
        ct_download(out->data(), dout, T * qd * sizeof(float));
    }
    ct_free(dq), ct_free(dout), ct_free(dpos), ct_free(dss), ct_free(dctx), ct_free(dbt), ct_free(scr);
    return rc;
}

// Run k_attention (f32 pools) on a step; returns its status and fills out (host) on success.
static int run_step(const att_world *w, const dev_world &dw, const att_step &st,
                    std::vector<float> *out, size_t scratch_bytes, int bound_q = 0, int bound_keys = 0) {
    return run_launch(w, st, out, scratch_bytes, [&](float *dout, const float *dq, const k_attn_batch *b, void *scr) {
        return bound_q ? k_attention_bounded(NULL, dout, dq, dw.k, dw.v, b, w->n_heads, w->n_kv, w->hd, w->bs,
                                             bound_q, bound_keys, scr, scratch_bytes)
                       : k_attention(NULL, dout, dq, dw.k, dw.v, b, w->n_heads, w->n_kv, w->hd, w->bs, scr,
                                     scratch_bytes);
    });
}

static std::vector<float> ref_step(const att_world *w, const att_step &st) {
    const size_t qd = (size_t)w->n_heads * w->hd;
    std::vector<float> q = step_q(st, w), out(st.pos.size() * qd);
    kv_view kv = {w->k.data(), w->v.data(), w->n_kv, w->hd, w->bs, BACKEND_KV_F32, 0};
    int maxc = 1;
    for (int c : st.ctx) maxc = c > maxc ? c : maxc;
    std::vector<float> scr(maxc);
    for (size_t s = 0; s < st.ctx.size(); s++) {
        const int t0 = st.seq_start[s], nq = st.seq_start[s + 1] - t0;
        op_attention_ref(&out[t0 * qd], &q[t0 * qd], nq, &st.pos[t0], w->n_heads, &kv,
                         &st.table[s * w->mbps], scr.data());
    }
    return out;
}

static double max_abs(const std::vector<float> &x) {
    double m = 0;
    for (float f : x) m = fabs(f) > m ? fabs(f) : m;
    return m;
}

// The issue's grid: every (head_dim, GQA, block size) on one ragged batch, with and
// without split-KV scratch.
static void test_grid(void) {
    const int hds[] = {64, 128}, bss[] = {16, 32};
    const int heads[][2] = {{2, 2}, {8, 2}, {8, 1}}; // GQA 1, 4, 8
    for (int hd : hds)
        for (const auto &hk : heads)
            for (int bs : bss) {
                // decode at 1037 keys (5 split-KV partitions), decode at 23, a 9-token chunk
                // after a 291-token cached prefix, a fresh 21-token prefill, 4 verification rows
                // at 530 keys.
                const std::vector<int> ctx = {1037, 23, 300, 21, 530};
                const int nq[] = {1, 1, 9, 21, 4};
                att_world w;
                world_init(&w, hd, hk[0], hk[1], bs, ctx, 11 + hd + bs + hk[0] * 3 + hk[1]);
                dev_world dw = world_upload(&w);
                att_step st;
                for (size_t s = 0; s < ctx.size(); s++) step_add(&st, &w, (int)s, nq[s], ctx[s]);
                std::vector<float> want = ref_step(&w, st), got, got_nosplit;
                const size_t scr = k_attention_scratch_bytes(64, 8, w.n_heads, hd, 2048) * ATT_SPLIT_Q;
                CHECK(scr > 0);
                CHECK(run_step(&w, dw, st, &got, scr) == DEV_OK);
                CHECK(run_step(&w, dw, st, &got_nosplit, 0) == DEV_OK);
                // fp32 against the sequential C reference: tiles, partitions and the merge
                // reorder the sums; outputs are convex mixes of V in [-1, 1].
                const double scale = max_abs(want);
                char what[128];
                snprintf(what, sizeof what, "hd %d heads %d/%d bs %d", hd, hk[0], hk[1], bs);
                CHECK(scale > 0.1);
                CHECK_CLOSE(got.data(), want.data(), want.size(), 2e-5 * scale, 1e-5, what);
                CHECK(got.size() == got_nosplit.size() &&
                      memcmp(got.data(), got_nosplit.data(), got.size() * sizeof(float)) == 0);
                ct_free(dw.k), ct_free(dw.v);
            }
}

// The same rows of one sequence computed five ways must agree bit for bit.
static void invariance(int hd, int n_heads, int n_kv, int bs) {
    const int P0 = 1060, P1 = 1100; // rows at positions P0..P1-1 of sequence 0
    const std::vector<int> ctx = {P1, 700, 13, 400};
    att_world w;
    world_init(&w, hd, n_heads, n_kv, bs, ctx, 99 + hd + n_heads);
    dev_world dw = world_upload(&w);
    const size_t qd = (size_t)n_heads * hd, n_rows = (size_t)(P1 - P0);
    const size_t scr = k_attention_scratch_bytes(64, 8, n_heads, hd, 2048) * ATT_SPLIT_Q;

    // (a) decodes one by one (split-KV), and (a') without scratch
    std::vector<float> dec(n_rows * qd), dec_ns(n_rows * qd), o;
    for (int p = P0; p < P1; p++) {
        att_step st;
        step_add(&st, &w, 0, 1, p + 1);
        CHECK(run_step(&w, dw, st, &o, scr) == DEV_OK);
        memcpy(&dec[(p - P0) * qd], o.data(), qd * sizeof(float));
        CHECK(run_step(&w, dw, st, &o, 0) == DEV_OK);
        memcpy(&dec_ns[(p - P0) * qd], o.data(), qd * sizeof(float));
    }
    CHECK(memcmp(dec.data(), dec_ns.data(), dec.size() * sizeof(float)) == 0);
    {
        att_step st;
        step_add(&st, &w, 0, (int)n_rows, P1);
        std::vector<float> want = ref_step(&w, st);
        CHECK_CLOSE(dec.data(), want.data(), want.size(), 2e-5 * max_abs(want), 1e-5, "decodes vs reference");
    }
    // (b) one prefill chunk
    {
        att_step st;
        step_add(&st, &w, 0, (int)n_rows, P1);
        CHECK(run_step(&w, dw, st, &o, scr) == DEV_OK);
        CHECK(memcmp(o.data(), dec.data(), dec.size() * sizeof(float)) == 0);
    }
    // (c) inside a ragged batch: a decode, the chunk, a fresh prefill, verification rows
    {
        att_step st;
        step_add(&st, &w, 1, 1, 700);
        step_add(&st, &w, 0, (int)n_rows, P1);
        step_add(&st, &w, 2, 13, 13);
        step_add(&st, &w, 3, 3, 400);
        CHECK(run_step(&w, dw, st, &o, scr) == DEV_OK);
        CHECK(memcmp(&o[1 * qd], dec.data(), dec.size() * sizeof(float)) == 0);
    }
    // (d) another split into chunks: 5 rows (short enough to split KV), then 35, in two
    // steps; and 3 + 37 as the two parts of one ragged step's neighbours
    {
        std::vector<float> o2;
        att_step s1, s2;
        step_add(&s1, &w, 0, 5, P0 + 5);
        step_add(&s2, &w, 0, (int)n_rows - 5, P1);
        CHECK(run_step(&w, dw, s1, &o, scr) == DEV_OK);
        CHECK(run_step(&w, dw, s2, &o2, scr) == DEV_OK);
        CHECK(memcmp(o.data(), dec.data(), 5 * qd * sizeof(float)) == 0);
        CHECK(memcmp(o2.data(), &dec[5 * qd], (n_rows - 5) * qd * sizeof(float)) == 0);
        att_step s3;
        step_add(&s3, &w, 0, 3, P0 + 3);
        step_add(&s3, &w, 1, 2, 650);
        CHECK(run_step(&w, dw, s3, &o, scr) == DEV_OK);
        CHECK(memcmp(o.data(), dec.data(), 3 * qd * sizeof(float)) == 0);
    }
    ct_free(dw.k), ct_free(dw.v);
}

static void test_invariance_hd128_gqa4_bs16(void) { invariance(128, 8, 2, 16); }
static void test_invariance_hd64_gqa8_bs32(void) { invariance(64, 8, 1, 32); }

// head_dim 32 and 96 (the other supported sizes), and the bounded launcher (grids planned
// for larger steps, as a CUDA graph captured earlier would be) giving the same bits.
static void test_other_dims_and_bounds(void) {
    const int hds[] = {32, 96};
    for (int hd : hds) {
        const std::vector<int> ctx = {600, 17, 90};
        att_world w;
        world_init(&w, hd, 4, 1, 16, ctx, 31 + hd);
        dev_world dw = world_upload(&w);
        att_step st;
        step_add(&st, &w, 0, 1, 600);
        step_add(&st, &w, 1, 5, 17);
        step_add(&st, &w, 2, 2, 90);
        std::vector<float> want = ref_step(&w, st), got, got_b;
        const size_t scr = k_attention_scratch_bytes(64, 8, w.n_heads, hd, 2048) * ATT_SPLIT_Q;
        CHECK(run_step(&w, dw, st, &got, scr) == DEV_OK);
        char what[64];
        snprintf(what, sizeof what, "hd %d", hd);
        CHECK_CLOSE(got.data(), want.data(), want.size(), 2e-5 * max_abs(want), 1e-5, what); // as test_grid
        CHECK(run_step(&w, dw, st, &got_b, scr, 40, w.mbps * w.bs) == DEV_OK);
        CHECK(got_b.size() == got.size() && memcmp(got_b.data(), got.data(), got.size() * sizeof(float)) == 0);
        CHECK(run_step(&w, dw, st, &got_b, 0, 40, w.mbps * w.bs) == DEV_OK);
        CHECK(got_b.size() == got.size() && memcmp(got_b.data(), got.data(), got.size() * sizeof(float)) == 0);
        // bounds beyond the block table are refused
        CHECK(run_step(&w, dw, st, &got_b, scr, 40, w.mbps * w.bs + 1) == DEV_ERR);
        ct_free(dw.k), ct_free(dw.v);
    }
}

// One dtype's pools: the world's rows stored by kv_store_row (the reference encoding),
// host-side in op_attention_ref's slot-major layout (INT8: scale after each row) and
// on the device as k_kv keeps them (elements, then INT8's scales apart).
struct kv_pools {
    std::vector<uint8_t> hk, hv;
    k_kv dev;
};

static kv_pools pools_store(const att_world *w, backend_kv_dtype d) {
    kv_pools p;
    const size_t rows = (size_t)w->n_blocks * w->bs * w->n_kv, rb = backend_kv_row_bytes(d, w->hd);
    const size_t eb = (size_t)w->hd * k_kv_elem_bytes((int32_t)d);
    p.hk.resize(rows * rb), p.hv.resize(rows * rb);
    std::vector<uint8_t> ek(rows * eb), ev(rows * eb);
    std::vector<float> sk(rows), sv(rows);
    for (size_t r = 0; r < rows; r++) {
        kv_store_row(d, &p.hk[r * rb], &w->k[r * w->hd], w->hd);
        kv_store_row(d, &p.hv[r * rb], &w->v[r * w->hd], w->hd);
        memcpy(&ek[r * eb], &p.hk[r * rb], eb), memcpy(&ev[r * eb], &p.hv[r * rb], eb);
        if (d == BACKEND_KV_INT8)
            sk[r] = kv_int8_scale(&p.hk[r * rb], w->hd), sv[r] = kv_int8_scale(&p.hv[r * rb], w->hd);
    }
    p.dev.k = ct_upload(ek.data(), ek.size()), p.dev.v = ct_upload(ev.data(), ev.size());
    p.dev.k_scale = d == BACKEND_KV_INT8 ? (float *)ct_upload(sk.data(), rows * 4) : NULL;
    p.dev.v_scale = d == BACKEND_KV_INT8 ? (float *)ct_upload(sv.data(), rows * 4) : NULL;
    p.dev.dtype = (int32_t)d;
    return p;
}

static void pools_free(kv_pools *p) { ct_free(p->dev.k), ct_free(p->dev.v), ct_free(p->dev.k_scale), ct_free(p->dev.v_scale); }

static int run_step_kv(const att_world *w, const k_kv *c, const att_step &st, std::vector<float> *out,
                       size_t scratch_bytes, int bound_q = 0) {
    return run_launch(w, st, out, scratch_bytes, [&](float *dout, const float *dq, const k_attn_batch *b, void *scr) {
        return bound_q ? k_attention_bounded_kv(NULL, dout, dq, c, b, w->n_heads, w->n_kv, w->hd, w->bs, bound_q,
                                                w->mbps * w->bs, scr, scratch_bytes)
                       : k_attention_kv(NULL, dout, dq, c, b, w->n_heads, w->n_kv, w->hd, w->bs, scr, scratch_bytes);
    });
}

// Every KV dtype: k_attention_kv over pools stored by kv_store_row against
// op_attention_ref reading the same stored rows (so the bound is f32's: the kernel
// widens each element to kv_load_row's value and the arithmetic is unchanged); split
// and unsplit KV and the bounded launch give the same bits; a decode row is the same
// alone and inside a ragged batch; the result really depends on the dtype (differs
// from f32's); INT8 without its scales is refused.
static void test_kv_dtypes(void) {
    const std::vector<int> ctx = {600, 37, 300, 21};
    const int nq[] = {1, 1, 9, 21};
    const int hds[] = {64, 128};
    for (int hd : hds) {
        att_world w;
        world_init(&w, hd, 8, 2, 16, ctx, 71 + hd);
        att_step st, one;
        for (size_t s = 0; s < ctx.size(); s++) step_add(&st, &w, (int)s, nq[s], ctx[s]);
        step_add(&one, &w, 0, 1, ctx[0]);
        const size_t scr = k_attention_scratch_bytes(64, 8, w.n_heads, hd, 2048) * ATT_SPLIT_Q;
        const size_t qd = (size_t)w.n_heads * hd;
        std::vector<float> f32_out;
        const std::vector<float> f32_want = ref_step(&w, st);
        const backend_kv_dtype ds[] = {BACKEND_KV_F32, BACKEND_KV_F16, BACKEND_KV_BF16, BACKEND_KV_INT8,
                                       BACKEND_KV_FP8};
        for (backend_kv_dtype d : ds) {
            kv_pools p = pools_store(&w, d);
            kv_view kv = {p.hk.data(), p.hv.data(), w.n_kv, w.hd, w.bs, d, 0};
            std::vector<float> q = step_q(st, &w), want(st.pos.size() * qd), got, got_ns, got_b, got1;
            std::vector<float> sc(ctx[0] + 1);
            for (size_t s = 0; s < st.ctx.size(); s++) {
                const int t0 = st.seq_start[s], n = st.seq_start[s + 1] - t0;
                op_attention_ref(&want[t0 * qd], &q[t0 * qd], n, &st.pos[t0], w.n_heads, &kv,
                                 &st.table[s * w.mbps], sc.data());
            }
            char what[64];
            snprintf(what, sizeof what, "kv %s hd %d", backend_kv_dtype_name(d), hd);
            CHECK(run_step_kv(&w, &p.dev, st, &got, scr) == DEV_OK);
            CHECK_CLOSE(got.data(), want.data(), want.size(), 2e-5 * max_abs(want), 1e-5, what);
            CHECK(run_step_kv(&w, &p.dev, st, &got_ns, 0) == DEV_OK);
            CHECK(run_step_kv(&w, &p.dev, st, &got_b, scr, 40) == DEV_OK);
            CHECK(memcmp(got.data(), got_ns.data(), got.size() * 4) == 0 && memcmp(got.data(), got_b.data(), got.size() * 4) == 0);
            CHECK(run_step_kv(&w, &p.dev, one, &got1, scr) == DEV_OK);
            CHECK(memcmp(got1.data(), got.data(), qd * 4) == 0);
            if (d == BACKEND_KV_F32) {
                f32_out = got;
                std::vector<float> old;
                dev_world dw = world_upload(&w); // the f32 entry point is the kv one at K_KV_F32
                CHECK(run_step(&w, dw, st, &old, scr) == DEV_OK);
                CHECK(memcmp(old.data(), got.data(), got.size() * 4) == 0);
                ct_free(dw.k), ct_free(dw.v);
            } else {
                double diff = 0;
                for (size_t i = 0; i < got.size(); i++) diff = fmax(diff, fabs(got[i] - f32_want[i]));
                CHECKF(diff > 1e-6, "%s: the same as f32 (%g)", what, diff);
                // within the dtype's rounding of the f32 result (outputs are mixes of V in [-1, 1])
                const double tol = d == BACKEND_KV_FP8 ? 0.2 : d == BACKEND_KV_INT8 ? 0.05 : 0.02;
                CHECKF(diff < tol, "%s: %g from f32", what, diff);
            }
            if (d == BACKEND_KV_INT8) {
                k_kv bad = p.dev;
                bad.v_scale = NULL;
                CHECK(run_step_kv(&w, &bad, st, &got_b, scr) == DEV_ERR);
            }
            pools_free(&p);
        }
        k_kv bad = {NULL, NULL, NULL, NULL, 5};
        std::vector<float> o;
        CHECK(run_step_kv(&w, &bad, st, &o, scr) == DEV_ERR);
    }
}

// Bad sizes are DEV_ERR with nothing launched; an empty step is DEV_OK.
static void test_errors(void) {
    const std::vector<int> ctx = {40};
    att_world w;
    world_init(&w, 64, 4, 2, 16, ctx, 5);
    dev_world dw = world_upload(&w);
    att_step st;
    step_add(&st, &w, 0, 3, 40);
    std::vector<float> o;
    CHECK(run_step(&w, dw, st, &o, 0) == DEV_OK);
    att_world bad = w;
    bad.hd = 80; // not a supported head size
    CHECK(run_step(&bad, dw, st, &o, 0) == DEV_ERR);
    bad = w;
    bad.n_heads = 3; // not a multiple of n_kv
    CHECK(run_step(&bad, dw, st, &o, 0) == DEV_ERR);
    att_step s2 = st;
    s2.pos[2] = 40; // position at the context length
    CHECK(run_step(&w, dw, s2, &o, 0) == DEV_ERR);
    s2 = st;
    s2.pos[0] = -1;
    CHECK(run_step(&w, dw, s2, &o, 0) == DEV_ERR);
    s2 = st;
    s2.ctx[0] = w.mbps * w.bs + 1; // more keys than the block table holds
    CHECK(run_step(&w, dw, s2, &o, 0) == DEV_ERR);
    s2 = st;
    s2.seq_start[1] = 2; // does not end at n_tokens
    CHECK(run_step(&w, dw, s2, &o, 0) == DEV_ERR);
    k_attn_batch b = {};
    CHECK(k_attention(NULL, NULL, NULL, NULL, NULL, &b, 4, 2, 64, 16, NULL, 0) == DEV_OK);
    b.n_seqs = -1;
    CHECK(k_attention(NULL, NULL, NULL, NULL, NULL, &b, 4, 2, 64, 16, NULL, 0) == DEV_ERR);
    CHECK(k_attention(NULL, NULL, NULL, NULL, NULL, NULL, 4, 2, 64, 16, NULL, 0) == DEV_ERR);
    CHECK(k_attention_scratch_bytes(16, 4, 8, 64, 100) == 0); // one partition: no split
    CHECK(k_attention_scratch_bytes(16, 4, 8, 64, 1000) == (size_t)4 * 4 * 8 * 66 * sizeof(float));
    ct_free(dw.k), ct_free(dw.v);
}

TEST_MAIN(T(test_grid), T(test_invariance_hd128_gqa4_bs16), T(test_invariance_hd64_gqa8_bs32),
          T(test_other_dims_and_bounds), T(test_kv_dtypes), T(test_errors))
