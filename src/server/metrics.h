/* metrics.h — Prometheus metrics (text exposition format 0.0.4, names inferd_*).
 *
 * The server records latencies (histograms), aborts by reason, finished requests by
 * finish reason and HTTP responses by code; engine-side numbers (running / waiting,
 * KV blocks, token and prefix-cache counters, preemptions) are read from
 * inferd_engine_stats at scrape time. Thread-safe: observations come from the
 * engine thread (callbacks) and the HTTP threads. */
#ifndef INFERD_SERVER_METRICS_H
#define INFERD_SERVER_METRICS_H
#include "../util/layer/server.h"

#include <stdint.h>

#include "inferd.h"
#include "util/buf.h"

typedef enum metric_hist {
    HIST_TTFT = 0,      /* inferd_time_to_first_token_seconds */
    HIST_ITL,           /* inferd_inter_token_latency_seconds */
    HIST_E2E,           /* inferd_e2e_request_latency_seconds */
    HIST_QUEUE,         /* inferd_request_queue_time_seconds */
    HIST_PREFILL,       /* inferd_request_prefill_time_seconds */
    HIST_N,
} metric_hist;

typedef enum abort_reason {
    ABORT_NONE = -1,
    ABORT_CLIENT_DISCONNECT = 0,
    ABORT_SHUTDOWN,
    ABORT_QUEUE_TIMEOUT,
    ABORT_ERROR,
    ABORT_N,
} abort_reason;

const char *abort_reason_str(abort_reason r); /* "client_disconnect", ... */

typedef enum finish_label {
    FIN_STOP = 0,
    FIN_LENGTH,
    FIN_TOOL_CALLS,
    FIN_ABORT,
    FIN_ERROR,
    FIN_N,
} finish_label;

typedef struct metrics metrics;

int metrics_create(metrics **out);
void metrics_destroy(metrics *m);
void metrics_observe(metrics *m, metric_hist h, double seconds);
void metrics_observe_n(metrics *m, metric_hist h, double seconds, uint64_t count);
void metrics_abort(metrics *m, abort_reason r);
void metrics_finished(metrics *m, finish_label f);
void metrics_http(metrics *m, int status);
void metrics_rejected(metrics *m, const char *code); /* admission: server_overloaded, ... */
/* Append the whole exposition; st is NULL while the engine is not up. */
void metrics_render(metrics *m, const inferd_stats *st, sbuf *out);
/* vLLM's names for the gauges routers read (vllm:num_requests_running / _waiting,
 * vllm:kv_cache_usage_perc and the older vllm:gpu_cache_usage_perc, vllm:cache_config_info),
 * labelled model_name. */
void metrics_render_vllm(const inferd_stats *st, const char *model, int32_t block_size, sbuf *out);

#endif
