/* rsp_store.c — the in-memory store of finished Responses (previous_response_id,
 * GET / DELETE /v1/responses/{id}): a hash table of entries on an LRU list, bounded by
 * count, by bytes and by a sliding TTL (an entry unused for ttl seconds is gone).
 *
 * Because the TTL slides, the LRU tail is always the entry used longest ago, so both
 * the bounds and the expiry evict from the tail only. Entries hold JSON text and are
 * copied out under the lock, so a reader never sees an entry another thread frees.
 * Any thread; one mutex, a leaf lock (nothing else is taken while it is held). */
#include "rsp.h"

#include <pthread.h>
#include <string.h>

#include "util/hash.h"

typedef struct rsp_entry {
    char id[RSP_ID_BYTES];
    char *items; /* the conversation: a JSON array of input + output items */
    size_t items_bytes;
    char *object; /* the response object, as GET returns it */
    size_t object_bytes;
    double t_used;                   /* seconds (the callers' clock) */
    struct rsp_entry *newer, *older; /* LRU list: head = most recently used */
    struct rsp_entry *next_in_bucket;
} rsp_entry;

struct rsp_store {
    pthread_mutex_t mu;
    int64_t max_entries, max_bytes;
    double ttl_s;
    rsp_entry **buckets; /* [n_buckets], a power of two */
    size_t n_buckets;
    rsp_entry *head, *tail;
    int64_t n;
    int64_t bytes; /* items + object bytes of every entry */
};

static size_t entry_bytes(const rsp_entry *x) { return x->items_bytes + x->object_bytes; }

static rsp_entry **bucket_of(rsp_store *st, const char *id) {
    uint64_t h = ifd_hash_bytes(0x9e3779b97f4a7c15ull, id, strlen(id));
    return &st->buckets[h & (st->n_buckets - 1)];
}

int rsp_store_create(rsp_store **out, int64_t max_entries, int64_t max_bytes, double ttl_s) {
    *out = NULL;
    rsp_store *st = calloc(1, sizeof *st);
    if (!st) return IFD_ERR_NOMEM;
    st->max_entries = max_entries;
    st->max_bytes = max_bytes;
    st->ttl_s = ttl_s;
    size_t want = max_entries > 0 ? (size_t)IFD_MIN(max_entries, (int64_t)1 << 20) : 1;
    st->n_buckets = 16;
    while (st->n_buckets < want) st->n_buckets <<= 1;
    st->buckets = calloc(st->n_buckets, sizeof *st->buckets);
    if (!st->buckets) {
        free(st);
        return IFD_ERR_NOMEM;
    }
    pthread_mutex_init(&st->mu, NULL);
    *out = st;
    return 0;
}

static void entry_free(rsp_entry *x) {
    if (!x) return;
    free(x->items);
    free(x->object);
    free(x);
}

void rsp_store_destroy(rsp_store *st) {
    if (!st) return;
    for (rsp_entry *x = st->head, *nx; x; x = nx) {
        nx = x->older;
        entry_free(x);
    }
    free(st->buckets);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* ---- list and table (st->mu held) ----------------------------------------------------- */

static void lru_unlink(rsp_store *st, rsp_entry *x) {
    if (x->newer)
        x->newer->older = x->older;
    else
        st->head = x->older;
    if (x->older)
        x->older->newer = x->newer;
    else
        st->tail = x->newer;
    x->newer = x->older = NULL;
}

static void lru_push_head(rsp_store *st, rsp_entry *x) {
    x->newer = NULL;
    x->older = st->head;
    if (st->head) st->head->newer = x;
    st->head = x;
    if (!st->tail) st->tail = x;
}

static rsp_entry *find(rsp_store *st, const char *id) {
    for (rsp_entry *x = *bucket_of(st, id); x; x = x->next_in_bucket)
        if (!strcmp(x->id, id)) return x;
    return NULL;
}

static void remove_entry(rsp_store *st, rsp_entry *x) {
    for (rsp_entry **pp = bucket_of(st, x->id); *pp; pp = &(*pp)->next_in_bucket)
        if (*pp == x) {
            *pp = x->next_in_bucket;
            break;
        }
    lru_unlink(st, x);
    st->n--;
    st->bytes -= (int64_t)entry_bytes(x);
    entry_free(x);
}

/* Drop what the bounds and the TTL no longer allow, oldest use first. */
static void evict(rsp_store *st, double now) {
    while (st->tail && (st->n > st->max_entries || st->bytes > st->max_bytes ||
                        (st->ttl_s > 0 && now - st->tail->t_used > st->ttl_s)))
        remove_entry(st, st->tail);
}

/* ---- the API ----------------------------------------------------------------------------- */

int rsp_store_put(rsp_store *st, const char *id, char *items, size_t items_bytes, char *object,
                  size_t object_bytes, double now) {
    int rc = !st || st->max_entries <= 0  ? IFD_ERR_UNSUPPORTED /* storing is off */
             : strlen(id) >= RSP_ID_BYTES ? IFD_ERR_INVALID
             : (int64_t)(items_bytes + object_bytes) > st->max_bytes ? IFD_ERR_LIMIT
                                                                     : 0;
    if (rc) {
        free(items);
        free(object);
        return rc;
    }
    rsp_entry *x = calloc(1, sizeof *x);
    if (!x) {
        free(items);
        free(object);
        return IFD_ERR_NOMEM;
    }
    memcpy(x->id, id, strlen(id) + 1);
    x->items = items;
    x->items_bytes = items_bytes;
    x->object = object;
    x->object_bytes = object_bytes;
    x->t_used = now;
    pthread_mutex_lock(&st->mu);
    rsp_entry *old = find(st, id);
    if (old) remove_entry(st, old);
    rsp_entry **b = bucket_of(st, id);
    x->next_in_bucket = *b;
    *b = x;
    lru_push_head(st, x);
    st->n++;
    st->bytes += (int64_t)entry_bytes(x);
    evict(st, now);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

static char *dup_bytes(const char *p, size_t n) {
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, p, n);
        c[n] = 0;
    }
    return c;
}

int rsp_store_get(rsp_store *st, const char *id, double now, char **items, size_t *items_bytes,
                  char **object, size_t *object_bytes) {
    if (items) *items = NULL;
    if (object) *object = NULL;
    if (!st) return IFD_ERR_NOT_FOUND;
    int rc = 0;
    pthread_mutex_lock(&st->mu);
    evict(st, now);
    rsp_entry *x = find(st, id);
    if (!x) {
        rc = IFD_ERR_NOT_FOUND;
    } else {
        x->t_used = now;
        lru_unlink(st, x);
        lru_push_head(st, x);
        if (items && !(*items = dup_bytes(x->items, x->items_bytes))) rc = IFD_ERR_NOMEM;
        if (object && !rc && !(*object = dup_bytes(x->object, x->object_bytes))) rc = IFD_ERR_NOMEM;
        if (items_bytes) *items_bytes = x->items_bytes;
        if (object_bytes) *object_bytes = x->object_bytes;
    }
    pthread_mutex_unlock(&st->mu);
    if (rc) {
        if (items) {
            free(*items);
            *items = NULL;
        }
        if (object) {
            free(*object);
            *object = NULL;
        }
    }
    return rc;
}

int rsp_store_delete(rsp_store *st, const char *id, double now) {
    if (!st) return IFD_ERR_NOT_FOUND;
    pthread_mutex_lock(&st->mu);
    evict(st, now);
    rsp_entry *x = find(st, id);
    if (x) remove_entry(st, x);
    pthread_mutex_unlock(&st->mu);
    return x ? 0 : IFD_ERR_NOT_FOUND;
}

int64_t rsp_store_count(rsp_store *st) {
    if (!st) return 0;
    pthread_mutex_lock(&st->mu);
    int64_t n = st->n;
    pthread_mutex_unlock(&st->mu);
    return n;
}
