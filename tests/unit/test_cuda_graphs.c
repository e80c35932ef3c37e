/* test_cuda_graphs.c — decode steps replayed as CUDA graphs (src/backend/cuda/
 * cuda_backend.cu) against the eager path of the same backend, on the CUDA backend
 * under the SIMT emulation (BACKEND_EMU: the graph records the kernels' launches at
 * create, and every replay runs them for real; on a host with a GPU also the native
 * backend's real CUDA graphs), with the in-memory `tiny` model:
 *  - logits of decode steps of 1, 3 (padded to the bucket of 4), 5 (padded to 8) and 8
 *    sequences equal the eager backend's bit for bit, over consecutive steps (the
 *    replay reads each step's arrays, not the capture's), with contexts on both sides
 *    of a split-KV partition (256 keys);
 *  - the KV pools after each step equal the eager backend's byte for byte, and differ
 *    from the pool before the step only at the real rows' slots (padding rows store
 *    nothing);
 *  - graphs are used: the backend's replay counter grows by one per decode step, not
 *    for a mixed prefill + decode step (eager), and never with graphs off;
 *  - --[no-]cuda-graphs reaches inferd_engine_options.no_cuda_graphs (default: graphs on).
 * The graph cases need the emulated CUDA backend (a build without it says so and
 * checks the option only). */
#include <stdint.h>

#include "backend/backend.h"
#include "server/config.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"
#include "util/common.h"

#if defined(INFERD_HAVE_CUDA_BACKEND) && defined(INFERD_HAVE_EMU)

enum { BS = 16, MB = 20, MAXS = 8, NB = MAXS * MB, MAXLEN = MB * BS };

static uint32_t rs = 12345;
static uint32_t rnd(void) {
    rs = rs * 1664525u + 1013904223u;
    return rs >> 8;
}
static float frand(void) { /* uniform in [-1, 1), never 0 */
    const float f = ((float)rnd() / 16777216.0f) * 2.0f - 1.0f;
    return f == 0.0f ? 0.25f : f;
}

/* sequence s owns blocks s*MB .. s*MB+MB-1, in reverse order (block 0 is the last
 * block of sequence 0: the block padding rows' tables point at) */
static int32_t block_of(int32_t s, int32_t j) { return s * MB + (MB - 1 - j); }

static model *tiny(void) {
    model *m = NULL;
    char err[256];
    if (model_load_random(&m, "tiny", "f32", 7, 1, err, sizeof err)) CHECKF(0, "%s", err);
    return m;
}

static backend *make(const model *m, backend_kind kind, int graphs_off) {
    const backend_config cfg = {.n_threads = 1, .block_size = BS, .n_blocks = NB, .max_batch_tokens = 16,
                                .max_batch_seqs = MAXS, .max_logits = 16, .max_seq_len = MAXLEN,
                                .graphs_off = graphs_off};
    backend *b = NULL;
    char err[512];
    const int rc = backend_create(&b, kind, m, &cfg, err, sizeof err);
    CHECKF(rc == IFD_OK, "%s", err);
    return rc == IFD_OK ? b : NULL;
}

static size_t pool_bytes(const model *m) {
    return (size_t)NB * BS * m->hp.n_kv_heads * m->hp.head_dim * 2 * m->hp.n_layers * sizeof(float);
}

/* One step's arrays: n sequences of q[s] new tokens each at positions start[s].. */
typedef struct step {
    int32_t tok[16], pos[16], slot[16], ss[MAXS + 1], ctx[MAXS], btab[MAXS * (MB + 1)], lidx[16];
    ifd_batch b;
} step;

/* mbps: the block table's row stride (MB - 1 .. MB + 1; entries past MB are out of
 * range: no kernel may read them) */
static void build(step *st, int32_t n, const int32_t *start, const int32_t *q, int32_t mbps) {
    int32_t t = 0;
    for (int32_t s = 0; s < n; s++) {
        st->ss[s] = t;
        for (int32_t j = 0; j < mbps; j++) st->btab[s * mbps + j] = j < MB ? block_of(s, j) : 1 << 30;
        for (int32_t i = 0; i < q[s]; i++, t++) {
            const int32_t p = start[s] + i;
            st->tok[t] = (int32_t)(rnd() % 512);
            st->pos[t] = p;
            st->slot[t] = block_of(s, p / BS) * BS + p % BS;
        }
        st->ctx[s] = start[s] + q[s];
        st->lidx[s] = t - 1; /* the last token's logits */
    }
    st->ss[n] = t;
    st->b = (ifd_batch){.n_tokens = t, .token_ids = st->tok, .positions = st->pos, .slot_mapping = st->slot,
                        .n_seqs = n, .seq_start = st->ss, .context_len = st->ctx, .block_table = st->btab,
                        .max_blocks_per_seq = mbps, .n_logits = n, .logits_index = st->lidx};
}

/* Run st on the eager and the graph backend; compare logits and pools, and the graph
 * backend's pool with before everywhere but the step's slots. */
static void run_both(backend *e, backend *g, const model *m, const step *st, float *before, float *ke,
                     float *kg, const char *what) {
    const int32_t V = (int32_t)m->hp.n_vocab, n = st->b.n_logits;
    const size_t pb = pool_bytes(m);
    float *le = malloc((size_t)n * V * sizeof(float)), *lg = malloc((size_t)n * V * sizeof(float));
    CHECK(backend_cuda_kv_access(g, before, pb, 0) == IFD_OK);
    CHECKF(backend_forward(e, &st->b, le) == IFD_OK, "%s: eager forward", what);
    CHECKF(backend_forward(g, &st->b, lg) == IFD_OK, "%s: graph forward", what);
    CHECKF(!memcmp(le, lg, (size_t)n * V * sizeof(float)), "%s: graph logits differ from eager", what);
    /* the logits are real: finite, and rows differ from one another */
    int finite = 1;
    for (size_t i = 0; i < (size_t)n * V; i++) finite &= isfinite(lg[i]) != 0;
    CHECKF(finite, "%s: non-finite logits", what);
    if (n > 1) CHECKF(memcmp(lg, lg + V, (size_t)V * sizeof(float)), "%s: rows 0 and 1 equal", what);
    CHECK(backend_cuda_kv_access(e, ke, pb, 0) == IFD_OK);
    CHECK(backend_cuda_kv_access(g, kg, pb, 0) == IFD_OK);
    CHECKF(!memcmp(ke, kg, pb), "%s: graph KV pool differs from eager", what);
    /* outside the step's slots nothing changed; inside, something did */
    const size_t per_slot = (size_t)m->hp.n_kv_heads * m->hp.head_dim, n_slots = (size_t)NB * BS;
    size_t stray = 0, written = 0;
    for (size_t r = 0; r < 2 * (size_t)m->hp.n_layers; r++)
        for (size_t sl = 0; sl < n_slots; sl++) {
            int mine = 0;
            for (int32_t t = 0; t < st->b.n_tokens; t++) mine |= st->slot[t] == (int32_t)sl;
            const size_t o = (r * n_slots + sl) * per_slot;
            const int same = !memcmp(before + o, kg + o, per_slot * sizeof(float));
            if (!mine && !same) stray++;
            if (mine && !same) written++;
        }
    CHECKF(stray == 0, "%s: %zu slot rows changed that the step does not own", what, stray);
    CHECKF(written == 2 * (size_t)m->hp.n_layers * (size_t)st->b.n_tokens, "%s: %zu of %zu slot rows written",
           what, written, 2 * (size_t)m->hp.n_layers * (size_t)st->b.n_tokens);
    free(le);
    free(lg);
}

/* kind: BACKEND_EMU, or BACKEND_CUDA where a GPU is present */
static void graphs_equal_eager(backend_kind kind) {
    model *m = tiny();
    if (!m) return;
    backend *e = make(m, kind, 1), *g = make(m, kind, 0);
    const size_t pb = pool_bytes(m);
    float *init = malloc(pb), *before = malloc(pb), *ke = malloc(pb), *kg = malloc(pb);
    if (!e || !g || !init || !before || !ke || !kg) goto done;
    /* the same random cache on both: every context reads real keys */
    for (size_t i = 0; i < pb / sizeof(float); i++) init[i] = frand();
    CHECK(backend_cuda_kv_access(e, init, pb, 1) == IFD_OK);
    CHECK(backend_cuda_kv_access(g, init, pb, 1) == IFD_OK);
    CHECK(backend_cuda_graph_replays(e) == 0 && backend_cuda_graph_replays(g) == 0);
    /* seq 0 reaches block 0; 254..257 cross the first split-KV partition boundary */
    const int32_t base[MAXS] = {310, 5, 254, 40, 255, 100, 0, 17};
    const int32_t one[MAXS] = {1, 1, 1, 1, 1, 1, 1, 1};
    const int32_t sizes[] = {1, 3, 5, 8};
    int64_t replays = 0;
    for (size_t k = 0; k < IFD_ARRAY_LEN(sizes); k++)
        for (int32_t it = 0; it < 2; it++) {
            int32_t start[MAXS];
            for (int32_t s = 0; s < MAXS; s++) start[s] = base[s] + it + (int32_t)k;
            step st;
            build(&st, sizes[k], start, one, MB);
            char what[64];
            snprintf(what, sizeof what, "decode of %d, step %d", sizes[k], it);
            run_both(e, g, m, &st, before, ke, kg, what);
            replays++;
            CHECKF(backend_cuda_graph_replays(g) == replays, "%s: %lld replays", what,
                   (long long)backend_cuda_graph_replays(g));
        }
    /* block tables narrower and wider than the graphs' (the engine's width is its own) */
    {
        const int32_t start[MAXS] = {290, 33, 257, 44, 258, 101, 3, 300};
        step st;
        build(&st, 5, start, one, MB - 1);
        run_both(e, g, m, &st, before, ke, kg, "decode of 5, block tables of MB - 1");
        build(&st, 3, start, one, MB + 1);
        run_both(e, g, m, &st, before, ke, kg, "decode of 3, block tables of MB + 1");
        replays += 2;
        CHECK(backend_cuda_graph_replays(g) == replays);
    }
    /* a mixed step (a 3-token prefill chunk and two decodes) stays eager */
    {
        const int32_t start[3] = {120, 60, 200}, q[3] = {1, 3, 1};
        step st;
        build(&st, 3, start, q, MB);
        run_both(e, g, m, &st, before, ke, kg, "mixed step");
        CHECK(backend_cuda_graph_replays(g) == replays);
    }
    CHECK(backend_cuda_graph_replays(e) == 0);
done:
    free(init);
    free(before);
    free(ke);
    free(kg);
    backend_destroy(e);
    backend_destroy(g);
    model_destroy(m);
}

static void test_decode_graphs_equal_eager(void) {
    graphs_equal_eager(BACKEND_EMU);
#ifdef INFERD_HAVE_CUDA
    if (backend_cuda_device_count() > 0) graphs_equal_eager(BACKEND_CUDA);
    else printf("(no GPU: the native CUDA backend's graphs are not checked here)\n");
#endif
}
#else
static void test_decode_graphs_equal_eager(void) {
    printf("(no emulated CUDA backend in this build: decode graphs not checked)\n");
}
#endif

static void test_cuda_graphs_option(void) {
    const cfg_cmd cmds[] = {CFG_CMD_SERVE, CFG_CMD_GENERATE, CFG_CMD_BENCH};
    for (size_t i = 0; i < IFD_ARRAY_LEN(cmds); i++)
        for (int off = 0; off < 3; off++) { /* not given, --no-cuda-graphs, --cuda-graphs */
            server_config c;
            char err[256] = "";
            char *argv[] = {"x", "-m", "m.gguf", off == 1 ? "--no-cuda-graphs" : "--cuda-graphs"};
            config_init(&c, cmds[i]);
            CHECKF(config_load(&c, off ? 4 : 3, argv, err, sizeof err) == 0, "%s", err);
            inferd_engine_options o;
            memset(&o, 0, sizeof o);
            o.no_cuda_graphs = off != 1; /* the wrong answer unless config writes it */
            config_engine_options(&c, &o);
            CHECKF(o.no_cuda_graphs == (off == 1), "cmd %zu, case %d", i, off);
            server_config_deinit(&c);
        }
}

TEST_MAIN(T(test_decode_graphs_equal_eager), T(test_cuda_graphs_option))
