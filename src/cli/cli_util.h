/* cli_util.h — helpers shared by the subcommands: strict number parsing, the
 * single-sequence runner used by generate/logits (the engine API replaces it for
 * serving). CLI thread only. */
#ifndef INFERD_CLI_UTIL_H
#define INFERD_CLI_UTIL_H
#include "../util/layer/cli.h"

#include <stdbool.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../model/model.h"

bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_f32(const char *s, float lo, float hi, float *out);
bool cli_parse_u64(const char *s, uint64_t *out);
/* Parse "1 2 3" / "1,2,3" into a malloc'ed id list. */
bool cli_parse_ids(const char *s, int32_t **ids, int32_t *n);

/* One sequence over a contiguous run of KV blocks. */
typedef struct seq_runner {
    const model *m;
    backend *be;
    int32_t max_len;
    int32_t chunk;        /* tokens per forward */
    int32_t n_past;
    int32_t *block_table; /* identity: block i of the pool */
    int32_t *tok, *pos, *slot, *lidx;
} seq_runner;

int seq_runner_init(seq_runner *r, const model *m, int32_t max_len, char *err, size_t err_bytes);
void seq_runner_deinit(seq_runner *r);
/* Append n tokens. With all_logits, out gets n rows of logits; otherwise out gets the
 * logits of the last token only. */
int seq_runner_feed(seq_runner *r, const int32_t *ids, int32_t n, bool all_logits, float *out);

#endif
