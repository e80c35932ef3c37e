/* cmd_bench.c — `inferd bench`: offline throughput in the style of nano-vllm's
 * bench.py. Random prompts (normal vocabulary tokens), ignore_eos, fixed output
 * lengths drawn from a range; all requests submitted at once (or at --request-rate
 * per second, Poisson), run through the threaded engine. Prints a readable table and,
 * as the last line, one JSON object with the figures. Options: the shared engine
 * entries and bench's own in src/server/config.c's table (`inferd bench --help`). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../engine/engine_model.h"
#include "../engine/sampler.h"
#include "../model/model.h"
#include "../server/config.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"
#include "cli_util.h"
#include "inferd.h"

typedef struct bench_req {
    double t_submit, t_first, t_last;
    int32_t n_out;
    int32_t want_out;
    bool done;
    int group; /* 0: normal, 1: long-prompt stream (scenario chunked) */
} bench_req;

typedef struct bench_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t n_done;
    bench_req *reqs;
    double *itl;   /* inter-token gaps (ms) of the measured group; engine thread only */
    int64_t n_itl, cap_itl;
    bool chunked;
} bench_state;

typedef struct cb_ctx {
    bench_state *st;
    int32_t i;
} cb_ctx;

static void on_output(const inferd_output *o, void *user) {
    cb_ctx *c = user;
    bench_req *r = &c->st->reqs[c->i];
    double now = ifd_now_s();
    if (o->n_tokens > 0) {
        const bool measured = !c->st->chunked || r->group == 0;
        if (r->n_out > 0 && measured && c->st->n_itl < c->st->cap_itl)
            c->st->itl[c->st->n_itl++] = (now - r->t_last) * 1e3 / o->n_tokens;
        if (r->n_out == 0) r->t_first = now;
        r->n_out += o->n_tokens;
        r->t_last = now;
    }
    if (o->finished) {
        pthread_mutex_lock(&c->st->mu);
        r->done = true;
        c->st->n_done++;
        pthread_cond_signal(&c->st->cv);
        pthread_mutex_unlock(&c->st->mu);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p) {
    if (n == 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double idx = p / 100.0 * (n - 1);
    int lo = (int)floor(idx), hi = (int)ceil(idx);
    return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

int cli_bench(int argc, char **argv) {
    server_config c;
    config_init(&c, CFG_CMD_BENCH);
    char err[512];
    int rc = config_load(&c, argc, argv, err, sizeof err);
    if (rc || (!c.model && !c.random_weights)) {
        if (rc < 0) fprintf(stderr, "inferd bench: %s\n", err);
        else if (!rc)
            fprintf(stderr, "inferd bench: -m FILE or --random-weights SHAPE is required (see --help)\n");
        server_config_deinit(&c);
        return rc > 0 ? 0 : 2;
    }
    inferd_engine_options eo;
    inferd_engine_options_default(&eo);
    config_engine_options(&c, &eo);
    int64_t n_req = c.num_requests, in_lo = c.input_len[0], in_hi = c.input_len[1],
            out_lo = c.output_len[0], out_hi = c.output_len[1];
    const uint64_t seed = c.seed;
    const float rate = (float)c.request_rate;
    const bool chunked = c.scenario == 1;
    const char *scenario = chunked ? "chunked" : c.prompt_file ? "prompt-file" : "offline";
    char *ptext = NULL; /* --prompt-file, read before the options go */
    size_t n_ptext = 0;
    if (c.prompt_file && ifd_read_file(c.prompt_file, &ptext, &n_ptext, err, sizeof err)) {
        fprintf(stderr, "inferd bench: --prompt-file %s: %s\n", c.prompt_file, err);
        server_config_deinit(&c);
        return 1;
    }
    inferd_engine *e = NULL;
    rc = inferd_engine_create(&e, &eo, err, sizeof err);
    server_config_deinit(&c); /* the rest is copied out; the engine keeps no option pointer */
    if (rc) {
        fprintf(stderr, "inferd bench: %s\n", err);
        return 1;
    }
    if (err[0]) fprintf(stderr, "inferd bench: warning: %s\n", err);
    const model *m = inferd_model(e);
    /* candidate prompt tokens: normal vocabulary entries */
    int32_t n_vocab = tok_n_vocab(m->tok), n_normal = 0;
    int32_t *normal = malloc((size_t)n_vocab * sizeof(int32_t));
    for (int32_t i = 0; normal && i < n_vocab; i++)
        if (tok_get_type(m->tok, i) == TOK_TYPE_NORMAL) normal[n_normal++] = i;
    const int32_t max_len = inferd_max_model_len(e);
    if (chunked) {
        /* 8 long decodes + a stream of 2,000-token prompts */
        in_lo = in_hi = 2000;
        out_lo = out_hi = 16;
    }
    if (!ptext && in_hi + out_hi > max_len) {
        fprintf(stderr, "inferd bench: input + output (%lld) exceeds the context length %d\n",
                (long long)(in_hi + out_hi), max_len);
        inferd_engine_destroy(e);
        free(normal);
        return 1;
    }
    ifd_rng rng;
    rng_seed(&rng, (uint64_t)seed);
    const int n_bg = chunked ? 8 : 0;
    const int n_total = (int)n_req + n_bg;
    bench_state st = {.reqs = calloc((size_t)n_total, sizeof(bench_req))};
    pthread_mutex_init(&st.mu, NULL);
    pthread_cond_init(&st.cv, NULL);
    cb_ctx *ctx = calloc((size_t)n_total, sizeof(cb_ctx));
    int32_t **prompts = calloc((size_t)n_total, sizeof(int32_t *));
    int32_t *plen = calloc((size_t)n_total, sizeof(int32_t));
    if (!st.reqs || !ctx || !prompts || !plen || !normal || n_normal == 0) {
        fprintf(stderr, "inferd bench: out of memory or no normal tokens\n");
        return 1;
    }
    int64_t total_in = 0, total_out = 0;
    st.chunked = chunked;
    for (int i = 0; i < n_total; i++) {
        const bool bg = i < n_bg;
        int64_t il = bg ? 64 : in_lo + (int64_t)(rng_next(&rng) % (uint64_t)(in_hi - in_lo + 1));
        int64_t ol = bg ? IFD_MIN(512, max_len - 64)
                        : out_lo + (int64_t)(rng_next(&rng) % (uint64_t)(out_hi - out_lo + 1));
        if (ptext && !bg) {
            /* text number i mod n of the file ('%%' lines between texts) */
            const char *a = ptext, *end = ptext + n_ptext;
            int n_texts = 1;
            for (const char *q = ptext; (q = strstr(q, "\n%%\n")) != NULL; q += 4) n_texts++;
            for (int k = i % n_texts; k > 0; k--) a = strstr(a, "\n%%\n") + 4;
            const char *b = strstr(a, "\n%%\n");
            if (!b) b = end;
            const int32_t cap = (int32_t)IFD_MAX(1, max_len - ol - 1);
            int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
            int32_t n = ids ? inferd_tokenize(e, a, (size_t)(b - a), true, true, ids, cap) : 0;
            il = IFD_MAX(1, IFD_MIN(n, cap));
            prompts[i] = ids;
            plen[i] = (int32_t)il;
            if (n > cap) fprintf(stderr, "inferd bench: prompt %d cut to %d tokens\n", i % n_texts, cap);
        } else {
            plen[i] = (int32_t)il;
            prompts[i] = malloc((size_t)il * sizeof(int32_t));
            for (int64_t j = 0; j < il; j++) prompts[i][j] = normal[rng_next(&rng) % (uint64_t)n_normal];
        }
        st.reqs[i].want_out = (int32_t)ol;
        st.reqs[i].group = bg ? 0 : (chunked ? 1 : 0);
        total_in += il;
        total_out += ol;
        ctx[i] = (cb_ctx){&st, i};
    }
    st.cap_itl = total_out;
    st.itl = malloc((size_t)(total_out + 1) * sizeof(double));
    if (!st.itl) {
        fprintf(stderr, "inferd bench: out of memory\n");
        return 1;
    }
    printf("inferd bench: %d requests, input %lld..%lld, output %lld..%lld, max_num_seqs %d, "
           "max_num_batched_tokens %d, scenario %s\n",
           n_total, (long long)in_lo, (long long)in_hi, (long long)out_lo, (long long)out_hi,
           eo.max_num_seqs, eo.max_num_batched_tokens, scenario);
    fflush(stdout);
    const double t0 = ifd_now_s();
    double next_arrival = t0;
    const double gap = chunked ? (rate > 0 ? 1.0 / rate : 2.0) : (rate > 0 ? 1.0 / rate : 0.0);
    for (int i = 0; i < n_total; i++) {
        if (i >= n_bg && gap > 0) {
            if (i > n_bg) next_arrival += chunked ? gap : -log(1.0 - rng_uniform(&rng)) * gap;
            double wait = next_arrival - ifd_now_s();
            if (wait > 0) usleep((useconds_t)(wait * 1e6));
        }
        inferd_request q = {.prompt = prompts[i], .n_prompt = plen[i], .cb = on_output, .user = &ctx[i]};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = 0.0f;
        q.sampling.max_tokens = st.reqs[i].want_out;
        q.sampling.ignore_eos = true;
        st.reqs[i].t_submit = ifd_now_s();
        if (inferd_submit(e, &q, NULL, err, sizeof err)) {
            fprintf(stderr, "inferd bench: submit failed: %s\n", err);
            return 1;
        }
    }
    pthread_mutex_lock(&st.mu);
    while (st.n_done < n_total) pthread_cond_wait(&st.cv, &st.mu);
    pthread_mutex_unlock(&st.mu);
    const double wall = ifd_now_s() - t0;
    inferd_stats es;
    inferd_engine_stats(e, &es);

    double *ttft = malloc((size_t)n_total * sizeof(double)), *tpot = malloc((size_t)n_total * sizeof(double));
    int n_ttft = 0, n_tpot = 0;
    int64_t got_out = 0;
    for (int i = 0; i < n_total; i++) {
        bench_req *r = &st.reqs[i];
        got_out += r->n_out;
        const bool ttft_group = chunked ? r->group == 1 : true;
        const bool tpot_group = chunked ? r->group == 0 : true;
        if (ttft_group) ttft[n_ttft++] = (r->t_first - r->t_submit) * 1e3;
        if (tpot_group && r->n_out > 1) tpot[n_tpot++] = (r->t_last - r->t_first) * 1e3 / (r->n_out - 1);
    }
    const double ttft50 = pct(ttft, n_ttft, 50), ttft99 = pct(ttft, n_ttft, 99);
    const double tpot50 = pct(tpot, n_tpot, 50), tpot99 = pct(tpot, n_tpot, 99);
    const int n_itl = (int)st.n_itl;
    const double itl50 = pct(st.itl, n_itl, 50), itl99 = pct(st.itl, n_itl, 99),
                 itlmax = n_itl ? st.itl[n_itl - 1] : 0.0;
    printf("\n%-28s %12s\n", "metric", "value");
    printf("%-28s %12d\n", "requests", n_total);
    printf("%-28s %12lld\n", "prompt tokens", (long long)total_in);
    printf("%-28s %12lld\n", "output tokens", (long long)got_out);
    printf("%-28s %12.2f\n", "wall time (s)", wall);
    printf("%-28s %12.1f\n", "output tokens/s", (double)got_out / wall);
    printf("%-28s %12.1f\n", "total tokens/s", (double)(got_out + total_in) / wall);
    printf("%-28s %12.1f\n", chunked ? "TTFT p50, 2k prompts (ms)" : "TTFT p50 (ms)", ttft50);
    printf("%-28s %12.1f\n", chunked ? "TTFT p99, 2k prompts (ms)" : "TTFT p99 (ms)", ttft99);
    printf("%-28s %12.2f\n", chunked ? "TPOT p50, decodes (ms)" : "TPOT p50 (ms)", tpot50);
    printf("%-28s %12.2f\n", chunked ? "TPOT p99, decodes (ms)" : "TPOT p99 (ms)", tpot99);
    printf("%-28s %12.2f\n", chunked ? "ITL p50, decodes (ms)" : "ITL p50 (ms)", itl50);
    printf("%-28s %12.2f\n", chunked ? "ITL p99, decodes (ms)" : "ITL p99 (ms)", itl99);
    printf("%-28s %12.2f\n", chunked ? "ITL max, decodes (ms)" : "ITL max (ms)", itlmax);
    printf("%-28s %12llu\n", "preemptions", (unsigned long long)es.preemptions);
    printf("%-28s %12llu\n", "prefix-cache hit tokens", (unsigned long long)es.prefix_hits_tokens);
    printf("%-28s %12llu\n", "engine steps", (unsigned long long)es.steps);
    const double acc = es.spec_proposed ? (double)es.spec_accepted / (double)es.spec_proposed : 0.0;
    const double mal = es.spec_verifications ? (double)es.spec_accepted / (double)es.spec_verifications : 0.0;
    if (eo.draft_model_path || eo.speculative_ngram) {
        printf("%-28s %12llu\n", "draft tokens verified", (unsigned long long)es.spec_proposed);
        printf("%-28s %12llu\n", "draft tokens accepted", (unsigned long long)es.spec_accepted);
        printf("%-28s %12.3f\n", "acceptance rate", acc);
        printf("%-28s %12.3f\n", "mean accepted length", mal);
        printf("%-28s %12.3f\n", "tokens per verification",
               es.spec_verifications ? (double)es.spec_emitted / (double)es.spec_verifications : 0.0);
        if (eo.draft_model_path && eo.speculative_ngram)
            printf("%-28s %5llu / %llu\n", "n-gram verified / accepted", (unsigned long long)es.spec_ngram_proposed,
                   (unsigned long long)es.spec_ngram_accepted);
        printf("%-28s %12llu\n", "speculation switched off", (unsigned long long)es.spec_switched_off);
        printf("%-28s %12llu\n", "speculation re-measured", (unsigned long long)es.spec_remeasured);
        printf("%-28s %12llu\n", "proposer rests", (unsigned long long)es.spec_rests);
        if (eo.draft_model_path) {
            printf("%-28s %12llu\n", "draft tokens unsure", (unsigned long long)es.spec_draft_unsure);
            printf("%-28s %12llu\n", "draft forwards", (unsigned long long)es.spec_draft_forwards);
            printf("%-28s %12.1f\n", "draft time (ms)", es.spec_draft_ms);
        }
        printf("%-28s ", "k histogram (0..K)");
        for (int k = 0; k <= eo.num_speculative_tokens && k <= 16; k++)
            printf("%s%llu", k ? " " : "", (unsigned long long)es.spec_k_hist[k]);
        printf("\n");
    }
    printf("{\"requests\": %d, \"prompt_tokens\": %lld, \"output_tokens\": %lld, \"wall_s\": %.3f, "
           "\"output_tok_per_s\": %.2f, \"ttft_ms_p50\": %.1f, \"ttft_ms_p99\": %.1f, "
           "\"tpot_ms_p50\": %.2f, \"tpot_ms_p99\": %.2f, \"itl_ms_p50\": %.2f, \"itl_ms_p99\": %.2f, "
           "\"itl_ms_max\": %.2f, \"max_num_batched_tokens\": %d, "
           "\"max_num_seqs\": %d, \"scenario\": \"%s\", \"spec_acceptance\": %.4f, "
           "\"spec_mean_accepted\": %.4f, \"spec_verifications\": %llu, \"spec_rests\": %llu}\n",
           n_total, (long long)total_in, (long long)got_out, wall, (double)got_out / wall, ttft50,
           ttft99, tpot50, tpot99, itl50, itl99, itlmax, eo.max_num_batched_tokens, eo.max_num_seqs, scenario,
           acc, mal, (unsigned long long)es.spec_verifications, (unsigned long long)es.spec_rests);
    inferd_engine_destroy(e);
    for (int i = 0; i < n_total; i++) free(prompts[i]);
    free(prompts);
    free(plen);
    free(ctx);
    free(st.reqs);
    free(ttft);
    free(tpot);
    free(st.itl);
    free(normal);
    free(ptext);
    pthread_mutex_destroy(&st.mu);
    pthread_cond_destroy(&st.cv);
    return 0;
}
