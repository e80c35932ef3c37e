/* test_sample.cu — the device sampling op (kernels/sample.cu) against the CPU sampler
 * (src/engine/sampler.c) and logprobs (src/engine/logprobs.c).
 *
 * Tokens must be EXACTLY equal, row for row: thousands of random rows with random
 * parameters (greedy, ties, top_k 1 / 40 / all / random, top_p 0.1..1, min_p,
 * repetition / presence / frequency penalties from a real sampler_state, logit_bias
 * with repeated ids, bans, NaN / -inf / +inf logits, all-masked rows), a 152k
 * vocabulary, random keys and positions. Logprobs: the same ids, values within 1e-5
 * absolute (a double normaliser summed in another order; both NaN where a +inf logit
 * makes logprobs.c's inf - inf). Batch invariance: a row
 * sampled in a big batch gives the same bits as alone. */
#include "cuda_test.h"
#include "sample.h"

extern "C" {
#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "util/status.h"
}

#include <vector>

static uint64_t g_rng = 0x5eed;
static uint64_t rnd(void) { return ct_next(&g_rng); }
static int rnd_int(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); } /* [lo, hi] */
static float rnd_f(float lo, float hi) { return lo + (hi - lo) * (float)((rnd() >> 40) * (1.0 / 16777216.0)); }

/* One row's inputs on the host side, both forms. */
struct row_case {
    std::vector<float> logits;
    sampler_params sp;
    sampler_state st; /* n_vocab 0: no penalty state */
    std::vector<sampler_bias> bias;
    std::vector<int32_t> ban;
    std::vector<uint32_t> allow; /* a grammar's mask, or empty */
    std::vector<int32_t> extra;
    uint64_t key, pos;
    int32_t n_logprobs;
};

static void make_logits(float *l, int nv) {
    const int style = rnd_int(0, 5);
    for (int i = 0; i < nv; i++) {
        switch (style) {
        case 0: l[i] = rnd_f(-5.0f, 5.0f); break;
        case 1: l[i] = (float)rnd_int(-6, 6) * 0.5f; break;              /* many ties */
        case 2: l[i] = rnd_f(-40.0f, 20.0f); break;                       /* wide spread */
        case 3: l[i] = rnd_f(-1.0f, 1.0f) * 0.01f; break;                 /* nearly flat */
        case 4: l[i] = (rnd() % 7 == 0) ? -INFINITY : rnd_f(-3.0f, 3.0f); break;
        default: l[i] = (float)rnd_int(0, 2); break;                      /* heavy ties */
        }
    }
    const int extra = rnd_int(0, 9);
    if (extra == 0) l[rnd_int(0, nv - 1)] = NAN;
    if (extra == 1) l[rnd_int(0, nv - 1)] = INFINITY;
    if (extra == 2)
        for (int i = 0; i < nv; i++) l[i] = -INFINITY; /* all masked */
    if (extra == 3) l[rnd_int(0, nv - 1)] = -0.0f;
}

static void make_case(row_case *c, int nv) {
    c->logits.resize((size_t)nv);
    make_logits(c->logits.data(), nv);
    sampler_params p = sampler_params_default();
    const int t = rnd_int(0, 9);
    p.temperature = t == 0 ? 0.0f : t == 1 ? 1e-6f : t == 2 ? 0.3f : t < 6 ? 1.0f : rnd_f(0.2f, 2.5f);
    const int k = rnd_int(0, 6);
    p.top_k = k == 0 ? 1 : k == 1 ? 40 : k == 2 ? nv : k == 3 ? rnd_int(1, nv) : 0;
    const int tp = rnd_int(0, 3);
    p.top_p = tp == 0 ? 1.0f : tp == 1 ? 0.0f : rnd_f(0.1f, 1.0f);
    const int mp = rnd_int(0, 5);
    p.min_p = mp == 0 ? 1.0f : mp < 3 ? rnd_f(0.0f, 0.3f) : 0.0f; /* 1: only the ties of the best */
    c->st = sampler_state{};
    if (rnd_int(0, 2) == 0) {
        const int r = rnd_int(0, 3);
        p.repetition_penalty = r == 0 ? 1.0f : r == 1 ? 1.3f : r == 2 ? 0.8f : rnd_f(0.5f, 2.0f);
        p.presence_penalty = rnd_int(0, 1) ? rnd_f(-2.0f, 2.0f) : 0.0f;
        p.frequency_penalty = rnd_int(0, 1) ? rnd_f(-2.0f, 2.0f) : 0.0f;
        CHECK(sampler_state_init(&c->st, nv) == IFD_OK);
        const int n_prompt = rnd_int(0, 30), n_out = rnd_int(0, 30);
        for (int i = 0; i < n_prompt; i++) {
            const int32_t id = rnd_int(0, nv - 1);
            sampler_state_add_prompt(&c->st, &id, 1);
        }
        for (int i = 0; i < n_out; i++) sampler_state_accept(&c->st, rnd_int(0, nv - 1));
    }
    c->bias.clear();
    if (rnd_int(0, 2) == 0) {
        const int n = rnd_int(1, 8);
        for (int i = 0; i < n; i++) {
            const int32_t id = rnd_int(0, 3) == 0 && i > 0 ? c->bias[0].id : rnd_int(0, nv - 1);
            const int kind = rnd_int(0, 3);
            c->bias.push_back({id, kind == 0 ? 100.0f : kind == 1 ? -100.0f : rnd_f(-3.0f, 3.0f)});
        }
    }
    c->ban.clear();
    if (rnd_int(0, 4) == 0) {
        const int n = rnd_int(1, 5);
        for (int i = 0; i < n; i++) c->ban.push_back(rnd_int(0, nv - 1));
    }
    p.logit_bias = c->bias.data();
    p.n_logit_bias = (int32_t)c->bias.size();
    p.banned = c->ban.data();
    p.n_banned = (int32_t)c->ban.size();
    /* a grammar's mask on a third of the rows: dense, sparse or a single id, sometimes
     * with stop ids allowed anyway (and sometimes nothing allowed at all) */
    c->allow.clear();
    c->extra.clear();
    if (rnd_int(0, 2) == 0) {
        c->allow.assign((size_t)(nv + 31) / 32, 0u);
        const int density = rnd_int(0, 3);
        for (int i = 0; i < nv; i++) {
            const bool on = density == 0 ? rnd_int(0, 1) == 0 : density == 1 ? rnd_int(0, 50) == 0 : density == 2 && i == nv / 2;
            if (on) c->allow[(size_t)i >> 5] |= 1u << (i & 31);
        }
        if (rnd_int(0, 1)) {
            const int n = rnd_int(1, SAMP_MAX_EXTRA);
            for (int i = 0; i < n; i++) c->extra.push_back(rnd_int(0, nv - 1));
        }
        p.allow = c->allow.data();
        p.allow_extra = c->extra.data();
        p.n_allow_extra = (int32_t)c->extra.size();
    }
    c->sp = p;
    c->key = rnd();
    c->pos = rnd_int(0, 3) == 0 ? (uint64_t)rnd_int(0, 100) : rnd();
    c->n_logprobs = rnd_int(0, 3) == 0 ? rnd_int(0, 25) : -1;
}

/* Run the device op over cases[0..n); tokens[n], lp[n][1 + SAMP_MAX_TOP]. */
static int run_device(const row_case *cases, int n, int nv, int32_t *tokens, samp_logprob *lp) {
    std::vector<float> logits((size_t)n * nv);
    std::vector<samp_row> rows((size_t)n);
    std::vector<samp_pen> pen;
    std::vector<samp_bias> bias;
    std::vector<int32_t> ban;
    std::vector<uint32_t> allow;
    std::vector<int32_t> extra;
    for (int r = 0; r < n; r++) {
        const row_case *c = &cases[r];
        memcpy(&logits[(size_t)r * nv], c->logits.data(), (size_t)nv * sizeof(float));
        samp_row *w = &rows[(size_t)r];
        *w = samp_row{};
        w->temperature = c->sp.temperature;
        w->top_k = c->sp.top_k;
        w->top_p = c->sp.top_p;
        w->min_p = c->sp.min_p;
        w->repetition_penalty = c->sp.repetition_penalty;
        w->presence_penalty = c->sp.presence_penalty;
        w->frequency_penalty = c->sp.frequency_penalty;
        w->n_logprobs = c->n_logprobs;
        w->key = c->key;
        w->position = c->pos;
        /* as the engine would: sampler_state's seen list and counts */
        w->pen_off = (int32_t)pen.size();
        for (int32_t i = 0; c->st.n_vocab && i < c->st.n_seen; i++)
            pen.push_back({c->st.seen[i], c->st.count[c->st.seen[i]]});
        w->n_pen = (int32_t)pen.size() - w->pen_off;
        w->bias_off = (int32_t)bias.size();
        for (const sampler_bias &b : c->bias) bias.push_back({b.id, b.bias});
        w->n_bias = (int32_t)c->bias.size();
        w->ban_off = (int32_t)ban.size();
        for (int32_t b : c->ban) ban.push_back(b);
        w->n_ban = (int32_t)c->ban.size();
        w->allow_off = c->allow.empty() ? -1 : (int64_t)allow.size();
        allow.insert(allow.end(), c->allow.begin(), c->allow.end());
        w->extra_off = (int32_t)extra.size();
        for (int32_t x : c->extra) extra.push_back(x);
        w->n_extra = (int32_t)c->extra.size();
    }
    /* never empty uploads: a list of 0 entries still gets a (1-entry) buffer */
    pen.push_back({0, 0});
    bias.push_back({0, 0.0f});
    ban.push_back(0);
    allow.push_back(0);
    extra.push_back(0);
    float *d_logits = (float *)ct_upload(logits.data(), logits.size() * sizeof(float));
    samp_row *d_rows = (samp_row *)ct_upload(rows.data(), rows.size() * sizeof(samp_row));
    samp_pen *d_pen = (samp_pen *)ct_upload(pen.data(), pen.size() * sizeof(samp_pen));
    samp_bias *d_bias = (samp_bias *)ct_upload(bias.data(), bias.size() * sizeof(samp_bias));
    int32_t *d_ban = (int32_t *)ct_upload(ban.data(), ban.size() * sizeof(int32_t));
    uint32_t *d_allow = (uint32_t *)ct_upload(allow.data(), allow.size() * sizeof(uint32_t));
    int32_t *d_extra = (int32_t *)ct_upload(extra.data(), extra.size() * sizeof(int32_t));
    float *d_work = (float *)ct_alloc(samp_scratch_bytes(n, nv));
    int32_t *d_tok = (int32_t *)ct_alloc((size_t)n * sizeof(int32_t));
    const size_t lp_bytes = (size_t)n * (1 + SAMP_MAX_TOP) * sizeof(samp_logprob);
    samp_logprob *d_lp = (samp_logprob *)ct_alloc(lp_bytes);
    int rc = samp_sample(NULL, d_logits, n, nv, d_rows, d_pen, (int32_t)pen.size() - 1, d_bias,
                         (int32_t)bias.size() - 1, d_ban, (int32_t)ban.size() - 1, d_allow,
                         (int64_t)allow.size() - 1, d_extra, (int32_t)extra.size() - 1, d_work, d_tok, d_lp);
    if (rc == DEV_OK) rc = ct_sync();
    if (rc == DEV_OK) {
        ct_download(tokens, d_tok, (size_t)n * sizeof(int32_t));
        ct_download(lp, d_lp, lp_bytes);
    }
    ct_free(d_logits);
    ct_free(d_rows);
    ct_free(d_pen);
    ct_free(d_bias);
    ct_free(d_ban);
    ct_free(d_allow);
    ct_free(d_extra);
    ct_free(d_work);
    ct_free(d_tok);
    ct_free(d_lp);
    return rc;
}

/* Compare the device's rows with the CPU sampler and logprobs; returns mismatches. */
static int check_rows(const row_case *cases, int n, int nv, const int32_t *tokens, const samp_logprob *lp,
                      int *n_greedy, int *n_drawn) {
    sampler_scratch scr = {};
    CHECK(sampler_scratch_init(&scr, nv) == IFD_OK);
    std::vector<logprob_entry> ref(1 + LOGPROBS_MAX_TOP);
    int bad = 0;
    for (int r = 0; r < n; r++) {
        const row_case *c = &cases[r];
        const sampler_state *st = c->st.n_vocab ? &c->st : NULL;
        const int32_t want = sampler_sample_at(&c->sp, st, c->logits.data(), nv, c->key, c->pos, &scr);
        const bool greedy = !(c->sp.temperature >= SAMPLER_GREEDY_EPS) || c->sp.top_k == 1;
        *(greedy ? n_greedy : n_drawn) += 1;
        if (tokens[r] != want) {
            if (bad++ < 5)
                fprintf(stderr, "  row %d: device %d, cpu %d (T %g k %d p %g min_p %g pen %d bias %zu ban %zu)\n", r,
                        tokens[r], want, (double)c->sp.temperature, c->sp.top_k, (double)c->sp.top_p,
                        (double)c->sp.min_p, st ? st->n_seen : 0, c->bias.size(), c->ban.size());
            continue;
        }
        if (c->n_logprobs < 0) continue;
        const int32_t k = logprobs_compute(c->logits.data(), nv, want, c->n_logprobs, ref.data());
        const samp_logprob *o = lp + (size_t)r * (1 + SAMP_MAX_TOP);
        for (int32_t j = 0; j <= k; j++) {
            const float a = o[j].logprob, b = ref[(size_t)j].logprob;
            const bool same = o[j].id == ref[(size_t)j].id &&
                              ((a == -INFINITY && b == -INFINITY) || (a != a && b != b) || fabsf(a - b) <= 1e-5f);
            if (!same) {
                if (bad++ < 5)
                    fprintf(stderr, "  row %d logprob %d: device (%d, %.9g), cpu (%d, %.9g)\n", r, j, o[j].id,
                            (double)a, ref[(size_t)j].id, (double)b);
                break;
            }
        }
    }
    sampler_scratch_deinit(&scr);
    return bad;
}

static void free_cases(std::vector<row_case> &cases) {
    for (row_case &c : cases) sampler_state_deinit(&c.st);
}

/* Thousands of random rows over a few vocabulary sizes: every token equal. */
static void test_exact_random(void) {
    const int vocab[] = {7, 100, 257, 1000, 3000};
    const int n_batches = CT_EMULATED ? 8 : 40;
    int total = 0, greedy = 0, drawn = 0;
    for (int nv : vocab) {
        for (int b = 0; b < n_batches; b++) {
            const int n = nv >= 3000 ? 48 : 96;
            std::vector<row_case> cases((size_t)n);
            for (row_case &c : cases) make_case(&c, nv);
            std::vector<int32_t> tok((size_t)n);
            std::vector<samp_logprob> lp((size_t)n * (1 + SAMP_MAX_TOP));
            CHECK(run_device(cases.data(), n, nv, tok.data(), lp.data()) == DEV_OK);
            CHECKF(check_rows(cases.data(), n, nv, tok.data(), lp.data(), &greedy, &drawn) == 0,
                   "n_vocab %d batch %d", nv, b);
            total += n;
            free_cases(cases);
        }
    }
    fprintf(stderr, "  %d rows (%d greedy, %d drawn), every token equal\n", total, greedy, drawn);
    CHECK(total >= 2000 && drawn > total / 2);
}

/* A qwen-sized vocabulary: the radix select over 152064 ids, top_k all / 40, top_p
 * without top_k, min_p; a draw from the whole vocabulary. */
static void test_large_vocab(void) {
    const int nv = 152064, n = 8;
    std::vector<row_case> cases((size_t)n);
    for (int r = 0; r < n; r++) {
        row_case *c = &cases[(size_t)r];
        make_case(c, nv);
        for (int i = 0; i < nv; i++) c->logits[(size_t)i] = rnd_f(-8.0f, 8.0f);
        c->sp.temperature = 1.0f;
        c->sp.top_k = r % 4 == 0 ? 40 : r % 4 == 1 ? nv : 0;
        c->sp.top_p = r % 2 ? rnd_f(0.3f, 0.99f) : 1.0f;
        c->sp.min_p = r == 6 ? 0.01f : 0.0f;
        c->n_logprobs = r % 3 == 0 ? 20 : -1;
    }
    std::vector<int32_t> tok((size_t)n);
    std::vector<samp_logprob> lp((size_t)n * (1 + SAMP_MAX_TOP));
    CHECK(run_device(cases.data(), n, nv, tok.data(), lp.data()) == DEV_OK);
    int greedy = 0, drawn = 0;
    CHECK(check_rows(cases.data(), n, nv, tok.data(), lp.data(), &greedy, &drawn) == 0);
    free_cases(cases);
}

/* A row's bits do not depend on the batch: rows sampled together and one by one. */
static void test_batch_invariance(void) {
    const int nv = 500, n = 40;
    std::vector<row_case> cases((size_t)n);
    for (row_case &c : cases) {
        make_case(&c, nv);
        c.n_logprobs = rnd_int(0, 20);
    }
    std::vector<int32_t> tok((size_t)n), one(1);
    const size_t w = 1 + SAMP_MAX_TOP;
    std::vector<samp_logprob> lp((size_t)n * w), lp1(w);
    CHECK(run_device(cases.data(), n, nv, tok.data(), lp.data()) == DEV_OK);
    for (int r = 0; r < n; r++) {
        CHECK(run_device(&cases[(size_t)r], 1, nv, one.data(), lp1.data()) == DEV_OK);
        CHECKF(one[0] == tok[(size_t)r], "row %d: %d alone, %d in the batch", r, one[0], tok[(size_t)r]);
        CHECKF(memcmp(lp1.data(), &lp[(size_t)r * w], (size_t)(1 + cases[(size_t)r].n_logprobs) * sizeof(samp_logprob)) == 0,
               "row %d logprobs", r);
    }
    free_cases(cases);
}

/* Bad sizes and missing buffers are DEV_ERR, never a launch. */
static void test_bad_args(void) {
    float *d = (float *)ct_alloc(64);
    samp_row *rows = (samp_row *)ct_alloc(sizeof(samp_row));
    int32_t *tok = (int32_t *)ct_alloc(16);
    CHECK(samp_sample(NULL, d, 1, 0, rows, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, d, tok, NULL) == DEV_ERR);
    CHECK(samp_sample(NULL, d, 1, SAMP_MAX_VOCAB + 1, rows, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, d, tok, NULL) == DEV_ERR);
    CHECK(samp_sample(NULL, d, -1, 4, rows, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, d, tok, NULL) == DEV_ERR);
    CHECK(samp_sample(NULL, NULL, 1, 4, rows, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, d, tok, NULL) == DEV_ERR);
    CHECK(samp_sample(NULL, d, 1, 4, rows, NULL, 3, NULL, 0, NULL, 0, NULL, 0, NULL, 0, d, tok, NULL) == DEV_ERR);
    CHECK(samp_sample(NULL, d, 1, 4, rows, NULL, 0, NULL, 0, NULL, 0, NULL, 2, NULL, 0, d, tok, NULL) == DEV_ERR);
    CHECK(samp_sample(NULL, d, 0, 4, rows, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, d, tok, NULL) == DEV_OK);
    CHECK(samp_scratch_bytes(3, 100) == 1200 && samp_scratch_bytes(0, 100) == 0);
    ct_free(d);
    ct_free(rows);
    ct_free(tok);
}

TEST_MAIN(T(test_bad_args), T(test_exact_random), T(test_large_vocab), T(test_batch_invariance))
