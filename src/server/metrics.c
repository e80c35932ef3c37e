/* metrics.c — histograms and counters behind /metrics. Any thread: one mutex per
 * histogram (observations are a handful per token), atomics for the counters. */
#include "metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* Seconds; up to an hour (queue and e2e times of long generations). */
static const double BUCKETS[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                 0.25,  0.5,    0.75,  1,    2.5,  5,    7.5,  10,   20,
                                 40,    80,     160,   320,  640,  1280, 2560, 3600};
#define N_BUCKETS IFD_ARRAY_LEN(BUCKETS)

typedef struct hist {
    pthread_mutex_t mu;
    uint64_t counts[N_BUCKETS + 1]; /* last: above every bound (+Inf only) */
    uint64_t count;
    double sum;
} hist;

static const struct {
    const char *name, *help;
} HIST_INFO[HIST_N] = {
    {"inferd_time_to_first_token_seconds", "Time from request arrival to its first generated token."},
    {"inferd_inter_token_latency_seconds", "Time between consecutive generated tokens of one choice."},
    {"inferd_e2e_request_latency_seconds", "Time from request arrival to the end of its response."},
    {"inferd_request_queue_time_seconds", "Time a request waited before it was first scheduled."},
    {"inferd_request_prefill_time_seconds", "Time from first schedule to the first token (prefill)."},
};

static const char *const ABORT_STR[ABORT_N] = {"client_disconnect", "shutdown", "queue_timeout",
                                               "error"};
static const char *const FIN_STR[FIN_N] = {"stop", "length", "tool_calls", "abort", "error"};

#define N_CODES 600
#define N_REJECT 4
static const char *const REJECT_STR[N_REJECT] = {"server_overloaded", "rate_limit_exceeded",
                                                 "queue_timeout", "shutting_down"};

struct metrics {
    hist h[HIST_N];
    _Atomic uint64_t aborted[ABORT_N];
    _Atomic uint64_t finished[FIN_N];
    _Atomic uint64_t http[N_CODES];
    _Atomic uint64_t rejected[N_REJECT];
};

const char *abort_reason_str(abort_reason r) {
    return r >= 0 && r < ABORT_N ? ABORT_STR[r] : "none";
}

int metrics_create(metrics **out) {
    metrics *m = calloc(1, sizeof *m);
    if (!m) return IFD_ERR_NOMEM;
    for (int i = 0; i < HIST_N; i++) pthread_mutex_init(&m->h[i].mu, NULL);
    *out = m;
    return 0;
}

void metrics_destroy(metrics *m) {
    if (!m) return;
    for (int i = 0; i < HIST_N; i++) pthread_mutex_destroy(&m->h[i].mu);
    free(m);
}

void metrics_observe_n(metrics *m, metric_hist h, double s, uint64_t count) {
    if (!m || h < 0 || h >= HIST_N || count == 0) return;
    if (!(s >= 0)) s = 0; /* also NaN */
    size_t b = 0;
    while (b < N_BUCKETS && s > BUCKETS[b]) b++;
    hist *x = &m->h[h];
    pthread_mutex_lock(&x->mu);
    x->counts[b] += count;
    x->count += count;
    x->sum += s * (double)count;
    pthread_mutex_unlock(&x->mu);
}

void metrics_observe(metrics *m, metric_hist h, double s) { metrics_observe_n(m, h, s, 1); }

void metrics_abort(metrics *m, abort_reason r) {
    if (m && r >= 0 && r < ABORT_N) atomic_fetch_add(&m->aborted[r], 1);
}

void metrics_finished(metrics *m, finish_label f) {
    if (m && f >= 0 && f < FIN_N) atomic_fetch_add(&m->finished[f], 1);
}

void metrics_http(metrics *m, int status) {
    if (m && status >= 100 && status < N_CODES) atomic_fetch_add(&m->http[status], 1);
}

void metrics_rejected(metrics *m, const char *code) {
    for (int i = 0; m && code && i < N_REJECT; i++)
        if (!strcmp(code, REJECT_STR[i])) atomic_fetch_add(&m->rejected[i], 1);
}

static void head(sbuf *o, const char *name, const char *type, const char *help) {
    sbuf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* one unlabelled sample of a real value, a gauge or a counter (seconds) */
static void real(sbuf *o, const char *name, const char *type, const char *help, double v) {
    head(o, name, type, help);
    sbuf_printf(o, "%s %.17g\n", name, v);
}

static void gauge(sbuf *o, const char *name, const char *help, double v) {
    real(o, name, "gauge", help, v);
}

static void counter(sbuf *o, const char *name, const char *help, uint64_t v) {
    head(o, name, "counter", help);
    sbuf_printf(o, "%s %llu\n", name, (unsigned long long)v);
}

void metrics_render(metrics *m, const inferd_stats *st, sbuf *o) {
    inferd_stats z = {0};
    if (!st) st = &z;
    gauge(o, "inferd_num_requests_running", "Requests in the engine's running set.", st->running);
    gauge(o, "inferd_num_requests_waiting", "Requests waiting to be scheduled.", st->waiting);
    gauge(o, "inferd_kv_blocks_capacity", "KV cache blocks in the pool (total).", st->kv_blocks_total);
    gauge(o, "inferd_kv_blocks_used", "KV cache blocks held by live sequences.", st->kv_blocks_used);
    gauge(o, "inferd_kv_blocks_cached",
          "Free KV cache blocks still findable by the prefix cache.", st->kv_blocks_cached);
    gauge(o, "inferd_kv_cache_usage_ratio", "Fraction of KV cache blocks in use.",
          st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0.0);
    counter(o, "inferd_prompt_tokens_total", "Prompt tokens processed.", st->prompt_tokens);
    counter(o, "inferd_generation_tokens_total", "Tokens generated.", st->generated_tokens);
    counter(o, "inferd_prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.", st->prefix_queries_tokens);
    counter(o, "inferd_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            st->prefix_hits_tokens);
    counter(o, "inferd_preemptions_total", "Sequences preempted for lack of KV blocks.",
            st->preemptions);
    counter(o, "inferd_engine_steps_total", "Engine steps run.", st->steps);
    /* speculative decoding (vLLM's names are vllm:spec_decode_num_*_tokens_total) */
    counter(o, "inferd_spec_decode_num_draft_tokens_total", "Draft tokens verified by the target.",
            st->spec_proposed);
    counter(o, "inferd_spec_decode_num_accepted_tokens_total", "Draft tokens the target accepted.",
            st->spec_accepted);
    counter(o, "inferd_spec_decode_num_verifications_total",
            "Sequence-steps that verified drafts (each emits accepted + 1 tokens).", st->spec_verifications);
    counter(o, "inferd_spec_decode_num_emitted_tokens_total", "Tokens emitted by verifications.",
            st->spec_emitted);
    counter(o, "inferd_spec_decode_switched_off_total",
            "Times a sequence stopped speculating for low acceptance.", st->spec_switched_off);
    counter(o, "inferd_spec_decode_remeasured_total",
            "Times a sequence the choice had left plain forgot its acceptance, to be measured again.",
            st->spec_remeasured);
    counter(o, "inferd_spec_decode_draft_forwards_total", "Draft model forwards run.",
            st->spec_draft_forwards);
    real(o, "inferd_spec_decode_draft_seconds_total", "counter",
         "Wall time in the draft model's forwards (its rounds and its catch-ups over prompts).",
         st->spec_draft_ms / 1e3);
    counter(o, "inferd_spec_decode_draft_unsure_total",
            "Draft-model tokens not verified: the draft gave them less than --draft-p-min (each ends its "
            "sequence's drafts for the step).",
            st->spec_draft_unsure);
    counter(o, "inferd_spec_decode_proposer_rests_total",
            "Times a proposer stopped exploring: its acceptance pooled over all sequences' probes "
            "fell below the threshold (measured sequences go on; new ones probe again later).",
            st->spec_rests);
    counter(o, "inferd_spec_decode_ngram_draft_tokens_total",
            "Draft tokens verified that the n-gram proposer made (the rest: the draft model's).",
            st->spec_ngram_proposed);
    counter(o, "inferd_spec_decode_ngram_accepted_tokens_total",
            "Accepted draft tokens that the n-gram proposer made.", st->spec_ngram_accepted);
    counter(o, "inferd_spec_decode_device_rows_total",
            "Verification rows drawn on the device (their logits never reach the host).", st->spec_device_rows);
    gauge(o, "inferd_spec_decode_acceptance_ratio", "Accepted over verified draft tokens.",
          st->spec_proposed ? (double)st->spec_accepted / (double)st->spec_proposed : 0.0);
    gauge(o, "inferd_spec_decode_mean_accepted_length", "Accepted draft tokens per verification.",
          st->spec_verifications ? (double)st->spec_accepted / (double)st->spec_verifications : 0.0);
    head(o, "inferd_spec_decode_k_total", "counter", "Drafts chosen per decoding sequence-step, by k.");
    for (int k = 0; k <= 16; k++)
        if (st->spec_k_hist[k] || k == 0)
            sbuf_printf(o, "inferd_spec_decode_k_total{k=\"%d\"} %llu\n", k,
                        (unsigned long long)st->spec_k_hist[k]);

    head(o, "inferd_aborted_total", "counter", "Requests aborted, by reason.");
    for (int i = 0; i < ABORT_N; i++)
        sbuf_printf(o, "inferd_aborted_total{reason=\"%s\"} %llu\n", ABORT_STR[i],
                    (unsigned long long)atomic_load(&m->aborted[i]));
    head(o, "inferd_requests_finished_total", "counter", "Generation requests finished, by finish reason.");
    for (int i = 0; i < FIN_N; i++)
        sbuf_printf(o, "inferd_requests_finished_total{finish_reason=\"%s\"} %llu\n", FIN_STR[i],
                    (unsigned long long)atomic_load(&m->finished[i]));
    head(o, "inferd_requests_rejected_total", "counter", "Requests refused at admission, by code.");
    for (int i = 0; i < N_REJECT; i++)
        sbuf_printf(o, "inferd_requests_rejected_total{code=\"%s\"} %llu\n", REJECT_STR[i],
                    (unsigned long long)atomic_load(&m->rejected[i]));
    head(o, "inferd_http_responses_total", "counter", "HTTP responses sent, by status code.");
    for (int c = 100; c < N_CODES; c++) {
        uint64_t v = atomic_load(&m->http[c]);
        if (v || c == 200) sbuf_printf(o, "inferd_http_responses_total{code=\"%d\"} %llu\n", c, (unsigned long long)v);
    }
    for (int i = 0; i < HIST_N; i++) {
        hist *x = &m->h[i];
        uint64_t counts[N_BUCKETS + 1], count;
        double sum;
        pthread_mutex_lock(&x->mu);
        memcpy(counts, x->counts, sizeof counts);
        count = x->count;
        sum = x->sum;
        pthread_mutex_unlock(&x->mu);
        const char *name = HIST_INFO[i].name;
        head(o, name, "histogram", HIST_INFO[i].help);
        uint64_t cum = 0;
        for (size_t b = 0; b < N_BUCKETS; b++) {
            cum += counts[b];
            sbuf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, BUCKETS[b], (unsigned long long)cum);
        }
        sbuf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)count);
        sbuf_printf(o, "%s_sum %.9g\n%s_count %llu\n", name, sum, name, (unsigned long long)count);
    }
}

void metrics_render_vllm(const inferd_stats *st, const char *model, int32_t block_size, sbuf *o) {
    /* what routers read from vLLM (the Gateway API Inference Extension's endpoint picker,
     * llm-d's scorers): the same gauges under vLLM's names, labelled by model_name */
    sbuf lbl = {0};
    sbuf_puts(&lbl, "{model_name=");
    sbuf_json_str(&lbl, model, strlen(model)); /* a JSON string is a valid label value */
    sbuf_puts(&lbl, "}");
    const char *l = sbuf_cstr(&lbl);
    const double usage = st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0.0;
    head(o, "vllm:num_requests_running", "gauge", "Requests running (alias of inferd_num_requests_running).");
    sbuf_printf(o, "vllm:num_requests_running%s %d\n", l, st->running);
    head(o, "vllm:num_requests_waiting", "gauge", "Requests waiting (alias of inferd_num_requests_waiting).");
    sbuf_printf(o, "vllm:num_requests_waiting%s %d\n", l, st->waiting);
    head(o, "vllm:kv_cache_usage_perc", "gauge", "KV cache usage, 1 = full (alias of inferd_kv_cache_usage_ratio).");
    sbuf_printf(o, "vllm:kv_cache_usage_perc%s %.17g\n", l, usage);
    head(o, "vllm:gpu_cache_usage_perc", "gauge", "KV cache usage, 1 = full (vLLM's older name).");
    sbuf_printf(o, "vllm:gpu_cache_usage_perc%s %.17g\n", l, usage);
    head(o, "vllm:cache_config_info", "gauge", "KV cache configuration (labels).");
    sbuf_printf(o, "vllm:cache_config_info{block_size=\"%d\",num_gpu_blocks=\"%d\",model_name=", block_size,
                st->kv_blocks_total);
    sbuf_json_str(o, model, strlen(model));
    sbuf_puts(o, "} 1\n");
    head(o, "vllm:prompt_tokens_total", "counter", "Prompt tokens processed.");
    sbuf_printf(o, "vllm:prompt_tokens_total%s %llu\n", l, (unsigned long long)st->prompt_tokens);
    head(o, "vllm:generation_tokens_total", "counter", "Tokens generated.");
    sbuf_printf(o, "vllm:generation_tokens_total%s %llu\n", l, (unsigned long long)st->generated_tokens);
    head(o, "vllm:num_preemptions_total", "counter", "Sequences preempted.");
    sbuf_printf(o, "vllm:num_preemptions_total%s %llu\n", l, (unsigned long long)st->preemptions);
    sbuf_free(&lbl);
}
