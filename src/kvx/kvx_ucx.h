/* kvx_ucx.h — the UCX half of kvx (internal to src/kvx: kvx_tcp.c frames the control
 * messages, this file moves the blocks with one-sided reads).
 *
 * Prefill side (kvx_ucx_srv): one UCP worker, the KV region registered once
 * (ucp_mem_map), its remote key and the worker's address packed into an "info" blob that
 * the control connection hands to each decode instance that asks; a thread waits on the
 * worker's event fd and progresses it (UCX over tcp emulates a GET with active messages,
 * so the target must progress; over shared memory / CMA / RDMA it need not).
 * Decode side (kvx_ucx_cli): per control connection, one worker and one endpoint to the
 * peer's worker; a read is a list of remote block ids, coalesced into runs of consecutive
 * ids, one ucp_get_nbx per run and segment, waited for on the worker's event fd under a
 * deadline.
 *
 * Without UCX at build time (no INFERD_HAVE_UCX) every call answers IFD_ERR_UNSUPPORTED. */
#ifndef INFERD_KVX_UCX_H
#define INFERD_KVX_UCX_H
#include "../util/layer/kvx.h"

#include <stddef.h>
#include <stdint.h>

#include "kvx.h"

typedef struct kvx_ucx_srv kvx_ucx_srv;
typedef struct kvx_ucx_cli kvx_ucx_cli;

#define KVX_UCX_MAX_INFO ((size_t)1 << 20)

int kvx_ucx_srv_create(kvx_ucx_srv **out, const kvx_region *r, char *err, size_t err_bytes);
/* The blob for decode instances (owned by srv). */
void kvx_ucx_srv_info(const kvx_ucx_srv *s, const void **blob, size_t *n);
void kvx_ucx_srv_destroy(kvx_ucx_srv *s); /* NULL ok */

/* From a peer's blob (checked: it comes from the network): block_bytes is ours. */
int kvx_ucx_cli_create(kvx_ucx_cli **out, const void *blob, size_t n, uint64_t block_bytes, char *err,
                       size_t err_bytes);
/* Blocks remote[0..n) into buf (n * block_bytes, the exchange layout) before deadline
 * (ifd_now_s() clock). *ops: the GETs issued. 0, IFD_ERR_INVALID (an id out of the
 * peer's range), IFD_ERR_IO (the peer failed or the deadline passed: the client is
 * broken then). */
int kvx_ucx_cli_get(kvx_ucx_cli *c, const int32_t *remote, int32_t n, void *buf, double deadline, uint64_t *ops,
                    char *err, size_t err_bytes);
void kvx_ucx_cli_destroy(kvx_ucx_cli *c); /* NULL ok */
/* From another thread: the get in progress, or the next, fails (as if the peer had). */
void kvx_ucx_cli_interrupt(kvx_ucx_cli *c);

#endif
