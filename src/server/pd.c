/* pd.c — the roles of prefill/decode disaggregation (see pd.h). */
#include "pd.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "kvx/kvx.h"
#include "server.h"
#include "util/common.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/status.h"

#define MAX_IDLE_CONNS 16
#define MAX_ATTEMPTS 3
#define READ_CHUNK_BYTES ((size_t)64 << 20)

typedef struct pd_peer {
    char host[256];
    int port;
    _Atomic int outstanding;
    double down_until; /* under pd_server.peer_mu: unhealthy until then (an error) */
    kvx_conn *idle[MAX_IDLE_CONNS];
    int n_idle;
} pd_peer;

typedef struct pd_job {
    struct pd_job *next;
    struct pd_server *p;
    uint64_t id;
    int32_t n_prompt, n_cached, n_blocks;
    int32_t *blocks;
    char *json;
    size_t json_n;
    uint64_t affinity;
    pd_info *info;
} pd_job;

struct pd_server {
    server *s;
    inferd_engine *e;
    int role;
    inferd_kv_info ki;
    kvx_hello me;
    /* prefill */
    kvx_server *kv;
    _Atomic uint64_t calls, busy_refusals;
    bool ucx_region; /* a region is registered with UCX: the pool, or the staging area */
    /* UCX staging (a pool not in host memory, or --pd-ucx-stage always): each lease's
     * blocks are copied into free slots of a registered host area, read from there */
    unsigned char *stage;
    int32_t stage_blocks;
    uint64_t *stage_owner; /* under stage_mu: the lease holding each slot (0: free) */
    double *stage_expiry;  /* under stage_mu: when the slot is free whatever happened */
    pthread_mutex_t stage_mu;
    _Atomic uint64_t stage_misses;
    /* decode */
    pd_peer *peers;
    int n_peers;
    pthread_mutex_t peer_mu;
    pthread_t *workers;
    int n_workers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pd_job *head, *tail;
    bool stopping;
    kvx_conn **inflight; /* under mu: connections in a call or transfer (pd_stop interrupts them) */
    int n_inflight;      /* its slots: one per worker */
    _Atomic uint64_t remote_prefills, local_prefills, failures, recomputes, retries, busy_waits;
    _Atomic uint64_t transfer_bytes, transfer_us, remote_prefill_us, transfer_ops;
};

static uint64_t random_u64(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) x = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&x;
    return ifd_hash_mix64(x);
}

/* ---- prefill side ------------------------------------------------------------------- */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int32_t token;
    uint64_t lease;
    int32_t n_blocks, cached;
    int32_t *blocks; /* the lease's, malloc'ed (NULL: out of memory) */
    inferd_finish_reason why;
} waiter;

static void on_prefill_out(const inferd_output *o, void *user) {
    waiter *w = user;
    pthread_mutex_lock(&w->mu);
    if (o->n_tokens > 0) w->token = o->tokens[0];
    if (o->finished) {
        w->done = true;
        w->lease = o->kv_lease;
        w->n_blocks = o->n_kv_blocks;
        w->cached = o->cached_tokens;
        if (o->n_kv_blocks > 0 && o->kv_blocks && (w->blocks = malloc((size_t)o->n_kv_blocks * sizeof(int32_t))))
            memcpy(w->blocks, o->kv_blocks, (size_t)o->n_kv_blocks * sizeof(int32_t));
        w->why = o->finish_reason;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

static char *dup_reply(const char *text, size_t *n) {
    *n = strlen(text);
    return strdup(text);
}

static int get_num(const cJSON *o, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x) return 0;
    if (!cJSON_IsNumber(x)) return -1;
    *v = x->valuedouble;
    return 0;
}

/* Copy lease's n blocks into free staging slots (their ids into slots): true, or false
 * (no room, or the lease is gone: nothing held). A slot is held until its lease is
 * released or until lease_ms from now (after the lease's own expiry: a read confirmed
 * by the release check read a slot still held). */
static bool stage_lease(pd_server *p, uint64_t lease, int32_t n, int32_t *slots) {
    const double now = ifd_now_s();
    int32_t k = 0;
    pthread_mutex_lock(&p->stage_mu);
    for (int32_t i = 0; i < p->stage_blocks && k < n; i++) {
        if (p->stage_owner[i] && p->stage_expiry[i] <= now) p->stage_owner[i] = 0;
        if (!p->stage_owner[i]) slots[k++] = i;
    }
    for (int32_t i = 0; k == n && i < n; i++) {
        p->stage_owner[slots[i]] = lease;
        p->stage_expiry[slots[i]] = now + (double)p->s->cfg.pd_lease_ms * 1e-3;
    }
    pthread_mutex_unlock(&p->stage_mu);
    if (k < n) {
        atomic_fetch_add(&p->stage_misses, 1);
        return false;
    }
    const size_t bb = p->ki.block_bytes;
    for (int32_t i = 0; i < n;) { /* runs of consecutive slots in one read each */
        int32_t m = 1;
        while (i + m < n && slots[i + m] == slots[i] + m) m++;
        if (inferd_kv_read_lease(p->e, lease, i, m, p->stage + (size_t)slots[i] * bb) != 0) {
            pthread_mutex_lock(&p->stage_mu);
            for (int32_t j = 0; j < n; j++) p->stage_owner[slots[j]] = 0;
            pthread_mutex_unlock(&p->stage_mu);
            return false;
        }
        i += m;
    }
    return true;
}

static void stage_free(pd_server *p, uint64_t lease) {
    if (!p->stage) return;
    pthread_mutex_lock(&p->stage_mu);
    for (int32_t i = 0; i < p->stage_blocks; i++)
        if (p->stage_owner[i] == lease) p->stage_owner[i] = 0;
    pthread_mutex_unlock(&p->stage_mu);
}

static int on_call(void *user, const char *req, size_t n, char **reply, size_t *reply_n) {
    pd_server *p = user;
    atomic_fetch_add(&p->calls, 1);
    inferd_stats st;
    inferd_engine_stats(p->e, &st);
    if (st.waiting >= p->s->cfg.max_num_seqs) { /* full: the decode side waits or goes elsewhere */
        atomic_fetch_add(&p->busy_refusals, 1);
        *reply = dup_reply("{\"retry_after_ms\":50}", reply_n);
        return *reply ? 0 : -1;
    }
    cJSON *j = cJSON_ParseWithLength(req, n);
    const char *bad = NULL;
    int32_t *ids = NULL;
    inferd_logit_bias *bias = NULL;
    inferd_request q = {0};
    inferd_sampling_default(&q.sampling);
    const cJSON *prompt = j ? cJSON_GetObjectItemCaseSensitive(j, "prompt") : NULL;
    const cJSON *sp = j ? cJSON_GetObjectItemCaseSensitive(j, "sampling") : NULL;
    int np = cJSON_IsArray(prompt) ? cJSON_GetArraySize(prompt) : 0;
    if (!j || !cJSON_IsObject(j) || np < 1 || np >= p->s->max_model_len || (sp && !cJSON_IsObject(sp))) {
        bad = "a prefill call needs {\"prompt\": [ids], \"sampling\": {...}}";
    } else if (!(ids = malloc((size_t)np * sizeof *ids))) {
        bad = "out of memory";
    } else {
        int k = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, prompt) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= p->s->n_vocab) {
                bad = "prompt: token ids in [0, n_vocab)";
                break;
            }
            ids[k++] = (int32_t)x->valuedouble;
        }
    }
    inferd_sampling *s = &q.sampling;
    if (!bad && sp) {
#define NUM(key, field, T)                                   \
    do {                                                     \
        double v_ = (double)s->field;                        \
        if (get_num(sp, key, &v_) || !(v_ > -1e9 && v_ < 1e9)) \
            bad = key;                                       \
        else                                                 \
            s->field = (T)v_;                                \
    } while (0)
        NUM("temperature", temperature, float);
        NUM("top_p", top_p, float);
        NUM("min_p", min_p, float);
        NUM("top_k", top_k, int32_t);
        NUM("repetition_penalty", repetition_penalty, float);
        NUM("presence_penalty", presence_penalty, float);
        NUM("frequency_penalty", frequency_penalty, float);
#undef NUM
        const cJSON *seed = cJSON_GetObjectItemCaseSensitive(sp, "seed");
        if (cJSON_IsString(seed)) {
            char *end;
            errno = 0;
            s->seed = strtoull(seed->valuestring, &end, 10);
            s->has_seed = !errno && *end == 0 && end != seed->valuestring;
            if (!s->has_seed) bad = "seed";
        }
        const cJSON *lb = cJSON_GetObjectItemCaseSensitive(sp, "logit_bias");
        if (cJSON_IsArray(lb) && cJSON_GetArraySize(lb) > 0) {
            const int nb = cJSON_GetArraySize(lb);
            bias = nb <= 4096 ? calloc((size_t)nb, sizeof *bias) : NULL;
            if (!bias) bad = "logit_bias";
            const cJSON *x;
            int k = 0;
            cJSON_ArrayForEach(x, lb) {
                if (bad) break;
                const cJSON *a = cJSON_GetArrayItem(x, 0), *b = cJSON_GetArrayItem(x, 1);
                if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 || a->valuedouble >= p->s->n_vocab) {
                    bad = "logit_bias";
                    break;
                }
                bias[k].id = (int32_t)a->valuedouble;
                bias[k++].bias = (float)b->valuedouble;
            }
            s->logit_bias = bias;
            s->n_logit_bias = k;
        }
    }
    cJSON_Delete(j);
    char out[512];
    sbuf lease_reply = {0};
    if (!bad) {
        s->max_tokens = 1;
        s->ignore_eos = true;
        q.prompt = ids;
        q.n_prompt = np;
        q.kv_hold_ms = (int32_t)p->s->cfg.pd_lease_ms;
        waiter w = {.token = -1};
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        q.cb = on_prefill_out;
        q.user = &w;
        char err[256] = "";
        uint64_t id;
        if (inferd_submit(p->e, &q, &id, err, sizeof err)) {
            snprintf(out, sizeof out, "{\"error\":\"the prefill was refused\"}");
        } else {
            pthread_mutex_lock(&w.mu);
            while (!w.done) pthread_cond_wait(&w.cv, &w.mu); /* the engine always ends it */
            pthread_mutex_unlock(&w.mu);
            if (w.lease && w.token >= 0) {
                /* the blocks' ids: a UCX peer reads them from the registered pool */
                sbuf_printf(&lease_reply, "{\"token\":%d,\"lease\":\"%llu\",\"n_blocks\":%d,\"cached_tokens\":%d",
                            w.token, (unsigned long long)w.lease, w.n_blocks, w.cached);
                /* staged: the slots' ids instead (none: no room, the peer reads over tcp) */
                if (w.blocks && p->stage && !stage_lease(p, w.lease, w.n_blocks, w.blocks)) {
                    free(w.blocks);
                    w.blocks = NULL;
                }
                if (w.blocks && p->ucx_region) {
                    sbuf_puts(&lease_reply, ",\"blocks\":[");
                    for (int32_t i = 0; i < w.n_blocks; i++) sbuf_printf(&lease_reply, i ? ",%d" : "%d", w.blocks[i]);
                    sbuf_puts(&lease_reply, "]");
                }
                sbuf_puts(&lease_reply, "}");
                snprintf(out, sizeof out, "{\"error\":\"out of memory\"}");
            } else
                snprintf(out, sizeof out, "{\"error\":\"the prefill failed (finish reason %d)\"}", (int)w.why);
        }
        free(w.blocks);
        pthread_mutex_destroy(&w.mu);
        pthread_cond_destroy(&w.cv);
    } else {
        sbuf b = {0};
        sbuf_puts(&b, "{\"error\":");
        char msg[256];
        snprintf(msg, sizeof msg, "bad prefill call: %s", bad);
        sbuf_json_str(&b, msg, strlen(msg));
        sbuf_puts(&b, "}");
        snprintf(out, sizeof out, "%s", b.oom ? "{\"error\":\"out of memory\"}" : sbuf_cstr(&b));
        sbuf_free(&b);
    }
    free(ids);
    free(bias);
    if (lease_reply.n && !lease_reply.oom) {
        *reply = sbuf_take(&lease_reply, reply_n);
        return 0;
    }
    sbuf_free(&lease_reply);
    *reply = dup_reply(out, reply_n);
    return *reply ? 0 : -1;
}

static int on_read(void *user, uint64_t lease, int32_t first, int32_t n, void *buf) {
    pd_server *p = user;
    return inferd_kv_read_lease(p->e, lease, first, n, buf);
}

static int on_release(void *user, uint64_t lease) {
    pd_server *p = user;
    const int rc = inferd_kv_release(p->e, lease);
    stage_free(p, lease); /* after the check: a live lease's slots were held until now */
    return rc;
}

/* ---- decode side -------------------------------------------------------------------- */

static void job_free(pd_job *j) {
    if (!j) return;
    free(j->blocks);
    free(j->json);
    free(j);
}

static void on_import(void *user, uint64_t id, int32_t n_cached, const int32_t *blocks, int32_t n_blocks) {
    pd_job *j = user;
    pd_server *p = j->p;
    j->id = id;
    j->n_cached = n_cached;
    j->n_blocks = n_blocks;
    j->blocks = malloc((size_t)(n_blocks > 0 ? n_blocks : 1) * sizeof(int32_t));
    if (!j->blocks) { /* answer now: the engine computes it itself */
        inferd_kv_import_done(p->e, id, -1, true);
        job_free(j);
        return;
    }
    memcpy(j->blocks, blocks, (size_t)n_blocks * sizeof(int32_t));
    pthread_mutex_lock(&p->mu);
    j->next = NULL;
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static bool healthy(pd_server *p, int i, double now) {
    pthread_mutex_lock(&p->peer_mu);
    const bool h = p->peers[i].down_until <= now;
    pthread_mutex_unlock(&p->peer_mu);
    return h;
}

/* Rendezvous hashing on the prompt's first block (prompts that share a system prompt go
 * where it is cached) unless that peer is much busier than the least busy one. */
static int choose_peer(pd_server *p, uint64_t affinity, const bool *tried) {
    const double now = ifd_now_s();
    int best = -1, least = -1;
    uint64_t best_score = 0;
    for (int i = 0; i < p->n_peers; i++) {
        if (tried[i] || !healthy(p, i, now)) continue;
        const uint64_t sc = ifd_hash_mix64(affinity ^ ((uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull));
        if (best < 0 || sc > best_score) {
            best = i;
            best_score = sc;
        }
        if (least < 0 || atomic_load(&p->peers[i].outstanding) < atomic_load(&p->peers[least].outstanding))
            least = i;
    }
    if (best >= 0 && atomic_load(&p->peers[best].outstanding) > atomic_load(&p->peers[least].outstanding) + 2)
        return least;
    return best;
}

static kvx_conn *peer_conn(pd_server *p, pd_peer *pe, char *err, size_t eb) {
    pthread_mutex_lock(&p->peer_mu);
    kvx_conn *c = pe->n_idle > 0 ? pe->idle[--pe->n_idle] : NULL;
    pthread_mutex_unlock(&p->peer_mu);
    if (c) return c;
    kvx_hello peer;
    if (kvx_connect(&c, pe->host, pe->port, &p->me, &peer, 10, err, eb)) return NULL;
    if (p->s->cfg.pd_transport == 1) {
        /* the peer's pool over UCX; a peer whose pool is not in host memory (CUDA) says
         * so, and its blocks come over this connection instead */
        const int rc = kvx_ucx_attach(c, err, eb);
        if (rc && rc != IFD_ERR_UNSUPPORTED) {
            kvx_close(c);
            return NULL;
        }
        err[0] = 0;
    }
    return c;
}

static void peer_put(pd_server *p, pd_peer *pe, kvx_conn *c, bool failed) {
    pthread_mutex_lock(&p->peer_mu);
    if (failed) pe->down_until = ifd_now_s() + 1.0; /* invalidated: others for a while */
    if (!failed && !kvx_broken(c) && pe->n_idle < MAX_IDLE_CONNS) {
        pe->idle[pe->n_idle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&p->peer_mu);
    kvx_close(c);
}

/* Register c as in flight (or, c NULL, unregister old); false: stopping (not registered). */
static bool inflight_set(pd_server *p, kvx_conn *old, kvx_conn *c) {
    pthread_mutex_lock(&p->mu);
    bool ok = !p->stopping || !c;
    for (int i = 0; ok && i < p->n_inflight; i++)
        if (p->inflight[i] == old) {
            p->inflight[i] = c;
            break;
        }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

/* One attempt on peer i: 1 done (answered), 0 failed, 2 busy (try again later). */
static int attempt(pd_server *p, pd_job *j, int i, char *err, size_t eb) {
    pd_peer *pe = &p->peers[i];
    kvx_conn *c = peer_conn(p, pe, err, eb);
    if (!c) {
        peer_put(p, pe, NULL, true);
        return 0;
    }
    if (!inflight_set(p, NULL, c)) { /* shutting down */
        snprintf(err, eb, "shutting down");
        peer_put(p, pe, c, false);
        return 0;
    }
    atomic_fetch_add(&pe->outstanding, 1);
    const double t0 = ifd_now_s();
    char *reply = NULL;
    size_t rn = 0;
    int rc = kvx_call(c, j->json, j->json_n, 600, &reply, &rn, err, eb);
    uint64_t lease = 0;
    int32_t token = -1, *remote = NULL;
    int result = 0;
    if (rc == 0) {
        remote = NULL;
        cJSON *r = cJSON_ParseWithLength(reply, rn);
        const cJSON *ra = r ? cJSON_GetObjectItemCaseSensitive(r, "retry_after_ms") : NULL;
        const cJSON *tk = r ? cJSON_GetObjectItemCaseSensitive(r, "token") : NULL;
        const cJSON *ls = r ? cJSON_GetObjectItemCaseSensitive(r, "lease") : NULL;
        const cJSON *nb = r ? cJSON_GetObjectItemCaseSensitive(r, "n_blocks") : NULL;
        const cJSON *er = r ? cJSON_GetObjectItemCaseSensitive(r, "error") : NULL;
        if (cJSON_IsNumber(ra)) {
            result = 2;
        } else if (cJSON_IsNumber(tk) && cJSON_IsString(ls) && cJSON_IsNumber(nb) && (int32_t)nb->valuedouble == j->n_blocks) {
            token = (int32_t)tk->valuedouble;
            lease = strtoull(ls->valuestring, NULL, 10);
            const cJSON *bl = cJSON_GetObjectItemCaseSensitive(r, "blocks");
            /* the lease's block ids in the peer's registered region; none (its staging
             * area was full): this one is read over the connection */
            if (kvx_ucx_attached(c) && bl) {
                if (cJSON_IsArray(bl) && cJSON_GetArraySize(bl) == j->n_blocks &&
                    (remote = malloc((size_t)IFD_MAX(j->n_blocks, 1) * sizeof *remote))) {
                    int k = 0;
                    const cJSON *x;
                    cJSON_ArrayForEach(x, bl) remote[k++] = cJSON_IsNumber(x) && x->valuedouble >= 0 &&
                                                                    x->valuedouble < INT32_MAX
                                                                ? (int32_t)x->valuedouble
                                                                : -1;
                } else {
                    snprintf(err, eb, "prefill %s:%d: no block ids for a UCX read", pe->host, pe->port);
                    rc = -1;
                }
            }
        } else {
            snprintf(err, eb, "prefill %s:%d: %s", pe->host, pe->port,
                     cJSON_IsString(er) ? er->valuestring : "a malformed answer");
            rc = -1;
        }
        cJSON_Delete(r);
    }
    free(reply);
    if (rc == 0 && result == 0) {
        /* the client gets token 1 now, while the KV moves (TTFT: the remote prefill only) */
        inferd_kv_import_first(p->e, j->id, token);
        /* remote[] comes from the network: kvx_get checks each id against the peer's pool */
        const double t1 = ifd_now_s();
        const int32_t b0 = j->n_cached / p->ki.block_size;
        const int32_t per = (int32_t)IFD_MAX((size_t)1, READ_CHUNK_BYTES / p->ki.block_bytes);
        char *buf = malloc((size_t)IFD_MIN(per, IFD_MAX(j->n_blocks - b0, 1)) * p->ki.block_bytes);
        if (!buf) rc = IFD_ERR_NOMEM;
        uint64_t bytes = 0, ops = 0;
        for (int32_t b = b0; rc == 0 && b < j->n_blocks; b += per) {
            const int32_t m = IFD_MIN(per, j->n_blocks - b);
            uint64_t o = 1;
            rc = remote ? kvx_get(c, remote + b, m, buf, 30 + (double)m * p->ki.block_bytes / 1e7, &o, err, eb)
                        : kvx_read(c, lease, b, m, buf, err, eb);
            if (rc == 0) rc = inferd_kv_write(p->e, j->blocks + b, m, buf);
            bytes += (uint64_t)m * p->ki.block_bytes;
            ops += o;
        }
        free(buf);
        if (remote) {
            /* one-sided reads: good only if the lease outlived them */
            const int rr = kvx_release_check(c, lease, rc ? NULL : err, rc ? 0 : eb);
            if (rc == 0) rc = rr;
        } else {
            kvx_release(c, lease); /* kvx_read checked the lease itself */
        }
        if (rc == 0) {
            atomic_fetch_add(&p->transfer_ops, ops);
            const double t2 = ifd_now_s();
            atomic_fetch_add(&p->remote_prefill_us, (uint64_t)((t1 - t0) * 1e6));
            atomic_fetch_add(&p->transfer_us, (uint64_t)((t2 - t1) * 1e6));
            atomic_fetch_add(&p->transfer_bytes, bytes);
            atomic_fetch_add(&p->remote_prefills, 1);
            if (j->info) {
                snprintf(j->info->prefill, sizeof j->info->prefill, "%s:%d", pe->host, pe->port);
                j->info->prefill_s = t1 - t0;
                j->info->transfer_s = t2 - t1;
            }
            result = 1;
        }
    }
    free(remote);
    inflight_set(p, c, NULL);
    atomic_fetch_sub(&pe->outstanding, 1);
    peer_put(p, pe, c, rc != 0);
    if (result == 1) inferd_kv_import_done(p->e, j->id, token, false);
    return result;
}

static void run_job(pd_server *p, pd_job *j) {
    bool tried[64] = {0};
    char err[512] = "";
    int attempts = 0;
    const int max_attempts = p->s->cfg.pd_on_kv_failure == PD_RETRY ? IFD_MIN(MAX_ATTEMPTS, p->n_peers) : 1;
    const double busy_deadline = ifd_now_s() + 30;
    while (attempts < max_attempts) {
        const int i = choose_peer(p, j->affinity, tried);
        if (i < 0) {
            if (!err[0]) snprintf(err, sizeof err, "no healthy prefill instance");
            break;
        }
        const int r = attempt(p, j, i, err, sizeof err);
        if (r == 1) return;
        if (r == 2) { /* busy: wait a little, then any peer again */
            atomic_fetch_add(&p->busy_waits, 1);
            if (ifd_now_s() > busy_deadline) {
                snprintf(err, sizeof err, "every prefill instance stayed busy");
                break;
            }
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
            pthread_mutex_lock(&p->mu);
            const bool stop = p->stopping;
            pthread_mutex_unlock(&p->mu);
            if (stop) {
                snprintf(err, sizeof err, "shutting down");
                break;
            }
            continue;
        }
        tried[i < 64 ? i : 63] = true;
        attempts++;
        if (attempts < max_attempts) atomic_fetch_add(&p->retries, 1);
    }
    atomic_fetch_add(&p->failures, 1);
    const bool recompute = p->s->cfg.pd_on_kv_failure == PD_RECOMPUTE;
    if (recompute) atomic_fetch_add(&p->recomputes, 1);
    slog("warn", "pd: remote prefill failed (%s): %s", err, recompute ? "prefilling locally" : "the request fails");
    inferd_kv_import_done(p->e, j->id, -1, recompute);
}

static void *worker_main(void *arg) {
    pd_server *p = arg;
    /* the transfer (receive, then the copy into the pool) yields to the engine thread
     * decoding on the same cores: its work shows as TTFT, not as stalls of every stream
     * (Linux: a thread's own nice value) */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0) {
        /* not allowed (a lower nice limit): the default priority */
    }
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->head && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
        pd_job *j = p->head;
        if (j) {
            p->head = j->next;
            if (!p->head) p->tail = NULL;
        }
        const bool stopping = p->stopping;
        pthread_mutex_unlock(&p->mu);
        if (!j) return NULL;
        if (stopping)
            inferd_kv_import_done(p->e, j->id, -1, false); /* shutting down: answer, no transfer */
        else
            run_job(p, j);
        job_free(j);
    }
}

bool pd_route_request(server *s, inferd_request *er, pd_info *info) {
    pd_server *p = s->pd;
    if (!p || p->role != PD_ROLE_DECODE || !p->ki.supported) return false;
    const inferd_sampling *sp = &er->sampling;
    if (sp->n != 1 || sp->grammar || sp->logprobs >= 0 || sp->prompt_logprobs >= 0 || sp->max_tokens < 1 ||
        er->n_prompt < s->cfg.pd_local_threshold)
        return false;
    const double now = ifd_now_s();
    bool any = false;
    for (int i = 0; i < p->n_peers && !any; i++) any = healthy(p, i, now);
    if (!any) {
        atomic_fetch_add(&p->local_prefills, 1);
        return false;
    }
    if (!er->sampling.has_seed) { /* both sides must draw from the same seed */
        er->sampling.seed = random_u64();
        er->sampling.has_seed = true;
    }
    sbuf b = {0};
    sbuf_puts(&b, "{\"prompt\":[");
    for (int32_t i = 0; i < er->n_prompt; i++) sbuf_printf(&b, i ? ",%d" : "%d", er->prompt[i]);
    sbuf_printf(&b,
                "],\"sampling\":{\"temperature\":%.9g,\"top_p\":%.9g,\"min_p\":%.9g,\"top_k\":%d,"
                "\"repetition_penalty\":%.9g,\"presence_penalty\":%.9g,\"frequency_penalty\":%.9g,"
                "\"seed\":\"%llu\",\"logit_bias\":[",
                (double)sp->temperature, (double)sp->top_p, (double)sp->min_p, sp->top_k,
                (double)sp->repetition_penalty, (double)sp->presence_penalty, (double)sp->frequency_penalty,
                (unsigned long long)er->sampling.seed);
    for (int32_t i = 0; i < sp->n_logit_bias; i++)
        sbuf_printf(&b, i ? ",[%d,%.9g]" : "[%d,%.9g]", sp->logit_bias[i].id, (double)sp->logit_bias[i].bias);
    sbuf_puts(&b, "]}}");
    pd_job *j = calloc(1, sizeof *j);
    if (!j || b.oom) {
        free(j);
        sbuf_free(&b);
        return false;
    }
    j->p = p;
    j->info = info;
    j->json = sbuf_take(&b, &j->json_n);
    j->n_prompt = er->n_prompt;
    j->affinity = ifd_hash_i32(0x5d, er->prompt, (size_t)IFD_MIN(er->n_prompt, 16));
    er->kv_import = on_import;
    er->kv_import_user = j;
    return true;
}

void pd_job_cancel(inferd_request *er) {
    if (er->kv_import == on_import) job_free(er->kv_import_user);
    er->kv_import = NULL;
    er->kv_import_user = NULL;
}

/* ---- start, stop, metrics ----------------------------------------------------------- */

static int parse_peers(pd_server *p, const char *list, char *err, size_t eb) {
    if (!list || !list[0]) return ifd_errf(err, eb, IFD_ERR_INVALID, "--role decode needs --pd-prefill host:port,...");
    int n = 1;
    for (const char *c = list; *c; c++) n += *c == ',';
    if (n > 64) return ifd_errf(err, eb, IFD_ERR_INVALID, "--pd-prefill: at most 64 instances");
    p->peers = calloc((size_t)n, sizeof *p->peers);
    if (!p->peers) return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
    const char *c = list;
    for (int i = 0; i < n; i++) {
        const char *end = strchr(c, ',');
        const size_t len = end ? (size_t)(end - c) : strlen(c);
        char item[256];
        if (len == 0 || len >= sizeof item) return ifd_errf(err, eb, IFD_ERR_INVALID, "--pd-prefill: an empty or long entry");
        memcpy(item, c, len);
        item[len] = 0;
        char *colon = strrchr(item, ':');
        char *pe = NULL;
        const long port = colon ? strtol(colon + 1, &pe, 10) : -1;
        if (!colon || colon == item || !pe || *pe || port < 1 || port > 65535)
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--pd-prefill: '%s' is not host:port", item);
        *colon = 0;
        char *h = item;
        if (h[0] == '[' && colon[-1] == ']') { /* [v6]:port */
            colon[-1] = 0;
            h++;
        }
        snprintf(p->peers[i].host, sizeof p->peers[i].host, "%s", h);
        p->peers[i].port = (int)port;
        c = end ? end + 1 : c + len;
    }
    p->n_peers = n;
    return 0;
}

/* Prefill role, --pd-transport ucx: register the pool itself, or a staging area. */
static int pd_start_ucx(pd_server *p, char *err, size_t eb) {
    const server_config *c = &p->s->cfg;
    inferd_kv_region *r = malloc(sizeof *r);
    kvx_region *kr = malloc(sizeof *kr);
    int rc = !r || !kr ? IFD_ERR_NOMEM : c->pd_ucx_stage == 1 ? IFD_ERR_UNSUPPORTED : inferd_kv_get_region(p->e, r);
    if (rc == 0) { /* the pool itself */
        *kr = (kvx_region){.base = r->base, .bytes = r->bytes, .n_blocks = r->n_blocks, .n_segs = r->n_segs,
                           .seg_bytes = r->seg_bytes, .block_stride = r->block_stride};
        for (int32_t i = 0; i < r->n_segs; i++) kr->seg_off[i] = r->seg_off[i];
    } else if (rc == IFD_ERR_UNSUPPORTED) { /* a staging area in the exchange layout */
        const size_t bb = p->ki.block_bytes;
        const int32_t n_segs = 2 * p->ki.n_layers;
        p->stage_blocks = (int32_t)IFD_MIN((int64_t)p->ki.n_blocks, IFD_MAX((int64_t)1, c->pd_stage_bytes / (int64_t)bb));
        void *mem = NULL;
        p->stage_owner = calloc((size_t)p->stage_blocks, sizeof *p->stage_owner);
        p->stage_expiry = calloc((size_t)p->stage_blocks, sizeof *p->stage_expiry);
        if (n_segs > KVX_MAX_SEGS || !p->stage_owner || !p->stage_expiry ||
            posix_memalign(&mem, 4096, (size_t)p->stage_blocks * bb)) {
            rc = IFD_ERR_NOMEM;
        } else {
            p->stage = mem;
            memset(p->stage, 0, (size_t)p->stage_blocks * bb);
            *kr = (kvx_region){.base = p->stage, .bytes = (size_t)p->stage_blocks * bb, .n_blocks = p->stage_blocks,
                               .n_segs = n_segs, .seg_bytes = bb / (size_t)n_segs, .block_stride = bb};
            for (int32_t i = 0; i < n_segs; i++) kr->seg_off[i] = (uint64_t)i * kr->seg_bytes;
            rc = 0;
            char f[160];
            snprintf(f, sizeof f, "\"blocks\":%d,\"bytes\":%zu", p->stage_blocks, (size_t)p->stage_blocks * bb);
            slog_fields("info", "pd: UCX staging area (each lease's blocks are copied there for decode instances)", f);
        }
    }
    if (rc == 0) rc = kvx_server_ucx(p->kv, kr, err, eb);
    else ifd_errf(err, eb, rc, "pd: out of memory for the UCX staging area");
    if (rc == 0) p->ucx_region = true;
    free(r);
    free(kr);
    return rc;
}

int pd_start(server *s, char *err, size_t eb) {
    const server_config *c = &s->cfg;
    if (c->role == PD_ROLE_BOTH) return 0;
    if (c->pd_transport == 1 && !kvx_ucx_built())
        return ifd_errf(err, eb, IFD_ERR_UNSUPPORTED,
                        "--pd-transport ucx: this build has no UCX (install libucx-dev and rebuild, or use tcp)");
    pd_server *p = calloc(1, sizeof *p);
    if (!p) return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
    p->s = s;
    p->e = s->engine;
    p->role = (int)c->role;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->peer_mu, NULL);
    pthread_mutex_init(&p->stage_mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    inferd_kv_get_info(p->e, &p->ki);
    p->me.compat_hash = p->ki.compat_hash;
    p->me.block_bytes = p->ki.block_bytes;
    p->me.epoch = random_u64();
    snprintf(p->me.compat, sizeof p->me.compat, "%s", p->ki.compat);
    s->pd = p;
    if (!p->ki.supported)
        return ifd_errf(err, eb, IFD_ERR_UNSUPPORTED, "--role %s: this backend cannot move KV blocks yet",
                        c->role == PD_ROLE_PREFILL ? "prefill" : "decode");
    if (c->role == PD_ROLE_PREFILL) {
        const int port = c->pd_kv_port ? (int)c->pd_kv_port : (int)c->port + 1;
        kvx_handlers h = {.call = on_call, .read = on_read, .release = on_release, .user = p};
        const char *host = c->pd_kv_host && c->pd_kv_host[0] ? c->pd_kv_host : c->host;
        if (kvx_server_start(&p->kv, host, port, &p->me, &h, 256, 300, 30, err, eb)) return -1;
        if (c->pd_transport == 1 && pd_start_ucx(p, err, eb)) return -1;
        char f[512];
        snprintf(f, sizeof f, "\"role\":\"prefill\",\"kv_host\":\"%s\",\"kv_port\":%d,\"transport\":\"%s\",\"lease_ms\":%lld",
                 host, kvx_server_port(p->kv), p->ucx_region ? "ucx" : "tcp", (long long)c->pd_lease_ms);
        slog_fields("info", "pd: serving KV", f);
        return 0;
    }
    if (parse_peers(p, c->pd_prefill, err, eb)) return -1;
    p->workers = calloc((size_t)c->pd_workers, sizeof *p->workers);
    p->inflight = calloc((size_t)c->pd_workers, sizeof *p->inflight);
    if (!p->workers || !p->inflight) return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
    p->n_inflight = (int)c->pd_workers;
    for (int i = 0; i < c->pd_workers; i++) {
        if (pthread_create(&p->workers[i], NULL, worker_main, p)) break;
        p->n_workers++;
    }
    if (p->n_workers == 0) return ifd_errf(err, eb, IFD_ERR_NOMEM, "pd: no worker threads");
    char f[256];
    snprintf(f, sizeof f, "\"role\":\"decode\",\"prefill_instances\":%d,\"workers\":%d,\"local_threshold\":%lld,"
             "\"transport\":\"%s\"", p->n_peers, p->n_workers, (long long)c->pd_local_threshold,
             c->pd_transport == 1 ? "ucx" : "tcp");
    slog_fields("info", "pd: decoding", f);
    return 0;
}

void pd_interrupt(server *s) {
    pd_server *p = s->pd;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    /* a call to a prefill instance that hangs (alive, never answering) would hold its
     * worker, and its request, for the call's 600 s: cut them all */
    for (int i = 0; i < p->n_inflight; i++)
        if (p->inflight[i]) kvx_interrupt(p->inflight[i]);
    pthread_mutex_unlock(&p->mu);
}

void pd_stop(server *s) {
    pd_server *p = s->pd;
    if (!p) return;
    kvx_server_stop(p->kv); /* prefill: calls in flight finish first */
    pd_interrupt(s);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
    for (pd_job *j = p->head, *n; j; j = n) { /* none: the workers drained the queue */
        n = j->next;
        inferd_kv_import_done(p->e, j->id, -1, false);
        job_free(j);
    }
    for (int i = 0; i < p->n_peers; i++)
        for (int k = 0; k < p->peers[i].n_idle; k++) kvx_close(p->peers[i].idle[k]);
    free(p->peers);
    free(p->workers);
    free(p->inflight);
    free(p->stage); /* after kvx_server_stop: no one reads it any more */
    free(p->stage_owner);
    free(p->stage_expiry);
    pthread_mutex_destroy(&p->stage_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->peer_mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    s->pd = NULL;
}

bool pd_metadata(server *s, sbuf *o) {
    pd_server *p = s->pd;
    if (!p) return false;
    sbuf_printf(o, "{\"role\":\"%s\",\"compat_hash\":\"%llu\",\"epoch\":\"%llu\",\"block_size\":%d,"
                   "\"block_bytes\":%zu,\"transport\":\"%s\",\"kv_port\":%d,\"compat\":",
                p->role == PD_ROLE_PREFILL ? "prefill" : "decode", (unsigned long long)p->me.compat_hash,
                (unsigned long long)p->me.epoch, p->ki.block_size, p->ki.block_bytes,
                p->s->cfg.pd_transport == 1 ? "ucx" : "tcp", p->kv ? kvx_server_port(p->kv) : 0);
    sbuf_json_str(o, p->me.compat, strlen(p->me.compat));
    if (p->stage) sbuf_printf(o, ",\"ucx_stage_blocks\":%d", p->stage_blocks);
    sbuf_puts(o, "}");
    return true;
}

static void counter(sbuf *o, const char *name, const char *help, double v) {
    sbuf_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %.17g\n", name, help, name, name, v);
}

void pd_metrics(server *s, sbuf *o) {
    pd_server *p = s->pd;
    if (!p) return;
    if (p->role == PD_ROLE_PREFILL) {
        inferd_pd_stats st;
        inferd_pd_get_stats(p->e, &st);
        sbuf_printf(o, "# HELP inferd_pd_leases KV leases held for decode instances now.\n# TYPE inferd_pd_leases gauge\n"
                       "inferd_pd_leases %d\n", st.leases);
        sbuf_printf(o, "# HELP inferd_pd_pinned_blocks KV blocks pinned by leases now.\n# TYPE inferd_pd_pinned_blocks gauge\n"
                       "inferd_pd_pinned_blocks %d\n", st.leased_blocks);
        counter(o, "inferd_pd_leases_total", "KV leases made (prompts prefilled for decode instances).",
                (double)st.leases_total);
        counter(o, "inferd_pd_lease_expiries_total", "KV leases that expired unreleased.", (double)st.lease_expiries);
        counter(o, "inferd_pd_prefill_calls_total", "Prefill calls received.", (double)atomic_load(&p->calls));
        counter(o, "inferd_pd_busy_refusals_total", "Prefill calls answered 'retry after' (engine full).",
                (double)atomic_load(&p->busy_refusals));
        if (p->stage)
            counter(o, "inferd_pd_stage_misses_total",
                    "Leases that did not fit the UCX staging area (their blocks were read over TCP).",
                    (double)atomic_load(&p->stage_misses));
        return;
    }
    inferd_pd_stats st;
    inferd_pd_get_stats(p->e, &st);
    sbuf_printf(o, "# HELP inferd_pd_importing Requests whose KV is being imported now.\n# TYPE inferd_pd_importing gauge\n"
                   "inferd_pd_importing %d\n", st.importing);
    counter(o, "inferd_pd_remote_prefills_total", "Prompts prefilled by a prefill instance.",
            (double)atomic_load(&p->remote_prefills));
    counter(o, "inferd_pd_local_prefills_total", "Prompts prefilled locally for want of a healthy prefill instance.",
            (double)atomic_load(&p->local_prefills));
    counter(o, "inferd_pd_kv_transfer_bytes_total", "KV bytes received from prefill instances.",
            (double)atomic_load(&p->transfer_bytes));
    counter(o, "inferd_pd_kv_transfer_seconds_total", "Seconds spent receiving KV (TTFT part 2).",
            (double)atomic_load(&p->transfer_us) * 1e-6);
    counter(o, "inferd_pd_remote_prefill_seconds_total", "Seconds spent waiting for remote prefills (TTFT part 1).",
            (double)atomic_load(&p->remote_prefill_us) * 1e-6);
    counter(o, "inferd_pd_kv_transfer_ops_total",
            "Reads issued for KV transfers (tcp: one per chunk; ucx: one GET per run of consecutive blocks and segment).",
            (double)atomic_load(&p->transfer_ops));
    counter(o, "inferd_pd_kv_failures_total", "Remote prefills or KV transfers that failed.",
            (double)atomic_load(&p->failures));
    counter(o, "inferd_pd_recomputes_total", "Failed remote prefills computed locally instead.",
            (double)atomic_load(&p->recomputes));
    counter(o, "inferd_pd_retries_total", "Remote prefills retried on another instance.", (double)atomic_load(&p->retries));
    counter(o, "inferd_pd_busy_waits_total", "Waits for a busy prefill instance.", (double)atomic_load(&p->busy_waits));
}
