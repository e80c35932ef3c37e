/* log.c — JSON-lines logging to stderr. Any thread. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "buf.h"

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

static void log_head(sbuf *b, const char *level) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    sbuf_printf(b, "{\"ts\":\"%s.%03dZ\",\"level\":\"%s\"", ts, (int)(tv.tv_usec / 1000), level);
}

static void log_write(sbuf *b) {
    sbuf_puts(b, "}\n");
    if (b->oom) return;
    pthread_mutex_lock(&g_log_mu);
    fwrite(b->p, 1, b->n, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&g_log_mu);
}

void slog_fields(const char *level, const char *msg, const char *fields_json) {
    sbuf b = {0};
    log_head(&b, level);
    sbuf_puts(&b, ",\"msg\":");
    sbuf_json_str(&b, msg, strlen(msg));
    if (fields_json && *fields_json) {
        sbuf_puts(&b, ",");
        sbuf_puts(&b, fields_json);
    }
    log_write(&b);
    sbuf_free(&b);
}

void slog(const char *level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    slog_fields(level, msg, NULL);
}

static void field_str(sbuf *b, const char *k, const char *v) {
    if (!v) return;
    sbuf_printf(b, ",\"%s\":", k);
    sbuf_json_str(b, v, strlen(v));
}

static void field_num(sbuf *b, const char *k, double v) {
    if (v < 0) return;
    sbuf_printf(b, ",\"%s\":%.6f", k, v);
}

void slog_request(const req_log *r) {
    sbuf b = {0};
    log_head(&b, r->status >= 500 ? "error" : r->status >= 400 ? "warn" : "info");
    sbuf_puts(&b, ",\"msg\":\"request\"");
    field_str(&b, "request_id", r->request_id);
    field_str(&b, "method", r->method);
    field_str(&b, "path", r->path);
    field_str(&b, "client", r->client);
    sbuf_printf(&b, ",\"status\":%d", r->status);
    if (r->finish_reason || r->n_choices) {
        sbuf_printf(&b, ",\"stream\":%s", r->stream ? "true" : "false");
        field_str(&b, "finish_reason", r->finish_reason);
        sbuf_printf(&b, ",\"n_prompts\":%d,\"n_choices\":%d,\"prompt_tokens\":%d,"
                        "\"completion_tokens\":%d,\"cached_tokens\":%d",
                    (int)r->n_prompts, (int)r->n_choices, (int)r->prompt_tokens,
                    (int)r->completion_tokens, (int)r->cached_tokens);
        if (r->spec_draft_tokens > 0)
            sbuf_printf(&b, ",\"spec_draft_tokens\":%d,\"spec_accepted_tokens\":%d",
                        (int)r->spec_draft_tokens, (int)r->spec_accepted_tokens);
        field_num(&b, "queue_s", r->queue_s);
        field_num(&b, "ttft_s", r->ttft_s);
        if (r->pd_prefill) {
            field_str(&b, "pd_prefill", r->pd_prefill);
            field_num(&b, "pd_prefill_s", r->pd_prefill_s);
            field_num(&b, "pd_transfer_s", r->pd_transfer_s);
        }
    }
    field_num(&b, "total_s", r->total_s);
    field_str(&b, "abort_reason", r->abort_reason);
    field_str(&b, "error", r->error_code);
    if (r->prompt) {
        sbuf_puts(&b, ",\"prompt\":");
        sbuf_json_str(&b, r->prompt, r->prompt_bytes);
    }
    log_write(&b);
    sbuf_free(&b);
}
