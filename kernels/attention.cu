/* attention.cu — paged causal attention for one forward step (see attention.h): one
 * kernel over blocks of query rows (k_attn_rows) and a log-sum-exp merge of split-KV
 * partials (k_attn_merge). Runs on the caller's stream; allocates nothing.
 *
 * A block serves ATT_ROWS query rows that share one KV head: the query heads of that
 * group for one or more tokens of one sequence. So one read of a K/V tile (from the
 * paged cache, through the block table, into shared memory) serves every query head of
 * the group (GQA) and every token of a prefill tile. Rows are enumerated per sequence
 * and KV head as r = token * group + g.
 *
 * The arithmetic of one row (the batch-invariance contract; both kernels share it):
 *   - keys in tiles of ATT_KEY_TILE at absolute positions (kt = 0, 32, 64, ...); lane j
 *     of the row's warp scores key kt + j with one fmaf chain over head_dim in order,
 *     then multiplies by 1/sqrt(head_dim);
 *   - within a partition of ATT_PART keys, online softmax: tile max and tile sum by an
 *     xor butterfly (every lane gets the same bits), m/l/acc rescaled by exp(m - m'),
 *     p*V accumulated key by key in order (lane owns dims lane + 32k);
 *   - partitions folded in order by att_fold (the log-sum-exp merge), then out = O/L.
 * A prefill tile folds its partitions as it goes; a split-KV decode (a sequence with at
 * most qsplit tokens whose rows fit one block) computes each partition in its own block,
 * stores (acc, m, l), and k_attn_merge folds them in the same order with the same code.
 * The launcher picks grids and whether to split from sizes only; no choice changes the
 * operations that produce a row. */
#include "simt.h"

#include "attention.h"
#include "kv_codec.cuh"

#if defined(__CUDACC__) && !defined(IFD_SIMT_EMU)
#define ATT_UNROLL _Pragma("unroll")
#else
#define ATT_UNROLL _Pragma("GCC unroll 8")
#endif

IFD_NS_BEGIN

enum { ATT_THREADS = 128, ATT_NW = ATT_THREADS / 32, ATT_RPW = ATT_ROWS / ATT_NW };

typedef struct att_params {
    float *out;                  /* [n_tokens][n_heads][HD] */
    const float *q;              /* [n_tokens][n_heads][HD] */
    const void *k, *v;           /* [n_slots][n_kv][HD] of dtype (ktypes.h's k_kv) */
    const float *k_scale, *v_scale; /* INT8: [n_slots][n_kv] */
    int32_t dtype;
    const int32_t *pos;          /* [n_tokens] */
    const int32_t *seq_start;    /* [n_seqs + 1] */
    const int32_t *block_table;  /* [n_seqs][mbps] */
    float *part;                 /* [n_seqs][parts_max][qsplit][n_heads][HD + 2]: acc, m, l */
    int32_t n_heads, n_kv, group, block_size, mbps, parts_max, qsplit;
    float scale;
} att_params;

/* Fold one partition's (m, l, acc) into the running (M, L, O): the log-sum-exp merge.
 * From the empty state (M = -inf, L = O = 0) it gives exactly (m, l, acc). */
template <int DPL>
__device__ __forceinline__ void att_fold(float &M, float &L, float *O, float m, float l, const float *acc) {
    const float mn = fmaxf(M, m);
    const float a = expf(M - mn), b = expf(m - mn);
    L = fmaf(L, a, l * b);
    ATT_UNROLL
    for (int k = 0; k < DPL; k++) O[k] = fmaf(O[k], a, acc[k] * b);
    M = mn;
}

/* out row = O / L (a row without keys — only from invalid positions — gets zeros). */
template <int DPL>
__device__ __forceinline__ void att_finish(float *out_row, float L, const float *O, int lane) {
    const float inv = L > 0.f ? 1.0f / L : 0.f;
    ATT_UNROLL
    for (int k = 0; k < DPL; k++) out_row[lane + 32 * k] = O[k] * inv;
}

__device__ __forceinline__ bool att_is_split(int nq, int group, int qsplit) {
    return nq <= qsplit && nq * group <= ATT_ROWS;
}

/* Keys of a row: positions[t] + 1, kept inside the block table. */
__device__ __forceinline__ int att_n_keys(const att_params &a, int t) {
    return min(max(a.pos[t] + 1, 0), a.mbps * a.block_size);
}

/* float4 loads per thread for one K (and one V) tile */
#define ATT_NLD(DPL) (ATT_KEY_TILE * 32 * (DPL) / 4 / ATT_THREADS)

/* Elements 4c .. 4c + 3 of stored row r of a pool of dtype d, as f32: the values
 * kv_load_row gives (INT8: q * the row's scale, one rounding). The f32 arithmetic of
 * attention then runs on them unchanged, so every dtype keeps batch invariance. */
__device__ __forceinline__ float4 att_load4(const void *pool, const float *scale, int32_t d, size_t r, int HD,
                                            int c) {
    switch (d) {
    case K_KV_F16:
    case K_KV_BF16: {
        const uint2 u = __ldg(reinterpret_cast<const uint2 *>(pool) + (r * HD) / 4 + c);
        if (d == K_KV_F16)
            return float4{kvc_f16_to_f32(u.x & 0xffffu), kvc_f16_to_f32(u.x >> 16), kvc_f16_to_f32(u.y & 0xffffu),
                          kvc_f16_to_f32(u.y >> 16)};
        return float4{kvc_bf16_to_f32(u.x & 0xffffu), kvc_bf16_to_f32(u.x >> 16), kvc_bf16_to_f32(u.y & 0xffffu),
                      kvc_bf16_to_f32(u.y >> 16)};
    }
    case K_KV_INT8: {
        const uint32_t u = __ldg(reinterpret_cast<const uint32_t *>(pool) + (r * HD) / 4 + c);
        const float sc = __ldg(scale + r);
        return float4{(float)(int8_t)(u & 0xffu) * sc, (float)(int8_t)((u >> 8) & 0xffu) * sc,
                      (float)(int8_t)((u >> 16) & 0xffu) * sc, (float)(int8_t)(u >> 24) * sc};
    }
    case K_KV_FP8: {
        const uint32_t u = __ldg(reinterpret_cast<const uint32_t *>(pool) + (r * HD) / 4 + c);
        return float4{kvc_fp8_to_f32(u & 0xffu), kvc_fp8_to_f32((u >> 8) & 0xffu), kvc_fp8_to_f32((u >> 16) & 0xffu),
                      kvc_fp8_to_f32(u >> 24)};
    }
    default: return __ldg(reinterpret_cast<const float4 *>(pool) + (r * HD) / 4 + c);
    }
}

/* This thread's part of the K/V tile of keys [kt, kt + ATT_KEY_TILE) (zeros at keys >= k_end,
 * whose block-table entries are not read). */
template <int DPL>
__device__ __forceinline__ void att_load_tile(const att_params &a, int seq, int kvh, int kt, int k_end,
                                              int tid, float4 *kx, float4 *vx) {
    constexpr int HD = 32 * DPL;
    ATT_UNROLL
    for (int it = 0; it < ATT_NLD(DPL); it++) {
        const int i = tid + it * ATT_THREADS, j = i / (HD / 4), c = i % (HD / 4), key = kt + j;
        kx[it] = vx[it] = float4{0.f, 0.f, 0.f, 0.f};
        if (key < k_end) {
            const int blk = a.block_table[(size_t)seq * a.mbps + key / a.block_size];
            const size_t r = ((size_t)blk * a.block_size + key % a.block_size) * a.n_kv + kvh;
            kx[it] = att_load4(a.k, a.k_scale, a.dtype, r, HD, c);
            vx[it] = att_load4(a.v, a.v_scale, a.dtype, r, HD, c);
        }
    }
}

/* grid (n_kv, tiles or partitions, n_seqs), ATT_THREADS threads. split = 0: blockIdx.y is
 * a tile of ATT_ROWS rows of a non-split sequence, all partitions folded here, out
 * written. split = 1: blockIdx.y is a partition of a split sequence, partials written. */
template <int DPL>
__global__ void __launch_bounds__(ATT_THREADS) k_attn_rows(att_params a, int split) {
    constexpr int HD = 32 * DPL, KS = HD + 4; /* K rows padded: conflict-free float4 reads */
    IFD_DYN_SHARED(float, sm);
    float *q_s = sm;                         /* [ATT_ROWS][HD] */
    float *k_s = q_s + ATT_ROWS * HD;        /* [ATT_KEY_TILE][KS] */
    float *v_s = k_s + ATT_KEY_TILE * KS;    /* [ATT_KEY_TILE][HD] */
    float *p_s = v_s + ATT_KEY_TILE * HD;    /* [ATT_NW][ATT_KEY_TILE] */
    __shared__ int nk_s[ATT_ROWS];

    const int kvh = blockIdx.x, seq = blockIdx.z;
    const int t0 = a.seq_start[seq], nq = a.seq_start[seq + 1] - t0, rows = nq * a.group;
    const bool split_seq = att_is_split(nq, a.group, a.qsplit);
    if (split ? !split_seq : (split_seq || (int)blockIdx.y * ATT_ROWS >= rows)) return;
    const int r0 = split ? 0 : (int)blockIdx.y * ATT_ROWS;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;

    if (tid < ATT_ROWS) {
        const int gr = r0 + tid;
        nk_s[tid] = gr < rows ? att_n_keys(a, t0 + gr / a.group) : 0;
    }
    __syncthreads();
    int max_keys = 0;
    for (int r = 0; r < ATT_ROWS; r++) max_keys = max(max_keys, nk_s[r]);
    const int n_parts = (max_keys + ATT_PART - 1) / ATT_PART;
    const int p_lo = split ? (int)blockIdx.y : 0, p_hi = split ? p_lo + 1 : n_parts;
    if (split && p_lo >= n_parts) return; /* a partition past the rows' keys (bounded grids) */
    /* Keys [k_beg, k_fin) in tiles; the next tile's K/V is fetched into registers while
     * the current one is used. Partitions start and end on tile boundaries. */
    const int k_beg = p_lo * ATT_PART, k_fin = min(max_keys, p_hi * ATT_PART);
    float4 kx[ATT_NLD(DPL)], vx[ATT_NLD(DPL)];
    if (k_beg < k_fin) att_load_tile<DPL>(a, seq, kvh, k_beg, k_fin, tid, kx, vx);
    ATT_UNROLL
    for (int it = 0; it < ATT_ROWS * HD / 4 / ATT_THREADS; it++) {
        const int i = tid + it * ATT_THREADS, r = i / (HD / 4), c = i % (HD / 4), gr = r0 + r;
        float4 x = {0.f, 0.f, 0.f, 0.f};
        if (gr < rows) {
            const size_t tok = (size_t)(t0 + gr / a.group);
            const int h = kvh * a.group + gr % a.group;
            x = __ldg(reinterpret_cast<const float4 *>(a.q + (tok * a.n_heads + h) * HD) + c);
        }
        reinterpret_cast<float4 *>(q_s)[i] = x;
    }
    __syncthreads();

    int nk_r[ATT_RPW];
    float M[ATT_RPW], L[ATT_RPW], O[ATT_RPW][DPL];
    float m[ATT_RPW], l[ATT_RPW], acc[ATT_RPW][DPL];
    ATT_UNROLL
    for (int i = 0; i < ATT_RPW; i++) {
        nk_r[i] = nk_s[w + ATT_NW * i];
        M[i] = m[i] = -INFINITY, L[i] = l[i] = 0.f;
        for (int k = 0; k < DPL; k++) O[i][k] = acc[i][k] = 0.f;
    }
    for (int kt = k_beg; kt < k_fin; kt += ATT_KEY_TILE) {
        if (kt % ATT_PART == 0) {
            ATT_UNROLL
            for (int i = 0; i < ATT_RPW; i++) {
                m[i] = -INFINITY, l[i] = 0.f;
                for (int k = 0; k < DPL; k++) acc[i][k] = 0.f;
            }
        }
        __syncthreads(); /* the previous tile is consumed */
        ATT_UNROLL
        for (int it = 0; it < ATT_NLD(DPL); it++) {
            const int i = tid + it * ATT_THREADS, j = i / (HD / 4), c = i % (HD / 4);
            *reinterpret_cast<float4 *>(k_s + j * KS + 4 * c) = kx[it];
            reinterpret_cast<float4 *>(v_s)[i] = vx[it];
        }
        __syncthreads();
        if (kt + ATT_KEY_TILE < k_fin) att_load_tile<DPL>(a, seq, kvh, kt + ATT_KEY_TILE, k_fin, tid, kx, vx);
        ATT_UNROLL
        for (int i = 0; i < ATT_RPW; i++) {
            const int nk = nk_r[i];
            if (nk <= kt) continue; /* warp-uniform: the warp's row ends before this tile */
            const float *qr = q_s + (w + ATT_NW * i) * HD, *kr = k_s + lane * KS;
            float sc = 0.f;
            ATT_UNROLL
            for (int d = 0; d < HD; d += 4) {
                const float4 qq = *reinterpret_cast<const float4 *>(qr + d);
                const float4 kk = *reinterpret_cast<const float4 *>(kr + d);
                sc = fmaf(qq.x, kk.x, sc);
                sc = fmaf(qq.y, kk.y, sc);
                sc = fmaf(qq.z, kk.z, sc);
                sc = fmaf(qq.w, kk.w, sc);
            }
            sc *= a.scale;
            const int n_valid = min((int)ATT_KEY_TILE, nk - kt);
            const bool valid = lane < n_valid;
            float tmax = valid ? sc : -INFINITY;
            for (int o = 16; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(IFD_FULL_MASK, tmax, o));
            const float mn = fmaxf(m[i], tmax);
            const float corr = expf(m[i] - mn);
            const float pj = valid ? expf(sc - mn) : 0.f;
            float ts = pj;
            for (int o = 16; o > 0; o >>= 1) ts += __shfl_xor_sync(IFD_FULL_MASK, ts, o);
            l[i] = fmaf(l[i], corr, ts);
            p_s[w * ATT_KEY_TILE + lane] = pj;
            __syncwarp();
            ATT_UNROLL
            for (int k = 0; k < DPL; k++) acc[i][k] *= corr;
            for (int j = 0; j < n_valid; j++) {
                const float pv = p_s[w * ATT_KEY_TILE + j];
                ATT_UNROLL
                for (int k = 0; k < DPL; k++) acc[i][k] = fmaf(pv, v_s[j * HD + lane + 32 * k], acc[i][k]);
            }
            __syncwarp(); /* p_s is rewritten by the warp's next row */
            m[i] = mn;
        }
        if ((kt + ATT_KEY_TILE) % ATT_PART != 0 && kt + ATT_KEY_TILE < k_fin) continue;
        /* partition p ends here */
        const int p = kt / ATT_PART;
        ATT_UNROLL
        for (int i = 0; i < ATT_RPW; i++) {
            if (nk_r[i] <= p * ATT_PART) continue; /* no key of this row in partition p */
            if (split) {
                const int gr = w + ATT_NW * i, tl = gr / a.group, h = kvh * a.group + gr % a.group;
                float *ent = a.part + ((((size_t)seq * a.parts_max + p) * a.qsplit + tl) * a.n_heads + h) * (HD + 2);
                for (int k = 0; k < DPL; k++) ent[lane + 32 * k] = acc[i][k];
                if (lane == 0) ent[HD] = m[i], ent[HD + 1] = l[i];
            } else {
                att_fold<DPL>(M[i], L[i], O[i], m[i], l[i], acc[i]);
            }
        }
    }
    if (split) return;
    ATT_UNROLL
    for (int i = 0; i < ATT_RPW; i++) {
        const int gr = r0 + w + ATT_NW * i;
        if (gr >= rows) continue;
        const size_t tok = (size_t)(t0 + gr / a.group);
        const int h = kvh * a.group + gr % a.group;
        att_finish<DPL>(a.out + (tok * a.n_heads + h) * HD, L[i], O[i], lane);
    }
}

/* grid (ceil(n_heads / 4), qsplit, n_seqs), 128 threads: one warp per (token, head) row
 * of a split sequence folds its partitions in order. */
template <int DPL>
__global__ void __launch_bounds__(128) k_attn_merge(att_params a) {
    constexpr int HD = 32 * DPL;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = (int)blockIdx.x * 4 + w, tl = blockIdx.y, seq = blockIdx.z;
    const int t0 = a.seq_start[seq], nq = a.seq_start[seq + 1] - t0;
    if (h >= a.n_heads || tl >= nq || !att_is_split(nq, a.group, a.qsplit)) return;
    const int np = min((att_n_keys(a, t0 + tl) + ATT_PART - 1) / ATT_PART, a.parts_max);
    float M = -INFINITY, L = 0.f, O[DPL], acc[DPL];
    for (int k = 0; k < DPL; k++) O[k] = 0.f;
    for (int p = 0; p < np; p++) {
        const float *ent = a.part + ((((size_t)seq * a.parts_max + p) * a.qsplit + tl) * a.n_heads + h) * (HD + 2);
        ATT_UNROLL
        for (int k = 0; k < DPL; k++) acc[k] = ent[lane + 32 * k];
        att_fold<DPL>(M, L, O, ent[HD], ent[HD + 1], acc);
    }
    att_finish<DPL>(a.out + ((size_t)(t0 + tl) * a.n_heads + h) * HD, L, O, lane);
}

template <int DPL>
static void att_launch(dev_stream s, const att_params &a, int n_seqs, int tiles, int parts,
                       int run_tiles) {
    constexpr int HD = 32 * DPL;
    const size_t smem = sizeof(float) * ((size_t)ATT_ROWS * HD + (size_t)ATT_KEY_TILE * (HD + 4) +
                                         (size_t)ATT_KEY_TILE * HD + (size_t)ATT_NW * ATT_KEY_TILE);
    auto kr = k_attn_rows<DPL>;
    if (run_tiles) IFD_LAUNCH(kr, dim3(a.n_kv, tiles, n_seqs), ATT_THREADS, smem, s, a, 0);
    if (a.qsplit > 0) {
        IFD_LAUNCH(kr, dim3(a.n_kv, parts, n_seqs), ATT_THREADS, smem, s, a, 1);
        auto km = k_attn_merge<DPL>;
        IFD_LAUNCH(km, dim3((a.n_heads + 3) / 4, a.qsplit, n_seqs), 128, 0, s, a);
    }
}

static int att_dpl(int32_t head_dim) {
    return head_dim >= 32 && head_dim <= 128 && head_dim % 32 == 0 ? head_dim / 32 : 0;
}

static size_t att_part_bytes(int64_t n_seqs, int64_t parts, int64_t qsplit, int64_t n_heads,
                             int64_t head_dim) {
    return (size_t)(n_seqs * parts * qsplit * n_heads * (head_dim + 2)) * sizeof(float);
}

size_t k_attention_scratch_bytes(int32_t max_tokens, int32_t max_seqs, int32_t n_heads,
                                 int32_t head_dim, int32_t max_context) {
    if (max_tokens <= 0 || max_seqs <= 0 || n_heads <= 0 || !att_dpl(head_dim) || max_context <= 0)
        return 0;
    const int64_t parts = ((int64_t)max_context + ATT_PART - 1) / ATT_PART;
    if (parts < 2 || parts > 65535) return 0;
    return att_part_bytes(max_seqs, parts, 1, n_heads, head_dim);
}

int k_attention_bounded_kv(dev_stream s, float *out, const float *q, const k_kv *cache,
                           const k_attn_batch *b, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                           int32_t block_size, int32_t max_q, int32_t max_keys, void *scratch,
                           size_t scratch_bytes) {
    const int dpl = att_dpl(head_dim);
    if (!cache || cache->dtype < K_KV_F32 || cache->dtype > K_KV_FP8) return DEV_ERR;
    const void *k_cache = cache->k, *v_cache = cache->v;
    if (!b || !dpl || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 ||
        block_size <= 0 || b->n_tokens < 0 || b->n_seqs < 0 || b->max_blocks_per_seq < 0 ||
        max_q < 0 || max_keys < 0 || b->n_seqs > 65535 || n_kv_heads > 65535 ||
        (int64_t)max_keys > (int64_t)b->max_blocks_per_seq * block_size)
        return DEV_ERR;
    if (b->n_seqs == 0 || b->n_tokens == 0 || max_q == 0) return DEV_OK;
    if (!out || !q || !k_cache || !v_cache || !b->positions || !b->seq_start || !b->block_table)
        return DEV_ERR;
    if (cache->dtype == K_KV_INT8 && (!cache->k_scale || !cache->v_scale)) return DEV_ERR;
    const int group = n_heads / n_kv_heads;
    const int64_t tiles = ((int64_t)max_q * group + ATT_ROWS - 1) / ATT_ROWS;
    const int64_t parts = ((int64_t)max_keys + ATT_PART - 1) / ATT_PART;
    if (tiles > 65535) return DEV_ERR;
    /* Split KV only where a sequence has more than one partition, and for as many
     * query tokens per sequence as the scratch holds (never changes the bits). */
    int qsplit = 0;
    if (parts >= 2 && parts <= 65535 && scratch) {
        int qmax = max_q < ATT_SPLIT_Q ? max_q : ATT_SPLIT_Q;
        if (qmax > ATT_ROWS / group) qmax = ATT_ROWS / group;
        for (int qs = qmax; qs >= 1; qs--)
            if (att_part_bytes(b->n_seqs, parts, qs, n_heads, head_dim) <= scratch_bytes) {
                qsplit = qs;
                break;
            }
    }
    att_params a;
    a.out = out, a.q = q, a.k = k_cache, a.v = v_cache;
    a.k_scale = cache->k_scale, a.v_scale = cache->v_scale, a.dtype = cache->dtype;
    a.pos = b->positions, a.seq_start = b->seq_start, a.block_table = b->block_table;
    a.part = (float *)scratch;
    a.n_heads = n_heads, a.n_kv = n_kv_heads, a.group = group, a.block_size = block_size;
    a.mbps = b->max_blocks_per_seq, a.parts_max = qsplit ? (int32_t)parts : 0, a.qsplit = qsplit;
    a.scale = 1.0f / sqrtf((float)head_dim);
    /* every sequence splits when each fits the split rule: the tile launch has no work */
    const int run_tiles = !(qsplit >= max_q && (int64_t)max_q * group <= ATT_ROWS);
    switch (dpl) {
    case 1: att_launch<1>(s, a, b->n_seqs, (int)tiles, (int)parts, run_tiles); break;
    case 2: att_launch<2>(s, a, b->n_seqs, (int)tiles, (int)parts, run_tiles); break;
    case 3: att_launch<3>(s, a, b->n_seqs, (int)tiles, (int)parts, run_tiles); break;
    default: att_launch<4>(s, a, b->n_seqs, (int)tiles, (int)parts, run_tiles); break;
    }
    return dev_check_launch();
}

int k_attention_bounded(dev_stream s, float *out, const float *q, const float *k_cache,
                        const float *v_cache, const k_attn_batch *b, int32_t n_heads,
                        int32_t n_kv_heads, int32_t head_dim, int32_t block_size, int32_t max_q,
                        int32_t max_keys, void *scratch, size_t scratch_bytes) {
    const k_kv c = {(void *)k_cache, (void *)v_cache, NULL, NULL, K_KV_F32};
    return k_attention_bounded_kv(s, out, q, &c, b, n_heads, n_kv_heads, head_dim, block_size, max_q, max_keys,
                                  scratch, scratch_bytes);
}

int k_attention(dev_stream s, float *out, const float *q, const float *k_cache, const float *v_cache,
                const k_attn_batch *b, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                int32_t block_size, void *scratch, size_t scratch_bytes) {
    const k_kv c = {(void *)k_cache, (void *)v_cache, NULL, NULL, K_KV_F32};
    return k_attention_kv(s, out, q, &c, b, n_heads, n_kv_heads, head_dim, block_size, scratch, scratch_bytes);
}

int k_attention_kv(dev_stream s, float *out, const float *q, const k_kv *cache, const k_attn_batch *b,
                   int32_t n_heads, int32_t n_kv_heads, int32_t head_dim, int32_t block_size, void *scratch,
                   size_t scratch_bytes) {
    if (!b || b->n_seqs < 0 || b->n_tokens < 0 || block_size <= 0 || b->max_blocks_per_seq < 0)
        return DEV_ERR;
    if (b->n_seqs == 0) return b->n_tokens == 0 ? DEV_OK : DEV_ERR;
    if (!b->h_positions || !b->h_seq_start || !b->h_context_len) return DEV_ERR;
    const int64_t cap = (int64_t)b->max_blocks_per_seq * block_size;
    if (b->h_seq_start[0] != 0 || b->h_seq_start[b->n_seqs] != b->n_tokens) return DEV_ERR;
    int32_t max_q = 0, max_keys = 0;
    for (int32_t sq = 0; sq < b->n_seqs; sq++) {
        const int32_t t0 = b->h_seq_start[sq], t1 = b->h_seq_start[sq + 1], ctx = b->h_context_len[sq];
        if (t1 < t0 || t1 > b->n_tokens || ctx < 0 || ctx > cap) return DEV_ERR;
        if (t1 - t0 > max_q) max_q = t1 - t0;
        for (int32_t t = t0; t < t1; t++) {
            const int32_t p = b->h_positions[t];
            if (p < 0 || p >= ctx) return DEV_ERR;
            if (p + 1 > max_keys) max_keys = p + 1;
        }
    }
    return k_attention_bounded_kv(s, out, q, cache, b, n_heads, n_kv_heads, head_dim, block_size, max_q,
                                  max_keys, scratch, scratch_bytes);
}

IFD_NS_END
