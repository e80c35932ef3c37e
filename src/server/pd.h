/* pd.h — prefill/decode disaggregation in the server: the roles (--role).
 *
 * prefill: a KV endpoint (src/kvx) on --pd-kv-port answers decode instances' prefill
 *   calls: the prompt runs in the engine's normal batches with max_tokens 1 and the
 *   request's sampling and seed, its blocks stay under a lease (--pd-lease-ms) and the
 *   answer names the token and the lease; reads of the lease's blocks and its release
 *   follow on the same connection. A full engine answers "retry after".
 * decode: a request whose uncached prompt is long enough (--pd-local-threshold) is
 *   submitted with a KV import: once the engine holds blocks for it, a worker picks a
 *   prefill instance (--pd-prefill: least outstanding, with prefix affinity), calls it,
 *   reads the lease's blocks into the local ones, releases the lease and hands the first
 *   token to the engine, which decodes on. A failure follows --pd-on-kv-failure.
 * both: neither (today's colocated server). */
#ifndef INFERD_SERVER_PD_H
#define INFERD_SERVER_PD_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stdint.h>

#include "inferd.h"
#include "util/buf.h"

struct server;
typedef struct pd_server pd_server;

/* After the engine is up (loader). 0, or -1 with one line in err. */
int pd_start(struct server *s, char *err, size_t err_bytes);
/* Before the engine goes: answers every import still queued, joins the workers, closes
 * the KV endpoint. NULL-safe (s->pd may be NULL). */
void pd_stop(struct server *s);
/* Shutting down (the drain timed out): remote prefills and transfers in flight fail now
 * (their requests end by --pd-on-kv-failure), none start. Any thread; NULL-safe. */
void pd_interrupt(struct server *s);

/* Decode role: whether a request goes through a prefill instance (n 1, no grammar, no
 * logprobs, prompt long enough); if so, fills er's kv_import fields (a job owned by the
 * import from then on; pd_job_cancel when the submit fails) and fixes its seed. */
typedef struct pd_info {
    char prefill[272]; /* host:port of the prefill instance that answered ("" none) */
    double prefill_s, transfer_s;
} pd_info;
/* info: where the worker writes what happened, before it answers the import (so it is
 * complete by the request's final event); it must live that long. */
bool pd_route_request(struct server *s, inferd_request *er, pd_info *info);
void pd_job_cancel(inferd_request *er);

/* GET /pd/metadata's JSON; false for role both. */
bool pd_metadata(struct server *s, sbuf *o);

/* Prometheus lines for /metrics (both sides' counters). */
void pd_metrics(struct server *s, sbuf *o);

#endif
