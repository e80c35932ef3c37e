/* test_engine_spec.c — speculative decoding on the shared Shakespeare pair (issue 11).
 *
 * - Greedy identity: with a draft model or n-gram proposals (K = 1, 4, 8, fixed k so
 *   every step speculates, and adaptive), each of 16 mixed requests gives the same token
 *   ids AND bit-identical top logprobs as plain decoding, run alone and all 16 at once,
 *   with prefix caching on; and under a KV pool small enough to force preemptions.
 *   The runs must really speculate (verifications and accepted drafts counted).
 * - Seeded sampling: the same seed gives the same tokens with and without speculation
 *   (temperature 1; and with top-p 0.9 plus a repetition penalty).
 * - Distribution: over 2,000 runs with different seeds, the first generated tokens with
 *   speculation match those without (chi-square homogeneity, p > 0.001), while the
 *   deliberately wrong rule "accept every draft" fails the same test (p < 0.001).
 * - A draft whose vocabulary differs is refused at create, naming the difference. */
#include <math.h>

#include "engine/engine_tap.h"
#include "engine/sampler.h"
#include "inferd.h"
#include "test_util.h"

#define TARGET INFERD_SHARED_DIR "/models/shakespeare-target.gguf"
#define DRAFT INFERD_SHARED_DIR "/models/shakespeare-draft.gguf"
#define MAX_OUT 48
#define NTOP 5
#define NP 16

typedef struct result {
    int32_t ids[MAX_OUT];
    inferd_token_logprob lp[MAX_OUT][1 + NTOP];
    int32_t n;
    bool done;
} result;

static void on_out(const inferd_output *o, void *user) {
    result *r = user;
    for (int32_t i = 0; i < o->n_tokens && r->n < MAX_OUT; i++) {
        r->ids[r->n] = o->tokens[i];
        if (o->logprobs)
            memcpy(r->lp[r->n], o->logprobs + (size_t)i * (1 + o->n_top),
                   (size_t)(1 + o->n_top) * sizeof(inferd_token_logprob));
        r->n++;
    }
    if (o->finished) r->done = true;
}

typedef struct prompt {
    int32_t ids[200];
    int32_t n, max_out;
} prompt;

static prompt P[NP];

/* 16 prompts: random ids, some sharing a prefix (prefix cache), some a repeated phrase
 * (the n-gram proposer finds matches) */
static void make_prompts(void) {
    ifd_rng rng;
    rng_seed(&rng, 7);
    int32_t prefix[48], phrase[12];
    for (int i = 0; i < 48; i++) prefix[i] = 3 + (int32_t)(rng_next(&rng) % 1000);
    for (int i = 0; i < 12; i++) phrase[i] = 3 + (int32_t)(rng_next(&rng) % 1000);
    for (int k = 0; k < NP; k++) {
        prompt *p = &P[k];
        p->n = 8 + (int32_t)(rng_next(&rng) % 150);
        p->ids[0] = 1;
        for (int32_t i = 1; i < p->n; i++) {
            int32_t t = 3 + (int32_t)(rng_next(&rng) % 1000);
            if (k % 4 == 1 && i < 48) t = prefix[i];
            if (k % 4 == 2) t = phrase[i % 12];
            p->ids[i] = t;
        }
        p->max_out = 12 + (int32_t)(rng_next(&rng) % (MAX_OUT - 12));
    }
}

typedef struct spec_cfg {
    const char *draft;
    bool ngram;
    int32_t K;
    bool adaptive;
} spec_cfg;
static int32_t g_dvocab; /* --draft-vocab of the next engine */
static double g_pmin = -1; /* --draft-p-min of the next engine (< 0: the default) */

static void opts(inferd_engine_options *o, const spec_cfg *c) {
    inferd_engine_options_default(o);
    o->model_path = TARGET;
    o->threaded = false;
    /* INFERD_TEST_DEVICE=emu: the CUDA backend under the SIMT emulation (ctest's
     * test_engine_spec_emu_*), where verification rows are drawn on the device */
    const char *d = getenv("INFERD_TEST_DEVICE");
    o->device = d && !strcmp(d, "emu")    ? INFERD_DEVICE_EMU
                : d && !strcmp(d, "cuda") ? INFERD_DEVICE_CUDA
                                          : INFERD_DEVICE_CPU;
    o->max_num_seqs = 16;
    if (c) {
        o->draft_model_path = c->draft;
        o->speculative_ngram = c->ngram;
        o->num_speculative_tokens = c->K;
        o->speculative_adaptive = c->adaptive;
        o->draft_vocab = g_dvocab; /* a device backend keeps the whole head (a warning) */
        if (g_pmin >= 0) o->draft_p_min = g_pmin;
    }
}

static bool submit(inferd_engine *e, const prompt *p, result *out, float temp, uint64_t seed,
                   float top_p, float rep) {
    char err[256];
    inferd_request q = {.prompt = p->ids, .n_prompt = p->n, .cb = on_out, .user = out};
    inferd_sampling_default(&q.sampling);
    q.sampling.temperature = temp;
    q.sampling.top_p = top_p;
    q.sampling.repetition_penalty = rep;
    q.sampling.seed = seed;
    q.sampling.has_seed = true;
    q.sampling.max_tokens = p->max_out;
    q.sampling.ignore_eos = true;
    q.sampling.logprobs = NTOP;
    if (inferd_submit(e, &q, NULL, err, sizeof err)) {
        fprintf(stderr, "  submit: %s\n", err);
        return false;
    }
    return true;
}

static void drain(inferd_engine *e) {
    for (int guard = 0; inferd_engine_step(e) > 0 && guard < 1000000; guard++) {
    }
}

/* All prompts greedy, one at a time (alone) or all at once. */
static bool run(const inferd_engine_options *o, bool alone, result *out, inferd_stats *st) {
    char err[512];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, o, err, sizeof err)) {
        fprintf(stderr, "  engine: %s\n", err);
        return false;
    }
    memset(out, 0, sizeof(result) * NP);
    bool ok = true;
    for (int k = 0; k < NP && ok; k++) {
        ok = submit(e, &P[k], &out[k], 0.0f, 0, 1.0f, 1.0f);
        if (alone) drain(e);
    }
    drain(e);
    if (st) inferd_engine_stats(e, st);
    inferd_engine_destroy(e);
    for (int k = 0; k < NP; k++) ok = ok && out[k].done;
    return ok;
}

static int compare(const result *a, const result *b, const char *what) {
    int bad = 0;
    for (int k = 0; k < NP; k++) {
        if (a[k].n != b[k].n || memcmp(a[k].ids, b[k].ids, (size_t)a[k].n * sizeof(int32_t))) {
            fprintf(stderr, "  %s: request %d tokens differ\n", what, k);
            bad++;
        } else if (memcmp(a[k].lp, b[k].lp, (size_t)a[k].n * sizeof a[k].lp[0])) {
            fprintf(stderr, "  %s: request %d logprobs differ\n", what, k);
            bad++;
        }
    }
    return bad;
}

static result R0[NP], R1[NP];

static void test_greedy_identical(void) {
    make_prompts();
    inferd_engine_options o;
    opts(&o, NULL);
    CHECK(run(&o, false, R0, NULL));
    const spec_cfg cfgs[] = {
        {DRAFT, false, 1, false}, {DRAFT, false, 4, false}, {DRAFT, false, 8, false},
        {NULL, true, 1, false},   {NULL, true, 4, false},   {NULL, true, 8, false},
        {DRAFT, true, 4, false},  {DRAFT, false, 4, true},  {NULL, true, 8, true},
        {DRAFT, false, 4, false}, /* again with a restricted draft lm head (ids < 500) */
    };
    const size_t nc = sizeof cfgs / sizeof cfgs[0];
    for (size_t c = 0; c < nc; c++) {
        g_dvocab = c == nc - 1 ? 500 : 0;
        for (int alone = 0; alone < 2; alone++) {
            opts(&o, &cfgs[c]);
            inferd_stats st;
            CHECK(run(&o, alone, R1, &st));
            char what[96];
            snprintf(what, sizeof what, "%s%s K=%d %s %s vocab %d", cfgs[c].draft ? "draft" : "",
                     cfgs[c].ngram ? "+ngram" : "", cfgs[c].K, cfgs[c].adaptive ? "adaptive" : "fixed",
                     alone ? "alone" : "batch of 16", g_dvocab);
            CHECKF(compare(R0, R1, what) == 0, "%s", what);
            if (!cfgs[c].adaptive) {
                CHECKF(st.spec_verifications > 0 && st.spec_accepted > 0,
                       "%s: %llu verifications, %llu accepted", what,
                       (unsigned long long)st.spec_verifications, (unsigned long long)st.spec_accepted);
                CHECK(st.spec_emitted == st.spec_accepted + st.spec_verifications);
                CHECK(st.spec_accepted <= st.spec_proposed);
            }
            if (cfgs[c].draft && !cfgs[c].ngram && !cfgs[c].adaptive)
                CHECK(st.spec_draft_forwards > 0 && st.spec_draft_ms > 0);
            if (!cfgs[c].draft) CHECK(st.spec_draft_forwards == 0 && st.spec_draft_ms == 0);
            CHECK(st.kv_blocks_used == 0);
        }
    }
    g_dvocab = 0;
}

/* A pool of 12 blocks of 16 tokens for 16 requests of up to ~200 tokens: preemption must
 * happen, with drafts in flight, and the prefix cache (on) serves the recomputes. */
static void test_preemption(void) {
    make_prompts();
    inferd_engine_options o;
    opts(&o, NULL);
    CHECK(run(&o, false, R0, NULL));
    const spec_cfg cfgs[] = {{DRAFT, false, 4, false}, {NULL, true, 8, false}, {DRAFT, true, 8, false}};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        opts(&o, &cfgs[c]);
        o.kv_cache_bytes = 14 * 16 * 2 * 4 * 2 * 128 + 14 * 16 * 2 * 2 * 1 * 128; /* both pools, f16 */
        inferd_stats st;
        CHECK(run(&o, false, R1, &st));
        CHECKF(st.preemptions > 0, "preemptions %llu", (unsigned long long)st.preemptions);
        CHECKF(st.spec_accepted > 0, "accepted %llu", (unsigned long long)st.spec_accepted);
        CHECK(compare(R0, R1, "small pool") == 0);
        CHECK(st.kv_blocks_used == 0);
    }
}

/* ---- seeded sampling and the distribution -------------------------------------------- */

#define NRUN 2000
#define DIST_OUT 4
static result DR[3][NRUN];

/* NRUN requests of the same prompt, seeds seed0 + i, all submitted at once. */
static bool run_seeded(const spec_cfg *c, bool wrong_rule, uint64_t seed0, float top_p, float rep,
                       result *out) {
    inferd_engine_options o;
    opts(&o, c);
    o.max_num_seqs = 64;
    char err[512];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) {
        fprintf(stderr, "  engine: %s\n", err);
        return false;
    }
    if (wrong_rule) engine_spec_debug_accept_all(e, true);
    static const char *text = "ROMEO:";
    prompt p = {.max_out = DIST_OUT};
    p.n = inferd_tokenize(e, text, strlen(text), true, false, p.ids, 200);
    memset(out, 0, sizeof(result) * NRUN);
    bool ok = p.n > 0;
    for (int i = 0; i < NRUN && ok; i++) ok = submit(e, &p, &out[i], 1.0f, seed0 + (uint64_t)i, top_p, rep);
    drain(e);
    inferd_stats st;
    inferd_engine_stats(e, &st);
    inferd_engine_destroy(e);
    if (c) CHECKF(st.spec_verifications > 0, "verifications %llu", (unsigned long long)st.spec_verifications);
    for (int i = 0; i < NRUN; i++) ok = ok && out[i].done && out[i].n == DIST_OUT;
    return ok;
}

/* Regularized upper incomplete gamma Q(a, x): series below a + 1, continued fraction above. */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double lg = lgamma(a);
    if (x < a + 1) {
        double sum = 1.0 / a, term = sum;
        for (int n = 1; n < 10000; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - lg);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

/* Chi-square homogeneity of the token at position pos (pos < 0: the pair at 0 and 1)
 * between two samples; bins with fewer than 10 in both together are merged. p-value. */
static double chi2_p(const result *a, const result *b, int pos) {
    enum { NB = 1024 * 8 };
    static int ca[NB], cb[NB];
    memset(ca, 0, sizeof ca);
    memset(cb, 0, sizeof cb);
    for (int i = 0; i < NRUN; i++) {
        const int ka = pos >= 0 ? a[i].ids[pos] : (a[i].ids[0] * 7 + a[i].ids[1]) % NB;
        const int kb = pos >= 0 ? b[i].ids[pos] : (b[i].ids[0] * 7 + b[i].ids[1]) % NB;
        ca[ka % NB]++;
        cb[kb % NB]++;
    }
    double chi = 0, oa = 0, ob = 0;
    int bins = 0;
    for (int k = 0; k < NB; k++) {
        if (ca[k] + cb[k] >= 10) {
            const double ea = (ca[k] + cb[k]) / 2.0; /* equal sample sizes */
            chi += (ca[k] - ea) * (ca[k] - ea) / ea + (cb[k] - ea) * (cb[k] - ea) / ea;
            bins++;
        } else {
            oa += ca[k];
            ob += cb[k];
        }
    }
    if (oa + ob > 0) {
        const double ea = (oa + ob) / 2.0;
        chi += (oa - ea) * (oa - ea) / ea + (ob - ea) * (ob - ea) / ea;
        bins++;
    }
    return bins > 1 ? gamma_q((bins - 1) / 2.0, chi / 2.0) : 1.0;
}

static void dist_case(float top_p, float rep) {
    const spec_cfg c = {DRAFT, false, 4, false};
    CHECK(run_seeded(NULL, false, 1000, top_p, rep, DR[0]));
    CHECK(run_seeded(&c, false, 1000, top_p, rep, DR[1]));
    /* the same seed gives the same tokens, speculation or not */
    int same = 0;
    for (int i = 0; i < NRUN; i++) same += !memcmp(DR[0][i].ids, DR[1][i].ids, sizeof(int32_t) * DIST_OUT);
    CHECKF(same == NRUN, "top_p %.2f rep %.2f: %d of %d seeded runs identical", top_p, rep, same, NRUN);
    /* other seeds: the same distribution */
    CHECK(run_seeded(&c, false, 900000, top_p, rep, DR[1]));
    g_pmin = 0; /* the wrong rule on every draft, whatever --draft-p-min's default */
    CHECK(run_seeded(&c, true, 900000, top_p, rep, DR[2]));
    g_pmin = -1;
    for (int pos = -1; pos < 3; pos++) {
        const double p_ok = chi2_p(DR[0], DR[1], pos), p_bad = chi2_p(DR[0], DR[2], pos);
        fprintf(stderr, "  top_p %.2f rep %.2f token %d: p = %.4f with speculation, %.3g accepting every draft\n",
                top_p, rep, pos, p_ok, p_bad);
        CHECKF(p_ok > 0.001, "token %d: p %.5f", pos, p_ok);
        if (pos >= 1) CHECKF(p_bad < 0.001, "wrong rule, token %d: p %.5f", pos, p_bad);
    }
}

static void test_distribution(void) { dist_case(1.0f, 1.0f); }
static void test_distribution_top_p_penalty(void) { dist_case(0.9f, 1.3f); }

/* Verification on the device (the CUDA backend under emulation in ctest; the CPU backend
 * draws on the host): greedy in a batch of 16 and seeded sampling (temperature 1, top-p
 * 0.9, no penalties) give plain decoding's tokens, and on a backend with a device
 * sampler every verification row was drawn there. */
static void test_device_verify(void) {
    make_prompts();
    inferd_engine_options o;
    opts(&o, NULL);
    const bool device = o.device != INFERD_DEVICE_CPU;
    CHECK(run(&o, false, R0, NULL));
    const spec_cfg cfgs[] = {{DRAFT, false, 4, false}, {NULL, true, 8, false}};
    for (size_t c = 0; c < 2; c++) {
        opts(&o, &cfgs[c]);
        inferd_stats st;
        CHECK(run(&o, false, R1, &st));
        CHECK(compare(R0, R1, cfgs[c].draft ? "device verify, draft" : "device verify, n-gram") == 0);
        CHECKF(st.spec_accepted > 0, "accepted %llu", (unsigned long long)st.spec_accepted);
        if (device)
            CHECKF(st.spec_device_rows == st.spec_verifications + st.spec_proposed,
                   "device rows %llu of %llu", (unsigned long long)st.spec_device_rows,
                   (unsigned long long)(st.spec_verifications + st.spec_proposed));
        else
            CHECK(st.spec_device_rows == 0);
    }
    /* seeded: 256 runs (64 under the emulation, which is slow), same seed, with and without */
    const int n_seeded = device ? 64 : 256;
    const spec_cfg c = {DRAFT, false, 4, false};
    inferd_engine_options o2;
    result *a = DR[0], *b = DR[1];
    for (int pass = 0; pass < 2; pass++) {
        opts(&o2, pass ? &c : NULL);
        o2.max_num_seqs = 64;
        char err[512];
        inferd_engine *e = NULL;
        CHECKF(inferd_engine_create(&e, &o2, err, sizeof err) == 0, "%s", err);
        if (!e) return;
        prompt p = {.max_out = 6};
        p.n = inferd_tokenize(e, "ROMEO:", 6, true, false, p.ids, 200);
        result *out = pass ? b : a;
        memset(out, 0, sizeof(result) * (size_t)n_seeded);
        for (int i = 0; i < n_seeded; i++) CHECK(submit(e, &p, &out[i], 1.0f, 77 + (uint64_t)i, 0.9f, 1.0f));
        drain(e);
        inferd_stats st;
        inferd_engine_stats(e, &st);
        inferd_engine_destroy(e);
        if (pass && device) CHECK(st.spec_device_rows > 0);
    }
    int same = 0;
    for (int i = 0; i < n_seeded; i++) same += a[i].n == 6 && !memcmp(a[i].ids, b[i].ids, 6 * sizeof(int32_t));
    CHECKF(same == n_seeded, "%d of %d seeded runs identical", same, n_seeded);
}

/* n > 1: the choices fork from the prompt (copy-on-write blocks) and each speculates on
 * its own; seeded at temperature 1 with logprobs, every choice's tokens and logprobs are
 * those of the run without speculation. */
typedef struct multi {
    result r[4];
} multi;
static void on_multi(const inferd_output *o, void *user) {
    multi *m = user;
    if (o->index >= 0 && o->index < 4) on_out(o, &m->r[o->index]);
}
static multi MF[2][NP];
static void test_n_fork(void) {
    make_prompts();
    for (int pass = 0; pass < 2; pass++) {
        const spec_cfg c = {DRAFT, true, 4, false};
        inferd_engine_options o;
        opts(&o, pass ? &c : NULL);
        char err[512];
        inferd_engine *e = NULL;
        CHECKF(inferd_engine_create(&e, &o, err, sizeof err) == 0, "%s", err);
        if (!e) return;
        memset(MF[pass], 0, sizeof MF[pass]);
        for (int k = 0; k < 6; k++) {
            inferd_request q = {.prompt = P[k].ids, .n_prompt = P[k].n, .cb = on_multi, .user = &MF[pass][k]};
            inferd_sampling_default(&q.sampling);
            q.sampling.n = 4;
            q.sampling.seed = 5 + (uint64_t)k;
            q.sampling.has_seed = true;
            q.sampling.max_tokens = P[k].max_out;
            q.sampling.ignore_eos = true;
            q.sampling.logprobs = NTOP;
            CHECKF(inferd_submit(e, &q, NULL, err, sizeof err) == 0, "%s", err);
        }
        drain(e);
        inferd_stats st;
        inferd_engine_stats(e, &st);
        inferd_engine_destroy(e);
        if (pass) CHECKF(st.spec_accepted > 0, "accepted %llu", (unsigned long long)st.spec_accepted);
        CHECK(st.kv_blocks_used == 0);
    }
    for (int k = 0; k < 6; k++)
        for (int c = 0; c < 4; c++) {
            const result *a = &MF[0][k].r[c], *b = &MF[1][k].r[c];
            CHECKF(a->done && b->done && a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * sizeof(int32_t)) &&
                       !memcmp(a->lp, b->lp, (size_t)a->n * sizeof a->lp[0]),
                   "request %d choice %d differs with speculation", k, c);
        }
}

/* ---- the adaptive choice, on fixed cost tables (engine_spec_debug_costs) -------------
 * A target forward costs 10 ms for 1 token, 11 for 4, then 7.25 ms a token (compute
 * bound); a draft round 2.5 ms for 1 token, 4 for 8, 40 for 64. At batch 1, k = 3 pays
 * from the prior on (2.95 tokens in 19 ms against 1 in 10), k = 1 from an acceptance of
 * 0.35; with 4 sequences decoding nothing pays. */
static const double CN[] = {1, 2, 4, 8}, CMS[] = {10, 10.5, 11, 40};
static const double DN[] = {1, 2, 4, 8, 64}, DMS[] = {2.5, 3, 3.5, 4, 40};

/* n_req requests of 40 random tokens, n_out out, greedy; chunked prefill of 32 tokens. */
static bool g_both;           /* the n-gram proposer beside the draft model in the next adaptive run */
static const char *g_draft;   /* its draft model (NULL: DRAFT) */
static const double *g_dms;   /* its draft round costs at DN (NULL: DMS) */
static const double *g_cms;   /* the target forward costs at CN (NULL: CMS) */

static bool adaptive_run_seen(int32_t max_seqs, int32_t dvocab, double min_acc, int n_req, int32_t n_out,
                              inferd_stats *st, const double *seen_ms, int32_t n_seen) {
    const spec_cfg c = {g_draft ? g_draft : DRAFT, g_both, 3, true};
    inferd_engine_options o;
    g_dvocab = dvocab;
    opts(&o, &c);
    g_dvocab = 0;
    o.device = INFERD_DEVICE_CPU;
    o.max_num_seqs = max_seqs;
    o.max_num_batched_tokens = 32;
    o.enable_prefix_caching = false;
    o.spec_min_acceptance = min_acc;
    char err[512];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) {
        fprintf(stderr, "  engine: %s\n", err);
        return false;
    }
    engine_spec_debug_costs(e, CN, g_cms ? g_cms : CMS, 4, DN, g_dms ? g_dms : DMS, 5);
    for (int32_t n = 1; n <= n_seen; n++)
        for (int rep = 0; rep < 3; rep++) engine_spec_debug_observe(e, n, seen_ms[n - 1]);
    ifd_rng rng;
    rng_seed(&rng, 11);
    bool ok = true;
    memset(R1, 0, sizeof R1);
    for (int k = 0; k < n_req && ok; k++) {
        prompt *p = &P[k];
        p->n = 40;
        p->max_out = n_out;
        p->ids[0] = 1;
        for (int32_t i = 1; i < p->n; i++) p->ids[i] = 3 + (int32_t)(rng_next(&rng) % 1000);
        ok = submit(e, p, &R1[k], 0.0f, 0, 1.0f, 1.0f);
    }
    drain(e);
    inferd_engine_stats(e, st);
    inferd_engine_destroy(e);
    for (int k = 0; k < n_req; k++) ok = ok && R1[k].done && R1[k].n == n_out;
    return ok;
}

static bool adaptive_run(int32_t max_seqs, int32_t dvocab, double min_acc, int n_req, int32_t n_out,
                         inferd_stats *st) {
    return adaptive_run_seen(max_seqs, dvocab, min_acc, n_req, n_out, st, NULL, 0);
}

static uint64_t spec_steps(const inferd_stats *st) {
    uint64_t n = 0;
    for (int k = 1; k < 17; k++) n += st->spec_k_hist[k];
    return n;
}

/* Four requests under a load where speculation cannot pay: none speculates or probes,
 * not even the first one to finish its prefill while the others still prefill (the gate
 * counts them as the decodes they are about to be), nor the last ones alone near their
 * end (the draft's catch-up of their whole context is spread over the few tokens left).
 * The same four one at a time do speculate. */
static void test_adaptive_load(void) {
    inferd_stats st;
    CHECK(adaptive_run(4, 0, 0.3, 4, 24, &st));
    CHECKF(spec_steps(&st) == 0 && st.spec_draft_forwards == 0 && st.spec_draft_ms == 0,
           "under load: %llu speculative steps, %llu draft forwards, %g ms in the draft",
           (unsigned long long)spec_steps(&st), (unsigned long long)st.spec_draft_forwards, st.spec_draft_ms);
    CHECK(adaptive_run(1, 0, 0.3, 4, 24, &st));
    CHECKF(spec_steps(&st) > 0 && st.spec_accepted > 0, "alone: %llu speculative steps",
           (unsigned long long)spec_steps(&st));
}

/* A draft that is always wrong (its lm head cut to ids 0..4, which the target never
 * picks) and no switch-off: after its probes the sequence stays plain, but not for good:
 * SPEC_IDLE (16) plain steps later it is measured again as a new sequence and probes
 * again (the gate lets it at batch 1), so it verifies more than its SPEC_MIN_OBS (6)
 * probes. */
static void test_adaptive_forgets(void) {
    inferd_stats st;
    CHECK(adaptive_run(1, 5, 0.01, 1, MAX_OUT, &st));
    CHECKF(st.spec_accepted == 0 && st.spec_switched_off == 0, "accepted %llu, switched off %llu",
           (unsigned long long)st.spec_accepted, (unsigned long long)st.spec_switched_off);
    CHECKF(st.spec_verifications > 6 && st.spec_k_hist[0] >= 16 && st.spec_remeasured >= 1,
           "%llu verifications, %llu plain steps, %llu re-measured", (unsigned long long)st.spec_verifications,
           (unsigned long long)st.spec_k_hist[0], (unsigned long long)st.spec_remeasured);
}

/* A sequence switched off (its draft computes 5 ids, so none is ever accepted; the
 * default threshold 0.3) decodes plainly for SPEC_RETRY = 32 tokens, then is measured
 * again from the prior and switched off again, all within 48 tokens (a retry after 128,
 * as before, left prose answers plain to their end). */
static void test_adaptive_retry(void) {
    inferd_stats st;
    CHECK(adaptive_run(1, 5, 0.3, 1, MAX_OUT, &st));
    fprintf(stderr, "  %llu verifications, switched off %llu times, %llu plain steps\n",
            (unsigned long long)st.spec_verifications, (unsigned long long)st.spec_switched_off,
            (unsigned long long)st.spec_k_hist[0]);
    CHECKF(st.spec_accepted == 0 && st.spec_switched_off == 2, "accepted %llu, switched off %llu",
           (unsigned long long)st.spec_accepted, (unsigned long long)st.spec_switched_off);
    CHECKF(st.spec_verifications >= 12 && st.spec_k_hist[0] >= 32, "%llu verifications, %llu plain steps",
           (unsigned long long)st.spec_verifications, (unsigned long long)st.spec_k_hist[0]);
}

/* A proposer that never agrees rests: seven requests one at a time, each 48 tokens, a
 * draft that computes 5 ids (none ever accepted). The first request probes twice (6
 * probes, switched off, 32 tokens plain, 6 probes again): SPEC_POOL_MIN (12) pooled
 * probes at acceptance 0, so the draft model rests for SPEC_REST (256) decoding
 * sequence-steps. The next five requests never probe; the seventh probes once after the
 * rest (the pool kept half its evidence, so one episode decides) and the draft rests
 * again. Without the rest each request probed twice: 84 verifications, not 18. */
static void test_adaptive_rest(void) {
    inferd_stats st;
    CHECK(adaptive_run(1, 5, 0.3, 7, MAX_OUT, &st));
    fprintf(stderr, "  %llu verifications, switched off %llu times, %llu rests, %llu plain steps\n",
            (unsigned long long)st.spec_verifications, (unsigned long long)st.spec_switched_off,
            (unsigned long long)st.spec_rests, (unsigned long long)st.spec_k_hist[0]);
    CHECKF(st.spec_accepted == 0 && st.spec_rests == 2 && st.spec_switched_off == 3,
           "accepted %llu, %llu rests, switched off %llu", (unsigned long long)st.spec_accepted,
           (unsigned long long)st.spec_rests, (unsigned long long)st.spec_switched_off);
    CHECKF(st.spec_verifications == 18, "%llu verifications", (unsigned long long)st.spec_verifications);
    /* a draft that agrees (the default: the shakespeare pair) does not rest */
    CHECK(adaptive_run(1, 0, 0.3, 7, MAX_OUT, &st));
    fprintf(stderr, "  agreeing draft: %llu / %llu accepted, %llu rests\n", (unsigned long long)st.spec_accepted,
            (unsigned long long)st.spec_proposed, (unsigned long long)st.spec_rests);
    CHECKF(st.spec_rests == 0 && st.spec_accepted > 0, "agreeing draft: %llu rests",
           (unsigned long long)st.spec_rests);
}

/* The gate's margin is for exploration only: a measured sequence speculates wherever its
 * acceptance promises any gain. Rows at 10 ms for one token and 12.4 for two, dearer
 * beyond (so k = 1), draft rounds nearly free, no switching off: a measured acceptance
 * a promises (1 + a) / 1.24, over 1 from a = 0.24 on, over the margin 1.1 only from
 * 0.364. These sequences accept about half their drafts, their moving averages often
 * dip below 0.364: with the margin for all (before) this run had 82 verifications and
 * 68 plain steps, now 109 and 23 (the run is deterministic: greedy, fixed costs). */
static void test_adaptive_margin(void) {
    static const double rows[] = {10, 12.4, 1000, 2000}, rounds[] = {0.1, 0.1, 0.1, 0.1, 1};
    inferd_stats st;
    g_cms = rows;
    g_dms = rounds;
    const bool ok = adaptive_run(1, 0, 0.01, 4, MAX_OUT, &st);
    g_cms = NULL;
    g_dms = NULL;
    CHECK(ok);
    fprintf(stderr, "  %llu verifications, %llu / %llu accepted, %llu plain steps, %llu re-measured\n",
            (unsigned long long)st.spec_verifications, (unsigned long long)st.spec_accepted,
            (unsigned long long)st.spec_proposed, (unsigned long long)st.spec_k_hist[0],
            (unsigned long long)st.spec_remeasured);
    CHECKF(st.spec_verifications > 0 && 2 * st.spec_k_hist[0] < st.spec_verifications,
           "%llu plain steps, %llu verifications", (unsigned long long)st.spec_k_hist[0],
           (unsigned long long)st.spec_verifications);
}

/* The forwards seen while serving overrule the start-up table for their sizes: where the
 * table has a verification of 1 + 3 tokens at 11 ms against a decode's 10 (so k = 3
 * pays alone, as test_adaptive_load checks), forwards of 2 .. 4 tokens seen at 40 ms
 * (3 of each) leave the sequence plain; sizes 1 .. 4 seen at the table's own values,
 * it still speculates. */
static void test_adaptive_seen(void) {
    inferd_stats st;
    static const double dear[] = {10, 40, 40, 40}, cheap[] = {10, 10.5, 10.75, 11};
    CHECK(adaptive_run_seen(1, 0, 0.3, 2, 24, &st, dear, 4));
    CHECKF(spec_steps(&st) == 0 && st.spec_draft_forwards == 0, "dear: %llu speculative steps, %llu draft forwards",
           (unsigned long long)spec_steps(&st), (unsigned long long)st.spec_draft_forwards);
    CHECK(adaptive_run_seen(1, 0, 0.3, 2, 24, &st, cheap, 4));
    CHECKF(spec_steps(&st) > 0, "cheap: %llu speculative steps", (unsigned long long)spec_steps(&st));
}

/* Both proposers: each has its own acceptance per sequence. The target drafting for
 * itself (every guess right) beside the n-gram lookup on random prompts (most guesses
 * wrong): with one acceptance shared, the n-gram's misses switched the draft off too (a
 * real run on code: 0.44 acceptance with both, 0.82 with the draft alone). Here the
 * draft model's share keeps at least 3/4 of the accepted tokens it has alone, and the
 * n-gram's own acceptance is the lower. */
static void test_adaptive_sources(void) {
    inferd_stats st0, st;
    g_draft = TARGET;
    g_pmin = 0; /* its unsure guesses are right too (greedy), as no real draft's are:
                   whatever --draft-p-min's default, none is dropped */
    CHECK(adaptive_run(1, 0, 0.3, 4, MAX_OUT, &st0));
    g_both = true;
    CHECK(adaptive_run(1, 0, 0.3, 4, MAX_OUT, &st));
    g_both = false;
    g_draft = NULL;
    g_pmin = -1;
    const unsigned long long dp = st.spec_proposed - st.spec_ngram_proposed,
                             da = st.spec_accepted - st.spec_ngram_accepted;
    fprintf(stderr, "  draft alone: %llu / %llu accepted; both: draft %llu / %llu, n-gram %llu / %llu\n",
            (unsigned long long)st0.spec_accepted, (unsigned long long)st0.spec_proposed, da, dp,
            (unsigned long long)st.spec_ngram_accepted, (unsigned long long)st.spec_ngram_proposed);
    CHECK(st0.spec_ngram_proposed == 0 && st.spec_ngram_proposed > 0);
    CHECKF(4 * da >= 3 * st0.spec_accepted, "draft accepted %llu with the n-gram, %llu alone", da,
           (unsigned long long)st0.spec_accepted);
    CHECK(st.spec_ngram_accepted * dp < da * st.spec_ngram_proposed);
}

/* Both proposers, a gate each. Four sequences decoding, target rows nearly free (8 tokens
 * 12 ms against 4 in 11) and draft rounds at 30 ms (the draft cannot pay even at the
 * gate's acceptance): the n-gram speculates, but the draft model never runs, not even
 * for the probes of the sequences the n-gram has nothing for (one gate for both let the
 * n-gram's cheap rows open it to draft probes: on code at batch 4, 0.95x plain). With
 * rounds at 0.1 ms the draft does run. */
static void test_adaptive_gate_each(void) {
    static const double cheap_rows[] = {10, 10.5, 11, 12}, dear[] = {30, 30, 30, 30, 300},
                        free_rounds[] = {0.1, 0.1, 0.1, 0.1, 1};
    inferd_stats st;
    g_both = true;
    g_cms = cheap_rows;
    g_dms = dear;
    CHECK(adaptive_run(4, 0, 0.3, 4, MAX_OUT, &st));
    fprintf(stderr, "  dear draft: %llu draft forwards, %llu drafts, n-gram %llu / %llu accepted\n",
            (unsigned long long)st.spec_draft_forwards, (unsigned long long)st.spec_proposed,
            (unsigned long long)st.spec_ngram_accepted, (unsigned long long)st.spec_ngram_proposed);
    CHECKF(st.spec_draft_forwards == 0 && st.spec_proposed == st.spec_ngram_proposed,
           "%llu draft forwards, %llu drafts proposed by the model", (unsigned long long)st.spec_draft_forwards,
           (unsigned long long)(st.spec_proposed - st.spec_ngram_proposed));
    CHECK(st.spec_ngram_proposed > 0);
    g_dms = free_rounds;
    CHECK(adaptive_run(4, 0, 0.3, 4, MAX_OUT, &st));
    g_dms = NULL;
    g_cms = NULL;
    g_both = false;
    CHECKF(st.spec_draft_forwards > 0, "free draft rounds: %llu draft forwards", (unsigned long long)st.spec_draft_forwards);
}

/* --draft-p-min: a draft after the first that the draft model gives less than p_min
 * probability ends its sequence's drafts for the step and is not verified. Fixed K = 4,
 * greedy, the 16 prompts alone: the output stays plain decoding's; at 0 nothing is
 * dropped; at 0.5 drafts are dropped, fewer are verified, and those verified are
 * accepted more often (the dropped ones were the likely misses); at 1 every draft but
 * the first is dropped (none has probability 1): each verification has one draft, so
 * the acceptance is still measured. Out of range: refused. */
static void test_draft_unsure(void) {
    make_prompts();
    inferd_engine_options o;
    opts(&o, NULL);
    CHECK(run(&o, true, R0, NULL));
    const spec_cfg c = {DRAFT, false, 4, false};
    inferd_stats st[3];
    static const double pm[3] = {0, 0.5, 1};
    for (int i = 0; i < 3; i++) {
        opts(&o, &c);
        o.draft_p_min = pm[i];
        CHECK(run(&o, true, R1, &st[i]));
        char what[64];
        snprintf(what, sizeof what, "draft-p-min %.1f", pm[i]);
        CHECKF(compare(R0, R1, what) == 0, "%s", what);
        fprintf(stderr, "  %s: %llu / %llu accepted, %llu dropped, %llu draft forwards\n", what,
                (unsigned long long)st[i].spec_accepted, (unsigned long long)st[i].spec_proposed,
                (unsigned long long)st[i].spec_draft_unsure, (unsigned long long)st[i].spec_draft_forwards);
        CHECK(st[i].kv_blocks_used == 0);
    }
    CHECK(st[0].spec_draft_unsure == 0 && st[0].spec_proposed > 0);
    CHECK(st[1].spec_draft_unsure > 0 && st[1].spec_proposed < st[0].spec_proposed);
    CHECKF(st[1].spec_accepted * st[0].spec_proposed > st[0].spec_accepted * st[1].spec_proposed,
           "acceptance %llu / %llu at 0.5, %llu / %llu at 0", (unsigned long long)st[1].spec_accepted,
           (unsigned long long)st[1].spec_proposed, (unsigned long long)st[0].spec_accepted,
           (unsigned long long)st[0].spec_proposed);
    CHECK(st[2].spec_verifications > 0 && st[2].spec_proposed == st[2].spec_verifications &&
          st[2].spec_draft_unsure > 0 && st[2].spec_k_hist[1] == st[2].spec_verifications);
    static const double bad[2] = {1.5, -0.1};
    for (int i = 0; i < 2; i++) {
        opts(&o, &c);
        o.draft_p_min = bad[i];
        char err[256] = "";
        inferd_engine *e = NULL;
        CHECK(inferd_engine_create(&e, &o, err, sizeof err) == INFERD_ERR_INVALID && e == NULL);
        CHECKF(strstr(err, "draft-p-min") != NULL, "%s", err);
    }
}

static void test_vocab_mismatch(void) {
    /* the target as a draft for itself passes; a file with another vocabulary is refused */
    inferd_engine_options o;
    const spec_cfg c = {TARGET, false, 2, false};
    opts(&o, &c);
    char err[512] = "";
    inferd_engine *e = NULL;
    CHECKF(inferd_engine_create(&e, &o, err, sizeof err) == 0, "%s", err);
    inferd_engine_destroy(e);
    const spec_cfg bad = {INFERD_SHARED_DIR "/models/no-such-draft.gguf", false, 2, false};
    opts(&o, &bad);
    e = NULL;
    CHECK(inferd_engine_create(&e, &o, err, sizeof err) != 0 && e == NULL);
    CHECKF(strstr(err, "draft model") != NULL, "%s", err);
    const spec_cfg k0 = {DRAFT, false, 0, false};
    opts(&o, &k0);
    CHECK(inferd_engine_create(&e, &o, err, sizeof err) == INFERD_ERR_INVALID && e == NULL);
}

TEST_MAIN(T(test_greedy_identical), T(test_preemption), T(test_distribution),
          T(test_distribution_top_p_penalty), T(test_device_verify), T(test_n_fork), T(test_adaptive_load),
          T(test_adaptive_forgets), T(test_adaptive_retry), T(test_adaptive_rest), T(test_adaptive_margin),
          T(test_adaptive_seen), T(test_adaptive_sources), T(test_adaptive_gate_each), T(test_draft_unsure),
          T(test_vocab_mismatch))
