/* test_engine_prompt_logprobs.c — prompt logprobs and max_tokens 0 through the engine,
 * on the shared Shakespeare model:
 *   - the prompt logprobs (chosen + top-20) are bit-identical whatever the prefill
 *     chunking (max_num_batched_tokens 5, 16, 64, 512) and whether the prefix cache
 *     holds the prompt (a prompt-logprobs request computes it in full);
 *   - the entry for prompt token i+1 equals, bit for bit, the logprob of that token
 *     when the prefix 0..i is run as its own request and the token is generated
 *     (forced by logit_bias; logprobs are of the raw logits, before the bias);
 *   - n > 1: choice 0's first event carries them, no other event does, and the
 *     sampled choices are those of the same request without prompt logprobs;
 *   - max_tokens 0: every choice finishes (length) with no token, prompt logprobs on
 *     choice 0's event. */
#include "inferd.h"
#include "test_util.h"

#define MODEL INFERD_SHARED_DIR "/models/shakespeare-target.gguf"
#define NTOP 20
#define MAXP 200
#define MAXC 4
#define MAXOUT 16

typedef struct out {
    inferd_token_logprob plp[MAXP][1 + NTOP];
    int32_t n_plp, n_plp_top, plp_events, events;
    int32_t ids[MAXC][MAXOUT], n_ids[MAXC];
    inferd_token_logprob lp[MAXC][MAXOUT][1 + NTOP];
    int32_t first_event_index; /* choice of the first event */
    bool done[MAXC];
    inferd_finish_reason reason[MAXC];
    int32_t completion[MAXC];
} out;

static void on_out(const inferd_output *o, void *user) {
    out *r = user;
    if (r->events++ == 0) r->first_event_index = o->index;
    if (o->prompt_logprobs || o->n_prompt_logprobs) {
        r->plp_events++;
        CHECK(o->index == 0);
        r->n_plp = o->n_prompt_logprobs;
        r->n_plp_top = o->n_prompt_top;
        for (int32_t i = 0; i < o->n_prompt_logprobs && i < MAXP; i++)
            memcpy(r->plp[i], o->prompt_logprobs + (size_t)i * (1 + o->n_prompt_top),
                   (size_t)(1 + o->n_prompt_top) * sizeof(inferd_token_logprob));
    }
    const int c = o->index;
    if (c >= MAXC) return;
    for (int32_t i = 0; i < o->n_tokens && r->n_ids[c] < MAXOUT; i++) {
        if (o->logprobs)
            memcpy(r->lp[c][r->n_ids[c]], o->logprobs + (size_t)i * (1 + o->n_top),
                   (size_t)(1 + o->n_top) * sizeof(inferd_token_logprob));
        r->ids[c][r->n_ids[c]++] = o->tokens[i];
    }
    r->completion[c] = o->completion_tokens;
    if (o->finished) {
        r->done[c] = true;
        r->reason[c] = o->finish_reason;
    }
}

static inferd_engine *make_engine(int32_t budget) {
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.model_path = MODEL;
    o.threaded = false;
    o.max_num_batched_tokens = budget;
    char err[256];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) fprintf(stderr, "  engine: %s\n", err);
    return e;
}

static void make_prompt(int32_t *ids, int32_t n, unsigned seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
    ids[0] = 1;
    for (int32_t i = 1; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 3 + (int32_t)((s >> 33) % 1000);
    }
}

static bool submit(inferd_engine *e, const int32_t *ids, int32_t n, const inferd_sampling *sp, out *r) {
    inferd_request q = {.prompt = ids, .n_prompt = n, .sampling = *sp, .cb = on_out, .user = r};
    char err[256];
    if (inferd_submit(e, &q, NULL, err, sizeof err)) {
        fprintf(stderr, "  submit: %s\n", err);
        return false;
    }
    return true;
}

static void drain(inferd_engine *e) {
    int guard = 0;
    while (inferd_engine_step(e) > 0 && guard++ < 100000) {
    }
}

static void sampling(inferd_sampling *sp, int32_t plp, int32_t max_tokens) {
    inferd_sampling_default(sp);
    sp->temperature = 0.0f;
    sp->ignore_eos = true;
    sp->max_tokens = max_tokens;
    sp->prompt_logprobs = plp;
    sp->logprobs = NTOP;
}

#define NPROMPT 90
static int32_t PROMPT[NPROMPT];
static out O[6];

static void test_chunking_invariance(void) {
    make_prompt(PROMPT, NPROMPT, 3);
    const int32_t budgets[4] = {5, 16, 64, 512};
    for (int k = 0; k < 4; k++) {
        inferd_engine *e = make_engine(budgets[k]);
        CHECK(e != NULL);
        if (!e) return;
        inferd_sampling sp;
        memset(&O[k], 0, sizeof O[k]);
        sampling(&sp, NTOP, 4);
        if (k == 3) {
            /* warm the prefix cache with the same prompt first: no hit may be taken */
            static out warm;
            memset(&warm, 0, sizeof warm);
            inferd_sampling w;
            sampling(&w, -1, 1);
            CHECK(submit(e, PROMPT, NPROMPT, &w, &warm));
            drain(e);
        }
        /* among other requests (batch invariance), one of them decoding */
        static out other[2];
        memset(other, 0, sizeof other);
        int32_t p2[40];
        make_prompt(p2, 40, 9);
        inferd_sampling so;
        sampling(&so, -1, 12);
        CHECK(submit(e, p2, 40, &so, &other[0]));
        inferd_engine_step(e);
        CHECK(submit(e, PROMPT, NPROMPT, &sp, &O[k]));
        CHECK(submit(e, p2, 33, &so, &other[1]));
        drain(e);
        CHECK(O[k].done[0] && O[k].plp_events == 1 && O[k].n_plp == NPROMPT - 1);
        CHECK(O[k].n_plp_top == NTOP && O[k].first_event_index == 0);
        inferd_stats st;
        inferd_engine_stats(e, &st);
        inferd_engine_destroy(e);
        bool ids_ok = true;
        for (int32_t i = 0; i < NPROMPT - 1; i++) ids_ok = ids_ok && O[k].plp[i][0].id == PROMPT[i + 1];
        CHECK(ids_ok);
        if (k > 0) {
            CHECKF(!memcmp(O[k].plp, O[0].plp, sizeof O[0].plp), "budget %d vs %d", budgets[k], budgets[0]);
            CHECK(O[k].n_ids[0] == O[0].n_ids[0] && !memcmp(O[k].ids[0], O[0].ids[0], sizeof O[0].ids[0]));
        }
    }
    /* top-N: descending, and the chosen one is among them when it is the best */
    bool sorted = true;
    for (int32_t i = 0; i < NPROMPT - 1; i++)
        for (int j = 2; j <= NTOP; j++) sorted = sorted && O[0].plp[i][j].logprob <= O[0].plp[i][j - 1].logprob;
    CHECK(sorted);
}

static void test_matches_prefix_runs(void) {
    make_prompt(PROMPT, NPROMPT, 3);
    inferd_engine *e = make_engine(64);
    CHECK(e != NULL);
    if (!e) return;
    static out full;
    memset(&full, 0, sizeof full);
    inferd_sampling sp;
    sampling(&sp, 5, 1);
    CHECK(submit(e, PROMPT, NPROMPT, &sp, &full));
    drain(e);
    CHECK(full.n_plp == NPROMPT - 1 && full.n_plp_top == 5);
    const int32_t at[] = {0, 1, 14, 15, 16, 40, NPROMPT - 2};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        const int32_t i = at[k];
        static out pre;
        memset(&pre, 0, sizeof pre);
        inferd_sampling s2;
        sampling(&s2, -1, 1);
        s2.logprobs = 5;
        /* force the next token to be prompt[i+1]; logprobs are of the raw logits */
        const inferd_logit_bias bias = {PROMPT[i + 1], 100.0f};
        s2.logit_bias = &bias;
        s2.n_logit_bias = 1;
        CHECK(submit(e, PROMPT, i + 1, &s2, &pre));
        drain(e);
        CHECK(pre.done[0] && pre.n_ids[0] == 1 && pre.ids[0][0] == PROMPT[i + 1]);
        CHECKF(!memcmp(pre.lp[0][0], full.plp[i], 6 * sizeof(inferd_token_logprob)),
               "token %d: %.9g vs %.9g", i + 1, (double)pre.lp[0][0][0].logprob,
               (double)full.plp[i][0].logprob);
    }
    inferd_engine_destroy(e);
}

static void test_n_choices(void) {
    make_prompt(PROMPT, 50, 5);
    for (int with = 0; with < 2; with++) {
        inferd_engine *e = make_engine(16);
        CHECK(e != NULL);
        if (!e) return;
        memset(&O[with], 0, sizeof O[with]);
        inferd_sampling sp;
        sampling(&sp, with ? 3 : -1, 8);
        sp.temperature = 0.8f;
        sp.has_seed = true;
        sp.seed = 1234;
        sp.n = 3;
        CHECK(submit(e, PROMPT, 50, &sp, &O[with]));
        drain(e);
        inferd_engine_destroy(e);
        for (int c = 0; c < 3; c++) CHECK(O[with].done[c] && O[with].n_ids[c] == 8);
    }
    CHECK(O[0].plp_events == 0 && O[1].plp_events == 1 && O[1].n_plp == 49 && O[1].n_plp_top == 3);
    for (int c = 0; c < 3; c++)
        CHECK(!memcmp(O[0].ids[c], O[1].ids[c], sizeof O[0].ids[c]) &&
              !memcmp(O[0].lp[c], O[1].lp[c], sizeof O[0].lp[c]));
    /* the same as n = 1 with prompt logprobs */
    inferd_engine *e = make_engine(512);
    if (!e) return;
    memset(&O[2], 0, sizeof O[2]);
    inferd_sampling sp;
    sampling(&sp, 3, 1);
    CHECK(submit(e, PROMPT, 50, &sp, &O[2]));
    drain(e);
    inferd_engine_destroy(e);
    CHECK(O[2].n_plp == 49 && !memcmp(O[2].plp, O[1].plp, sizeof O[1].plp));
}

static void test_max_tokens_zero(void) {
    make_prompt(PROMPT, 30, 8);
    inferd_engine *e = make_engine(8);
    CHECK(e != NULL);
    if (!e) return;
    for (int k = 0; k < 3; k++) {
        memset(&O[k], 0, sizeof O[k]);
        inferd_sampling sp;
        sampling(&sp, k == 2 ? -1 : 2, 0);
        sp.n = k == 1 ? 3 : 1;
        CHECK(submit(e, PROMPT, 30, &sp, &O[k]));
    }
    drain(e);
    for (int k = 0; k < 3; k++) {
        const int n = k == 1 ? 3 : 1;
        CHECK(O[k].events == n && O[k].first_event_index == 0);
        for (int c = 0; c < n; c++)
            CHECK(O[k].done[c] && O[k].reason[c] == INFERD_FINISH_LENGTH && O[k].n_ids[c] == 0 &&
                  O[k].completion[c] == 0);
    }
    CHECK(O[0].plp_events == 1 && O[0].n_plp == 29 && O[1].plp_events == 1 && O[2].plp_events == 0);
    CHECK(!memcmp(O[0].plp, O[1].plp, sizeof O[0].plp));
    inferd_stats st;
    inferd_engine_stats(e, &st);
    CHECK(st.generated_tokens == 0);
    /* out-of-range values are refused */
    inferd_sampling sp;
    sampling(&sp, 21, 1);
    inferd_request q = {.prompt = PROMPT, .n_prompt = 30, .sampling = sp, .cb = on_out, .user = &O[3]};
    char err[128];
    CHECK(inferd_submit(e, &q, NULL, err, sizeof err) != 0);
    q.sampling.prompt_logprobs = -2;
    CHECK(inferd_submit(e, &q, NULL, err, sizeof err) != 0);
    q.sampling.prompt_logprobs = 0;
    q.sampling.max_tokens = -1;
    CHECK(inferd_submit(e, &q, NULL, err, sizeof err) != 0);
    /* a one-token prompt has no prompt logprobs */
    memset(&O[3], 0, sizeof O[3]);
    q.sampling.max_tokens = 0;
    q.n_prompt = 1;
    CHECK(inferd_submit(e, &q, NULL, err, sizeof err) == 0);
    drain(e);
    CHECK(O[3].done[0] && O[3].n_plp == 0 && O[3].n_ids[0] == 0);
    inferd_engine_destroy(e);
}

TEST_MAIN(T(test_chunking_invariance), T(test_matches_prefix_runs), T(test_n_choices),
          T(test_max_tokens_zero))
