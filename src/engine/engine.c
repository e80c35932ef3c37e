/* engine.c — the engine: lifecycle, requests, the cross-thread inbox, the engine thread
 * (a libuv loop), and each step's schedule() -> run(batch) -> postprocess() (nano-vllm's
 * loop). The scheduler (scheduler.h) owns the queues, admission, preemption, forks and
 * the token budget and returns the plan; this file gives it the mixed-step budget from
 * the timed forwards (sched_cost, max_step_ms), runs the plan (runner.c), then per
 * planned sequence: prompt logprobs from its rows, sched_commit of the accepted tokens
 * (prefix cache), sched_fork of an n > 1 parent, sampling, emit and finish. Sequences
 * the scheduler gave up on (stuck queue) are finished here. A failed step ends its
 * requests with INFERD_FINISH_ERROR; a lost device (IFD_ERR_DEVICE_LOST from the backend)
 * ends every request and kills the engine (inferd_engine_healthy turns false).
 *
 * Threads: inferd_submit / inferd_abort / inferd_engine_stats take the inbox mutex and
 * wake the engine thread with uv_async_send (the only cross-thread wake-up). All other
 * state belongs to the engine thread. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../backend/calib.h"
#include "../model/model_awq.h"
#include "../model/model_quant.h"
#include "../model/quant.h"
#include "engine_calib.h"
#include "../util/common.h"
#include "../util/log.h"
#include "engine_internal.h"
#include "logprobs.h"

void inferd_engine_options_default(inferd_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->block_size = 16;
    o->kv_cache_fraction = 0.25;
    o->max_num_seqs = 64;
    o->max_num_batched_tokens = 256; /* chosen from bench/engine_bench.sh section 3 */
    /* 100 ms, measured on the 2-core AVX-512 dev box (2 threads):
     * - serving (bench/serving_compare.sh, the 1.1B Q4_0, 64 requests x 128 tokens, 16 at
     *   a time): inter-token p99 95 / 108 / 204 ms for 60 / 100 / 200 ms, output 175 /
     *   193 / 194 tok/s, TTFT p99 7.8 / 4.9 / 4.3 s. 100 halves the stall of 200 for 0.6 s
     *   of TTFT p99; 60 leaves too little room next to a 16-sequence decode (~55 ms) and
     *   starves prefill.
     * - bench/engine_bench.sh section 3 (dim-512 8-layer Q8_0, 8 decodes + 2,000-token
     *   prompts, cap 2048): ITL p99/max 130/203 ms at 100 ms against 398/534 for the old
     *   fixed 256-token budget (TTFT p50 8.9 s against 4.2 s: that is the price).
     * config.c's --max-step-ms default says the same number. */
    o->max_step_ms = 100;
    o->max_prefill_stall_ms = 0;
    o->enable_prefix_caching = true;
    o->threaded = true;
    o->device = INFERD_DEVICE_AUTO;
    o->gpu_memory_utilization = 0.90;
    o->num_speculative_tokens = 4;
    o->ngram_min = 1;
    o->ngram_max = 4;
    o->speculative_adaptive = true;
    o->spec_min_acceptance = 0.3;
    o->draft_p_min = 0; /* off: not shown to pay (docs/speculative.md, 2026-12-07 (night)) */
}

void inferd_sampling_default(inferd_sampling *s) {
    memset(s, 0, sizeof *s);
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
    s->max_tokens = 16;
    s->n = 1;
    s->logprobs = -1;
    s->prompt_logprobs = -1;
}

/* ---- request / sequence lifetime ------------------------------------------------------ */

static void request_free(request *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_seqs; i++) {
        sequence *s = &r->seqs[i];
        free(s->ss.tokens);
        sampler_state_deinit(&s->samp);
    }
    free(r->seqs);
    if (r->stop_strs)
        for (int32_t i = 0; i < r->sp.n_stop; i++) free(r->stop_strs[i]);
    free(r->stop_strs);
    free(r->stop_lens);
    free(r->bias);
    free(r->stop_ids);
    gram_unref(r->gram);
    free(r->rs_end);
    free(r->prompt);
    free(r->plp);
    free(r);
}

static void emit(sequence *s, const int32_t *toks, int32_t n_toks,
                 const char *text, size_t text_bytes, const inferd_token_logprob *lp,
                 int32_t n_top) {
    request *r = s->req;
    inferd_output o = {.request_id = r->id,
                       .index = s->index,
                       .tokens = toks,
                       .n_tokens = n_toks,
                       .text = text ? text : "",
                       .text_bytes = text_bytes,
                       .logprobs = lp,
                       .n_top = n_top,
                       .finished = s->ss.status == SCHED_FINISHED,
                       .finish_reason = s->finish,
                       .stop_reason = s->stop_reason,
                       .prompt_tokens = r->n_prompt,
                       .completion_tokens = s->n_generated,
                       .cached_tokens = r->cached_tokens,
                       .spec_draft_tokens = s->spec_proposed,
                       .spec_accepted_tokens = s->spec_accepted,
                       .queue_s = r->t_first_sched > 0 ? r->t_first_sched - r->t_submit : 0.0,
                       .ttft_s = r->t_first_token > 0 ? r->t_first_token - r->t_submit : 0.0};
    if (o.finished && s->index == 0 && r->pd_lease) {
        o.kv_lease = r->pd_lease;
        o.kv_blocks = r->pd_blocks;
        o.n_kv_blocks = r->pd_n_blocks;
    }
    if (r->sp.prompt_logprobs >= 0 && s->index == 0 && !r->plp_sent) {
        o.prompt_logprobs = r->plp;
        o.n_prompt_logprobs = r->plp ? r->n_prompt - 1 : 0;
        o.n_prompt_top = r->plp_top;
        r->plp_sent = true;
    }
    r->cb(&o, r->user);
}

static const char *stop_str(const sequence *s) {
    int i = stop_matched(&s->stop);
    return i >= 0 && i < s->req->sp.n_stop ? s->req->stop_strs[i] : NULL;
}

static void request_unlink(inferd_engine *e, request *r) {
    for (request **pp = &e->live; *pp; pp = &(*pp)->next_all)
        if (*pp == r) {
            *pp = r->next_all;
            e->n_live--;
            break;
        }
}

/* Finish one sequence: flush held text (unless a stop string ended it), emit the final
 * event, free its blocks; free the request when its last sequence ends. */
static void seq_finish(inferd_engine *e, sequence *s, inferd_finish_reason why,
                       const int32_t *toks, int32_t n_toks, const char *text, size_t n_text,
                       const inferd_token_logprob *lp, int32_t n_top) {
    request *r = s->req;
    IFD_ASSERT(n_text == 0 || text == e->text_buf); /* the flush below appends to text_buf */
    if (r->kv_hold_ms > 0 && s->index == 0 && why != INFERD_FINISH_ABORT && why != INFERD_FINISH_ERROR &&
        s->ss.n_computed >= r->n_prompt)
        pd_lease_take(e, s); /* its blocks stay, pinned under a lease */
    sched_remove(&e->sch, &s->ss); /* out of its queue, blocks freed: SCHED_FINISHED */
    spec_seq_done(e, s);
    s->finish = why;
    size_t n = n_text;
    if (why != INFERD_FINISH_STOP || !s->stop_reason) {
        /* flush the detokenizer's held bytes through the stop matcher, then the matcher */
        char tail[64];
        size_t k = tok_detok_flush(&s->detok, tail, sizeof tail);
        bool stopped = false;
        n += stop_push(&s->stop, tail, k, e->text_buf + n, e->text_cap - n, &stopped);
        if (!stopped) n += stop_flush(&s->stop, e->text_buf + n, e->text_cap - n);
        else if (why != INFERD_FINISH_ABORT) {
            s->finish = INFERD_FINISH_STOP;
            s->stop_reason = stop_str(s);
        }
        text = e->text_buf;
    }
    emit(s, toks, n_toks, text, n, lp, n_top);
    if (why == INFERD_FINISH_ABORT) e->cnt.aborted++;
    if (--r->n_live == 0) {
        /* children never forked (parent ended first) are finished silently above */
        request_unlink(e, r);
        request_free(r);
    }
}

/* End every live sequence of r with the given reason; r is freed. */
static void request_end(inferd_engine *e, request *r, inferd_finish_reason why) {
    r->abort_requested = true;
    for (int32_t i = 0; i < r->n_seqs; i++) {
        sequence *s = &r->seqs[i];
        if (s->ss.status == SCHED_FINISHED) continue;
        const bool last = r->n_live == 1;
        seq_finish(e, s, why, NULL, 0, NULL, 0, NULL, 0);
        if (last) return; /* r is freed */
    }
}

static void request_abort(inferd_engine *e, request *r) { request_end(e, r, INFERD_FINISH_ABORT); }

void engine_request_end(inferd_engine *e, request *r, inferd_finish_reason why) { request_end(e, r, why); }

/* The scheduler gave up on s (its KV cannot be had even alone): finish it (length),
 * with its never-forked siblings if it is an n > 1 parent. r may be freed. */
static void finish_stuck(inferd_engine *e, sequence *s) {
    request *r = s->req;
    if (s->index == 0 && r->n_seqs > 1 && !r->forked) {
        /* its choices wait for its prompt and are no better off */
        request_end(e, r, INFERD_FINISH_LENGTH);
        return;
    }
    seq_finish(e, s, INFERD_FINISH_LENGTH, NULL, 0, NULL, 0, NULL, 0);
}

/* ---- the step ------------------------------------------------------------------------ */

static bool grammar_start(inferd_engine *e, request *r);

/* Take the inbox and every pending abort id in one critical section (so each abort id
 * names a request that is live or in the taken inbox). The abort list is taken whole
 * by swapping it with the engine's spare array: no copy, no cap, no allocation. */
static void drain_inbox(inferd_engine *e) {
    pthread_mutex_lock(&e->mu);
    request *in = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    uint64_t *const aborts = e->abort_ids;
    const int32_t n_abort = e->n_abort, cap = e->cap_abort;
    e->abort_ids = e->abort_spare;
    e->cap_abort = e->cap_spare;
    e->n_abort = 0;
    e->abort_spare = aborts;
    e->cap_spare = cap;
    pthread_mutex_unlock(&e->mu);
    while (in) {
        request *r = in;
        in = in->next_inbox;
        r->next_all = e->live;
        e->live = r;
        e->n_live++;
        e->cnt.prompt_tokens += (uint64_t)r->n_prompt;
        if (r->gram && !grammar_start(e, r)) {
            request_end(e, r, INFERD_FINISH_ERROR); /* r is freed */
            continue;
        }
        for (int32_t i = 0; i < r->n_seqs; i++) {
            r->seqs[i].ss.priority = r->priority;
            r->seqs[i].ss.arrival = r->arrival;
            if (i > 0) sched_add_fork(&r->seqs[0].ss, &r->seqs[i].ss);
        }
        if (!pd_route(e, r)) sched_add(&e->sch, &r->seqs[0].ss);
    }
    for (int32_t i = 0; i < n_abort; i++)
        for (request *r = e->live; r; r = r->next_all)
            if (r->id == aborts[i]) {
                if (!pd_abort(e, r)) request_abort(e, r);
                break;
            }
    pd_drain(e);
}

/* ---- constrained decoding ------------------------------------------------------------- */
static size_t gv_piece(void *ctx, int32_t id, char *buf, size_t cap) { return tok_piece(ctx, id, false, buf, cap); }
static bool gv_eog(void *ctx, int32_t id) { return tok_is_eog(ctx, id); }

/* Every sequence of r at the grammar's start (the vocabulary's trie is built on the
 * first grammar request). False when that fails (r must end with an error). */
static bool grammar_start(inferd_engine *e, request *r) {
    if (!e->gvocab) e->gvocab = gram_vocab_new(e->n_vocab, gv_piece, gv_eog, (void *)e->m->tok);
    if (!e->gextra) e->gextra = malloc(sizeof *e->gextra * SAMPLER_MAX_EXTRA);
    if (!e->gvocab || !e->gextra) return false;
    const gram_state st = gram_start(r->gram);
    /* with a reasoning that may open (and a token that opens it): wait for the first
     * draw; one the prompt opened: inside it; otherwise (no such token) the grammar
     * from the first token */
    const uint8_t mode = !r->rs_end ? GMODE_ACTIVE
                         : r->rs_may_open ? (r->rs_start_id >= 0 ? GMODE_WAIT : GMODE_ACTIVE)
                                          : GMODE_REASONING;
    for (int32_t i = 0; i < r->n_seqs; i++) {
        r->seqs[i].gstate = st;
        r->seqs[i].g = (seq_gram){.mode = mode};
    }
    return st != GRAM_DEAD;
}

/* The sampler's constraint for s's next token: the grammar's mask (and the request's
 * stop token ids where the grammar may end, the token that opens a reasoning where the
 * output may still begin with one); none inside a reasoning. Returns false when s
 * cannot draw: the grammar leaves nothing allowed (its end, with EOS banned: a stop)
 * or the matcher hit its limits (an error); *why gets the finish reason. */
static bool grammar_constrain(inferd_engine *e, const sequence *s, sampler_params *sp, inferd_finish_reason *why) {
    const request *r = s->req;
    if (s->g.mode == GMODE_REASONING) return true;
    const uint32_t *mask = gram_mask(r->gram, e->gvocab, s->gstate);
    if (!mask) {
        *why = INFERD_FINISH_ERROR;
        return false;
    }
    sp->allow = mask;
    const bool can_end = gram_can_end(r->gram, s->gstate);
    int32_t n_extra = 0;
    if (can_end)
        for (int32_t i = 0; i < r->sp.n_stop_token_ids && n_extra < SAMPLER_MAX_EXTRA - 1; i++)
            e->gextra[n_extra++] = r->stop_ids[i];
    if (s->g.mode == GMODE_WAIT) e->gextra[n_extra++] = r->rs_start_id;
    sp->allow_extra = e->gextra;
    sp->n_allow_extra = n_extra;
    /* anything left to draw once the bans are applied? */
    int64_t n = 0;
    const int32_t W = gram_mask_words(e->gvocab);
    for (int32_t w = 0; w < W && n < 64; w++) n += __builtin_popcount(mask[w]);
    if (n < 64) {
        for (int32_t i = 0; i < sp->n_banned; i++) {
            const int32_t id = sp->banned[i];
            n -= id >= 0 && id < e->n_vocab && (mask[id >> 5] >> (id & 31) & 1);
        }
        n += n_extra;
    }
    if (n <= 0) {
        *why = INFERD_FINISH_STOP;
        return false;
    }
    return true;
}

/* s drew id: its grammar state follows (an end token leaves it where it is); a
 * reasoning opens, or ends (then the grammar takes the rest of the token's bytes, but
 * for whitespace). */
static void grammar_take(inferd_engine *e, sequence *s, int32_t id) {
    request *r = s->req;
    if (!r->gram || gram_vocab_is_eog(e->gvocab, id)) return;
    if (s->g.mode == GMODE_WAIT) {
        if (id == r->rs_start_id) {
            s->g = (seq_gram){.mode = GMODE_REASONING};
            return;
        }
        s->g.mode = GMODE_ACTIVE;
    }
    if (s->g.mode == GMODE_ACTIVE) {
        s->gstate = gram_advance_token(r->gram, e->gvocab, s->gstate, id);
        return;
    }
    /* inside the reasoning: look for its end in the kept tail + this token's bytes */
    size_t n;
    const char *p = gram_vocab_piece(e->gvocab, id, &n);
    const size_t L = strlen(r->rs_end);
    char buf[64];
    for (size_t off = 0; off < n;) {
        const size_t take = IFD_MIN(n - off, sizeof buf - s->g.n_tail);
        memcpy(buf, s->g.tail, s->g.n_tail);
        memcpy(buf + s->g.n_tail, p + off, take);
        const size_t m = s->g.n_tail + take;
        for (size_t i = 0; i + L <= m; i++)
            if (!memcmp(buf + i, r->rs_end, L)) {
                /* the end: the grammar starts with what follows it in this token */
                const size_t used = off + (i + L - s->g.n_tail);
                s->g = (seq_gram){.mode = GMODE_ACTIVE};
                size_t k = used;
                while (k < n && (p[k] == ' ' || p[k] == '\n' || p[k] == '\t' || p[k] == '\r')) k++;
                if (k < n) s->gstate = gram_feed(r->gram, s->gstate, p + k, n - k);
                return;
            }
        const size_t keep = IFD_MIN(m, L - 1);
        memmove(s->g.tail, buf + m - keep, keep);
        s->g.n_tail = (uint8_t)keep;
        off += take;
    }
}

/* After s took a token and goes on: a grammar that allows nothing more ends it now
 * (without waiting for the model's end token). Returns true when s finished. */
static bool grammar_done(inferd_engine *e, sequence *s) {
    const request *r = s->req;
    if (!r->gram || s->g.mode != GMODE_ACTIVE) return false;
    if (s->gstate == GRAM_DEAD) { /* the matcher's limits (a drawn token is always allowed) */
        seq_finish(e, s, INFERD_FINISH_ERROR, NULL, 0, NULL, 0, NULL, 0);
        return true;
    }
    if (!gram_must_end(r->gram, s->gstate)) return false;
    seq_finish(e, s, INFERD_FINISH_STOP, NULL, 0, NULL, 0, NULL, 0);
    return true;
}

/* Append the drawn token id to s (with its logprobs lp[0 .. 1 + n_top) when asked),
 * emit / finish. The tokens s fed this step are already committed (sched_commit): a
 * finish frees its blocks. The caller has counted id in the penalty state. Returns true
 * when s finished (s and its request may then be freed). */
static bool seq_take(inferd_engine *e, sequence *s, int32_t id, inferd_token_logprob *lp,
                     int32_t n_top) {
    request *r = s->req;
    if (r->t_first_token == 0.0) r->t_first_token = ifd_now_s();
    s->ss.tokens[s->ss.n_tokens++] = id;
    s->n_generated++;
    e->cnt.generated_tokens++;

    bool eos = !r->sp.ignore_eos && tok_is_eog(e->m->tok, id);
    bool stop_id = false;
    for (int32_t i = 0; i < r->sp.n_stop_token_ids; i++)
        if (r->stop_ids[i] == id) stop_id = true;
    size_t n_text = 0;
    bool stopped = false;
    if (!eos && !stop_id) {
        /* piece_cap holds the longest token's text however it decodes (see create) */
        size_t k = tok_detok_push(&s->detok, id, e->piece_buf, e->piece_cap);
        n_text = stop_push(&s->stop, e->piece_buf, k, e->text_buf, e->text_cap, &stopped);
    }
    if (eos || stop_id) {
        seq_finish(e, s, INFERD_FINISH_STOP, &id, 1, e->text_buf, 0, lp, n_top);
    } else if (stopped) {
        s->stop_reason = stop_str(s);
        seq_finish(e, s, INFERD_FINISH_STOP, &id, 1, e->text_buf, n_text, lp, n_top);
    } else if (s->n_generated >= s->max_tokens || s->ss.n_tokens >= e->max_model_len) {
        seq_finish(e, s, INFERD_FINISH_LENGTH, &id, 1, e->text_buf, n_text, lp, n_top);
    } else {
        emit(s, &id, 1, e->text_buf, n_text, lp, n_top);
        return false;
    }
    return true; /* finished: s (and its request) may be freed */
}

/* Sample the next token of s from logits row on the host, then seq_take. */
static void seq_advance(inferd_engine *e, sequence *s, const float *row) {
    request *r = s->req;
    const sampler_state *st = s->samp.count ? &s->samp : NULL; /* NULL: no penalties asked */
    sampler_params sp = r->sparams;
    inferd_finish_reason why;
    if (r->gram && !grammar_constrain(e, s, &sp, &why)) {
        seq_finish(e, s, why, NULL, 0, NULL, 0, NULL, 0);
        return;
    }
    const int32_t id = sampler_sample_seq(&sp, st, row, e->n_vocab, &s->rng, &e->scratch);
    int32_t n_top = 0;
    inferd_token_logprob *lp = NULL;
    if (r->sp.logprobs >= 0) {
        lp = e->lp_buf;
        n_top = logprobs_compute(row, e->n_vocab, id, r->sp.logprobs, (logprob_entry *)lp);
    }
    if (s->samp.count) sampler_state_accept(&s->samp, id);
    grammar_take(e, s, id);
    if (!seq_take(e, s, id, lp, n_top)) grammar_done(e, s);
}

bool engine_take_continues(const inferd_engine *e, const sequence *s, int32_t id) {
    const request *r = s->req;
    if (!r->sp.ignore_eos && tok_is_eog(e->m->tok, id)) return false;
    for (int32_t i = 0; i < r->sp.n_stop_token_ids; i++)
        if (r->stop_ids[i] == id) return false;
    if (r->sp.n_stop > 0) return false;
    return s->n_generated + 1 < s->max_tokens && s->ss.n_tokens + 1 < e->max_model_len;
}

bool engine_seq_take(inferd_engine *e, sequence *s, int32_t id) {
    if (s->samp.count) sampler_state_accept(&s->samp, id);
    return seq_take(e, s, id, NULL, 0);
}

/* A verification entry (q->n_spec drafts after the fed token): each of its k + 1 rows
 * draws the target's token exactly as a plain decode would (same sampler, penalty state
 * with the tokens before it, RNG counter); the draft token at that position is
 * accepted iff it equals the draw, and the first draw that differs (or the one after
 * the last draft) ends it. See speculate.c for why this is the rejection rule. The
 * fed token and the accepted drafts are committed; the rejected positions leave the
 * KV; then each emitted token goes through seq_take like a plain decode's (stop
 * strings, EOS, max_tokens and logprobs as without speculation: a stop inside the
 * accepted run ends there).
 * dev: the k + 1 draws already made on the device (rows in order, drawn at counters
 * rng.ctr + j, with logprobs dev_lp[j] when asked), or NULL: drawn here from e->logits. */
static void spec_verify(inferd_engine *e, const sched_entry *en, const int32_t *dev,
                        const backend_logprob *dev_lp) {
    sched_seq *q = en->seq;
    sequence *s = seq_of(q);
    request *r = s->req;
    const int32_t k = q->n_spec, base = q->n_computed;
    IFD_ASSERT(k > 0 && en->n_logits == k + 1 && en->n_tokens == k + 1);
    sampler_state *st = s->samp.count ? &s->samp : NULL;
    int32_t n = 0;
    bool ended = false; /* the grammar allows nothing after the accepted drafts */
    const gram_state g0 = s->gstate;
    const seq_gram gm0 = s->g;
    inferd_finish_reason why = INFERD_FINISH_STOP;
    for (int32_t j = 0; j <= k; j++) {
        int32_t id;
        if (dev) {
            id = dev[j];
            s->rng.ctr++; /* as sampler_sample_seq's draw: one counter per emitted token */
        } else {
            /* a grammar constrains every row from the state after the drafts before it
             * (drafts were cut where they broke it: spec_propose) */
            sampler_params sp = r->sparams;
            if (r->gram && ((s->g.mode == GMODE_ACTIVE && gram_must_end(r->gram, s->gstate)) ||
                            !grammar_constrain(e, s, &sp, &why))) {
                ended = true;
                break;
            }
            const float *row = e->logits + (size_t)(en->logits_first + j) * e->n_vocab;
            id = sampler_sample_seq(&sp, st, row, e->n_vocab, &s->rng, &e->scratch);
        }
        if (e->spec.debug_accept_all && j < k) id = q->tokens[base + 1 + j]; /* tests: a wrong rule */
        e->vtok[n++] = id;
        if (st) sampler_state_accept(st, id);
        grammar_take(e, s, id);
        if (j == k || id != q->tokens[base + 1 + j]) break;
    }
    /* every draw is accepted but the last (the target's own token), unless the grammar
     * ended the row loop: then all n draws were equal to drafts */
    const int32_t a = ended ? n : n - 1;
    s->gstate = g0; /* grammar_take again below, token by token with seq_take */
    s->g = gm0;
    sched_commit(&e->sch, q, 1 + a);
    spec_observe(e, s, k, a);
    /* the accepted drafts are appended again by seq_take, one by one, as a plain
     * decode's tokens are (until the last, n_tokens trails n_computed) */
    q->n_tokens = base + 1;
    for (int32_t j = 0; j < n; j++) {
        inferd_token_logprob *lp = NULL;
        int32_t n_top = 0;
        if (r->sp.logprobs >= 0 && dev) {
            lp = (inferd_token_logprob *)(dev_lp + (size_t)j * (1 + BACKEND_SAMPLE_MAX_TOP));
            n_top = IFD_MIN(r->sp.logprobs, e->n_vocab);
        } else if (r->sp.logprobs >= 0) {
            const float *row = e->logits + (size_t)(en->logits_first + j) * e->n_vocab;
            lp = e->lp_buf;
            n_top = logprobs_compute(row, e->n_vocab, e->vtok[j], r->sp.logprobs, (logprob_entry *)lp);
        }
        grammar_take(e, s, e->vtok[j]);
        if (seq_take(e, s, e->vtok[j], lp, n_top)) return; /* finished: s (and r) may be gone */
        if (grammar_done(e, s)) return;
    }
    if (ended && n == 0) seq_finish(e, s, why, NULL, 0, NULL, 0, NULL, 0);
}

/* Can every draw of plan p run on the device (backend_ops.sample)? Not when a row's
 * logits are wanted on the host: prompt logprobs, the logits tap, more top logprobs
 * than the device op gives, more bans than it takes. */
static bool step_samples_on_device(const inferd_engine *e, const sched_plan *p) {
    if (!e->be->ops->sample || e->opt.no_device_sampling || e->tap) return false;
    for (int32_t i = 0; i < p->n_seqs; i++) {
        const sched_entry *en = &p->entries[i];
        if (en->n_logits == 0) continue;
        const request *r = seq_of(en->seq)->req;
        /* a grammar's mask goes with the row (advance_on_device); a constrained
         * verification's rows depend on each other's states: drawn on the host */
        if (r->gram && en->seq->n_spec > 0) return false;
        /* a verification's rows: on the device unless penalties need the state as it
         * grows through the drafts */
        const bool verify = en->seq->n_spec > 0 && !seq_of(en->seq)->samp.count;
        if ((en->n_logits > 1 && !verify) || (en->seq->all_prompt_logits && r->plp)) return false;
        if (r->sp.logprobs > BACKEND_SAMPLE_MAX_TOP) return false;
        if (r->sparams.n_banned > BACKEND_SAMPLE_MAX_BAN ||
            r->sparams.n_logit_bias > BACKEND_SAMPLE_MAX_BIAS)
            return false;
    }
    return true;
}

/* The device's description of one draw of s from logits row `row` at RNG counter pos. */
static void fill_row(backend_sample_row *w, const sequence *s, int32_t row, uint64_t pos) {
    _Static_assert(sizeof(backend_bias) == sizeof(sampler_bias), "bias layout");
    _Static_assert(sizeof(backend_logprob) == sizeof(inferd_token_logprob), "logprob layout");
    const request *r = s->req;
    const sampler_params *sp = &r->sparams;
    *w = (backend_sample_row){.logits_row = row,
                              .temperature = sp->temperature,
                              .top_p = sp->top_p,
                              .min_p = sp->min_p,
                              .top_k = sp->top_k,
                              .repetition_penalty = sp->repetition_penalty,
                              .presence_penalty = sp->presence_penalty,
                              .frequency_penalty = sp->frequency_penalty,
                              .n_logprobs = r->sp.logprobs,
                              .key = s->rng.key,
                              .position = pos,
                              .bias = (const backend_bias *)sp->logit_bias,
                              .n_bias = sp->n_logit_bias,
                              .ban = sp->banned,
                              .n_ban = sp->n_banned};
    if (s->samp.count) {
        w->seen = s->samp.seen;
        w->n_seen = s->samp.n_seen;
        w->count = s->samp.count;
    }
}

/* The draws of this step on the device: one row per advancing sequence, keyed by its
 * RNG (the counter advances as sampler_sample_seq's does), then seq_take. */
static int advance_on_device(inferd_engine *e, int32_t *rows_of) {
    /* constrained sequences: their masks (copied: the next mask of the same grammar may
     * move the cache) and allowed-anyway ids; one that can draw nothing ends here */
    int32_t n = 0;
    for (int32_t k = 0; k < e->n_adv; k++) {
        sequence *s = e->adv_seq[k];
        sampler_params sp = s->req->sparams;
        inferd_finish_reason why;
        if (s->req->gram && !grammar_constrain(e, s, &sp, &why)) {
            seq_finish(e, s, why, NULL, 0, NULL, 0, NULL, 0); /* its siblings here are live: r stays */
            continue;
        }
        fill_row(&e->adv_rows[n], s, rows_of[k], s->rng.ctr);
        if (sp.allow) {
            const int32_t W = gram_mask_words(e->gvocab);
            if (!e->dmask) e->dmask = malloc(sizeof *e->dmask * (size_t)W * (size_t)e->opt.max_num_seqs);
            if (!e->dextra) e->dextra = malloc(sizeof *e->dextra * SAMPLER_MAX_EXTRA * (size_t)e->opt.max_num_seqs);
            if (!e->dmask || !e->dextra) return IFD_ERR_NOMEM;
            uint32_t *m = e->dmask + (size_t)n * (size_t)W;
            int32_t *x = e->dextra + (size_t)n * SAMPLER_MAX_EXTRA;
            memcpy(m, sp.allow, sizeof *m * (size_t)W);
            memcpy(x, sp.allow_extra, sizeof *x * (size_t)sp.n_allow_extra);
            e->adv_rows[n].allow = m;
            e->adv_rows[n].allow_extra = x;
            e->adv_rows[n].n_allow_extra = sp.n_allow_extra;
        }
        e->adv_seq[n] = s;
        rows_of[n] = rows_of[k];
        n++;
    }
    e->n_adv = n;
    for (int32_t k = 0; k < e->n_adv; k++) e->adv_seq[k]->rng.ctr++;
    const int rc = e->n_adv ? e->be->ops->sample(e->be, e->adv_rows, e->n_adv, e->adv_tok, e->adv_lp) : IFD_OK;
    if (rc != IFD_OK) return rc;
    for (int32_t k = 0; k < e->n_adv; k++) {
        sequence *s = e->adv_seq[k];
        inferd_token_logprob *lp = NULL;
        int32_t n_top = 0;
        if (s->req->sp.logprobs >= 0) {
            lp = (inferd_token_logprob *)(e->adv_lp + (size_t)k * (1 + BACKEND_SAMPLE_MAX_TOP));
            n_top = IFD_MIN(s->req->sp.logprobs, e->n_vocab);
        }
        if (s->samp.count) sampler_state_accept(&s->samp, e->adv_tok[k]);
        grammar_take(e, s, e->adv_tok[k]);
        if (!seq_take(e, s, e->adv_tok[k], lp, n_top)) grammar_done(e, s);
    }
    return IFD_OK;
}

/* The verifications of this step on the device (e->ver[0 .. n_ver)): every row of every
 * entry drawn there (counters rng.ctr + j; no penalty state, which step_samples_on_device
 * ensures), in calls of at most max_num_seqs rows; only the token ids (and asked
 * logprobs) come back, then spec_verify as on the host. A failure marks their requests
 * to fail. */
static int verify_on_device(inferd_engine *e) {
    int32_t t = 0;
    for (int32_t v = 0; v < e->n_ver; v++) {
        const sched_entry *en = e->ver[v];
        const sequence *s = seq_of(en->seq);
        for (int32_t j = 0; j < en->n_logits; j++, t++)
            fill_row(&e->ver_rows[t], s, en->logits_first + j, s->rng.ctr + (uint64_t)j);
    }
    const int32_t S = e->opt.max_num_seqs;
    e->spec.cnt.spec_device_rows += (uint64_t)t;
    int rc = IFD_OK;
    for (int32_t off = 0; off < t && rc == IFD_OK; off += S)
        rc = e->be->ops->sample(e->be, e->ver_rows + off, IFD_MIN(S, t - off), e->ver_tok + off,
                                e->ver_lp + (size_t)off * (1 + BACKEND_SAMPLE_MAX_TOP));
    if (rc != IFD_OK) {
        for (int32_t v = 0; v < e->n_ver; v++) seq_of(e->ver[v]->seq)->req->abort_requested = true;
        return rc;
    }
    t = 0;
    for (int32_t v = 0; v < e->n_ver; v++) {
        const sched_entry *en = e->ver[v];
        const int32_t rows = en->n_logits;
        spec_verify(e, en, e->ver_tok + t, e->ver_lp + (size_t)t * (1 + BACKEND_SAMPLE_MAX_TOP));
        t += rows;
    }
    return IFD_OK;
}

/* Prompt logprobs of the rows of en: row j is that of position pos = (first fed) +
 * n_tokens - n_logits + j and scores prompt token pos + 1. */
static void store_prompt_logprobs(inferd_engine *e, const sched_entry *en) {
    const sched_seq *q = en->seq;
    request *r = seq_of(en->seq)->req;
    if (!r->plp && !e->tap) return;
    const int32_t first = q->n_computed + en->n_tokens - en->n_logits;
    for (int32_t j = 0; j < en->n_logits; j++) {
        const int32_t pos = first + j;
        const float *row = e->logits + (size_t)(en->logits_first + j) * e->n_vocab;
        if (e->tap && pos < r->n_prompt) e->tap(e->tap_user, r->id, pos, row, e->n_vocab);
        if (pos + 1 >= r->n_prompt || !r->plp) continue;
        logprobs_compute(row, e->n_vocab, r->prompt[pos + 1], r->plp_top,
                         (logprob_entry *)(r->plp + (size_t)pos * (1 + r->plp_top)));
    }
}

/* After a forward: prompt logprobs, commits, forks; then the step's draws, in plan
 * order, on the host from e->logits or on the device (e->dev_sample). Returns a
 * device sampling failure (its sequences' requests fail). */
static int postprocess(inferd_engine *e) {
    const sched_plan *p = e->plan;
    int32_t *rows_of = e->adv_row;
    e->n_adv = 0;
    e->n_ver = 0;
#define ADVANCE(seq, row_index)                                                 \
    do {                                                                        \
        IFD_ASSERT(e->n_adv < e->opt.max_num_seqs);                           \
        e->adv_seq[e->n_adv] = (seq);                                           \
        rows_of[e->n_adv++] = (row_index);                                      \
    } while (0)
    for (int32_t i = 0; i < p->n_seqs; i++) {
        const sched_entry *en = &p->entries[i];
        sched_seq *q = en->seq;
        if (q->n_spec > 0) {
            if (e->dev_sample)
                e->ver[e->n_ver++] = en; /* after the plain draws, all on the device */
            else
                spec_verify(e, en, NULL, NULL);
            continue;
        }
        sequence *s = seq_of(q);
        request *r = s->req;
        const bool ends_known = q->n_computed + en->n_tokens == q->n_tokens;
        if (q->all_prompt_logits && en->n_logits > 0) store_prompt_logprobs(e, en);
        const int32_t row = ends_known && en->n_logits > 0 ? en->logits_first + en->n_logits - 1 : -1;
        /* every fed token is accepted (not a verification); the prefix cache gets them */
        sched_commit(&e->sch, q, en->n_tokens);
        if (row < 0) continue;
        q->all_prompt_logits = false; /* the prompt's rows are in: a recompute needs one */
        if (s->max_tokens == 0) {
            /* the prompt only: every choice ends with no token (choice 0 first, with
             * the prompt logprobs); none has forked, so r is in this entry alone */
            request_end(e, r, INFERD_FINISH_LENGTH);
            continue;
        }
        if (s->index == 0 && r->n_seqs > 1 && !r->forked) {
            /* n > 1: the parent finished its prompt. Children that find a seat share
             * its blocks and sample from its row now, each with its own RNG; the
             * others wait and prefill the prompt themselves (prefix cache, batch
             * invariance: the same logits, hence the same samples) */
            r->forked = true;
            sched_fork(&e->sch, q);
            for (int32_t c = r->n_seqs - 1; c >= 1; c--)
                if (r->seqs[c].ss.status == SCHED_RUNNING) ADVANCE(&r->seqs[c], row);
        }
        ADVANCE(s, row);
    }
#undef ADVANCE
    /* the draws (a finish may free a request only once its last advancing choice is
     * taken: every choice of a request that advances here is still live) */
    if (e->dev_sample) {
        const int rc = advance_on_device(e, rows_of);
        if (rc != IFD_OK) {
            for (int32_t v = 0; v < e->n_ver; v++) seq_of(e->ver[v]->seq)->req->abort_requested = true;
            return rc;
        }
        e->n_adv = 0; /* taken (some may be freed): a failure below fails the verifications only */
        return verify_on_device(e);
    }
    for (int32_t k = 0; k < e->n_adv; k++)
        seq_advance(e, e->adv_seq[k], e->logits + (size_t)rows_of[k] * e->n_vocab);
    return IFD_OK;
}

void engine_update_stats(inferd_engine *e) {
    kv_stats ks;
    kv_get_stats(e->kv, &ks);
    pthread_mutex_lock(&e->mu);
    e->stats.prompt_tokens = e->cnt.prompt_tokens;
    e->stats.generated_tokens = e->cnt.generated_tokens;
    e->stats.preemptions = e->sch.n_preemptions;
    e->stats.prefill_bursts = e->sch.n_bursts;
    e->stats.steps = e->cnt.steps;
    e->stats.aborted = e->cnt.aborted;
    e->stats.running = e->sch.running.n;
    e->stats.max_step_seqs = e->cnt.max_step_seqs;
    e->stats.max_step_tokens = e->cnt.max_step_tokens;
    e->stats.waiting = e->sch.waiting.n;
    e->stats.kv_blocks_total = ks.n_blocks;
    e->stats.kv_blocks_used = ks.n_used;
    e->stats.kv_blocks_cached = ks.n_cached_evictable;
    e->stats.prefix_queries_tokens = ks.prefix_queries_tokens;
    e->stats.prefix_hits_tokens = ks.prefix_hits_tokens;
    const inferd_stats *c = &e->spec.cnt;
    e->stats.spec_verifications = c->spec_verifications;
    e->stats.spec_proposed = c->spec_proposed;
    e->stats.spec_accepted = c->spec_accepted;
    e->stats.spec_emitted = c->spec_emitted;
    e->stats.spec_switched_off = c->spec_switched_off;
    e->stats.spec_remeasured = c->spec_remeasured;
    e->stats.spec_draft_forwards = c->spec_draft_forwards;
    e->stats.spec_draft_ms = c->spec_draft_ms;
    e->stats.spec_ngram_proposed = c->spec_ngram_proposed;
    e->stats.spec_ngram_accepted = c->spec_ngram_accepted;
    e->stats.spec_device_rows = c->spec_device_rows;
    e->stats.spec_draft_unsure = c->spec_draft_unsure;
    e->stats.spec_rests = c->spec_rests;
    memcpy(e->stats.spec_k_hist, c->spec_k_hist, sizeof c->spec_k_hist);
    e->pd.pub = e->pd.cnt;
    pthread_mutex_unlock(&e->mu);
}

/* The backend lost its device (IFD_ERR_DEVICE_LOST): no later step can succeed. Mark
 * the engine dead (under mu, so that a submit either sees it or is in the inbox taken
 * after it) and end every request live or queued with an error: no client waits on
 * an engine that will never step again. */
static void engine_die(inferd_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->dead = true;
    pthread_mutex_unlock(&e->mu);
    drain_inbox(e);
    while (e->live) request_end(e, e->live, INFERD_FINISH_ERROR);
}

/* Prefill bursts pause a sequence at most once per this many of its decodes: 1 gap in
 * 128 (0.8%), under the 1% that an inter-token p99 looks at. */
#define STALL_EVERY 128

/* One engine step; returns the number of live requests. */
static int engine_step(inferd_engine *e) {
    if (e->dead) { /* dead: nothing runs again (submit refuses, so this finds nothing new) */
        engine_die(e);
        engine_update_stats(e);
        return 0;
    }
    drain_inbox(e);
    pd_expire(e);
    pd_admit(e);
    const int32_t hard = e->opt.max_num_batched_tokens;
    const int32_t mixed = sched_cost_budget(&e->cost, e->opt.max_step_ms, hard);
    sched_set_burst(&e->sch, e->opt.max_prefill_stall_ms > 0
                                 ? sched_cost_budget(&e->cost, e->opt.max_prefill_stall_ms, 1 << 24)
                                 : 0);
    spec_propose(e); /* drafts for the running decodes (none without speculation) */
    const sched_plan *p = e->plan = sched_schedule(&e->sch, mixed);
    for (sched_seq *q; (q = sched_next_stuck(&e->sch));) finish_stuck(e, seq_of(q));
    if (p->n_seqs > e->cnt.max_step_seqs) e->cnt.max_step_seqs = p->n_seqs;
    if (p->n_tokens > e->cnt.max_step_tokens) e->cnt.max_step_tokens = p->n_tokens;
    if (p->n_seqs > 0) {
        const double now = ifd_now_s();
        for (int32_t i = 0; i < p->n_seqs; i++) {
            request *r = seq_of(p->entries[i].seq)->req;
            if (r->t_first_sched == 0.0) {
                r->t_first_sched = now;
                r->cached_tokens = p->entries[i].seq->cached_tokens;
            }
        }
        e->dev_sample = step_samples_on_device(e, p);
        int rc = runner_execute(e);
        bool sampled = false;
        if (rc == IFD_OK) {
            const double fwd_ms = (ifd_now_s() - now) * 1e3;
            sched_cost_observe(&e->cost, p->n_tokens, fwd_ms);
            spec_observe_step(e, p->n_tokens, p->n_logits, fwd_ms);
            rc = postprocess(e);
            sampled = true;
        }
        if (rc == IFD_ERR_DEVICE_LOST) {
            engine_die(e);
        } else if (rc) {
            /* a backend failure is an internal fault: fail the sequences of this step
             * (after a failed device draw: those that were to advance; their fed
             * tokens are committed) */
            if (!sampled) {
                for (int32_t i = 0; i < p->n_seqs; i++) {
                    p->entries[i].seq->n_scheduled = 0;
                    seq_of(p->entries[i].seq)->req->abort_requested = true;
                }
            } else {
                for (int32_t k = 0; k < e->n_adv; k++) e->adv_seq[k]->req->abort_requested = true;
            }
            for (request *r = e->live, *next; r; r = next) {
                next = r->next_all;
                if (r->abort_requested) request_end(e, r, INFERD_FINISH_ERROR);
            }
        }
        e->cnt.steps++;
    }
    pd_admit(e); /* what this step's finishes freed */
    engine_update_stats(e);
    int live = 0;
    for (request *r = e->live; r; r = r->next_all) live++;
    return live;
}

int inferd_engine_step(inferd_engine *e) {
    IFD_ASSERT(!e->threaded);
    return engine_step(e);
}

/* ---- engine thread ------------------------------------------------------------------- */

/* Requests that only wait for an import (its answer comes through the inbox) are no
 * work: the loop sleeps instead of spinning on them. */
static bool has_work(inferd_engine *e) {
    pthread_mutex_lock(&e->mu);
    bool w = e->inbox_head != NULL || e->n_abort > 0 || pd_has_msgs(e);
    pthread_mutex_unlock(&e->mu);
    return w || e->n_live > e->pd.n_parked;
}

static void on_idle(uv_idle_t *h) {
    inferd_engine *e = h->data;
    engine_step(e);
    if (!has_work(e)) {
        uv_idle_stop(&e->idle);
        e->idle_on = false;
    }
}

static void on_async(uv_async_t *h) {
    inferd_engine *e = h->data;
    pthread_mutex_lock(&e->mu);
    bool stopping = e->stopping;
    pthread_mutex_unlock(&e->mu);
    if (stopping) {
        drain_inbox(e);
        while (e->live) request_abort(e, e->live);
        uv_close((uv_handle_t *)&e->async, NULL);
        uv_close((uv_handle_t *)&e->idle, NULL);
        if (e->pd.timer_init) uv_close((uv_handle_t *)&e->pd.timer, NULL);
        return;
    }
    if (!e->idle_on && has_work(e)) {
        uv_idle_start(&e->idle, on_idle);
        e->idle_on = true;
    }
}

static void engine_thread_main(void *arg) {
    inferd_engine *e = arg;
    uv_sem_post(&e->started);
    uv_run(&e->loop, UV_RUN_DEFAULT);
}

static void wake(inferd_engine *e) {
    if (e->threaded) uv_async_send(&e->async);
}

void engine_wake(inferd_engine *e) { wake(e); }

/* ---- public API ---------------------------------------------------------------------- */

/* Bytes tok_detok_push may write for one token: tokenizer.h bounds it by 3 x the
 * token's decoded length + 3 (invalid bytes become 3-byte U+FFFD); computed from the
 * longest token text of the vocabulary, with slack. */
static size_t detok_piece_cap(const tokenizer *t) {
    size_t longest = 0;
    for (int32_t id = 0; id < tok_n_vocab(t); id++) {
        const size_t n = tok_piece(t, id, false, NULL, 0);
        if (n > longest) longest = n;
    }
    return 3 * longest + 16;
}

static double cpu_seconds(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)) return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --quantize on load: the model's linear weights converted before the backend
 * prepares (and repacks) them */
/* --calibration: AWQ scales from the text's activations (at most ENGINE_CALIB_TOKENS
 * tokens, windows of ENGINE_CALIB_WINDOW) folded into the weights about to be quantized */
#define ENGINE_CALIB_TOKENS 2048
#define ENGINE_CALIB_WINDOW 256
#define ENGINE_CALIB_MIN_TOKENS 64
int engine_calibrate(model *m, const char *path, ggml_type qt, const bool *keep, int n_threads,
                     char *err, size_t err_bytes) {
    char *text = NULL;
    size_t n_text = 0;
    char e1[256];
    int rc = ifd_read_file(path, &text, &n_text, e1, sizeof e1);
    if (rc) return ifd_errf(err, err_bytes, rc, "--calibration: %s", e1);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    rc = tok_encode(m->tok, text, n_text, TOK_ENC_ADD_BOS, &ids, &n_ids);
    free(text);
    if (rc) {
        free(ids);
        return ifd_errf(err, err_bytes, rc, "--calibration %s: cannot tokenize it", path);
    }
    if (n_ids < ENGINE_CALIB_MIN_TOKENS) {
        free(ids);
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "--calibration %s: the text is too short (%zu tokens; at least %d)", path, n_ids,
                        ENGINE_CALIB_MIN_TOKENS);
    }
    int32_t window = ENGINE_CALIB_WINDOW;
    if (m->hp.n_ctx_train > 0 && (uint32_t)window > m->hp.n_ctx_train) window = (int32_t)m->hp.n_ctx_train;
    model_calib c;
    const double t0 = ifd_now_s();
    rc = backend_awq(m, ids, (int64_t)n_ids, window, tok_bos(m->tok), ENGINE_CALIB_TOKENS, qt, keep, n_threads,
                     &c, err, err_bytes);
    if (rc == IFD_OK) {
        char msg[256];
        int scaled = 0;
        for (uint32_t i = 0; i < c.n_layers * CALIB_N; i++) scaled += c.alpha[i] > 0;
        snprintf(msg, sizeof msg, "calibration: %lld tokens of %s, %d of %u layer inputs scaled (AWQ), %.2f s",
                 (long long)(n_ids < ENGINE_CALIB_TOKENS ? n_ids : ENGINE_CALIB_TOKENS), path, scaled,
                 c.n_layers * CALIB_N, ifd_now_s() - t0);
        slog_fields("info", msg, NULL);
    } else {
        char e2[512];
        snprintf(e2, sizeof e2, "--calibration %s: %s", path, err);
        snprintf(err, err_bytes, "%s", e2);
    }
    model_calib_free(&c);
    free(ids);
    return rc;
}

static int quantize_on_load(model *m, const inferd_engine_options *o, char *err, size_t err_bytes) {
    if (o->calibration_file && o->quantize_bits == 0)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "--calibration needs --quantize int8|int4");
    if (o->quantize_bits == 0) {
        if (o->quantize_keep_layers || o->quantize_lm_head)
            return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                            "--quantize-keep-layers / --quantize-lm-head need --quantize int8|int4");
        return IFD_OK;
    }
    bool *keep = calloc(m->hp.n_layers, sizeof *keep);
    if (!keep) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "engine: out of memory");
    int rc = model_quant_parse_layers(o->quantize_keep_layers, m->hp.n_layers, keep, err, err_bytes);
    if (rc == IFD_OK) {
        const model_quant_opts qo = {.bits = o->quantize_bits,
                                     .group_size = o->quantize_group_size ? o->quantize_group_size : 128,
                                     .lm_head = o->quantize_lm_head,
                                     .keep = keep,
                                     .n_threads = o->n_threads};
        const double t0 = ifd_now_s(), c0 = cpu_seconds();
        if (o->calibration_file)
            rc = engine_calibrate(m, o->calibration_file, quant_int_type(qo.bits, qo.group_size), keep,
                                  o->n_threads, err, err_bytes);
        if (rc == IFD_OK) rc = model_quantize(m, &qo, err, err_bytes);
        model_awq_trim(m);
        if (rc == IFD_OK) {
            char f[256];
            const ggml_type_info *ti = ggml_type_get((uint32_t)m->quant_type);
            /* cpu_seconds: of all threads, a figure other processes on the machine do not move */
            snprintf(f, sizeof f,
                     "\"type\":\"%s\",\"matrices\":%u,\"skipped\":%u,\"seconds\":%.3f,"
                     "\"cpu_seconds\":%.3f",
                     m->n_quantized && ti ? ti->name : "none", m->n_quantized, m->n_quant_skipped,
                     ifd_now_s() - t0, cpu_seconds() - c0);
            char msg[160];
            snprintf(msg, sizeof msg, "quantize: %u matrices to %s int%d g%d, %u left as they are",
                     m->n_quantized, m->n_quantized && ti ? ti->name : "none", o->quantize_bits,
                     qo.group_size, m->n_quant_skipped);
            slog_fields("info", msg, f);
        }
    }
    free(keep);
    return rc;
}

/* Startup log: resident weight bytes by type (before -> after a quantization) and the
 * KV cache's bytes per token. */
static void log_weights(const model *m, const size_t *before, size_t kv_per_token) {
    size_t after[GGML_TYPE_COUNT_];
    model_weight_bytes_by_type(m, after);
    char text[512], msg[640];
    model_weight_bytes_str(before, after, text, sizeof text);
    snprintf(msg, sizeof msg, "weights: %s; KV cache %zu bytes per token", text, kv_per_token);
    char f[2048]; /* a few types in practice; every one of the 44 still fits */
    size_t k = 0, total = 0;
    k += (size_t)snprintf(f + k, sizeof f - k, "\"weight_bytes_by_type\":{");
    bool first = true;
    for (int t = 0; t < GGML_TYPE_COUNT_ && k < sizeof f; t++)
        if (after[t]) {
            k += (size_t)snprintf(f + k, sizeof f - k, "%s\"%s\":%zu", first ? "" : ",",
                                  ggml_type_get((uint32_t)t)->name, after[t]);
            total += after[t];
            first = false;
        }
    if (k < sizeof f)
        snprintf(f + k, sizeof f - k, "},\"weight_bytes\":%zu,\"kv_bytes_per_token\":%zu", total,
                 kv_per_token);
    slog_fields("info", msg, f);
}

int inferd_engine_create(inferd_engine **out, const inferd_engine_options *o, char *err,
                         size_t err_bytes) {
    *out = NULL;
    if (err && err_bytes) err[0] = 0;
    if (!o->model_path && !o->random_weights)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "engine: no model path given");
    if (o->block_size < 1 || o->block_size > 1024 || o->max_num_seqs < 1 ||
        o->max_num_seqs > 4096 || o->max_num_batched_tokens < 1 ||
        o->max_num_batched_tokens > (1 << 20) || o->max_model_len < 0)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "engine: invalid options");
    if (!(o->gpu_memory_utilization >= 0 && o->gpu_memory_utilization <= 1)) /* 0: default */
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "engine: gpu_memory_utilization %g is not in (0, 1]",
                        o->gpu_memory_utilization);
    backend_kind kind;
    switch (o->device) {
    case INFERD_DEVICE_AUTO: kind = BACKEND_AUTO; break;
    case INFERD_DEVICE_CPU: kind = BACKEND_CPU; break;
    case INFERD_DEVICE_CUDA: kind = BACKEND_CUDA; break;
    case INFERD_DEVICE_EMU: kind = BACKEND_EMU; break;
    default: return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "engine: unknown device %d", (int)o->device);
    }
    /* AUTO resolved once for the sizing; backend_create resolves it the same way and logs
     * what was asked for and what was chosen */
    const backend_kind use = backend_resolve_kind(kind);
    model *dm = NULL; /* the draft model until spec_init owns it */
    inferd_engine *e = calloc(1, sizeof *e);
    if (!e) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "engine: out of memory");
    e->opt = *o;
    pthread_mutex_init(&e->mu, NULL);
    int rc = o->random_weights
                 ? model_load_random(&e->m, o->random_weights, o->random_dtype ? o->random_dtype : "f32",
                                     o->random_seed, o->n_threads, err, err_bytes)
                 : model_load(&e->m, o->model_path, err, err_bytes);
    if (rc) goto fail;
    size_t wbytes_before[GGML_TYPE_COUNT_];
    model_weight_bytes_by_type(e->m, wbytes_before);
    if ((rc = quantize_on_load(e->m, o, err, err_bytes))) goto fail;
    e->n_vocab = (int32_t)e->m->hp.n_vocab;
    e->max_model_len = (int32_t)e->m->hp.n_ctx_train;
    if (o->max_model_len > 0) e->max_model_len = IFD_MIN(o->max_model_len, (int32_t)(1 << 24));
    const int32_t bs = o->block_size;
    e->max_blocks_per_seq = (e->max_model_len + bs - 1) / bs;
    if (e->opt.max_num_batched_tokens < e->opt.max_num_seqs)
        e->opt.max_num_batched_tokens = e->opt.max_num_seqs;

    /* logits rows: one per sequence, and every prompt token of a chunk for prompt
     * logprobs, up to max_num_batched_tokens rows or 256 MiB of logits */
    const int64_t rows_by_mem = ((int64_t)256 << 20) / ((int64_t)e->n_vocab * (int64_t)sizeof(float));
    e->max_logits = (int32_t)IFD_MAX((int64_t)e->opt.max_num_seqs,
                                     IFD_MIN((int64_t)e->opt.max_num_batched_tokens, rows_by_mem));
    backend_kv_dtype kv_dtype;
    if ((rc = backend_kv_dtype_parse(o->kv_cache_dtype, &kv_dtype, err, err_bytes)) ||
        (rc = backend_kv_dtype_check(use, kv_dtype, err, err_bytes)))
        goto fail;
    backend_config bc = {.n_threads = o->n_threads,
                         .block_size = bs,
                         .max_batch_tokens = e->opt.max_num_batched_tokens,
                         .max_batch_seqs = e->opt.max_num_seqs,
                         .max_logits = e->max_logits,
                         .max_seq_len = e->max_model_len,
                         .reference = o->reference_kernels,
                         .kv_dtype = backend_kv_dtype_resolve(use, kv_dtype),
                         .kv_cache_fraction = o->kv_cache_fraction,
                         .gpu_memory_utilization =
                             o->gpu_memory_utilization > 0 ? o->gpu_memory_utilization : 0.90,
                         .graphs_off = o->no_cuda_graphs};

    /* KV pool from the memory budget (the backend's: free host or device memory) */
    const size_t block_bytes = backend_kv_block_bytes(use, e->m, bs, bc.kv_dtype);
    int64_t budget = o->kv_cache_bytes;
    if (budget <= 0 && (rc = backend_kv_budget(use, e->m, &bc, &budget, err, err_bytes))) goto fail;
    /* a draft model's pool comes from the same budget, holding as many tokens */
    if (o->draft_model_path && (rc = draft_open(&dm, o->draft_model_path, e->m, err, err_bytes))) goto fail;
    const size_t dblock_bytes = dm ? backend_kv_block_bytes(use, dm, bs, bc.kv_dtype) : 0;
    int64_t n_blocks = budget / (int64_t)(block_bytes + dblock_bytes);
    const int64_t useful = (int64_t)e->max_blocks_per_seq * e->opt.max_num_seqs * 4;
    if (n_blocks > useful) n_blocks = useful;
    if (n_blocks > INT32_MAX / bs) n_blocks = INT32_MAX / bs;
    if (n_blocks < e->max_blocks_per_seq) {
        if (n_blocks < 2) {
            rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM,
                          "engine: KV cache budget of %lld bytes holds %lld blocks of %zu bytes",
                          (long long)budget, (long long)n_blocks, block_bytes);
            goto fail;
        }
        /* A sequence longer than the pool could only preempt itself forever: the
         * longest sequence is what the pool holds. Said in err (success) for the log. */
        const int32_t was = e->max_model_len;
        e->max_blocks_per_seq = (int32_t)n_blocks;
        e->max_model_len = (int32_t)n_blocks * bs;
        if (err && err_bytes)
            snprintf(err, err_bytes,
                     "engine: max_model_len clamped from %d to %d tokens: the KV cache budget "
                     "of %lld bytes holds %lld blocks of %d tokens",
                     was, e->max_model_len, (long long)budget, (long long)n_blocks, bs);
    }
    log_weights(e->m, wbytes_before, block_bytes / (size_t)bs);
    bc.n_blocks = (int32_t)n_blocks;
    backend_log_kv(use, e->m, bc.kv_dtype, bs, n_blocks, budget);
    bc.max_seq_len = e->max_model_len; /* after the clamp above */
    if ((rc = backend_create(&e->be, kind, e->m, &bc, err, err_bytes))) goto fail;
    if ((rc = kv_create(&e->kv, (int32_t)n_blocks, bs, e->max_blocks_per_seq,
                        o->enable_prefix_caching))) {
        ifd_errf(err, err_bytes, rc, "engine: cannot create the KV block manager");
        goto fail;
    }
    {
        char e1[512];
        rc = spec_init(e, dm, kind, &bc, e1, sizeof e1);
        dm = NULL; /* spec_init owns it, also on failure */
        if (rc) {
            if (err && err_bytes) snprintf(err, err_bytes, "%s", e1);
            goto fail;
        }
    }
    const size_t T = (size_t)e->opt.max_num_batched_tokens, S = (size_t)e->opt.max_num_seqs;
    const size_t L = (size_t)e->max_logits;
    const sched_config sc = {.max_num_seqs = e->opt.max_num_seqs,
                             .max_num_batched_tokens = e->opt.max_num_batched_tokens,
                             .max_logits = e->max_logits,
                             /* with bursts, prompts also progress in them: mixed steps
                              * keep a smaller floor (4 tokens), so they stay near the
                              * decodes' own cost (measured: docs/benchmarks.md) */
                             .min_prefill_tokens = o->max_prefill_stall_ms > 0 ? IFD_MIN(bs, 4) : bs,
                             .stall_every = STALL_EVERY};
    if ((rc = sched_init(&e->sch, &sc, e->kv))) {
        ifd_errf(err, err_bytes, rc, "engine: cannot create the scheduler");
        goto fail;
    }
    sched_cost_init(&e->cost);
    const int brc = step_batch_init(&e->batch, T, S, L, e->max_blocks_per_seq);
    e->copy_src = malloc(S * sizeof(int32_t));
    e->copy_dst = malloc(S * sizeof(int32_t));
    e->logits = malloc(L * (size_t)e->n_vocab * sizeof(float));
    e->lp_buf = malloc((1 + INFERD_MAX_TOP_LOGPROBS) * sizeof(inferd_token_logprob));
    e->adv_seq = malloc(S * sizeof(sequence *));
    e->adv_tok = malloc(S * sizeof(int32_t));
    e->adv_row = malloc(S * sizeof(int32_t));
    e->adv_rows = malloc(S * sizeof(backend_sample_row));
    e->adv_lp = malloc(S * (1 + BACKEND_SAMPLE_MAX_TOP) * sizeof(backend_logprob));
    e->ver = malloc(S * sizeof(const sched_entry *));
    e->ver_rows = malloc(L * sizeof(backend_sample_row));
    e->ver_tok = malloc(L * sizeof(int32_t));
    e->ver_lp = malloc(L * (1 + BACKEND_SAMPLE_MAX_TOP) * sizeof(backend_logprob));
    e->piece_cap = detok_piece_cap(e->m->tok);
    e->piece_buf = malloc(e->piece_cap);
    /* one step's text: a piece through the stop matcher (+ its held bytes), then at a
     * finish the detokenizer's flush (< 64 bytes) through it and the matcher's flush */
    e->text_cap = IFD_MAX((size_t)1 << 16, e->piece_cap + 64 + 2 * (size_t)STOP_MAX_BYTES);
    e->text_buf = malloc(e->text_cap);
    e->cap_abort = e->cap_spare = 1024;
    e->abort_ids = malloc((size_t)e->cap_abort * sizeof(uint64_t));
    e->abort_spare = malloc((size_t)e->cap_spare * sizeof(uint64_t));
    if (brc != IFD_OK || !e->copy_src || !e->copy_dst ||
        !e->logits || !e->lp_buf || !e->adv_seq || !e->adv_tok || !e->adv_row || !e->adv_rows || !e->adv_lp ||
        !e->ver || !e->ver_rows || !e->ver_tok || !e->ver_lp ||
        !e->piece_buf || !e->text_buf || !e->abort_ids ||
        !e->abort_spare ||
        sampler_scratch_init(&e->scratch, e->n_vocab)) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    rng_seed(&e->seed_rng, (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)e << 16));
    e->next_id = 1;
    pd_init(e, use);
    e->threaded = o->threaded;
    if (e->threaded) {
        uv_loop_init(&e->loop);
        uv_async_init(&e->loop, &e->async, on_async);
        uv_idle_init(&e->loop, &e->idle);
        e->async.data = e->idle.data = e;
        uv_sem_init(&e->started, 0);
        if (uv_thread_create(&e->thread, engine_thread_main, e)) {
            rc = ifd_errf(err, err_bytes, IFD_ERR_INTERNAL, "engine: cannot start its thread");
            uv_close((uv_handle_t *)&e->async, NULL);
            uv_close((uv_handle_t *)&e->idle, NULL);
            uv_run(&e->loop, UV_RUN_DEFAULT);
            uv_loop_close(&e->loop);
            uv_sem_destroy(&e->started);
            e->threaded = false;
            goto fail;
        }
        uv_sem_wait(&e->started);
    }
    engine_update_stats(e);
    *out = e;
    return IFD_OK;
fail:
    model_destroy(dm);
    inferd_engine_destroy(e);
    return rc;
}

void inferd_engine_destroy(inferd_engine *e) {
    if (!e) return;
    if (e->threaded) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        pthread_mutex_unlock(&e->mu);
        uv_async_send(&e->async);
        uv_thread_join(&e->thread);
        uv_loop_close(&e->loop);
        uv_sem_destroy(&e->started);
    } else {
        if (e->kv) {
            drain_inbox(e);
            while (e->live) request_abort(e, e->live);
        }
    }
    for (request *r = e->inbox_head, *n; r; r = n) {
        n = r->next_inbox;
        request_free(r);
    }
    spec_deinit(e);
    pd_deinit(e);
    kv_destroy(e->kv);
    backend_destroy(e->be);
    model_destroy(e->m);
    sampler_scratch_deinit(&e->scratch);
    sched_deinit(&e->sch);
    step_batch_free(&e->batch);
    free(e->copy_src);
    free(e->copy_dst);
    free(e->logits);
    free(e->lp_buf);
    free(e->adv_seq);
    free(e->adv_tok);
    free(e->adv_row);
    free(e->adv_rows);
    free(e->adv_lp);
    free(e->ver);
    free(e->ver_rows);
    free(e->ver_tok);
    free(e->ver_lp);
    free(e->piece_buf);
    gram_vocab_free(e->gvocab);
    free(e->gextra);
    free(e->dmask);
    free(e->dextra);
    free(e->text_buf);
    free(e->abort_ids);
    free(e->abort_spare);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static int check_sampling(const inferd_engine *e, const inferd_sampling *sp, char *err,
                          size_t err_bytes) {
#define BAD(...) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, __VA_ARGS__)
    if (!(sp->temperature >= 0.0f && sp->temperature <= 100.0f)) BAD("temperature must be in [0, 100]");
    if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f)) BAD("top_p must be in (0, 1]");
    if (sp->top_k < 0) BAD("top_k must be >= 0");
    if (!(sp->min_p >= 0.0f && sp->min_p <= 1.0f)) BAD("min_p must be in [0, 1]");
    if (!(sp->repetition_penalty > 0.0f && sp->repetition_penalty <= 100.0f))
        BAD("repetition_penalty must be in (0, 100]");
    if (!(fabsf(sp->presence_penalty) <= 2.0f)) BAD("presence_penalty must be in [-2, 2]");
    if (!(fabsf(sp->frequency_penalty) <= 2.0f)) BAD("frequency_penalty must be in [-2, 2]");
    if (sp->max_tokens < 0) BAD("max_tokens must be >= 0");
    if (sp->n < 1 || sp->n > 128) BAD("n must be in [1, 128]");
    if (sp->logprobs < -1 || sp->logprobs > INFERD_MAX_TOP_LOGPROBS)
        BAD("top_logprobs must be in [0, %d]", INFERD_MAX_TOP_LOGPROBS);
    if (sp->prompt_logprobs < -1 || sp->prompt_logprobs > INFERD_MAX_TOP_LOGPROBS)
        BAD("prompt_logprobs must be in [0, %d]", INFERD_MAX_TOP_LOGPROBS);
    if (sp->n_stop < 0 || sp->n_stop > INFERD_MAX_STOP) BAD("at most %d stop strings", INFERD_MAX_STOP);
    if (sp->reasoning_end && strlen(sp->reasoning_end) > 24) BAD("reasoning_end is at most 24 bytes");
    if (sp->n_logit_bias < 0 || sp->n_logit_bias > 1024) BAD("logit_bias has too many entries");
    for (int32_t i = 0; i < sp->n_logit_bias; i++) {
        if (sp->logit_bias[i].id < 0 || sp->logit_bias[i].id >= e->n_vocab)
            BAD("logit_bias token id %d is out of range", sp->logit_bias[i].id);
        if (!(fabsf(sp->logit_bias[i].bias) <= 100.0f)) BAD("logit_bias values must be in [-100, 100]");
    }
    if (sp->n_stop_token_ids < 0 || sp->n_stop_token_ids > 64) BAD("too many stop_token_ids");
    for (int32_t i = 0; i < sp->n_stop_token_ids; i++)
        if (sp->stop_token_ids[i] < 0 || sp->stop_token_ids[i] >= e->n_vocab)
            BAD("stop token id %d is out of range", sp->stop_token_ids[i]);
    for (int32_t i = 0; i < sp->n_stop; i++)
        if (!sp->stop[i] || !sp->stop[i][0] || strlen(sp->stop[i]) > 256)
            BAD("stop strings must be 1..256 bytes");
#undef BAD
    return IFD_OK;
}

int inferd_submit(inferd_engine *e, const inferd_request *q, uint64_t *id, char *err,
                  size_t err_bytes) {
    if (!q->cb) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "no output callback");
    if (q->n_prompt < 1)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "the prompt must contain at least one token");
    for (int32_t i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= e->n_vocab)
            return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "prompt token id %d is out of range",
                            q->prompt[i]);
    if (q->n_prompt >= e->max_model_len)
        return ifd_errf(err, err_bytes, IFD_ERR_LIMIT,
                        "the prompt has %d tokens; the maximum context length is %d", q->n_prompt,
                        e->max_model_len);
    int rc = check_sampling(e, &q->sampling, err, err_bytes);
    if (rc) return rc;
    if (q->kv_hold_ms < 0 || (q->kv_hold_ms > 0 && q->sampling.n != 1))
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "kv_hold_ms needs n = 1 and a duration >= 0");
    if (q->kv_import && (q->sampling.n != 1 || q->sampling.prompt_logprobs >= 0 || q->sampling.grammar ||
                         q->sampling.max_tokens < 1 || q->kv_hold_ms > 0))
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "a KV import needs n = 1, max_tokens >= 1, no prompt logprobs, no grammar, no hold");
    request *r = calloc(1, sizeof *r);
    if (!r) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    r->sp = q->sampling;
    r->priority = q->priority;
    r->cb = q->cb;
    r->user = q->user;
    r->kv_hold_ms = q->kv_hold_ms;
    r->kv_import = q->kv_import;
    r->kv_import_user = q->kv_import_user;
    r->n_prompt = q->n_prompt;
    r->t_submit = ifd_now_s();
    r->n_seqs = r->sp.n;
    r->n_live = r->n_seqs;
    r->prompt = malloc((size_t)q->n_prompt * sizeof(int32_t));
    r->seqs = calloc((size_t)r->n_seqs, sizeof(sequence));
    bool ok = r->prompt && r->seqs;
    if (ok && r->sp.n_stop > 0) {
        r->stop_strs = calloc((size_t)r->sp.n_stop, sizeof(char *));
        r->stop_lens = calloc((size_t)r->sp.n_stop, sizeof(size_t));
        ok = r->stop_strs && r->stop_lens;
        for (int32_t i = 0; ok && i < r->sp.n_stop; i++) {
            r->stop_strs[i] = strdup(q->sampling.stop[i]);
            ok = r->stop_strs[i] != NULL;
            if (ok) r->stop_lens[i] = strlen(r->stop_strs[i]);
        }
        r->sp.stop = (const char *const *)r->stop_strs;
    }
    if (ok && r->sp.n_logit_bias > 0) {
        r->bias = malloc((size_t)r->sp.n_logit_bias * sizeof *r->bias);
        ok = r->bias != NULL;
        if (ok) memcpy(r->bias, q->sampling.logit_bias, (size_t)r->sp.n_logit_bias * sizeof *r->bias);
        r->sp.logit_bias = r->bias;
    }
    if (ok && r->sp.n_stop_token_ids > 0) {
        r->stop_ids = malloc((size_t)r->sp.n_stop_token_ids * sizeof(int32_t));
        ok = r->stop_ids != NULL;
        if (ok) memcpy(r->stop_ids, q->sampling.stop_token_ids, (size_t)r->sp.n_stop_token_ids * sizeof(int32_t));
    }
    r->rs_start_id = -1;
    r->sp.reasoning_start = r->sp.reasoning_end = NULL;
    if (ok && q->sampling.grammar) {
        r->gram = (gram *)(void *)q->sampling.grammar;
        gram_ref(r->gram);
        const char *re = q->sampling.reasoning_end, *rs = q->sampling.reasoning_start;
        if (re && re[0]) {
            r->rs_end = strdup(re);
            ok = r->rs_end != NULL;
            if (rs && rs[0]) {
                r->rs_may_open = true;
                r->rs_start_id = tok_find(e->m->tok, rs, strlen(rs));
            }
        }
    }
    if (ok && r->sp.prompt_logprobs >= 0 && r->n_prompt > 1) {
        r->plp_top = IFD_MIN(r->sp.prompt_logprobs, INFERD_MAX_TOP_LOGPROBS);
        r->plp = calloc((size_t)(r->n_prompt - 1) * (size_t)(1 + r->plp_top), sizeof *r->plp);
        ok = r->plp != NULL;
    }
    if (!ok) {
        request_free(r);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    }
    memcpy(r->prompt, q->prompt, (size_t)q->n_prompt * sizeof(int32_t));
    r->sparams = (sampler_params){.temperature = r->sp.temperature,
                                  .top_k = r->sp.top_k,
                                  .top_p = r->sp.top_p,
                                  .min_p = r->sp.min_p,
                                  .repetition_penalty = r->sp.repetition_penalty,
                                  .presence_penalty = r->sp.presence_penalty,
                                  .frequency_penalty = r->sp.frequency_penalty,
                                  .logit_bias = (const sampler_bias *)r->bias,
                                  .n_logit_bias = r->sp.n_logit_bias};
    const int32_t max_new = e->max_model_len - q->n_prompt;
    const bool penalties = r->sp.repetition_penalty != 1.0f || r->sp.presence_penalty != 0.0f ||
                           r->sp.frequency_penalty != 0.0f;
    pthread_mutex_lock(&e->mu);
    const bool stopping = e->stopping, dead = e->dead;
    uint64_t seed = r->sp.has_seed ? r->sp.seed : rng_next(&e->seed_rng);
    pthread_mutex_unlock(&e->mu);
    if (dead) {
        request_free(r);
        return ifd_errf(err, err_bytes, IFD_ERR_DEVICE_LOST, "the engine is dead: its device was lost");
    }
    if (stopping) {
        request_free(r);
        return ifd_errf(err, err_bytes, IFD_ERR_BUSY, "the engine is shutting down");
    }
    for (int32_t i = 0; i < r->n_seqs; i++) {
        sequence *s = &r->seqs[i];
        s->req = r;
        s->index = i;
        s->ss.status = SCHED_NEW;
        s->ss.n_prompt = r->n_prompt;
        s->ss.all_prompt_logits = i == 0 && r->sp.prompt_logprobs >= 0;
        s->max_tokens = IFD_MIN(r->sp.max_tokens, max_new);
        s->ss.tokens = malloc((size_t)e->max_model_len * sizeof(int32_t));
        ok = s->ss.tokens != NULL;
        if (ok) {
            memcpy(s->ss.tokens, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
            s->ss.n_tokens = r->n_prompt;
            /* penalty counts (9 bytes x n_vocab) only when a penalty needs them: a
             * request of 64 prompts x n=8 on a 150k vocabulary would take 0.7 GB */
            ok = !penalties || (sampler_state_init(&s->samp, e->n_vocab) == 0 &&
                                sampler_state_add_prompt(&s->samp, r->prompt, r->n_prompt) == 0);
            ok = ok && stop_init(&s->stop, (const char *const *)r->stop_strs, r->stop_lens, r->sp.n_stop,
                           false) == 0;
        }
        if (!ok) {
            request_free(r);
            return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
        }
        /* per-choice RNG: the request seed, decorrelated by choice index */
        rng_seed(&s->rng, seed + 0x9e3779b97f4a7c15ull * (uint64_t)i);
        tok_detok_init(&s->detok, e->m->tok, false);
    }
    pthread_mutex_lock(&e->mu);
    if (e->dead) { /* died since the check above: nothing enters the inbox engine_die took */
        pthread_mutex_unlock(&e->mu);
        request_free(r);
        return ifd_errf(err, err_bytes, IFD_ERR_DEVICE_LOST, "the engine is dead: its device was lost");
    }
    r->id = e->next_id++;
    r->arrival = e->next_arrival++;
    if (e->inbox_tail)
        e->inbox_tail->next_inbox = r;
    else
        e->inbox_head = r;
    e->inbox_tail = r;
    pthread_mutex_unlock(&e->mu);
    if (id) *id = r->id;
    wake(e);
    return IFD_OK;
}

void inferd_abort(inferd_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    if (e->n_abort == e->cap_abort) {
        uint64_t *n = realloc(e->abort_ids, (size_t)e->cap_abort * 2 * sizeof(uint64_t));
        if (n) {
            e->abort_ids = n;
            e->cap_abort *= 2;
        }
    }
    if (e->n_abort < e->cap_abort) e->abort_ids[e->n_abort++] = id;
    pthread_mutex_unlock(&e->mu);
    wake(e);
}

void inferd_engine_stats(inferd_engine *e, inferd_stats *st) {
    pthread_mutex_lock(&e->mu);
    *st = e->stats;
    pthread_mutex_unlock(&e->mu);
}

bool inferd_engine_healthy(inferd_engine *e) {
    pthread_mutex_lock(&e->mu);
    const bool ok = !e->dead;
    pthread_mutex_unlock(&e->mu);
    return ok;
}

void engine_spec_debug_accept_all(inferd_engine *e, bool on) { e->spec.debug_accept_all = on; }

void engine_set_logits_tap(inferd_engine *e, engine_logits_tap fn, void *user) {
    e->tap = fn;
    e->tap_user = user;
}

int inferd_grammar_compile(inferd_grammar_kind kind, const char *text, size_t n, inferd_grammar **out, char *err,
                           size_t err_bytes) {
    gram *g = NULL;
    int rc;
    *out = NULL;
    switch (kind) {
    case INFERD_GRAMMAR_GBNF: rc = gram_from_gbnf(text, n, &g, err, err_bytes); break;
    case INFERD_GRAMMAR_JSON_SCHEMA: rc = gram_from_json_schema(text, n, &g, err, err_bytes); break;
    case INFERD_GRAMMAR_REGEX: rc = gram_from_regex(text, n, &g, err, err_bytes); break;
    case INFERD_GRAMMAR_JSON_OBJECT: {
        gram_builder *b = gb_new();
        int32_t root;
        rc = b ? gram_json_any_object(b, &root) : -1;
        if (rc == 0) rc = gram_compile(b, root, &g, err, err_bytes);
        else ifd_errf(err, err_bytes, -1, "out of memory");
        gb_free(b);
        break;
    }
    default: return ifd_errf(err, err_bytes, -1, "unknown grammar kind %d", (int)kind);
    }
    if (rc) return -1;
    *out = (inferd_grammar *)(void *)g;
    return 0;
}

void inferd_grammar_free(inferd_grammar *g) { gram_unref((gram *)(void *)g); }

int32_t inferd_n_vocab(const inferd_engine *e) { return e->n_vocab; }
int32_t inferd_max_model_len(const inferd_engine *e) { return e->max_model_len; }
const char *inferd_model_name(const inferd_engine *e) { return e->m->name; }
const struct model *inferd_model(const inferd_engine *e) { return e->m; }
