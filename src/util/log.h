/* log.h — the server's log: one JSON object per line on stderr (journald / docker
 * friendly). Thread-safe: each line is written with one locked fwrite. */
#ifndef INFERD_UTIL_LOG_H
#define INFERD_UTIL_LOG_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

/* {"ts":...,"level":LEVEL,"msg":"..."} — msg is printf-formatted text. */
void slog(const char *level, const char *fmt, ...) IFD_PRINTF(2, 3);
/* Same, with extra fields: `fields_json` is a JSON object's members without braces
 * (e.g. "\"port\":8000"), appended as they are. */
void slog_fields(const char *level, const char *msg, const char *fields_json);

/* What the request log line holds (log.c writes it; http.c fills it). */
typedef struct req_log {
    const char *request_id;
    const char *method, *path;
    const char *client; /* address text */
    int status;
    bool stream;
    const char *finish_reason; /* NULL when not a generation */
    const char *abort_reason;  /* NULL unless aborted */
    const char *error_code;    /* the error's code when status >= 400 */
    int32_t n_prompts, prompt_tokens, completion_tokens, cached_tokens, n_choices;
    int32_t spec_draft_tokens, spec_accepted_tokens; /* speculative decoding; 0: none */
    double queue_s, ttft_s, total_s; /* negative: unknown */
    /* prefill/decode disaggregation: the prefill instance that computed the prompt (NULL:
     * none), and TTFT's parts: the remote prefill and the KV transfer */
    const char *pd_prefill;
    double pd_prefill_s, pd_transfer_s;
    const char *prompt;              /* only with --log-prompts */
    size_t prompt_bytes;
} req_log;

void slog_request(const req_log *r);

#endif
