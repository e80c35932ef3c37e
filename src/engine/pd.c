/* pd.c — the engine's side of prefill/decode disaggregation: KV leases on a prefill
 * instance and KV imports on a decode instance. Moving the bytes between instances is
 * the caller's (src/kvx); the engine only says which blocks, keeps them still while
 * they move, and turns an import into a running sequence.
 *
 * Prefill side: a request submitted with kv_hold_ms computes its prompt and draws its
 * first token as any other; when it ends, its kv_seq moves into a lease instead of
 * being freed, so its blocks (its own references) stay put, immutable, for kv_hold_ms
 * or until inferd_kv_release. The final event names the lease and the blocks.
 *
 * Decode side: a request submitted with kv_import waits (FIFO, PD_WAIT) until the
 * scheduler gives it a seat and blocks for its whole prompt (sched_admit_hold: the
 * local prefix cache serves what it can), then (PD_HOLD) its callback hands the blocks
 * to the caller, who fills them and answers with inferd_kv_import_done: the sequence
 * then joins the running set with its prompt computed and the first token taken, or
 * (a failed import) prefills the rest itself or ends with an error. Until the answer
 * the blocks are the caller's: an abort is deferred to it. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../util/common.h"
#include "../util/hash.h"
#include "../util/status.h"

void pd_init(inferd_engine *e, backend_kind kind) {
    const model_hparams *hp = &e->m->hp;
    const backend_config *bc = &e->be->cfg;
    snprintf(e->pd.compat, sizeof e->pd.compat,
             "model=%s arch=%s layers=%u kv_heads=%u head_dim=%u dim=%u vocab=%d quant=%d/%d kv=%s block=%d backend=%s",
             e->m->name, hp->arch_name, hp->n_layers, hp->n_kv_heads, hp->head_dim, hp->dim,
             e->n_vocab, e->opt.quantize_bits, e->opt.quantize_group_size, backend_kv_dtype_name(bc->kv_dtype),
             bc->block_size, e->be->ops->name);
    e->pd.compat_hash = ifd_hash_bytes(0x7064u, e->pd.compat, strlen(e->pd.compat));
    e->pd.block_bytes = backend_kv_block_bytes(kind, e->m, bc->block_size, bc->kv_dtype);
}

void pd_deinit(inferd_engine *e) {
    for (int32_t i = 0; i < e->pd.n_leases; i++) kv_seq_deinit(e->kv, &e->pd.leases[i].kv);
    free(e->pd.leases);
    e->pd.leases = NULL;
    e->pd.n_leases = 0;
    for (pd_msg *m = e->pd.msgs, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    e->pd.msgs = NULL;
}

bool pd_has_msgs(inferd_engine *e) { return e->pd.msgs != NULL; }

/* ---- prefill side: leases -------------------------------------------------------------- */

/* Drop lease i unless a reader is copying its blocks (then it is marked and dropped by
 * a later pd_expire). Engine thread; takes mu (readers look leases up under it). */
static bool lease_drop(inferd_engine *e, int32_t i) {
    pd_state *pd = &e->pd;
    pthread_mutex_lock(&e->mu);
    pd_lease *l = &pd->leases[i];
    if (l->busy > 0) {
        l->gone = true; /* no new reader finds it */
        pthread_mutex_unlock(&e->mu);
        return false;
    }
    kv_seq k = l->kv;
    pd->leases[i] = pd->leases[--pd->n_leases];
    pthread_mutex_unlock(&e->mu);
    pd->cnt.leases--;
    pd->cnt.leased_blocks -= k.n_blocks;
    kv_seq_deinit(e->kv, &k); /* its blocks: evictable (cached) or free */
    return true;
}

static void on_lease_timer(uv_timer_t *t) {
    inferd_engine *e = t->data;
    const uint64_t before = e->pd.cnt.lease_expiries;
    pd_expire(e);
    if (e->pd.cnt.lease_expiries != before) engine_update_stats(e);
    if (e->pd.n_leases == 0) {
        uv_timer_stop(&e->pd.timer);
        e->pd.timer_on = false;
    }
}

void pd_lease_take(inferd_engine *e, sequence *s) {
    pd_state *pd = &e->pd;
    request *r = s->req;
    pthread_mutex_lock(&e->mu);
    if (pd->n_leases == pd->cap_leases) {
        const int32_t cap = pd->cap_leases ? 2 * pd->cap_leases : 16;
        pd_lease *n = realloc(pd->leases, (size_t)cap * sizeof *n);
        if (!n) { /* no lease: the blocks are freed as usual, the event names none */
            pthread_mutex_unlock(&e->mu);
            return;
        }
        pd->leases = n;
        pd->cap_leases = cap;
    }
    pd_lease *l = &pd->leases[pd->n_leases++];
    *l = (pd_lease){.id = ++pd->next_lease, .kv = s->ss.kv}; /* the table and its references move */
    l->expiry = ifd_now_s() + r->kv_hold_ms * 1e-3;
    pthread_mutex_unlock(&e->mu);
    memset(&s->ss.kv, 0, sizeof s->ss.kv);
    s->ss.kv_ready = false;
    r->pd_lease = l->id;
    /* the table outlives the event (the lease is dropped on the engine thread only) */
    r->pd_blocks = l->kv.blocks;
    r->pd_n_blocks = l->kv.n_blocks;
    pd->cnt.leases_total++;
    pd->cnt.leases++;
    pd->cnt.leased_blocks += l->kv.n_blocks;
    if (e->threaded) {
        if (!pd->timer_init) {
            uv_timer_init(&e->loop, &pd->timer);
            pd->timer.data = e;
            pd->timer_init = true;
        }
        if (!pd->timer_on) {
            uv_timer_start(&pd->timer, on_lease_timer, 10, 10);
            pd->timer_on = true;
        }
    }
}

void pd_expire(inferd_engine *e) {
    pd_state *pd = &e->pd;
    if (pd->n_leases == 0) return;
    const double now = ifd_now_s();
    for (int32_t i = pd->n_leases - 1; i >= 0; i--) {
        if (pd->leases[i].gone) { /* released or expired while being read */
            lease_drop(e, i);
        } else if (pd->leases[i].expiry <= now) {
            pd->cnt.lease_expiries++;
            lease_drop(e, i);
        }
    }
}

static void release(inferd_engine *e, uint64_t lease) {
    for (int32_t i = 0; i < e->pd.n_leases; i++)
        if (e->pd.leases[i].id == lease) {
            lease_drop(e, i);
            return;
        }
}

/* ---- decode side: imports -------------------------------------------------------------- */

bool pd_route(inferd_engine *e, request *r) {
    if (!r->kv_import) return false;
    r->pd = PD_WAIT;
    r->next_pd = NULL;
    if (e->pd.wait_tail)
        e->pd.wait_tail->next_pd = r;
    else
        e->pd.wait_head = r;
    e->pd.wait_tail = r;
    e->pd.n_parked++;
    return true;
}

static void wait_unlink(pd_state *pd, request *r) {
    request *prev = NULL;
    for (request *q = pd->wait_head; q; prev = q, q = q->next_pd)
        if (q == r) {
            if (prev)
                prev->next_pd = q->next_pd;
            else
                pd->wait_head = q->next_pd;
            if (pd->wait_tail == q) pd->wait_tail = prev;
            return;
        }
}

void pd_admit(inferd_engine *e) {
    pd_state *pd = &e->pd;
    while (pd->wait_head) {
        request *r = pd->wait_head;
        sequence *s = &r->seqs[0];
        const int32_t hit = sched_admit_hold(&e->sch, &s->ss);
        if (hit == -1) return; /* no seat or blocks yet: in order, so all wait */
        pd->wait_head = r->next_pd;
        if (!pd->wait_head) pd->wait_tail = NULL;
        if (hit < 0) { /* the prompt can never fit this pool */
            pd->n_parked--;
            r->pd = PD_NONE;
            engine_request_end(e, r, INFERD_FINISH_LENGTH);
            continue;
        }
        r->pd = PD_HOLD;
        pd->cnt.importing++;
        pd->cnt.imports_total++;
        r->t_first_sched = ifd_now_s();
        r->cached_tokens = hit;
        r->kv_import(r->kv_import_user, r->id, hit, s->ss.kv.blocks, s->ss.kv.n_blocks);
    }
}

bool pd_abort(inferd_engine *e, request *r) {
    if (r->pd == PD_WAIT) {
        wait_unlink(&e->pd, r);
        e->pd.n_parked--;
        r->pd = PD_NONE;
        engine_request_end(e, r, INFERD_FINISH_ABORT);
        return true;
    }
    if (r->pd == PD_HOLD) {
        r->pd_abort = true; /* the caller may be writing its blocks: end at the answer */
        return true;
    }
    return false;
}

static void import_done(inferd_engine *e, const pd_msg *m) {
    request *r = e->live;
    while (r && r->id != m->id) r = r->next_all;
    if (!r || r->pd != PD_HOLD) return;
    pd_state *pd = &e->pd;
    sequence *s = &r->seqs[0];
    r->pd = PD_NONE;
    pd->n_parked--;
    pd->cnt.importing--;
    const bool ok = m->token >= 0 && m->token < e->n_vocab;
    if (ok) {
        sched_release_hold(&e->sch, &s->ss, r->n_prompt);
    } else {
        pd->cnt.import_failures++;
        /* the prompt's KV past the local prefix-cache hit is garbage: drop it */
        sched_release_hold(&e->sch, &s->ss, r->cached_tokens);
    }
    if (r->pd_abort) {
        engine_request_end(e, r, INFERD_FINISH_ABORT);
        return;
    }
    if (!ok) {
        if (m->recompute)
            pd->cnt.import_recomputes++; /* running, its prompt to prefill from the hit */
        else
            engine_request_end(e, r, INFERD_FINISH_ERROR);
        return;
    }
    if (r->pd_early) return; /* token 1 is out already (import_early) */
    s->rng.ctr++; /* the prefill instance drew the first token at counter 0 */
    engine_seq_take(e, s, m->token);
}

/* The first token before the KV: emitted at once when it leaves the request running
 * (one that it would end — EOS, a stop, max_tokens 1 — waits for the answer: its blocks
 * are the caller's until then). The sequence then holds n_prompt + 1 tokens while its
 * prompt's KV is still arriving; a failed import recomputes the prompt and token 1 (as
 * a preempted sequence does) and draws token 2 next, the same output. */
static void import_early(inferd_engine *e, const pd_msg *m) {
    request *r = e->live;
    while (r && r->id != m->id) r = r->next_all;
    if (!r || r->pd != PD_HOLD || r->pd_abort || r->pd_early || m->token < 0 || m->token >= e->n_vocab) return;
    sequence *s = &r->seqs[0];
    if (!engine_take_continues(e, s, m->token)) return;
    r->pd_early = true;
    s->rng.ctr++; /* the prefill instance drew it at counter 0 */
    const bool ended = engine_seq_take(e, s, m->token);
    IFD_ASSERT(!ended);
}

void pd_drain(inferd_engine *e) {
    pthread_mutex_lock(&e->mu);
    pd_msg *m = e->pd.msgs;
    e->pd.msgs = NULL;
    pthread_mutex_unlock(&e->mu);
    /* newest first: reverse, so answers are handled in the order they came */
    pd_msg *in_order = NULL;
    while (m) {
        pd_msg *n = m->next;
        m->next = in_order;
        in_order = m;
        m = n;
    }
    for (m = in_order; m;) {
        pd_msg *n = m->next;
        if (m->release)
            release(e, m->id);
        else if (m->early)
            import_early(e, m);
        else
            import_done(e, m);
        free(m);
        m = n;
    }
}

/* ---- public API ------------------------------------------------------------------------ */

static void post(inferd_engine *e, uint64_t id, int32_t token, bool rel, bool recompute, bool early) {
    pd_msg *m = malloc(sizeof *m);
    if (!m) {
        /* out of memory: an answer must not be lost (the blocks would stay held), so
         * wait for memory; a release is lost at worst until the lease expires */
        if (rel || early) return;
        while (!(m = malloc(sizeof *m))) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    *m = (pd_msg){.id = id, .token = token, .release = rel, .recompute = recompute, .early = early};
    pthread_mutex_lock(&e->mu);
    m->next = e->pd.msgs;
    e->pd.msgs = m;
    pthread_mutex_unlock(&e->mu);
    engine_wake(e);
}

int inferd_kv_release(inferd_engine *e, uint64_t lease) {
    /* live now: not dropped, and cannot have been (a drop needs its expiry past, or a
     * release, or it marked gone) — so whatever was read from its blocks before was its */
    bool live = false;
    const double now = ifd_now_s();
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0; i < e->pd.n_leases && !live; i++)
        live = e->pd.leases[i].id == lease && !e->pd.leases[i].gone && e->pd.leases[i].expiry > now;
    pthread_mutex_unlock(&e->mu);
    post(e, lease, -1, true, false, false);
    return live ? IFD_OK : IFD_ERR_NOT_FOUND;
}

int inferd_kv_get_region(inferd_engine *e, inferd_kv_region *out) {
    memset(out, 0, sizeof *out);
    const int32_t n_segs = 2 * (int32_t)e->m->hp.n_layers;
    if (!e->be->ops->kv_region || n_segs > INFERD_KV_MAX_SEGS) return IFD_ERR_UNSUPPORTED;
    size_t stride = 0;
    const int rc = e->be->ops->kv_region(e->be, &out->base, &out->bytes, out->seg_off, &stride);
    if (rc) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->n_segs = n_segs;
    out->n_blocks = e->be->cfg.n_blocks;
    out->seg_bytes = e->pd.block_bytes / (size_t)n_segs;
    out->block_stride = stride;
    return IFD_OK;
}

void inferd_kv_import_done(inferd_engine *e, uint64_t request_id, int32_t first_token, bool recompute) {
    post(e, request_id, first_token < 0 ? -1 : first_token, false, recompute, false);
}

void inferd_kv_import_first(inferd_engine *e, uint64_t request_id, int32_t first_token) {
    if (first_token >= 0) post(e, request_id, first_token, false, false, true);
}

void inferd_kv_get_info(const inferd_engine *e, inferd_kv_info *out) {
    const backend_config *bc = &e->be->cfg;
    const size_t bb = e->pd.block_bytes;
    *out = (inferd_kv_info){.block_size = bc->block_size,
                            .n_blocks = bc->n_blocks,
                            .n_layers = (int32_t)e->m->hp.n_layers,
                            .block_bytes = bb,
                            .layer_bytes = bb / (2 * (size_t)e->m->hp.n_layers),
                            .compat_hash = e->pd.compat_hash,
                            .compat = e->pd.compat,
                            .supported = e->be->ops->kv_rw != NULL};
}

int inferd_kv_read(inferd_engine *e, const int32_t *blocks, int32_t n, void *buf) {
    if (!e->be->ops->kv_rw) return IFD_ERR_UNSUPPORTED;
    if (n < 0 || (n > 0 && (!blocks || !buf))) return IFD_ERR_INVALID;
    return e->be->ops->kv_rw(e->be, blocks, n, buf, 0);
}

int inferd_kv_read_lease(inferd_engine *e, uint64_t lease, int32_t first, int32_t n, void *buf) {
    if (!e->be->ops->kv_rw) return IFD_ERR_UNSUPPORTED;
    if (first < 0 || n < 0 || (n > 0 && !buf)) return IFD_ERR_INVALID;
    int32_t ids[64];
    pthread_mutex_lock(&e->mu);
    pd_lease *l = NULL;
    for (int32_t i = 0; i < e->pd.n_leases; i++)
        if (e->pd.leases[i].id == lease && !e->pd.leases[i].gone && e->pd.leases[i].expiry > ifd_now_s())
            l = &e->pd.leases[i];
    if (!l || first > l->kv.n_blocks || n > l->kv.n_blocks - first) {
        pthread_mutex_unlock(&e->mu);
        return l ? IFD_ERR_INVALID : IFD_ERR_NOT_FOUND;
    }
    l->busy++;
    const int32_t *blocks = l->kv.blocks + first; /* the table stays while busy */
    pthread_mutex_unlock(&e->mu);
    int rc = IFD_OK;
    char *p = buf;
    for (int32_t k = 0; k < n && rc == IFD_OK; k += 64) {
        const int32_t m = n - k < 64 ? n - k : 64;
        memcpy(ids, blocks + k, (size_t)m * sizeof(int32_t));
        rc = e->be->ops->kv_rw(e->be, ids, m, p + (size_t)k * e->pd.block_bytes, 0);
    }
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0; i < e->pd.n_leases; i++)
        if (e->pd.leases[i].id == lease) e->pd.leases[i].busy--;
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int inferd_kv_write(inferd_engine *e, const int32_t *blocks, int32_t n, const void *buf) {
    if (!e->be->ops->kv_rw) return IFD_ERR_UNSUPPORTED;
    if (n < 0 || (n > 0 && (!blocks || !buf))) return IFD_ERR_INVALID;
    return e->be->ops->kv_rw(e->be, blocks, n, (void *)(uintptr_t)buf, 1);
}

void inferd_pd_get_stats(inferd_engine *e, inferd_pd_stats *st) {
    pthread_mutex_lock(&e->mu);
    *st = e->pd.pub;
    pthread_mutex_unlock(&e->mu);
}
