/* config.h — the server's configuration: one declarative table (config.c) of every
 * option with its type, default, bounds and help. The table drives, in increasing
 * precedence, the defaults, the JSON config file (--config), INFERD_* environment
 * variables and --flags; it also prints --help and the effective-config log line.
 * Main thread only (parsed once at startup; read-only afterwards). */
#ifndef INFERD_SERVER_CONFIG_H
#define INFERD_SERVER_CONFIG_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum max_tokens_policy {
    MAXTOK_CLAMP = 0,  /* max_tokens past the context is clamped to what is left */
    MAXTOK_REJECT = 1, /* ... or answered 400 context_length_exceeded */
} max_tokens_policy;

typedef struct server_config {
    /* model and identity */
    char *model;              /* GGUF path */
    char *served_model_name;  /* comma-separated aliases; first one is reported */
    char *chat_template_file; /* overrides the model's template */
    bool allow_request_chat_template;
    /* network */
    char *host;
    int64_t port;
    char *api_key;
    char *api_key_file;
    int64_t http_threads;
    int64_t max_connections;
    int64_t reserve_connections;  /* over max_connections: health checks and metrics only */
    int64_t connection_timeout_s; /* a response whose client stops reading */
    double header_timeout_s;      /* receiving a request's head */
    double body_timeout_s;        /* receiving a request's body */
    double keepalive_timeout_s;   /* idle between requests on a kept-alive connection */
    int64_t max_header_bytes;
    char *allowed_origins;        /* CORS: comma-separated origins, or "*" */
    /* limits and admission */
    int64_t max_body_bytes;
    int64_t max_buffered_body_bytes;
    int64_t max_n;
    int64_t max_top_logprobs;
    int64_t max_stop;
    int64_t max_logit_bias;
    int64_t max_prompts;       /* prompts in one completions request */
    int64_t max_tokens_policy; /* max_tokens_policy */
    int64_t max_waiting_requests;
    int64_t max_waiting_tokens;
    int64_t max_requests_per_client; /* concurrent generation requests per client IP */
    double queue_timeout_s;
    int64_t retry_after_s;
    double keepalive_s;
    double shutdown_timeout_s;
    /* chat template rendering limits */
    double template_timeout_s;
    int64_t template_max_bytes;
    /* engine */
    int64_t threads;
    int64_t max_num_seqs;
    int64_t max_num_batched_tokens;
    int64_t kv_cache_memory; /* bytes; 0 = kv_cache_fraction */
    double kv_cache_fraction;
    int64_t block_size;
    int64_t max_model_len;
    bool enable_prefix_caching;
    bool reference_kernels;
    /* logging */
    bool log_requests;
    bool log_prompts;
    bool log_health;
    /* --config: the file the rest came from (not itself in a file) */
    char *config_file;
} server_config;

void server_config_init(server_config *c); /* defaults */
void server_config_deinit(server_config *c);

/* Parse everything: defaults, then --config FILE (found in argv or INFERD_CONFIG),
 * then INFERD_* variables, then argv flags. argv[0] is the command name. Returns 0;
 * 1 when --help was printed (exit 0); -1 with one line in err on a bad option. */
int server_config_load(server_config *c, int argc, char **argv, char *err, size_t err_bytes);

void server_config_help(FILE *fp);
/* One JSON object with every option's effective value (secrets redacted). Malloc'ed. */
char *server_config_effective_json(const server_config *c);

/* Exposed for the unit tests: set one option by its name ("max-num-seqs" or
 * "max_num_seqs") from text. */
int server_config_set(server_config *c, const char *name, const char *value, char *err,
                      size_t err_bytes);

#endif
