/* inferd.h — the public C API: embed the inferd engine without HTTP.
 *
 * Create an engine from a model path and options, tokenize text or render a chat
 * template with the model's vocabulary, submit requests (prompt token ids + sampling
 * parameters), receive output through a callback, abort, destroy. The engine runs its
 * own thread (a libuv loop) that batches every live request into one forward pass per
 * step. This header stands alone: it needs only the C standard library.
 *
 * Thread-safety: inferd_submit, inferd_abort, inferd_engine_stats, inferd_engine_healthy,
 * the model facts and the tokenizer / chat-template functions may be called from any
 * thread. Output callbacks run on the engine thread and must not block or call back
 * into the engine except inferd_abort. */
#ifndef INFERD_H
#define INFERD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct inferd_engine inferd_engine;

/* Status codes: 0 or one of these negative values (the same numbers as the
 * implementation's status list). */
enum {
    INFERD_OK = 0,
    INFERD_ERR_NOMEM = -1,
    INFERD_ERR_IO = -2,
    INFERD_ERR_FORMAT = -3,       /* invalid or corrupt file */
    INFERD_ERR_UNSUPPORTED = -4,
    INFERD_ERR_INVALID = -5,      /* invalid argument */
    INFERD_ERR_NOT_FOUND = -6,
    INFERD_ERR_LIMIT = -7,        /* a size or time limit */
    INFERD_ERR_INTERNAL = -8,
    INFERD_ERR_TEMPLATE = -9,     /* a chat template failed to parse or raised */
    INFERD_ERR_BUSY = -10,        /* shutting down */
    INFERD_ERR_ABORTED = -11,
    INFERD_ERR_DEVICE_LOST = -12, /* the device failed for good (a sticky CUDA error): the
                                     engine is dead, every request fails; restart the process */
};

/* Where the engine computes (--device). AUTO: CUDA when a device is present, else CPU;
 * EMU: the CUDA backend run on the CPU under the SIMT emulation (tests). */
typedef enum inferd_device {
    INFERD_DEVICE_AUTO = 0,
    INFERD_DEVICE_CPU = 1,
    INFERD_DEVICE_CUDA = 2,
    INFERD_DEVICE_EMU = 3,
} inferd_device;

typedef struct inferd_engine_options {
    const char *model_path;         /* GGUF file; ignored when random_weights is set */
    /* A model built in memory instead of a file (benchmarks, tests; its output is
     * noise): a shape preset ("tiny", "llama3-8b", "qwen2.5-1.5b"), weights of
     * random_dtype ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"; NULL = "f32")
     * drawn from random_seed, and a synthetic vocabulary (byte tokens + filler pieces). */
    const char *random_weights;     /* NULL = load model_path */
    const char *random_dtype;
    uint64_t random_seed;
    /* Quantize on load (weight-only): the F32/F16/BF16 linear weights (q k v o gate up
     * down; output.weight with quantize_lm_head) become INT8 (symmetric, fp16 scale per
     * group) or INT4 (asymmetric, fp16 scale and minimum per group); embeddings and
     * norms stay. 0 = none, 8, 4. */
    int quantize_bits;
    int quantize_group_size;          /* 32 | 64 | 128; 0 = 128 */
    bool quantize_lm_head;            /* output.weight too (never a tied embedding) */
    const char *quantize_keep_layers; /* layers left as they are: "0,1,21", "0-3,21"; NULL = none */
    const char *calibration_file;     /* AWQ calibration text (not available yet: an error) */
    inferd_device device;           /* default INFERD_DEVICE_AUTO */
    double gpu_memory_utilization;  /* CUDA: fraction of the device's free memory the
                                       weights, activations and KV pool may take, (0, 1]
                                       (default 0.90; 0 means the default) */
    bool no_device_sampling;        /* draw every token on the host even when the backend
                                       samples on the device (tests, debugging) */
    bool no_cuda_graphs;            /* CUDA: run every step eagerly (debugging); default
                                       false: decode steps replay CUDA graphs */
    int n_threads;                  /* CPU worker threads; 0 = all cores */
    int32_t block_size;             /* KV block size in tokens (default 16) */
    int64_t kv_cache_bytes;         /* KV pool budget in bytes; 0 = use kv_cache_fraction */
    double kv_cache_fraction;       /* of available memory when kv_cache_bytes == 0 (default 0.25) */
    int32_t max_num_seqs;           /* running-set cap (default 64) */
    int32_t max_num_batched_tokens; /* token budget per step: a hard cap */
    double max_step_ms;             /* decode stall bound: a step that mixes prefill chunks
                                       with decodes is sized from the backend's measured
                                       cost per token to take at most this long (0 = off:
                                       only max_num_batched_tokens bounds it) */
    double max_prefill_stall_ms;    /* prefill bursts: when prompts wait, decoding may pause
                                       for up to this long so they run at the full prefill
                                       rate; each sequence at most once per 128 of its
                                       tokens, so at most 1 gap in 128 is long (0 = never:
                                       prompts only share mixed steps) */
    int32_t max_model_len;          /* 0 = the model's context length */
    bool enable_prefix_caching;     /* default true */
    bool reference_kernels;         /* CPU: plain C reference kernels (slow; for tests) */
    const char *kv_cache_dtype;     /* KV cache element type: "auto" (or NULL), "f32", "f16",
                                       "bf16", "int8", "fp8"; auto: f16 on the CPU, bf16 on
                                       CUDA (every backend stores every dtype) */
    bool threaded;                  /* run the engine thread (default true); false: the caller
                                       drives it with inferd_engine_step (tests, bench) */
    /* Speculative decoding: a draft model (same vocabulary, its own KV pool from the same
     * budget) and/or n-gram (prompt lookup) proposals; the target verifies them in the
     * step's flat batch. Greedy and seeded output are those of plain decoding, bit for bit. */
    const char *draft_model_path;   /* NULL: no draft model */
    int32_t num_speculative_tokens; /* K, the most drafts per sequence and step (default 4, 1..16) */
    int32_t draft_vocab;            /* CPU: the draft proposes only ids below this (its lm head
                                       computes those rows only); 0 (default): all */
    bool speculative_ngram;         /* n-gram proposals (alone, or first with a draft model) */
    int32_t ngram_min, ngram_max;   /* pattern lengths tried, longest first (default 1..4) */
    bool speculative_adaptive;      /* default true: k in 0..K per sequence and step from its
                                       acceptance and the measured step costs; false: always
                                       K (what the proposer has), for tests */
    double spec_min_acceptance;     /* a sequence whose acceptance falls below this stops
                                       speculating for a while (default 0.3) */
    double draft_p_min;             /* a draft-model token after the first that the draft
                                       itself gives less than this probability ends the
                                       sequence's drafts for the step and is not proposed
                                       (0, the default: off) */
} inferd_engine_options;

void inferd_engine_options_default(inferd_engine_options *o);
/* err gets one line on failure. On success it is empty, or holds one line worth
 * logging as a warning: max_model_len was clamped to what the KV pool holds (the
 * clamped value is what inferd_max_model_len returns and submit enforces). A pool of
 * fewer than two blocks is refused. */
int inferd_engine_create(inferd_engine **out, const inferd_engine_options *o, char *err,
                         size_t err_bytes);
/* Aborts what is still running, joins the engine thread, frees everything. */
void inferd_engine_destroy(inferd_engine *e);

typedef enum inferd_finish_reason {
    INFERD_FINISH_NONE = 0,
    INFERD_FINISH_STOP = 1,   /* EOS / stop token / stop string */
    INFERD_FINISH_LENGTH = 2, /* max_tokens or context full */
    INFERD_FINISH_ABORT = 3,  /* inferd_abort, disconnect, shutdown */
    INFERD_FINISH_ERROR = 4,
} inferd_finish_reason;

typedef struct inferd_logit_bias {
    int32_t id;
    float bias;
} inferd_logit_bias;

#define INFERD_MAX_STOP 16
#define INFERD_MAX_TOP_LOGPROBS 20

/* A compiled grammar for constrained decoding (structured outputs): every token the
 * engine draws for a request that carries one keeps the output a prefix of a sentence of
 * the grammar, and end-of-generation is allowed exactly where the grammar can end (the
 * output then ends there by itself when nothing may follow). Compile once, use for any
 * number of requests (the engine takes its own reference at submit); reference counted:
 * inferd_grammar_free drops the caller's reference. Compiling is thread-safe; a grammar
 * is matched on the engine thread only. */
typedef struct inferd_grammar inferd_grammar;
typedef enum inferd_grammar_kind {
    INFERD_GRAMMAR_GBNF = 0,        /* llama.cpp's GBNF, start rule "root" */
    INFERD_GRAMMAR_JSON_SCHEMA = 1, /* a JSON Schema (text); unsupported keywords are errors */
    INFERD_GRAMMAR_REGEX = 2,       /* an ECMAScript regular expression, matched whole */
    INFERD_GRAMMAR_JSON_OBJECT = 3, /* any JSON object (text ignored) */
} inferd_grammar_kind;
/* 0, or -1 with one line in err (where and why). */
int inferd_grammar_compile(inferd_grammar_kind kind, const char *text, size_t n, inferd_grammar **out, char *err,
                           size_t err_bytes);
void inferd_grammar_free(inferd_grammar *g); /* NULL ok */

typedef struct inferd_sampling {
    float temperature;        /* 0 = greedy */
    float top_p;              /* 1 = off */
    int32_t top_k;            /* 0 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off */
    float presence_penalty;   /* 0 = off */
    float frequency_penalty;  /* 0 = off */
    uint64_t seed;            /* used when has_seed; else drawn from the engine */
    bool has_seed;
    int32_t max_tokens;       /* generated tokens cap (clamped to the context); 0: run the
                                 prompt only (prompt logprobs, log-likelihoods) and finish
                                 with INFERD_FINISH_LENGTH and no token */
    bool ignore_eos;
    int32_t n;                /* choices (forked sequences), >= 1 */
    int32_t logprobs;         /* -1 = off, else top-N alternatives (0..20) */
    int32_t prompt_logprobs;  /* -1 = off, else the logprob of every prompt token after the
                                 first, with top-N alternatives (0..20); the prompt is then
                                 computed in full (no prefix-cache hit) */
    const inferd_logit_bias *logit_bias;
    int32_t n_logit_bias;
    const char *const *stop;  /* stop strings (copied at submit) */
    int32_t n_stop;
    const int32_t *stop_token_ids;
    int32_t n_stop_token_ids;
    const inferd_grammar *grammar; /* constrained decoding, or NULL (referenced at submit) */
    /* reasoning models: the grammar applies only after the output's reasoning, which
     * ends with reasoning_end (e.g. "</think>"); with reasoning_start ("<think>", a token
     * of the vocabulary) the output may also begin with it, or go straight to the
     * grammar; without it the output starts inside the reasoning (the prompt opened
     * it). NULL reasoning_end: the grammar applies from the first token. Copied. */
    const char *reasoning_start, *reasoning_end;
} inferd_sampling;

void inferd_sampling_default(inferd_sampling *s);

typedef struct inferd_token_logprob {
    int32_t id;
    float logprob;
} inferd_token_logprob;

/* One event for one choice of one request. Pointers are valid only during the callback. */
typedef struct inferd_output {
    uint64_t request_id;
    int32_t index;              /* choice index (0..n-1) */
    const int32_t *tokens;      /* new token ids this step */
    int32_t n_tokens;
    const char *text;           /* new text: whole UTF-8 characters, stop strings held back */
    size_t text_bytes;
    /* logprobs for each new token when requested: n_tokens entries of 1 + n_top */
    const inferd_token_logprob *logprobs; /* [n_tokens][1 + n_top]: chosen, then top-N */
    int32_t n_top;
    /* prompt logprobs (sampling.prompt_logprobs >= 0): on the first event of choice 0
     * only, entries for prompt tokens 1..n_prompt-1 (token 0 has no context), each
     * 1 + n_prompt_top entries: the prompt token itself, then the top-N */
    const inferd_token_logprob *prompt_logprobs; /* [n_prompt_logprobs][1 + n_prompt_top] */
    int32_t n_prompt_logprobs;
    int32_t n_prompt_top;
    bool finished;
    inferd_finish_reason finish_reason;
    const char *stop_reason;    /* matched stop string, or NULL */
    int32_t prompt_tokens;      /* usage, on every event */
    int32_t completion_tokens;  /* so far, this choice */
    int32_t cached_tokens;      /* prompt tokens served from the prefix cache */
    int32_t spec_draft_tokens;  /* speculative decoding, this choice so far: drafts verified */
    int32_t spec_accepted_tokens; /* ... and accepted */
    double queue_s;             /* time from submit to first schedule */
    double ttft_s;              /* time from submit to the first token (0 until then) */
    /* PD, prefill side (request kv_hold_ms > 0): on the final event of a request that
     * computed its prompt, the lease that pins its prompt's KV blocks (0: none) and
     * those blocks (block i holds positions i * block_size ..) */
    uint64_t kv_lease;
    const int32_t *kv_blocks;
    int32_t n_kv_blocks;
} inferd_output;

typedef void (*inferd_output_cb)(const inferd_output *out, void *user);

/* PD, decode side: the request's prompt KV comes from another instance. Called on the
 * engine thread (must not block) once the request holds a seat and blocks for its whole
 * prompt: blocks[0..n_blocks) are its blocks in order (block i holds positions
 * i * block_size ..), the first n_cached prompt tokens' KV is already there (the local
 * prefix cache; a multiple of block_size). The caller writes the KV of blocks
 * n_cached / block_size .. n_blocks - 1 (inferd_kv_write), from any thread, and then
 * answers with exactly one inferd_kv_import_done, also after an abort (until then the
 * blocks are the caller's: an abort waits for the answer). */
typedef void (*inferd_kv_import_cb)(void *user, uint64_t request_id, int32_t n_cached, const int32_t *blocks,
                                    int32_t n_blocks);

typedef struct inferd_request {
    const int32_t *prompt; /* copied at submit */
    int32_t n_prompt;
    inferd_sampling sampling;
    int32_t priority;      /* lower runs first; FCFS within a priority */
    inferd_output_cb cb;   /* required */
    void *user;
    /* PD, prefill side: > 0: when the request ends after computing its prompt (normally
     * with max_tokens 1), its prompt's KV blocks stay pinned for this many ms under a
     * lease named in the final event (inferd_kv_release gives them back sooner). n 1. */
    int32_t kv_hold_ms;
    /* PD, decode side: non-NULL: the prompt's KV is imported (see inferd_kv_import_cb)
     * instead of computed, and the first token comes with it. n 1, no prompt logprobs,
     * no grammar, max_tokens >= 1. */
    inferd_kv_import_cb kv_import;
    void *kv_import_user;
} inferd_request;

/* Queue a request. Returns 0 and the id, or a negative code (invalid parameters,
 * prompt too long, engine shutting down). Never blocks on the engine. */
int inferd_submit(inferd_engine *e, const inferd_request *r, uint64_t *id, char *err,
                  size_t err_bytes);
/* Abort at the next step (frees its KV blocks); its callback gets a final
 * INFERD_FINISH_ABORT event. Unknown / finished ids are ignored. */
void inferd_abort(inferd_engine *e, uint64_t id);
/* Run one engine step in the caller's thread (threaded = false only). Returns the
 * number of live requests left. */
int inferd_engine_step(inferd_engine *e);

typedef struct inferd_stats {
    int32_t running, waiting;
    int32_t kv_blocks_total, kv_blocks_used, kv_blocks_cached;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t prefix_queries_tokens, prefix_hits_tokens;
    uint64_t preemptions, steps;
    uint64_t aborted;
    uint64_t prefill_bursts; /* prefill bursts started (max_prefill_stall_ms) */
    int32_t max_step_seqs;   /* most sequences in one step's batch so far (<= max_num_seqs) */
    int32_t max_step_tokens; /* most tokens in one step's batch so far (<= max_num_batched_tokens) */
    /* speculative decoding (zero without it) */
    uint64_t spec_verifications; /* sequence-steps that verified drafts */
    uint64_t spec_proposed, spec_accepted; /* draft tokens verified / accepted */
    uint64_t spec_emitted;       /* tokens those verifications produced (accepted + 1 each) */
    uint64_t spec_switched_off;  /* times a sequence stopped speculating (low acceptance) */
    uint64_t spec_remeasured;    /* times a measured sequence left plain forgot its acceptance
                                    (it is measured again where the load lets it probe) */
    uint64_t spec_draft_forwards; /* draft model forwards (rounds) */
    double spec_draft_ms;        /* wall time in the draft model's forwards (rounds and catch-ups) */
    uint64_t spec_ngram_proposed, spec_ngram_accepted; /* the n-gram proposer's share of
                                  * spec_proposed / spec_accepted (the rest: the draft model's) */
    uint64_t spec_device_rows;   /* verification rows drawn on the device (no logits to the host) */
    uint64_t spec_k_hist[17];    /* k chosen per decoding sequence-step (0..16) */
    uint64_t spec_draft_unsure;  /* draft-model tokens dropped below draft_p_min (each ends its
                                    sequence's drafts for that step) */
    uint64_t spec_rests;         /* times a proposer stopped exploring: its pooled acceptance over
                                    all sequences' probes fell below the threshold */
} inferd_stats;

void inferd_engine_stats(inferd_engine *e, inferd_stats *st);

/* ---- prefill/decode disaggregation: KV blocks between instances (thread-safe) ---- */

typedef struct inferd_kv_info {
    int32_t block_size;    /* tokens per block */
    int32_t n_blocks;      /* pool size */
    int32_t n_layers;
    size_t block_bytes;    /* one block in the exchange layout (all layers, K and V) */
    size_t layer_bytes;    /* of one layer's K (and of its V) in one block */
    uint64_t compat_hash;  /* model (name, architecture, layers, KV heads, head dim, vocabulary),
                              KV dtype, block size and the backend's layout: two engines
                              exchange KV only when theirs are equal */
    const char *compat;    /* the same facts as text (for error messages) */
    bool supported;        /* the backend can read and write blocks */
} inferd_kv_info;
void inferd_kv_get_info(const inferd_engine *e, inferd_kv_info *out);
/* Copy blocks between the KV pool and buf (n * block_bytes, block after block; each
 * block its layers in order, each layer its K then its V). Only for blocks no step
 * touches meanwhile: a lease's (read) or an import's (write). 0, INFERD_ERR_INVALID
 * (an id out of range), INFERD_ERR_UNSUPPORTED. */
int inferd_kv_read(inferd_engine *e, const int32_t *blocks, int32_t n, void *buf);
int inferd_kv_write(inferd_engine *e, const int32_t *blocks, int32_t n, const void *buf);
/* Blocks first .. first + n - 1 of a live lease's (prefill side; block i holds positions
 * i * block_size ..) into buf, safe against the lease's expiry or release meanwhile (its
 * blocks stay until the copy is done). 0, INFERD_ERR_NOT_FOUND (no such lease, or
 * expired or released), INFERD_ERR_INVALID (a range outside it), INFERD_ERR_UNSUPPORTED. */
int inferd_kv_read_lease(inferd_engine *e, uint64_t lease, int32_t first, int32_t n, void *buf);
/* Give a lease's blocks back (prefill side). 0: it was live until this call (so what
 * was read from its blocks before, by any means, was its KV), INFERD_ERR_NOT_FOUND:
 * unknown, released or expired (ignored). */
int inferd_kv_release(inferd_engine *e, uint64_t lease);

/* The pool as host memory, for one-sided reads by another process (UCX, RDMA): block b's
 * segment s (layer s / 2, K for even s, V for odd: the exchange layout's order) is
 * seg_bytes at base + seg_off[s] + b * block_stride. A lease's blocks hold still there
 * while it lives (confirm with inferd_kv_release's answer after reading).
 * INFERD_ERR_UNSUPPORTED: the pool is not in host memory (CUDA) — use inferd_kv_read_lease. */
#define INFERD_KV_MAX_SEGS 1024
typedef struct inferd_kv_region {
    void *base;
    size_t bytes;
    int32_t n_blocks, n_segs;
    size_t seg_bytes, block_stride;
    size_t seg_off[INFERD_KV_MAX_SEGS];
} inferd_kv_region;
int inferd_kv_get_region(inferd_engine *e, inferd_kv_region *out);
/* The answer to an import (decode side): first_token >= 0: the KV is written and this is
 * the request's first generated token (drawn by the prefill instance with the request's
 * sampling and seed: RNG counter 0); -1: the import failed, and recompute says whether
 * the engine computes the prompt itself (else the request ends with
 * INFERD_FINISH_ERROR). Unknown ids are ignored. */
void inferd_kv_import_done(inferd_engine *e, uint64_t request_id, int32_t first_token, bool recompute);
/* Optional, before inferd_kv_import_done: the first token as soon as the prefill
 * instance names it, while the KV is still moving: the client gets it at once (unless it
 * ends the request: EOS, a stop, max_tokens 1 — then it comes with the answer). The
 * answer still follows (the same token, or -1: the engine then recomputes the prompt and
 * this token, or ends the request with an error, after the token went out). */
void inferd_kv_import_first(inferd_engine *e, uint64_t request_id, int32_t first_token);

typedef struct inferd_pd_stats {
    int32_t leases, leased_blocks; /* pinned now (prefill side) */
    uint64_t leases_total, lease_expiries;
    int32_t importing;             /* requests whose KV is being imported now */
    uint64_t imports_total, import_failures, import_recomputes;
} inferd_pd_stats;
void inferd_pd_get_stats(inferd_engine *e, inferd_pd_stats *st);
/* False once the engine is dead: its backend reported INFERD_ERR_DEVICE_LOST (a sticky
 * device error). Every request in flight then ended with INFERD_FINISH_ERROR and every
 * later inferd_submit returns INFERD_ERR_DEVICE_LOST; only destroying the engine (in
 * practice, restarting the process) recovers. A recoverable backend failure fails the
 * requests of its step only and leaves the engine healthy. Thread-safe. */
bool inferd_engine_healthy(inferd_engine *e);

/* Model facts (thread-safe). */
int32_t inferd_n_vocab(const inferd_engine *e);
int32_t inferd_max_model_len(const inferd_engine *e);
const char *inferd_model_name(const inferd_engine *e);

/* ---- tokenizer and chat template (thread-safe; read-only model data) ---- */

/* Special token ids, or -1 when the vocabulary has none. */
int32_t inferd_token_bos(const inferd_engine *e);
int32_t inferd_token_eos(const inferd_engine *e);
/* EOS, EOT, EOM and similar ids that end a generation. */
bool inferd_token_is_eog(const inferd_engine *e, int32_t id);

/* Token ids of text[0..n) (any bytes; need not be NUL-terminated) into out[0..cap).
 * add_special: BOS / EOS as the vocabulary asks (add_bos_token / add_eos_token), as
 * llama.cpp's add_special; parse_special: control tokens spelled in the text become
 * those tokens (else they are tokenized as plain text — use false for untrusted text).
 * Returns the number of tokens; when that is more than cap, out holds the first cap
 * and the caller retries with a buffer of the returned size (out may be NULL with cap
 * 0 to ask for the size). Negative: INFERD_ERR_INVALID (NULL text with n > 0, cap < 0),
 * INFERD_ERR_LIMIT (more than INT32_MAX tokens), INFERD_ERR_NOMEM. */
int32_t inferd_tokenize(const inferd_engine *e, const char *text, size_t n, bool add_special,
                        bool parse_special, int32_t *out, int32_t cap);

/* The text of ids[0..n): the concatenation of their pieces (raw bytes; may be
 * invalid UTF-8 when the ids cut a character). render_special: control tokens as their
 * text (else nothing). Writes at most cap - 1 bytes and a NUL (when cap > 0) and
 * returns the full length without the NUL, like snprintf: a result >= cap means it was
 * cut. Negative: INFERD_ERR_INVALID (an id outside [0, n_vocab), n < 0),
 * INFERD_ERR_NOMEM. */
int64_t inferd_detokenize(const inferd_engine *e, const int32_t *ids, int32_t n, bool render_special,
                          char *out, size_t cap);

/* One token's piece as it appears in output text (SentencePiece's U+2581 as a space,
 * byte tokens as the raw byte), with the same convention as inferd_detokenize; no
 * NUL is written when cap is 0. Negative: INFERD_ERR_INVALID (id out of range). */
int32_t inferd_token_to_piece(const inferd_engine *e, int32_t id, bool render_special, char *out,
                              size_t cap);

/* Render the model's chat template (tokenizer.chat_template; ChatML when the model has
 * none) as transformers' apply_chat_template does. messages_json is JSON text: an
 * array of messages ({"role": ..., "content": ...}), or an object holding the whole
 * template context ("messages" and any other variables, e.g. "tools"); bos_token and
 * eos_token are the vocabulary's unless the object gives them, and
 * add_generation_prompt is the argument's. On success *out is a malloc'ed
 * NUL-terminated string (free() it) and *out_bytes (may be NULL) its length. The text
 * holds the messages verbatim: tokenize it with parse_special only when their
 * content is trusted. Returns 0, or INFERD_ERR_INVALID (not JSON, no messages array),
 * INFERD_ERR_TEMPLATE (the template does not parse, or raised: its message in err),
 * INFERD_ERR_LIMIT (rendering took more than 2 s or 4 MiB), INFERD_ERR_NOMEM; err
 * (may be NULL) gets one line. */
int inferd_apply_chat_template(const inferd_engine *e, const char *messages_json,
                               bool add_generation_prompt, char **out, size_t *out_bytes, char *err,
                               size_t err_bytes);

#ifdef __cplusplus
}
#endif

#endif
