/* config.c — the one declarative option table of serve, generate, bench and perplexity, and the
 * sources it drives: defaults < JSON config file < INFERD_* environment < --flags
 * (file and environment: serve only). Also each command's --help, the effective-config
 * JSON serve logs at start, and the table's engine options as inferd_engine_options.
 * Main thread, at startup only.
 *
 * Depends on nothing but buf.c, util/common.c and cJSON (tests/python/test_packaging.py
 * compiles it alone to load the example config). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/buf.h"
#include "util/common.h"

typedef enum cfg_type {
    CFG_STR,
    CFG_INT,
    CFG_SIZE,  /* int64 with an optional K/M/G/T suffix */
    CFG_FLOAT,
    CFG_FRACTION, /* a double in (0, 1] (lo and hi unused) */
    CFG_BOOL,
    CFG_ENUM,  /* int64 index into choices */
    CFG_U64,   /* exact decimal uint64 (seeds) */
    CFG_RANGE, /* int64[2]: "A:B" or "A" (= "A:A"), lo <= A <= B <= hi */
    CFG_LIST,  /* cfg_strlist: each occurrence appends a non-empty string */
} cfg_type;

typedef struct cfg_opt {
    const char *name;  /* --name, INFERD_NAME (dashes -> underscores), "name" in the file */
    const char *alias; /* short flag or NULL */
    unsigned cmds;     /* cfg_cmd bits: the commands that take it */
    cfg_type type;
    size_t off;
    const char *def;     /* default, as text (NULL: unset) */
    double lo, hi;       /* bounds for numbers */
    const char *choices; /* CFG_ENUM: "a|b|c" -> 0, 1, 2 */
    bool secret;         /* redacted in the effective-config line */
    const char *help;
} cfg_opt;

#define S CFG_CMD_SERVE
#define G CFG_CMD_GENERATE
#define B CFG_CMD_BENCH
#define P CFG_CMD_PERPLEXITY
#define E (CFG_CMD_SERVE | CFG_CMD_GENERATE | CFG_CMD_BENCH | CFG_CMD_PERPLEXITY)
#define Q CFG_CMD_QUANTIZE
#define O(f) offsetof(server_config, f)
#define BIG 9.0e15
static const cfg_opt OPTS[] = {
    /* ---- the engine: serve, generate, bench and perplexity ---- */
    {"model", "-m", E, CFG_STR, O(model), NULL, 0, 0, NULL, false, "GGUF model file"},
    {"threads", "-t", E | Q, CFG_INT, O(threads), "0", 0, 1024, NULL, false, "engine CPU threads (0 = all cores)"},
    {"max-num-seqs", NULL, E, CFG_INT, O(max_num_seqs), "64", 1, 65536, NULL, false,
     "sequences running at once"},
    {"max-num-batched-tokens", NULL, E, CFG_INT, O(max_num_batched_tokens), "256", 1, 1 << 24, NULL,
     false, "tokens per engine step"},
    {"kv-cache-memory", NULL, E, CFG_SIZE, O(kv_cache_memory), "0", 0, BIG, NULL, false,
     "KV cache bytes, e.g. 2G (0 = kv-cache-fraction of free memory)"},
    {"kv-cache-fraction", NULL, E, CFG_FLOAT, O(kv_cache_fraction), "0.25", 0.001, 1, NULL, false,
     "fraction of free memory for the KV cache"},
    {"block-size", NULL, E, CFG_INT, O(block_size), "16", 1, 1024, NULL, false, "KV block size in tokens"},
    {"max-model-len", NULL, E, CFG_INT, O(max_model_len), "0", 0, 1 << 24, NULL, false,
     "context length (0 = the model's)"},
    {"enable-prefix-caching", NULL, E, CFG_BOOL, O(enable_prefix_caching), "true", 0, 0, NULL, false,
     "reuse cached KV blocks of shared prompt prefixes"},
    {"reference-kernels", NULL, E, CFG_BOOL, O(reference_kernels), "false", 0, 0, NULL, false,
     "CPU plain C reference kernels (slow; for tests)"},
    {"kv-cache-dtype", NULL, E, CFG_ENUM, O(kv_cache_dtype), "auto", 0, 0, "auto|f32|f16|bf16|int8|fp8",
     false, "KV cache element type: auto = f16 on the CPU, bf16 on CUDA; int8 (a scale per token "
            "and head) and fp8 (E4M3) hold ~4x the tokens of f32"},
    /* default: inferd_engine_options_default's, measured (see the comment there) */
    {"max-step-ms", NULL, E, CFG_FLOAT, O(max_step_ms), "100", 0, 600000, NULL,
     false, "a step that mixes prefill with decodes is sized to take at most this long (decode "
            "stall bound, from the measured cost per token; 0 = only max-num-batched-tokens)"},
    {"max-prefill-stall-ms", NULL, E, CFG_FLOAT, O(max_prefill_stall_ms), "0", 0, 600000, NULL,
     false, "when prompts wait, decoding may pause up to this long so they prefill at full "
            "rate; a sequence at most once per 128 of its tokens (0 = never)"},
    {"device", NULL, E, CFG_ENUM, O(device), "auto", 0, 0, "auto|cuda|cpu|emu", false,
     "where the model runs: auto = CUDA when a GPU is present, else the CPU; emu = the CUDA "
     "backend with its kernels under the CPU's SIMT emulation (tests)"},
    {"gpu-memory-utilization", NULL, E, CFG_FRACTION, O(gpu_memory_utilization), "0.90", 0, 1, NULL,
     false, "CUDA: fraction of the GPU's free memory for the weights, the activations and the "
            "KV cache (the KV pool gets what the other two leave)"},
    {"cuda-graphs", NULL, E, CFG_BOOL, O(cuda_graphs), "true", 0, 0, NULL, false,
     "CUDA: run decode steps as CUDA graphs captured at start, one per padded batch size "
     "(--no-cuda-graphs: every step eager, for debugging)"},
    {"random-weights", NULL, E, CFG_ENUM, O(random_weights), "none", 0, 0,
     "none|tiny|llama3-8b|qwen2.5-1.5b", false,
     "instead of -m FILE, build a model of this shape in memory with seeded random weights "
     "and a synthetic vocabulary (benchmarks, tests): its output is noise"},
    {"dtype", NULL, E, CFG_ENUM, O(random_dtype), "bf16", 0, 0, "f32|f16|bf16|q8_0|q4_0|q4_k|q6_k",
     false, "weight type of --random-weights"},
    {"random-weights-seed", NULL, E, CFG_U64, O(random_seed), "0", 0, 0, NULL, false,
     "seed of --random-weights (the same seed gives the same weights)"},
    {"quantize", NULL, E, CFG_ENUM, O(quantize), "none", 0, 0, "none|int8|int4", false,
     "quantize the F32/F16/BF16 linear weights at load (weight-only): int8 symmetric, int4 "
     "asymmetric (GPTQ/AWQ grid), an fp16 scale (and minimum) per group; embeddings and norms stay"},
    {"quantize-group-size", NULL, E | Q, CFG_ENUM, O(quantize_group_size), "128", 0, 0, "32|64|128",
     false, "weights per quantization group (32: the Q8_0 / Q4_1 blocks)"},
    {"quantize-lm-head", NULL, E | Q, CFG_BOOL, O(quantize_lm_head), "false", 0, 0, NULL, false,
     "quantize output.weight too (never a tied token embedding)"},
    {"allow-requantize", NULL, Q, CFG_BOOL, O(allow_requantize), "false", 0, 0, NULL, false,
     "also convert linear weights that are already quantized (dequantized, then quantized "
     "again: the errors add up; a smaller, faster draft model from a quantized file)"},
    {"quantize-keep-layers", NULL, E | Q, CFG_STR, O(quantize_keep_layers), NULL, 0, 0, NULL, false,
     "layers left in full precision, e.g. 0,1,21 or 0-3,21"},
    {"calibration", NULL, E | Q, CFG_STR, O(calibration), NULL, 0, 0, NULL, false,
     "calibration text: activation-aware (AWQ) scales for --quantize, from its first 2048 tokens"},
    {"report", NULL, Q, CFG_BOOL, O(quant_report), "false", 0, 0, NULL, false,
     "with --calibration: print each matrix's output error on the calibration text, sorted, and "
     "the --quantize-keep-layers that meets --ppl-budget"},
    {"ppl-budget", NULL, Q, CFG_FLOAT, O(ppl_budget), "1", 0, 1000, NULL, false,
     "perplexity budget of --report over the original model, percent"},
    /* ---- speculative decoding: serve, generate, bench ---- */
    {"draft-model", NULL, S | G | B, CFG_STR, O(draft_model), NULL, 0, 0, NULL, false,
     "speculative decoding with this draft model (GGUF; it must share the model's vocabulary)"},
    {"num-speculative-tokens", NULL, S | G | B, CFG_INT, O(num_speculative_tokens), "4", 1, 16, NULL, false,
     "most draft tokens per sequence and step (K)"},
    {"draft-vocab", NULL, S | G | B, CFG_INT, O(draft_vocab), "0", 0, 1 << 30, NULL, false,
     "CPU: the draft model proposes only token ids below this (its lm head computes those rows "
     "only: a faster draft, at some acceptance; 0: all)"},
    {"speculative-ngram", NULL, S | G | B, CFG_BOOL, O(speculative_ngram), "false", 0, 0, NULL, false,
     "n-gram (prompt lookup) proposals: the continuation of the last n tokens' most recent earlier "
     "occurrence in the prompt and output; alone, or beside the draft model (per sequence and "
     "step, the proposer whose own acceptance promises more)"},
    {"ngram-min", NULL, S | G | B, CFG_INT, O(ngram_min), "1", 1, 64, NULL, false,
     "shortest n-gram pattern tried"},
    {"ngram-max", NULL, S | G | B, CFG_INT, O(ngram_max), "4", 1, 64, NULL, false,
     "longest n-gram pattern tried (longest first)"},
    {"speculative-adaptive", NULL, S | G | B, CFG_BOOL, O(speculative_adaptive), "true", 0, 0, NULL, false,
     "choose k in 0..K per sequence and step from its acceptance and the step costs measured at "
     "start (--no-speculative-adaptive: always K)"},
    {"speculative-min-acceptance", NULL, S | G | B, CFG_FLOAT, O(spec_min_acceptance), "0.3", 0, 1, NULL,
     false, "a sequence whose acceptance falls below this stops speculating for 32 tokens (doubling each time); "
     "a proposer whose probes, pooled over all sequences, fall below it stops probing for 256 decode "
     "steps (doubling)"},
    {"draft-p-min", NULL, S | G | B, CFG_FLOAT, O(draft_p_min), "0", 0, 1, NULL, false,
     "a draft-model token after the first that the draft gives less than this probability ends that "
     "sequence's drafts for the step and is not verified (0: off)"},
    /* ---- quantize ---- */
    {"type", NULL, Q, CFG_ENUM, O(quant_type), NULL, 0, 0, "q8_0|q4_0|q4_k|q5_k|q6_k|int8|int4", false,
     "the weight type of the file written (q8_0 ... q6_k: the ggml types llama.cpp reads; int8 / "
     "int4: inferd's layouts at --quantize-group-size)"},
    /* ---- serve ---- */
    {"served-model-name", NULL, S, CFG_STR, O(served_model_name), NULL, 0, 0, NULL, false,
     "model name(s) the API answers to, comma-separated (default: the file's base name, with and without .gguf)"},
    {"chat-template-file", NULL, S, CFG_STR, O(chat_template_file), NULL, 0, 0, NULL, false,
     "Jinja chat template to use instead of the model's (default: the GGUF's, else ChatML)"},
    {"allow-request-chat-template", NULL, S, CFG_BOOL, O(allow_request_chat_template), "false", 0, 0,
     NULL, false, "accept a chat_template field in chat requests"},
    {"host", NULL, S, CFG_STR, O(host), "127.0.0.1", 0, 0, NULL, false, "address to bind (:: or 0.0.0.0 for all)"},
    {"port", NULL, S, CFG_INT, O(port), "8000", 0, 65535, NULL, false, "TCP port"},
    {"api-key", NULL, S, CFG_STR, O(api_key), NULL, 0, 0, NULL, true,
     "require 'Authorization: Bearer KEY' on every route but /health*"},
    {"api-key-file", NULL, S, CFG_STR, O(api_key_file), NULL, 0, 0, NULL, false,
     "file with API keys, one per line (re-read on SIGHUP)"},
    {"http-threads", NULL, S, CFG_INT, O(http_threads), "4", 1, 256, NULL, false,
     "HTTP worker threads (parsing, templating, tokenizing)"},
    {"max-connections", NULL, S, CFG_INT, O(max_connections), "1024", 1, 65536, NULL, false,
     "open HTTP connections at most (idle kept-alive ones are closed to make room)"},
    {"reserve-connections", NULL, S, CFG_INT, O(reserve_connections), "32", 0, 4096, NULL, false,
     "connections over --max-connections that may still reach /health, /health/ready and /metrics"},
    {"connection-timeout", NULL, S, CFG_INT, O(connection_timeout_s), "600", 0, 86400, NULL, false,
     "seconds a response (e.g. a stream) may wait on a client that reads nothing (0 = forever)"},
    {"header-timeout", NULL, S, CFG_FLOAT, O(header_timeout_s), "10", 0.1, 3600, NULL, false,
     "seconds to receive a request's head, from its first byte (or from connecting)"},
    {"body-timeout", NULL, S, CFG_FLOAT, O(body_timeout_s), "30", 0.1, 3600, NULL, false,
     "seconds to receive a request's body, from the end of its head"},
    {"keepalive-timeout", NULL, S, CFG_FLOAT, O(keepalive_timeout_s), "30", 0.1, 86400, NULL, false,
     "seconds a kept-alive connection may sit idle between requests"},
    {"max-header-bytes", NULL, S, CFG_SIZE, O(max_header_bytes), "32K", 1024, 1 << 20, NULL, false,
     "largest request head (request line + headers; 431 above)"},
    {"allowed-origins", NULL, S, CFG_STR, O(allowed_origins), NULL, 0, 0, NULL, false,
     "CORS: origins allowed to call the API from a browser, comma-separated, or * (default: none)"},
    {"max-body-bytes", NULL, S, CFG_SIZE, O(max_body_bytes), "8M", 1024, 1 << 30, NULL, false,
     "largest request body (413 above)"},
    {"max-buffered-body-bytes", NULL, S, CFG_SIZE, O(max_buffered_body_bytes), "256M", 1024, BIG, NULL, false,
     "request bodies being received at once, all connections together (503 above)"},
    {"max-n", NULL, S, CFG_INT, O(max_n), "8", 1, 128, NULL, false, "largest n (choices per prompt)"},
    {"max-top-logprobs", NULL, S, CFG_INT, O(max_top_logprobs), "20", 0, 20, NULL, false,
     "largest top_logprobs / logprobs"},
    {"max-stop", NULL, S, CFG_INT, O(max_stop), "16", 0, 16, NULL, false, "most stop strings per request"},
    {"max-logit-bias", NULL, S, CFG_INT, O(max_logit_bias), "1024", 0, 1024, NULL, false,
     "most logit_bias entries per request"},
    {"max-prompts", NULL, S, CFG_INT, O(max_prompts), "64", 1, 4096, NULL, false,
     "most prompts in one completions request"},
    {"max-tokens-policy", NULL, S, CFG_ENUM, O(max_tokens_policy), "clamp", 0, 0, "clamp|reject", false,
     "max_tokens beyond the context: clamp to what is left, or reject with 400"},
    {"max-waiting-requests", NULL, S, CFG_INT, O(max_waiting_requests), "256", 0, 1 << 20, NULL, false,
     "requests waiting for their first token at most; more get 503 (0 = no limit)"},
    {"max-waiting-tokens", NULL, S, CFG_INT, O(max_waiting_tokens), "0", 0, BIG, NULL, false,
     "prompt tokens waiting at most; more get 503 (0 = no limit)"},
    {"max-requests-per-client", NULL, S, CFG_INT, O(max_requests_per_client), "0", 0, 1 << 20, NULL, false,
     "concurrent generation requests per client address; more get 429 (0 = no limit)"},
    {"queue-timeout", NULL, S, CFG_FLOAT, O(queue_timeout_s), "0", 0, 86400, NULL, false,
     "seconds a request may wait for its first token before it is dropped with 503 (0 = none)"},
    {"retry-after", NULL, S, CFG_INT, O(retry_after_s), "1", 0, 3600, NULL, false,
     "Retry-After seconds on 429 and 503"},
    {"keepalive-interval", NULL, S, CFG_FLOAT, O(keepalive_s), "10", 0.05, 3600, NULL, false,
     "seconds of silence before a ': keep-alive' comment on a stream"},
    {"shutdown-timeout", NULL, S, CFG_FLOAT, O(shutdown_timeout_s), "30", 0, 86400, NULL, false,
     "on SIGTERM, seconds in-flight requests get to finish before they are aborted"},
    {"responses-store-max", NULL, S, CFG_INT, O(responses_store_max), "1024", 0, 1 << 24, NULL, false,
     "finished /v1/responses kept in memory for previous_response_id and GET /v1/responses/{id}, "
     "least recently used dropped first (0 = keep none)"},
    {"responses-store-max-bytes", NULL, S, CFG_SIZE, O(responses_store_max_bytes), "256M", 0, BIG, NULL, false,
     "bytes of stored responses (their conversations and objects) at most"},
    {"reasoning-parser", NULL, S, CFG_ENUM, O(reasoning_parser), "auto", 0, 0, "auto|none|think", false,
     "reasoning models: the thinking goes to message.reasoning_content (and .reasoning), the rest is content: "
     "think splits at <think>…</think> (Qwen3, QwQ, DeepSeek-R1 distills), auto when the chat template writes "
     "<think>, none never"},
    {"role", NULL, S, CFG_ENUM, O(role), "both", 0, 0, "both|prefill|decode", false,
     "prefill/decode disaggregation: both (colocated), prefill (computes prompts for decode instances and "
     "serves their KV on --pd-kv-port), decode (prefills on the --pd-prefill instances and decodes)"},
    {"pd-prefill", NULL, S, CFG_STR, O(pd_prefill), NULL, 0, 0, NULL, false,
     "decode role: the prefill instances' KV endpoints, host:port,host:port,..."},
    {"pd-kv-host", NULL, S, CFG_STR, O(pd_kv_host), NULL, 0, 0, NULL, false,
     "prefill role: the address of the KV endpoint (default --host); it has no authentication: keep it on a "
     "private network"},
    {"pd-kv-port", NULL, S, CFG_INT, O(pd_kv_port), "0", 0, 65535, NULL, false,
     "prefill role: the port of the KV endpoint (0 = --port + 1)"},
    {"pd-lease-ms", NULL, S, CFG_INT, O(pd_lease_ms), "10000", 10, 3600000, NULL, false,
     "prefill role: how long a prefilled prompt's KV blocks stay pinned for the decode instance to read"},
    {"pd-local-threshold", NULL, S, CFG_INT, O(pd_local_threshold), "32", 0, 1 << 30, NULL, false,
     "decode role: prompts of fewer tokens (not cached) are prefilled locally"},
    {"pd-on-kv-failure", NULL, S, CFG_ENUM, O(pd_on_kv_failure), "recompute", 0, 0, "fail|recompute|retry", false,
     "decode role, when a remote prefill or its KV transfer fails: fail (the request ends with an error), "
     "recompute (prefill locally: the same output), retry (another prefill instance, then an error)"},
    {"pd-transport", NULL, S, CFG_ENUM, O(pd_transport), "tcp", 0, 0, "tcp|ucx", false,
     "how KV moves between instances: tcp (the prefill instance copies a lease's blocks into the control "
     "connection) or ucx (one-sided reads of its registered KV pool over UCX: shared memory, tcp, RDMA; "
     "UCX_TLS and the other UCX_* variables apply; both roles must say the same)"},
    {"pd-workers", NULL, S, CFG_INT, O(pd_workers), "4", 1, 256, NULL, false,
     "decode role: concurrent remote prefills and transfers"},
    {"pd-ucx-stage", NULL, S, CFG_ENUM, O(pd_ucx_stage), "auto", 0, 0, "auto|always", false,
     "prefill role with --pd-transport ucx: auto (decode instances read the KV pool itself when it is in host "
     "memory, else a staging area in host memory that each lease's blocks are copied into) or always (the "
     "staging area: the pool itself is then never exposed to UCX)"},
    {"pd-stage-bytes", NULL, S, CFG_SIZE, O(pd_stage_bytes), "1G", 1 << 16, BIG, NULL, false,
     "prefill role: the UCX staging area's size; a lease that does not fit is read over the KV port's TCP "
     "connection instead"},
    {"responses-store-ttl", NULL, S, CFG_FLOAT, O(responses_store_ttl_s), "3600", 0, 1e9, NULL, false,
     "seconds a stored response is kept after its last use (0 = no expiry)"},
    {"template-timeout", NULL, S, CFG_FLOAT, O(template_timeout_s), "2", 0.01, 600, NULL, false,
     "seconds one chat-template render may take"},
    {"template-max-bytes", NULL, S, CFG_SIZE, O(template_max_bytes), "4M", 4096, 1 << 30, NULL, false,
     "largest chat-template output"},
    {"log-requests", NULL, S, CFG_BOOL, O(log_requests), "true", 0, 0, NULL, false,
     "one JSON log line per request"},
    {"log-prompts", NULL, S, CFG_BOOL, O(log_prompts), "false", 0, 0, NULL, false,
     "include prompts in the request log lines"},
    {"log-health", NULL, S, CFG_BOOL, O(log_health), "false", 0, 0, NULL, false,
     "log /health, /health/ready and /metrics requests too"},
    /* ---- generate ---- */
    {"prompt", "-p", G, CFG_STR, O(prompt), NULL, 0, 0, NULL, false, "the prompt text (BOS added when the vocabulary asks)"},
    {"n-predict", "-n", G, CFG_INT, O(n_predict), "128", 0, 1 << 24, NULL, false, "tokens to generate at most"},
    {"temp", NULL, G, CFG_FLOAT, O(temp), "0.8", 0, 100, NULL, false, "temperature (0 = greedy)"},
    {"top-k", NULL, G, CFG_INT, O(top_k), "40", 0, 2147483647.0, NULL, false, "top-k (0 = off)"},
    {"top-p", NULL, G, CFG_FLOAT, O(top_p), "0.95", 0, 1, NULL, false, "top-p (1 = off; must be > 0)"},
    {"min-p", NULL, G, CFG_FLOAT, O(min_p), "0.05", 0, 1, NULL, false, "min-p (0 = off)"},
    {"repeat-penalty", NULL, G, CFG_FLOAT, O(repeat_penalty), "1", 0.01, 100, NULL, false,
     "repetition penalty (1 = off)"},
    {"stop", NULL, G, CFG_LIST, O(stop), NULL, 0, 0, NULL, false, "stop string (repeatable, at most 16)"},
    {"seed", NULL, G, CFG_U64, O(seed), NULL, 0, 0, NULL, false, "sampling seed (default: the clock)"},
    {"ignore-eos", NULL, G, CFG_BOOL, O(ignore_eos), "false", 0, 0, NULL, false,
     "keep generating past end-of-generation tokens"},
    {"ids", NULL, G, CFG_BOOL, O(print_ids), "false", 0, 0, NULL, false,
     "print the generated token ids on one line instead of the text"},
    {"verbose", "-v", G, CFG_BOOL, O(verbose), "false", 0, 0, NULL, false, "timings on stderr"},
    /* ---- bench ---- */
    {"num-requests", NULL, B, CFG_INT, O(num_requests), "64", 1, 1000000, NULL, false, "requests to run"},
    {"input-len-range", NULL, B, CFG_RANGE, O(input_len), "64:512", 1, 1 << 24, NULL, false,
     "prompt lengths A:B (uniform), or one length"},
    {"output-len-range", NULL, B, CFG_RANGE, O(output_len), "64:256", 1, 1 << 24, NULL, false,
     "output lengths C:D (uniform, ignore_eos), or one length"},
    {"seed", NULL, B, CFG_U64, O(seed), "0", 0, 0, NULL, false, "seed of the random prompts and lengths"},
    {"request-rate", NULL, B, CFG_FLOAT, O(request_rate), "0", 0, 1e6, NULL, false,
     "requests per second, Poisson arrivals (0 = all at once; chunked: one long prompt every 1/rate s, default 2 s)"},
    {"prompt-file", NULL, B, CFG_STR, O(prompt_file), NULL, 0, 0, NULL, false,
     "real prompts instead of random ids: the file's texts, separated by lines '%%', request i "
     "takes text i mod n (tokenized with BOS, special tokens spelled in it parsed; --input-len-range is then unused)"},
    {"scenario", NULL, B, CFG_ENUM, O(scenario), "offline", 0, 0, "offline|chunked", false,
     "offline: the request mix above; chunked: 8 long decodes + a stream of 2,000-token prompts"},
    /* ---- perplexity ---- */
    {"file", "-f", P, CFG_STR, O(text_file), NULL, 0, 0, NULL, false, "the text file to score"},
    {"ctx", "-c", P, CFG_INT, O(ppl_ctx), "512", 0, 1 << 24, NULL, false,
     "window length in tokens (the default is capped at the model's context; a larger "
     "value given is an error)"},
    {"kl-base", NULL, P, CFG_STR, O(kl_base), NULL, 0, 0, NULL, false,
     "base model: also report KL divergence (base || this) and top-1 agreement over the "
     "scored positions"},
};
#undef O
#undef S
#undef G
#undef B
#undef P
#undef E
#undef Q
#define CFG_ENGINE (CFG_CMD_SERVE | CFG_CMD_GENERATE | CFG_CMD_BENCH | CFG_CMD_PERPLEXITY)
_Static_assert(IFD_ARRAY_LEN(OPTS) <= CFG_MAX_OPTS, "raise CFG_MAX_OPTS");

/* What each command says about itself in --help, and the defaults it sets over the
 * table's ("name=value"). */
typedef struct cfg_cmd_spec {
    cfg_cmd cmd;
    const char *name;
    const char *usage;
    const char *about;
    const char *defaults[4];
} cfg_cmd_spec;

static const cfg_cmd_spec CMDS[] = {
    {CFG_CMD_SERVE, "serve", "inferd serve -m FILE [options]",
     "Serves the model over an OpenAI-compatible HTTP API. Every option may also be\n"
     "given in a JSON file (--config FILE, keys as below) or as an INFERD_* environment\n"
     "variable; flags win over the environment, which wins over the file.",
     {NULL}},
    {CFG_CMD_GENERATE, "generate", "inferd generate -m FILE -p TEXT [options]",
     "One completion through the engine API, printed as it is generated (UTF-8 safe,\n"
     "stop strings held back), or with --ids the generated token ids on one line.",
     {"max-num-seqs=1", "kv-cache-fraction=0.05", NULL}},
    {CFG_CMD_BENCH, "bench", "inferd bench (-m FILE | --random-weights SHAPE [--dtype TYPE]) [options]",
     "Offline throughput: random prompts (normal vocabulary tokens), ignore_eos, output\n"
     "lengths drawn from a range, run through the threaded engine. Prints a table and,\n"
     "as the last line, one JSON object with the figures.",
     {NULL}},
    {CFG_CMD_PERPLEXITY, "perplexity", "inferd perplexity -m FILE -f TEXT [--ctx N] [--kl-base BASE.gguf] [options]",
     "Perplexity of a text as llama.cpp's llama-perplexity computes it: consecutive\n"
     "windows of --ctx tokens (BOS first when the model adds one), the second half of\n"
     "each scored, all windows run as concurrent prompt-logprob requests. Prints the\n"
     "running figure per window (stderr) and, last, 'ppl VALUE +/- ERROR'.",
     {"max-num-batched-tokens=2048", "enable-prefix-caching=false", NULL}},
    {CFG_CMD_QUANTIZE, "quantize", "inferd quantize IN.gguf OUT.gguf --type TYPE [options]",
     "Writes a copy of IN with its F32/F16/BF16 linear weights (q k v o gate up down;\n"
     "output.weight with --quantize-lm-head) quantized to TYPE: every metadata key, the\n"
     "tokenizer and the chat template copied, tensors in IN's order. int8 / int4 files\n"
     "declare inferd's layouts (inferd.quantization.*) and load only in inferd; they give\n"
     "the same logits as --quantize on load. With --allow-requantize, linear weights of\n"
     "other quantized types are converted too (e.g. a Q4_0 copy of a Q5_0 draft model:\n"
     "smaller and faster, at some accuracy).",
     {NULL}},
};

static const cfg_cmd_spec *cmd_spec(cfg_cmd cmd) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(CMDS); i++)
        if (CMDS[i].cmd == cmd) return &CMDS[i];
    IFD_ASSERT(!"unknown command");
    return &CMDS[0];
}

static const char *const *cfg_str_at(const server_config *c, const cfg_opt *o) {
    return (const char *const *)((const char *)c + o->off);
}

/* "max-num-seqs", "max_num_seqs", "--max-num-seqs" -> cmd's option, or NULL */
static const cfg_opt *cfg_find(unsigned cmd, const char *name, size_t n) {
    while (n && *name == '-') name++, n--;
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
        const char *on = OPTS[i].name;
        if (!(OPTS[i].cmds & cmd) || strlen(on) != n) continue;
        size_t k = 0;
        for (; k < n; k++) {
            char a = name[k] == '_' ? '-' : name[k];
            if (a != on[k]) break;
        }
        if (k == n) return &OPTS[i];
    }
    return NULL;
}

static int parse_bool(const char *v, bool *out) {
    if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        *out = true;
    else if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no") ||
             !strcasecmp(v, "off"))
        *out = false;
    else
        return -1;
    return 0;
}

/* an integer in [lo, hi], the whole of s */
static int parse_bounded_int(const cfg_opt *o, const char *s, int64_t *out, char *err, size_t eb) {
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE)
        return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected an integer or A:B", o->name);
    if ((double)v < o->lo || (double)v > o->hi)
        return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: out of range [%.17g, %.17g]", o->name, o->lo, o->hi);
    *out = v;
    return 0;
}

static int opt_set(server_config *c, const cfg_opt *o, const char *v, char *err, size_t eb) {
    void *p = (char *)c + o->off;
    char *end = NULL;
    switch (o->type) {
    case CFG_STR: {
        char *s = strdup(v);
        if (!s) return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
        free(*(char **)p);
        *(char **)p = s;
        return 0;
    }
    case CFG_LIST: {
        cfg_strlist *l = p;
        if (!v[0]) return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: empty value", o->name);
        if (l->n >= CFG_MAX_LIST)
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: at most %d values", o->name, CFG_MAX_LIST);
        if (!(l->v[l->n] = strdup(v))) return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
        l->n++;
        return 0;
    }
    case CFG_BOOL:
        if (parse_bool(v, (bool *)p))
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected true or false", o->name);
        return 0;
    case CFG_ENUM: {
        int idx = 0;
        for (const char *s = o->choices; *s; idx++) {
            const char *bar = strchr(s, '|');
            size_t n = bar ? (size_t)(bar - s) : strlen(s);
            if (strlen(v) == n && !strncmp(v, s, n)) {
                *(int64_t *)p = idx;
                return 0;
            }
            s += n + (bar ? 1 : 0);
        }
        return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected one of %s", o->name, o->choices);
    }
    case CFG_U64: {
        errno = 0;
        unsigned long long u = strtoull(v, &end, 10);
        if (!isdigit((unsigned char)v[0]) || *end || errno == ERANGE)
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected an unsigned 64-bit integer", o->name);
        *(uint64_t *)p = (uint64_t)u;
        return 0;
    }
    case CFG_RANGE: {
        char buf[64];
        int64_t a, b;
        if (strlen(v) >= sizeof buf)
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected an integer or A:B", o->name);
        snprintf(buf, sizeof buf, "%s", v);
        char *colon = strchr(buf, ':');
        if (colon) *colon = 0;
        if (parse_bounded_int(o, buf, &a, err, eb)) return IFD_ERR_INVALID;
        b = a;
        if (colon && parse_bounded_int(o, colon + 1, &b, err, eb)) return IFD_ERR_INVALID;
        if (a > b) return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: A:B needs A <= B", o->name);
        ((int64_t *)p)[0] = a;
        ((int64_t *)p)[1] = b;
        return 0;
    }
    case CFG_INT:
    case CFG_SIZE:
    case CFG_FLOAT:
    case CFG_FRACTION: {
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || errno == ERANGE || !isfinite(d))
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: not a number", o->name);
        if (o->type == CFG_SIZE && *end) {
            double mul = 1;
            switch (toupper((unsigned char)*end)) {
            case 'K': mul = 1024.0; break;
            case 'M': mul = 1024.0 * 1024; break;
            case 'G': mul = 1024.0 * 1024 * 1024; break;
            case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
            default: mul = 0;
            }
            if (mul == 0) return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: bad size suffix", o->name);
            d *= mul;
            end++;
            if (toupper((unsigned char)*end) == 'I') end++;
            if (toupper((unsigned char)*end) == 'B') end++;
        }
        if (*end) return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: not a number", o->name);
        const bool is_float = o->type == CFG_FLOAT || o->type == CFG_FRACTION;
        if (!is_float && d != floor(d))
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected an integer", o->name);
        if (o->type == CFG_FRACTION && !(d > 0 && d <= 1))
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: out of range (0, 1]", o->name);
        if (o->type != CFG_FRACTION && (d < o->lo || d > o->hi))
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: out of range [%.17g, %.17g]", o->name,
                            o->lo, o->hi);
        if (is_float)
            *(double *)p = d;
        else
            *(int64_t *)p = (int64_t)d;
        return 0;
    }
    }
    return IFD_ERR_INTERNAL;
}

/* set and remember that it was given */
static int opt_give(server_config *c, const cfg_opt *o, const char *v, char *err, size_t eb) {
    int rc = opt_set(c, o, v, err, eb);
    if (!rc) c->given[o - OPTS] = true;
    return rc;
}

/* the command's own default for o over the table's, or NULL */
static const char *cmd_default(const cfg_cmd_spec *cs, const cfg_opt *o) {
    size_t n = strlen(o->name);
    for (int i = 0; i < 4 && cs->defaults[i]; i++)
        if (!strncmp(cs->defaults[i], o->name, n) && cs->defaults[i][n] == '=') return cs->defaults[i] + n + 1;
    return NULL;
}

static const char *opt_default(const cfg_cmd_spec *cs, const cfg_opt *o) {
    const char *d = cmd_default(cs, o);
    return d ? d : o->def;
}

void config_init(server_config *c, cfg_cmd cmd) {
    memset(c, 0, sizeof *c);
    c->cmd = cmd;
    const cfg_cmd_spec *cs = cmd_spec(cmd);
    char err[256];
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
        const char *d = opt_default(cs, &OPTS[i]);
        if ((OPTS[i].cmds & cmd) && d) IFD_ASSERT(opt_set(c, &OPTS[i], d, err, sizeof err) == 0);
    }
}

void server_config_init(server_config *c) { config_init(c, CFG_CMD_SERVE); }

void server_config_deinit(server_config *c) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
        void *p = (char *)c + OPTS[i].off;
        if (OPTS[i].type == CFG_STR) {
            free(*(char **)p);
            *(char **)p = NULL;
        } else if (OPTS[i].type == CFG_LIST) {
            cfg_strlist *l = p;
            for (int k = 0; k < l->n; k++) free(l->v[k]);
            l->n = 0;
        }
    }
    free(c->config_file);
    c->config_file = NULL;
}

int server_config_set(server_config *c, const char *name, const char *value, char *err,
                      size_t err_bytes) {
    const cfg_opt *o = cfg_find(c->cmd, name, strlen(name));
    if (!o) return ifd_errf(err, err_bytes, IFD_ERR_NOT_FOUND, "unknown option '%s'", name);
    return opt_give(c, o, value, err, err_bytes);
}

bool config_given(const server_config *c, const char *name) {
    const cfg_opt *o = cfg_find(c->cmd, name, strlen(name));
    return o && c->given[o - OPTS];
}

void config_engine_options(const server_config *c, inferd_engine_options *o) {
    o->model_path = c->model;
    o->n_threads = (int)c->threads;
    o->block_size = (int32_t)c->block_size;
    o->kv_cache_bytes = c->kv_cache_memory;
    o->kv_cache_fraction = c->kv_cache_fraction;
    o->max_num_seqs = (int32_t)c->max_num_seqs;
    o->max_num_batched_tokens = (int32_t)c->max_num_batched_tokens;
    o->max_step_ms = c->max_step_ms;
    o->max_prefill_stall_ms = c->max_prefill_stall_ms;
    o->max_model_len = (int32_t)c->max_model_len;
    o->enable_prefix_caching = c->enable_prefix_caching;
    o->reference_kernels = c->reference_kernels;
    static const char *const KV_DTYPES[] = {"auto", "f32", "f16", "bf16", "int8", "fp8"};
    o->kv_cache_dtype = KV_DTYPES[c->kv_cache_dtype];
    /* the CFG_ENUM choices of device, random-weights and dtype, in table order */
    static const inferd_device DEVICES[] = {INFERD_DEVICE_AUTO, INFERD_DEVICE_CUDA, INFERD_DEVICE_CPU,
                                            INFERD_DEVICE_EMU};
    static const char *const SHAPES[] = {NULL, "tiny", "llama3-8b", "qwen2.5-1.5b"};
    static const char *const DTYPES[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"};
    o->device = DEVICES[c->device];
    o->gpu_memory_utilization = c->gpu_memory_utilization;
    o->no_cuda_graphs = !c->cuda_graphs;
    o->random_weights = SHAPES[c->random_weights];
    o->random_dtype = DTYPES[c->random_dtype];
    o->random_seed = c->random_seed;
    static const int BITS[] = {0, 8, 4}, GROUPS[] = {32, 64, 128};
    o->quantize_bits = BITS[c->quantize];
    o->quantize_group_size = GROUPS[c->quantize_group_size];
    o->quantize_lm_head = c->quantize_lm_head;
    o->quantize_keep_layers = c->quantize_keep_layers;
    o->calibration_file = c->calibration;
    o->draft_model_path = c->draft_model;
    o->num_speculative_tokens = (int32_t)c->num_speculative_tokens;
    o->draft_vocab = (int32_t)c->draft_vocab;
    o->speculative_ngram = c->speculative_ngram;
    o->ngram_min = (int32_t)c->ngram_min;
    o->ngram_max = (int32_t)c->ngram_max;
    o->speculative_adaptive = c->speculative_adaptive;
    o->spec_min_acceptance = c->spec_min_acceptance;
    o->draft_p_min = c->draft_p_min;
}

static int load_file(server_config *c, const char *path, char *err, size_t eb) {
    char *text = NULL;
    size_t n = 0;
    char e2[256];
    if (ifd_read_file(path, &text, &n, e2, sizeof e2))
        return ifd_errf(err, eb, IFD_ERR_IO, "--config %s: %s", path, e2);
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ifd_errf(err, eb, IFD_ERR_FORMAT, "--config %s: not a JSON object", path);
    }
    int rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const cfg_opt *o = cfg_find(c->cmd, it->string, strlen(it->string));
        if (!o) {
            rc = ifd_errf(err, eb, IFD_ERR_INVALID, "--config %s: unknown option '%s'", path, it->string);
            break;
        }
        char num[64];
        const char *v = NULL;
        if (cJSON_IsString(it))
            v = it->valuestring;
        else if (cJSON_IsBool(it))
            v = cJSON_IsTrue(it) ? "true" : "false";
        else if (cJSON_IsNumber(it)) {
            snprintf(num, sizeof num, "%.17g", it->valuedouble);
            v = num;
        } else if (cJSON_IsNull(it))
            continue;
        if (!v) {
            rc = ifd_errf(err, eb, IFD_ERR_INVALID, "--config %s: '%s' has the wrong type", path, it->string);
            break;
        }
        if ((rc = opt_give(c, o, v, e2, sizeof e2))) {
            ifd_errf(err, eb, rc, "--config %s: %s", path, e2);
            break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

static void env_name(const cfg_opt *o, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "INFERD_");
    for (const char *s = o->name; *s && k + 1 < cap; s++)
        out[k++] = *s == '-' ? '_' : (char)toupper((unsigned char)*s);
    out[k] = 0;
}

int config_load(server_config *c, int argc, char **argv, char *err, size_t eb) {
    const bool serve = c->cmd == CFG_CMD_SERVE;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            config_help(c->cmd, stdout);
            return 1;
        }
    if (serve) {
        /* 1. --config (or INFERD_CONFIG) first: the file sits under env and flags */
        const char *cfg = getenv("INFERD_CONFIG");
        for (int i = 1; i < argc; i++) {
            if (!strcmp(argv[i], "--config") && i + 1 < argc) cfg = argv[i + 1];
            else if (!strncmp(argv[i], "--config=", 9)) cfg = argv[i] + 9;
        }
        if (cfg && *cfg) {
            c->config_file = strdup(cfg);
            if (load_file(c, cfg, err, eb)) return -1;
        }
        /* 2. environment */
        for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
            if (!(OPTS[i].cmds & c->cmd)) continue;
            char name[96], e2[256];
            env_name(&OPTS[i], name, sizeof name);
            const char *v = getenv(name);
            if (!v) continue;
            if (opt_give(c, &OPTS[i], v, e2, sizeof e2)) {
                ifd_errf(err, eb, IFD_ERR_INVALID, "%s: %s", name, e2);
                return -1;
            }
        }
    }
    /* 3. flags */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (serve && !strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (serve && !strncmp(a, "--config=", 9)) continue;
        const char *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const cfg_opt *o = NULL;
        bool negated = false;
        for (size_t k = 0; k < IFD_ARRAY_LEN(OPTS) && a[0] == '-' && a[1] != '-'; k++)
            if ((OPTS[k].cmds & c->cmd) && OPTS[k].alias && !strcmp(OPTS[k].alias, a)) o = &OPTS[k];
        if (!o && !strncmp(a, "--", 2)) o = cfg_find(c->cmd, a, n);
        if (!o && !strncmp(a, "--no-", 5)) {
            o = cfg_find(c->cmd, a + 5, n - 5);
            if (o && o->type != CFG_BOOL) o = NULL;
            negated = o != NULL;
        }
        if (!o) return ifd_errf(err, eb, IFD_ERR_INVALID, "unknown option '%s' (see --help)", a);
        const char *v;
        if (o->type == CFG_BOOL && !eq) {
            v = negated ? "false" : "true";
        } else if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s needs a value", o->name);
            v = argv[++i];
        }
        char e2[256];
        if (opt_give(c, o, v, e2, sizeof e2)) {
            snprintf(err, eb, "%s", e2);
            return -1;
        }
    }
    return 0;
}

int server_config_load(server_config *c, int argc, char **argv, char *err, size_t eb) {
    return config_load(c, argc, argv, err, eb);
}

void config_help(cfg_cmd cmd, FILE *fp) {
    const cfg_cmd_spec *cs = cmd_spec(cmd);
    const bool serve = cmd == CFG_CMD_SERVE;
    fprintf(fp, "usage: %s\n\n%s\n\n", cs->usage, cs->about);
    for (int pass = 0; pass < 2; pass++) {
        /* the engine options, then the command's own */
        if (pass == 0 && cmd == CFG_CMD_QUANTIZE) continue; /* it runs no engine */
        fprintf(fp, pass == 0 ? "engine options (the same in serve, generate, bench and perplexity):\n"
                              : "\n%s options:\n", cs->name);
        if (pass == 1 && serve)
            fprintf(fp, "  --config FILE                 JSON config file (INFERD_CONFIG)\n");
        for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
            const cfg_opt *o = &OPTS[i];
            const bool engine_opt = (o->cmds & CFG_ENGINE) == CFG_ENGINE && cmd != CFG_CMD_QUANTIZE;
            if (!(o->cmds & cmd) || engine_opt != (pass == 0)) continue;
            const char *meta = o->type == CFG_STR || o->type == CFG_LIST ? " STR"
                               : o->type == CFG_BOOL                     ? ""
                               : o->type == CFG_FLOAT || o->type == CFG_FRACTION ? " X"
                               : o->type == CFG_SIZE                     ? " BYTES"
                               : o->type == CFG_ENUM                     ? " MODE"
                               : o->type == CFG_RANGE                    ? " A:B"
                                                                         : " N";
            char flag[64], env[96];
            snprintf(flag, sizeof flag, "%s%s--%s%s", o->alias ? o->alias : "", o->alias ? ", " : "",
                     o->name, meta);
            fprintf(fp, "  %-29s %s", flag, o->help);
            if (o->type == CFG_ENUM) fprintf(fp, " [%s]", o->choices);
            const char *d = opt_default(cs, o);
            if (d && !o->secret) fprintf(fp, " (default %s)", d);
            if (serve) {
                env_name(o, env, sizeof env);
                fprintf(fp, " {%s}", env);
            }
            fputc('\n', fp);
        }
    }
    fprintf(fp, "\nA boolean option --X is turned off with --no-X.\n");
}

void server_config_help(FILE *fp) { config_help(CFG_CMD_SERVE, fp); }

char *server_config_effective_json(const server_config *c) {
    sbuf b = {0};
    sbuf_puts(&b, "{");
    bool first = true;
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
        const cfg_opt *o = &OPTS[i];
        if (!(o->cmds & c->cmd)) continue;
        const void *p = (const char *)c + o->off;
        if (!first) sbuf_puts(&b, ",");
        first = false;
        sbuf_json_str(&b, o->name, strlen(o->name));
        sbuf_puts(&b, ":");
        switch (o->type) {
        case CFG_STR: {
            const char *s = *cfg_str_at(c, o);
            if (!s) sbuf_puts(&b, "null");
            else if (o->secret) sbuf_puts(&b, "\"(set)\"");
            else sbuf_json_str(&b, s, strlen(s));
            break;
        }
        case CFG_LIST: {
            const cfg_strlist *l = p;
            sbuf_puts(&b, "[");
            for (int k = 0; k < l->n; k++) {
                if (k) sbuf_puts(&b, ",");
                sbuf_json_str(&b, l->v[k], strlen(l->v[k]));
            }
            sbuf_puts(&b, "]");
            break;
        }
        case CFG_BOOL: sbuf_puts(&b, *(const bool *)p ? "true" : "false"); break;
        case CFG_FLOAT:
        case CFG_FRACTION: sbuf_json_num(&b, *(const double *)p); break;
        case CFG_INT:
        case CFG_SIZE: sbuf_printf(&b, "%lld", (long long)*(const int64_t *)p); break;
        case CFG_U64: sbuf_printf(&b, "%llu", (unsigned long long)*(const uint64_t *)p); break;
        case CFG_RANGE:
            sbuf_printf(&b, "\"%lld:%lld\"", (long long)((const int64_t *)p)[0], (long long)((const int64_t *)p)[1]);
            break;
        case CFG_ENUM: {
            int64_t idx = *(const int64_t *)p;
            const char *s = o->choices;
            for (int64_t k = 0; k < idx && strchr(s, '|'); k++) s = strchr(s, '|') + 1;
            const char *bar = strchr(s, '|');
            sbuf_json_str(&b, s, bar ? (size_t)(bar - s) : strlen(s));
            break;
        }
        }
    }
    if (c->config_file) {
        sbuf_puts(&b, ",\"config\":");
        sbuf_json_str(&b, c->config_file, strlen(c->config_file));
    }
    sbuf_puts(&b, "}");
    if (b.oom) {
        sbuf_free(&b);
        return NULL;
    }
    return sbuf_take(&b, NULL);
}
