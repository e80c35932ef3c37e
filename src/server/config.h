/* config.h — the configuration of `serve`, `generate`, `bench` and `perplexity`: one declarative
 * table (config.c) of every option with its type, default, bounds, help and the
 * commands it belongs to. The engine options (model, threads, KV cache, batching ...)
 * are one set of entries shared by all four commands, under the same names; each
 * command adds its own entries (serve: network and limits; generate: prompt and
 * sampling; bench: the request mix; perplexity: the text and window).
 *
 * For serve the table drives, in increasing precedence, the defaults, the JSON config
 * file (--config), INFERD_* environment variables and --flags; the other commands read
 * only their defaults and --flags. The table also prints each command's --help and
 * serve's effective-config log line.
 * Main thread only (parsed once at startup; read-only afterwards). */
#ifndef INFERD_SERVER_CONFIG_H
#define INFERD_SERVER_CONFIG_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "inferd.h"

/* The commands the table serves (a bit set in each entry). */
typedef enum cfg_cmd {
    CFG_CMD_SERVE = 1 << 0,
    CFG_CMD_GENERATE = 1 << 1,
    CFG_CMD_BENCH = 1 << 2,
    CFG_CMD_PERPLEXITY = 1 << 3,
    CFG_CMD_QUANTIZE = 1 << 4, /* inferd quantize IN OUT: the quantize-* options, --type, --threads */
} cfg_cmd;

#define CFG_MAX_OPTS 128 /* table entries at most (config.c checks) */
#define CFG_MAX_LIST 16  /* values of a repeatable option (--stop) */

typedef struct cfg_strlist { /* a repeatable string option: every occurrence appends */
    char *v[CFG_MAX_LIST];
    int n;
} cfg_strlist;

typedef enum max_tokens_policy {
    MAXTOK_CLAMP = 0,  /* max_tokens past the context is clamped to what is left */
    MAXTOK_REJECT = 1, /* ... or answered 400 context_length_exceeded */
} max_tokens_policy;

typedef enum pd_role { PD_ROLE_BOTH = 0, PD_ROLE_PREFILL = 1, PD_ROLE_DECODE = 2 } pd_role;
typedef enum pd_failure { PD_FAIL = 0, PD_RECOMPUTE = 1, PD_RETRY = 2 } pd_failure;

typedef enum reasoning_parser {
    REASONING_AUTO = 0, /* <think>…</think> when the chat template writes <think> */
    REASONING_NONE = 1, /* the output is content, whatever it holds */
    REASONING_THINK = 2, /* <think>…</think> (Qwen3, QwQ, DeepSeek-R1 and its distills) */
} reasoning_parser;

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
    /* /v1/responses: the store of finished responses (previous_response_id, GET) */
    int64_t responses_store_max;
    int64_t responses_store_max_bytes;
    double responses_store_ttl_s;
    int64_t reasoning_parser; /* reasoning_parser */
    /* prefill/decode disaggregation (pd.c) */
    int64_t role;             /* pd_role */
    char *pd_prefill;
    char *pd_kv_host;
    int64_t pd_kv_port;
    int64_t pd_lease_ms;
    int64_t pd_local_threshold;
    int64_t pd_on_kv_failure; /* pd_failure */
    int64_t pd_transport;     /* 0 tcp, 1 ucx */
    int64_t pd_workers;
    int64_t pd_ucx_stage;     /* 0 auto, 1 always */
    int64_t pd_stage_bytes;
    /* chat template rendering limits */
    double template_timeout_s;
    int64_t template_max_bytes;
    /* engine */
    int64_t threads;
    int64_t max_num_seqs;
    int64_t max_num_batched_tokens;
    double max_step_ms;
    double max_prefill_stall_ms;
    int64_t kv_cache_memory; /* bytes; 0 = kv_cache_fraction */
    double kv_cache_fraction;
    int64_t block_size;
    int64_t max_model_len;
    bool enable_prefix_caching;
    bool reference_kernels;
    int64_t kv_cache_dtype; /* auto|f32|f16|bf16|int8|fp8 (config_engine_options maps it) */
    int64_t device;                /* auto|cuda|cpu|emu (config_engine_options maps it) */
    double gpu_memory_utilization; /* (0, 1] */
    bool cuda_graphs;              /* decode steps as CUDA graphs */
    int64_t random_weights;        /* none|tiny|llama3-8b|qwen2.5-1.5b */
    int64_t random_dtype;          /* f32|f16|bf16|q8_0|q4_0|q4_k|q6_k */
    uint64_t random_seed;
    int64_t quantize;            /* none|int8|int4 (config_engine_options maps it) */
    int64_t quantize_group_size; /* 32|64|128: an index into those */
    bool quantize_lm_head;
    bool allow_requantize; /* quantize: convert quantized weights too */
    char *quantize_keep_layers;  /* "0,1,21" / "0-3,21" (checked against the model at load) */
    char *calibration;           /* AWQ calibration text */
    char *draft_model;           /* speculative decoding: the draft model */
    int64_t num_speculative_tokens;
    int64_t draft_vocab;
    bool speculative_ngram;
    int64_t ngram_min, ngram_max;
    bool speculative_adaptive;
    double spec_min_acceptance;
    double draft_p_min;
    bool quant_report;           /* quantize --report */
    double ppl_budget;           /* quantize --ppl-budget, percent */
    /* quantize */
    int64_t quant_type;          /* q8_0|q4_0|q4_k|q5_k|q6_k|int8|int4 */
    /* logging */
    bool log_requests;
    bool log_prompts;
    bool log_health;
    /* generate */
    char *prompt;
    int64_t n_predict;
    double temp, top_p, min_p, repeat_penalty;
    int64_t top_k;
    cfg_strlist stop;
    bool print_ids, verbose, ignore_eos;
    uint64_t seed; /* generate (not given: the clock) and bench */
    /* bench */
    int64_t num_requests;
    int64_t input_len[2], output_len[2]; /* ranges "A:B" (or "A" = "A:A") */
    double request_rate;
    int64_t scenario; /* 0 offline, 1 chunked */
    char *prompt_file; /* bench: real prompts, '%%' lines between them */
    /* perplexity */
    char *text_file; /* -f: the text to score */
    int64_t ppl_ctx; /* --ctx: window length in tokens */
    char *kl_base;   /* --kl-base: the base model for KL divergence */
    /* --config: the file the rest came from (not itself in a file) */
    char *config_file;
    /* bookkeeping */
    cfg_cmd cmd;                  /* whose options these are */
    bool given[CFG_MAX_OPTS];     /* table entry i was set by a file, the environment or a flag */
} server_config;

/* Defaults of cmd's options (server_config_init: serve's). */
void config_init(server_config *c, cfg_cmd cmd);
void server_config_init(server_config *c);
void server_config_deinit(server_config *c);

/* Parse c->cmd's options from argv (argv[0] is the command name) over the defaults.
 * serve: --config FILE (found in argv or INFERD_CONFIG), then INFERD_* variables,
 * then argv flags; generate and bench: argv flags only. Returns 0; 1 when --help was
 * printed (exit 0); -1 with one line in err on a bad option. */
int config_load(server_config *c, int argc, char **argv, char *err, size_t err_bytes);
int server_config_load(server_config *c, int argc, char **argv, char *err, size_t err_bytes);

/* Was the option (by name) given, rather than left at its default? */
bool config_given(const server_config *c, const char *name);

/* The engine options the table holds (model ... random-weights-seed) into o; threaded
 * is left as o has it (the caller decides). */
void config_engine_options(const server_config *c, inferd_engine_options *o);

void config_help(cfg_cmd cmd, FILE *fp);
void server_config_help(FILE *fp);
/* One JSON object with every option's effective value (secrets redacted). Malloc'ed. */
char *server_config_effective_json(const server_config *c);

/* Exposed for the unit tests: set one option by its name ("max-num-seqs" or
 * "max_num_seqs") from text. */
int server_config_set(server_config *c, const char *name, const char *value, char *err,
                      size_t err_bytes);

#endif
